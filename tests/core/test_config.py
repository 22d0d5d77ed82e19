"""Config loading: the bundled configs load, and every error path is one clear line."""
from __future__ import annotations

from pathlib import Path

import pytest

from yatt.core import InputError
from yatt.core.config import dump_yaml, load_experiment, load_plan, read_yaml
from yatt.core.schema import from_dict, to_dict
from yatt.core.plan import Experiment

ROOT = Path(__file__).resolve().parents[2]


def test_bundled_configs_load():
    e = load_experiment(ROOT / "configs/default.yaml")
    assert e.cluster.num_gpus == 48
    assert e.actor.name == "Qwen2.5-1.5B" and e.genrm.name == "Qwen2.5-Math-72B"
    assert e.workload.prompts_per_step == 1024 and e.workload.samples_per_prompt == 8
    d = load_experiment(ROOT / "configs/demo-cpu.yaml")
    assert d.cluster.num_gpus == 2 and d.actor.dim_head >= 32 and d.genrm.dim_head >= 32


def _write(tmp_path: Path, text: str, name: str = "exp.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


BASE = """
name: t
cluster: {gpu: A100-80G, nodes: 1, gpus_per_node: 8}
actor: Qwen2.5-1.5B
genrm: Qwen2.5-7B
workload: {prompts_per_step: 4, samples_per_prompt: 2}
"""

CASES = [
    # (yaml, expected field path fragment, expected message fragment)
    (BASE + "bogus: 1\n", "bogus", "unknown key"),
    (BASE.replace("nodes: 1", "nodes: -1"), "cluster.nodes", ">= 1"),
    (BASE.replace("nodes: 1", "nodes: two"), "cluster.nodes", "an integer"),
    (BASE.replace("A100-80G", "B300"), "cluster.gpu", "allowed: A100-40G"),
    (BASE.replace("actor: Qwen2.5-1.5B", "actor: Qwen9"), "actor", "unknown model"),
    (BASE.replace("actor: Qwen2.5-1.5B", "actor: nope.yaml"), "actor", "not found"),
    (BASE.replace("prompts_per_step: 4", "prompts_per_step: 0"), "workload.prompts_per_step", ">= 1"),
    (BASE + "algo: {name: dpo}\n", "algo.name", "grpo|ppo"),
    (BASE + "algo: {kl_coef: -1}\n", "algo.kl_coef", ">= 0"),
    (BASE + "engine: {gpu_memory_utilization: 1.5}\n", "engine.gpu_memory_utilization", "<= 1"),
    (BASE + "search: {modes: [fast]}\n", "search.modes[0]", "colocate|partial"),
    (BASE.replace("genrm: Qwen2.5-7B\n", ""), "genrm", "no genrm model"),
    (BASE.replace("workload: {prompts_per_step: 4, samples_per_prompt: 2}",
                  "workload: {prompts_per_step: 4}"), "workload.samples_per_prompt", "missing"),
    (BASE.replace("workload: {prompts_per_step: 4, samples_per_prompt: 2}",
                  "workload: {prompts_per_step: 4, samples_per_prompt: 2, response_len: {kind: lognormal, value: 0}}"),
     "workload.response_len.value", "> 0"),
    (BASE.replace("workload: {prompts_per_step: 4, samples_per_prompt: 2}",
                  "workload: {prompts_per_step: 4, samples_per_prompt: 2, response_len: {kind: lognormal, value: 300}}"),
     "workload.response_len.sigma", "lognormal needs `sigma`"),
    (BASE.replace("actor: Qwen2.5-1.5B", "actor: {name: x, layers: 2, hidden: 64, intermediate: 8, heads: 3, kv_heads: 2, vocab: 10}"),
     "actor.kv_heads", "multiple of kv_heads"),
    ("- just\n- a list\n", "", "a mapping"),
    ("name: [unclosed\n", "line", "invalid YAML"),
]


@pytest.mark.parametrize("text,field,msg", CASES)
def test_config_errors_are_one_clear_line(tmp_path, text, field, msg):
    p = _write(tmp_path, text)
    with pytest.raises(InputError) as ei:
        load_experiment(p)
    line = str(ei.value)
    assert "\n" not in line
    assert line.startswith(str(p))
    assert field in line, line
    assert msg in line, line


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_experiment(tmp_path / "nope.yaml")


def test_experiment_round_trip(tmp_path):
    e = load_experiment(ROOT / "configs/default.yaml")
    d = to_dict(e)
    assert from_dict(Experiment, d) == e
    dump_yaml(e, tmp_path / "e.yaml")
    assert from_dict(Experiment, read_yaml(tmp_path / "e.yaml")) == e


def test_plan_file_errors(tmp_path):
    p = _write(tmp_path, "mode: colocate\n", "plan.yaml")
    with pytest.raises(InputError, match="placements: missing required field"):
        load_plan(p)
