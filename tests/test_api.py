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
