"""The Python quick start: `from yatt import Trainer` builds the same Experiment and Plan
objects the CLI does, and rejects bad arguments with one clear line."""
from __future__ import annotations

import json

import pytest

import yatt
from yatt.core import InputError, Mode, RewardSource


def _hf_dir(tmp_path, **over):
    cfg = {"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 128,
           "intermediate_size": 384, "num_attention_heads": 4, "num_key_value_heads": 2,
           "vocab_size": 64, "tie_word_embeddings": True, "torch_dtype": "float32", **over}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return tmp_path


def test_trainer_reads_hf_config_and_plans(tmp_path):
    t = yatt.Trainer(actor_model=_hf_dir(tmp_path), reward_model="configs/model/tiny-genrm.yaml")
    assert t.actor.layers == 2 and t.actor.dim_head == 32 and t.actor.hf_path
    exp = t.experiment(batch_size=8)
    assert exp.algo.reward is RewardSource.GENRM and exp.workload.prompts_per_step == 8
    plan = t.plan(batch_size=8)
    assert plan.mode in (Mode.COLOCATE, Mode.PARTIAL)
    assert all(p.tp == 1 for p in plan.placements if p.role.value in ("rollout", "genrm"))


def test_forced_strategy_and_rule_reward(tmp_path):
    t = yatt.Trainer(actor_model=_hf_dir(tmp_path), strategy="colocate")
    assert t.plan(batch_size=4).mode is Mode.COLOCATE
    assert t.experiment(4).algo.reward is RewardSource.RULE


@pytest.mark.parametrize("kwargs,field", [
    ({"strategy": "fast"}, "strategy"),
    ({"actor_model": "NoSuchModel"}, "actor_model"),
])
def test_bad_arguments(tmp_path, kwargs, field):
    args = {"actor_model": str(_hf_dir(tmp_path)), **kwargs}
    with pytest.raises(InputError) as ei:
        yatt.Trainer(**args)
    assert field in str(ei.value) and "allowed" in str(ei.value)


def test_bad_dataset(tmp_path):
    t = yatt.Trainer(actor_model=_hf_dir(tmp_path))
    with pytest.raises(InputError, match="dataset: got 'wiki'; allowed: arith"):
        t.train(dataset="wiki")


def test_hf_config_missing_fields(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(InputError, match="missing num_hidden_layers"):
        yatt.Trainer(actor_model=tmp_path)


# ---- yatt.plan(): `yatt plan` for scripts ----------------------------------------------------

DEMO = "configs/demo-cpu.yaml"


def test_plan_api_scores_a_placement_and_prices_runs(tmp_path):
    r = yatt.plan(DEMO, placement="colocate R2(tp1) G2(tp1) T2(tp1)", gpus=[1, 2], steps=10,
                  price_per_gpu_hour=1.5, top=2)
    assert isinstance(r, yatt.PlanResult)
    assert "\n" not in repr(r) and len(repr(r)) < 300 and "given=" in repr(r)
    assert r.given is not None and r.given.mean >= r.best.mean and r.gap()
    df = r.ranking
    assert {"rollout_tp", "genrm_devices", "trainer_dp", "dollars_run"} <= set(df.columns)
    assert list(df["source"])[-1] == "given"
    assert {row.gpus for row in r.scaling} == {1, 2}
    s = r.summary()
    assert s["cost"]["steps"] == 10 and s["cost"]["price_per_gpu_hour"] == 1.5
    assert r.timeline().spans and r.timeline(given=True).spans
    assert r.best_plan().predicted.step_s == pytest.approx(r.best.mean, abs=1e-3)
    e = r.emit("openrlhf")
    assert e.text().startswith("#!/usr/bin/env bash")


def test_plan_api_takes_objects_and_plan_files(tmp_path):
    from yatt.core.config import dump_yaml, load_experiment

    exp = load_experiment(DEMO)
    r = yatt.plan(exp, top=1)
    assert r.given is None and r.gap() is None
    path = tmp_path / "plan.yaml"
    dump_yaml(r.best_plan(), path)
    again = yatt.plan(path, top=1)
    assert again.given is not None and "is the best one" in again.gap()
    assert yatt.plan(r.best.plan, top=1).given is not None


@pytest.mark.parametrize("kwargs,field", [
    ({"top": 0}, "top"),
    ({"steps": 0}, "steps: got 0"),
    ({"price_per_gpu_hour": -2.0}, "price_per_gpu_hour: got -2.0"),
    ({"gpus": [3]}, "gpus: got 3"),
    ({"placement": "colocate R2(tp1)"}, "placement: no trainer token"),
])
def test_plan_api_bad_arguments(kwargs, field):
    with pytest.raises(InputError) as ei:
        yatt.plan(DEMO, **kwargs)
    assert field in str(ei.value)


def test_plan_api_refuses_a_placement_for_a_plan(tmp_path):
    from yatt.core.config import load_experiment
    from yatt.planner.placement_text import parse_placement

    plan = parse_placement("colocate R2(tp1) G2(tp1) T2(tp1)", load_experiment(DEMO))
    with pytest.raises(InputError, match="placement"):
        yatt.plan(plan, placement="colocate R2(tp1) G2(tp1) T2(tp1)")
