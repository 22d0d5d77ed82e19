"""Async (one-step off-policy) runs with the real executor (Ray + vLLM + Megatron on CPU).

Plan: 2 devices, the rollout engine and the GenRM on device 0 (switching resident), the
trainer and the reference on device 1, max_staleness 1, a checkpoint after every step.
One uninterrupted run is the reference; a run stopped after step 1 and resumed, with an
engine and a trainer killed in the resumed part, must repeat it exactly (the checkpoint
keeps the engines' next weight version; a recovery regenerates from the failed step).
"""
from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytest.importorskip("megatron.core")

from yatt.core.roles import Mode, ReleasePolicy  # noqa: E402

STEPS = 4
EXACT = ("loss", "kl", "entropy", "grad_norm", "reward_mean", "accuracy", "response_tokens",
         "samples", "is_weight", "policy_version")


def _rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def plan(demo_experiment):
    from yatt.core.layout import make_plan
    ck = dataclasses.replace(demo_experiment.checkpoint, every_steps=1, keep_last=2)
    exp = dataclasses.replace(demo_experiment, checkpoint=ck)
    return make_plan(exp, Mode.ASYNC, rollout_devices=1, max_staleness=1,
                     release=ReleasePolicy.RESIDENT)


def _run(plan, out, steps=STEPS, **kw):
    from yatt.exec.runner import run_plan
    return run_plan(plan, steps=steps, out_dir=out, seed=0, progress=False, **kw)


@pytest.fixture(scope="module")
def reference(ray_cluster, plan, tmp_path_factory):
    out = tmp_path_factory.mktemp("async") / "reference"
    return out, _run(plan, out)


@pytest.mark.slow
def test_every_sample_is_generated_by_weights_at_most_one_version_old(reference, plan):
    from yatt.core.schedule import min_policy_version
    out, trace = reference
    n = plan.experiment.workload.samples_per_step
    keys = [(s.step, s.sample_id) for s in trace.samples]
    assert len(keys) == len(set(keys)) == STEPS * n          # each sample once
    for s in trace.samples:
        assert s.policy_version == min_policy_version(s.step, 1) >= s.step - 1
    rows = _rows(out)
    assert [int(r["policy_version"]) for r in rows] == [max(0, s - 1) for s in range(STEPS)]
    # stale samples are reweighted (pi_old / pi_behaviour, truncated); fresh ones weigh ~1
    assert all(0 < float(r["is_weight"]) <= plan.experiment.algo.behaviour_is_cap for r in rows)


@pytest.mark.slow
def test_the_trace_has_the_simulators_async_step_records_and_replays(reference, plan):
    """Step time between consecutive train ends, step 0 as warm-up, as the simulator
    reports it; `yatt replay`'s re-simulation runs on the measured trace."""
    from yatt.planner.profiled import cost_model_for, shipped_profile
    from yatt.planner.replay import replay
    from yatt.sim.metrics import summarize
    _, trace = reference
    per = trace.meta.extra["steps"]
    assert [p["step"] for p in per] == list(range(STEPS))
    for a, b in zip(per, per[1:]):
        assert b["step_time_s"] == pytest.approx(b["train_end_s"] - a["train_end_s"], abs=1e-3)
        assert b["gen_start_s"] < a["train_end_s"]            # generated while a was trained
    assert trace.meta.extra["async"]["warmup_steps"] == 1
    steady = [p["step_time_s"] for p in per[1:]]
    assert summarize(trace).step_time_mean == pytest.approx(sum(steady) / len(steady))
    profile, _ = shipped_profile(plan.cluster.gpu.name)
    rep = replay(trace, cost_model_for(plan.experiment, profile))
    assert rep.predicted_stats.step_time_mean > 0 and rep.recorded_stats.step_time_mean > 0


@pytest.mark.slow
def test_the_engines_take_each_version_between_their_steps(reference):
    from yatt.core.roles import Phase, Role
    _, trace = reference
    sends = {sp.step: sp for sp in trace.spans
             if sp.phase is Phase.WEIGHT_SYNC and sp.role is Role.TRAINER}
    takes = {sp.step: sp for sp in trace.spans
             if sp.phase is Phase.WEIGHT_SYNC and sp.role is Role.ROLLOUT}
    assert sorted(sends) == list(range(STEPS))
    assert sorted(takes) == list(range(2, STEPS))          # versions 1.. for steps 2..
    rollout = {sp.step: sp for sp in trace.spans if sp.phase is Phase.ROLLOUT}
    train = {sp.step: sp for sp in trace.spans if sp.phase is Phase.TRAIN}
    for s in range(2, STEPS):
        # version s - 1 is taken after train step s - 2 published it, before rollout s
        assert sends[s - 2].end_s <= takes[s].start_s <= takes[s].end_s <= rollout[s].start_s
    # the overlap itself: step 1's rollout starts as soon as step 0 is generated, while the
    # trainer trains step 0 on its own device
    assert rollout[1].start_s < train[0].end_s


@pytest.mark.slow
def test_a_stopped_run_resumes_exactly_through_actor_faults(reference, plan, tmp_path,
                                                           monkeypatch):
    """Stopped after step 1, resumed; in the resumed part the rollout engine dies in its
    first generate (step 2) and the trainer in its second train step (step 3). Each is
    restarted, the generator starts again from the failed step, and the run still repeats
    the uninterrupted one exactly, every sample once."""
    from yatt.core.trace import Trace
    out_ref, _ = reference
    out = tmp_path / "stopped"
    _run(plan, out, steps=2)
    ck = sorted((out / "checkpoints").glob("step-*"))[-1]
    assert (ck / "engine_weights.safetensors").is_file()
    monkeypatch.setenv("YATT_FAULTS", "rollout.exit@1,trainer.exit@2")
    monkeypatch.setenv("YATT_FAULT_DIR", str(tmp_path))
    logs: list[str] = []
    tr = _run(plan, out, steps=STEPS, resume=True, log=logs.append)
    # the newest checkpoint (its metadata from megatron's cached save plan) is the one loaded
    assert tr.meta.extra["resumed_from"] == ck.name == "step-000001"
    assert (tmp_path / "yatt-fault-rollout.exit@1").exists()   # the faults really fired
    assert (tmp_path / "yatt-fault-trainer.exit@2").exists()
    assert [(f["step"], f["role"]) for f in tr.meta.extra["faults"]] == [(2, "rollout"),
                                                                         (3, "trainer")]
    assert any("rollout actor died" in m for m in logs) and any("trainer actor died" in m for m in logs)
    a, b = _rows(out_ref), _rows(out)
    assert [r["step"] for r in a] == [r["step"] for r in b]
    assert b[-1]["restarts"] == "2"
    for ra, rb in zip(a, b):
        for c in EXACT:
            assert ra[c] == rb[c], (ra["step"], c, ra[c], rb[c])
    t = Trace.read_jsonl(out / "trace.jsonl")
    keys = [(s.step, s.sample_id) for s in t.samples]
    assert len(keys) == len(set(keys)) == STEPS * plan.experiment.workload.samples_per_step
    assert [p["step"] for p in t.meta.extra["steps"]] == list(range(STEPS))
