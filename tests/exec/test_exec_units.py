"""Pure executor pieces: controller shards and moments, release mapping, run checks."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from yatt.core.errors import InputError
from yatt.core.layout import make_plan
from yatt.core.release import ReleaseAction
from yatt.core.roles import Mode, ReleasePolicy, Role
from yatt.core.runnable import check_runnable
from yatt.exec.step_stats import Moments, shard
from yatt.exec.runner import release_actions

ROOT = Path(__file__).resolve().parents[2]
from yatt.exec.task import step_prompts, step_samples


def test_shards_cover_everything_once():
    items = list(range(11))
    for k in (1, 2, 3, 4):
        parts = [shard(items, i, k) for i in range(k)]
        assert sum(parts, []) == items
        assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_moments_merge_equals_global_stats():
    xs = [0.0, 1.0, 3.0, 7.0, 2.0]
    parts = [xs[:2], xs[2:]]
    m = sum((Moments(len(p), sum(p), sum(x * x for x in p)) for p in parts), Moments())
    mean = sum(xs) / len(xs)
    assert m.mean == pytest.approx(mean)
    assert m.std == pytest.approx(math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs)))


def test_release_mapping_is_honest_on_cpu(demo_experiment):
    def actions(policy, cpu):
        return release_actions(make_plan(demo_experiment, Mode.COLOCATE, release=policy), cpu)

    assert actions(ReleasePolicy.OFFLOAD, True)[Role.ROLLOUT] is ReleaseAction.TEARDOWN
    assert actions(ReleasePolicy.OFFLOAD, True)[Role.TRAINER] is ReleaseAction.KEEP
    assert actions(ReleasePolicy.OFFLOAD, False)[Role.GENRM] is ReleaseAction.OFFLOAD
    assert set(actions(ReleasePolicy.RESIDENT, True).values()) == {ReleaseAction.KEEP}


def test_task_is_deterministic(demo_experiment):
    wl = demo_experiment.workload
    assert step_prompts(0, 1, wl) == step_prompts(0, 1, wl)
    assert step_prompts(0, 1, wl) != step_prompts(0, 2, wl)
    s = step_samples(0, 0, wl)
    assert len(s) == wl.samples_per_step and len({x.seed for x in s}) == len(s)


def test_check_runnable_rejects_clearly(demo_experiment):
    plan = make_plan(demo_experiment, Mode.COLOCATE, release=ReleasePolicy.TEARDOWN)
    check_runnable(plan, 2)
    with pytest.raises(InputError, match="steps"):
        check_runnable(plan, 0)
    wl = dataclasses.replace(demo_experiment.workload, dynamic_sampling=True,
                             samples_per_prompt=1)
    bad = make_plan(dataclasses.replace(demo_experiment, workload=wl), Mode.PARTIAL, release=ReleasePolicy.TEARDOWN)
    with pytest.raises(InputError, match="dynamic sampling"):
        check_runnable(bad, 1)


def test_host_probe_samples_a_fixed_workload():
    from yatt.profiling import microbench as mb

    xs = mb.host_probe(0.0)
    assert len(xs) >= 3 and all(x > 0 for x in xs)


def test_check_runnable_takes_tp_engines_and_a_pp_trainer_and_refuses_in_one_line(demo_experiment):
    """Engines at TP=2 and a PP=2 trainer run; pipelined inference and a trainer TP that
    does not divide the KV heads are refused, naming the field."""
    plan = make_plan(demo_experiment, Mode.COLOCATE, rollout_tp=2, genrm_tp=2,
                     release=ReleasePolicy.TEARDOWN)
    check_runnable(plan, 2)
    trainer = dataclasses.replace(plan.placement(Role.TRAINER), pp=2)
    pp2 = dataclasses.replace(plan, placements=tuple(
        trainer if p.role is Role.TRAINER else p for p in plan.placements))
    check_runnable(pp2, 2)
    gen = dataclasses.replace(plan.placement(Role.GENRM), tp=1, pp=2)
    bad = dataclasses.replace(plan, placements=tuple(
        gen if p.role is Role.GENRM else p for p in plan.placements))
    with pytest.raises(InputError, match="genrm.pp") as e:
        check_runnable(bad, 2)
    assert "\n" not in str(e.value)
    wide = dataclasses.replace(demo_experiment, actor=dataclasses.replace(
        demo_experiment.actor, heads=8, kv_heads=1, hidden=256))
    with pytest.raises(InputError, match="trainer.tp"):
        check_runnable(make_plan(wide, Mode.COLOCATE, trainer_tp=2,
                                 release=ReleasePolicy.TEARDOWN), 2)


def test_cpu_kv_cache_holds_every_sequence_at_full_length_and_is_capped(tmp_path):
    import json

    from yatt.core.kvcache import CPU_BLOCK_TOKENS, CPU_KV_CAP_BYTES
    from yatt.exec.rollout import EngineConfig, cpu_kv_bytes

    (tmp_path / "config.json").write_text(json.dumps(dict(
        num_attention_heads=4, num_key_value_heads=2, hidden_size=128, num_hidden_layers=2,
        intermediate_size=256, vocab_size=512)))
    per_token = 2 * 2 * 2 * (128 // 4) * 4          # K and V, layers, KV heads, head_dim, fp32
    cfg = EngineConfig(str(tmp_path), max_model_len=200, max_num_seqs=3)
    blocks = 2 * 3 + 1                               # 200 tokens take 2 blocks of 128; +1 spare
    assert cpu_kv_bytes(cfg) == blocks * CPU_BLOCK_TOKENS * per_token
    half = dataclasses.replace(cfg, dtype="bfloat16")
    assert cpu_kv_bytes(half) == cpu_kv_bytes(cfg) // 2
    assert cpu_kv_bytes(dataclasses.replace(cfg, max_num_seqs=10**6)) == CPU_KV_CAP_BYTES


@pytest.mark.parametrize("config", ["demo-cpu.yaml", "fidelity/longtail.yaml", "fidelity/wide.yaml"])
def test_the_cost_model_prices_the_kv_cache_the_executor_allocates(config):
    """`yatt.core.kvcache.job_kv_bytes` (the planner's view, from the workload) equals the
    KV cache the executor gives each engine of the job (from its measured prompts)."""
    from yatt.core.config import load_experiment
    from yatt.core.kvcache import job_kv_bytes
    from yatt.exec.job import prepare_job
    from yatt.exec.rollout import EngineConfig, cpu_kv_bytes

    exp = load_experiment(ROOT / "configs" / config)
    job = prepare_job(exp, 0, 2)
    rollout = EngineConfig(job.actor_path, max_model_len=job.max_model_len,
                           max_num_seqs=exp.engine.max_num_seqs, dtype=job.dtype.value)
    genrm = EngineConfig(job.genrm_path, max_model_len=job.genrm_max_model_len,
                         max_num_seqs=exp.engine.genrm_max_num_seqs, dtype=job.dtype.value)
    assert job_kv_bytes(exp) == (cpu_kv_bytes(rollout), cpu_kv_bytes(genrm))
