"""Fuzzing the YAML loader: any text, and any random edit of a valid experiment or plan,
gives either a valid spec (which round-trips) or an InputError whose text is one line.
Any other exception escaping is a bug in yatt.core."""
from __future__ import annotations

import functools
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from yatt.core.config import experiment_from_mapping, parse_yaml
from yatt.core.errors import InputError
from yatt.core.plan import Plan, RolePlacement
from yatt.core.roles import Mode, Role
from yatt.core.schema import from_dict, to_dict

from _fuzz_helpers import assert_one_line, mutated

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"  # base dir: relative refs like cluster/cpu-2dev.yaml resolve
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

BASE_EXPERIMENT = {
    "name": "fuzz",
    "cluster": {"gpu": "H100-SXM", "nodes": 2, "gpus_per_node": 8},
    "actor": "Qwen2.5-0.5B",
    "genrm": "Qwen2.5-1.5B",
    "workload": {"prompts_per_step": 8, "samples_per_prompt": 2,
                 "response_len": {"kind": "empirical", "values": [10, 20], "weights": [1, 2]}},
    "algo": {"lr": 1e-6, "reward": "genrm"},
    "engine": {"max_num_seqs": 16},
    "search": {"modes": ["colocate", "partial"], "tp_choices": [1, 2], "balance": "kk"},
}


@functools.lru_cache(maxsize=None)
def base_plan() -> dict:
    exp = experiment_from_mapping(BASE_EXPERIMENT, CONFIGS)
    plan = Plan(Mode.PARTIAL, (RolePlacement(Role.ROLLOUT, tuple(range(8)), tp=2),
                               RolePlacement(Role.GENRM, tuple(range(8, 16)), tp=2),
                               RolePlacement(Role.TRAINER, tuple(range(16)), tp=2),
                               RolePlacement(Role.REFERENCE, tuple(range(16)), tp=2)), exp)
    return to_dict(plan)


def load_experiment_data(data):
    return experiment_from_mapping(data, CONFIGS, file="fuzz.yaml")


def load_plan_data(data):
    return from_dict(Plan, data)


def spec_or_clean_error(load, data) -> None:
    try:
        spec = load(data)
    except InputError as e:
        assert_one_line(e)
        return
    assert from_dict(type(spec), to_dict(spec)) == spec  # a valid spec round-trips


# Pieces of YAML: syntax, tags, anchors, hostile scalars, and real keys and values.
TOKENS = ["\n", "\n  ", "\n    ", ": ", "- ", "{", "}", "[", "]", ", ", "? ", "&a ", "*a", "<<: ",
          "!!binary ", "!!python/object:os.system ", "!!set ", "!!str ", "!!int ", "!!float ",
          "'", '"', "#", "|\n", ">\n", "\t", "%YAML 1.1\n", "---\n", "...\n", "\x00", "\ufeff",
          ".inf", "-.inf", ".nan", "1e999", "0x" + "f" * 40, "9" * 30, "2024-13-45", "1:2:3",
          "null", "~", "true", "no", "-1", "0", "1.5", "8",
          "name", "cluster", "gpu", "nodes", "gpus_per_node", "actor", "genrm", "workload",
          "prompts_per_step", "samples_per_prompt", "response_len", "kind", "value", "values",
          "weights", "algo", "engine", "search", "modes", "tp_choices", "mode", "placements",
          "role", "devices", "tp", "experiment", "H100-SXM", "Qwen2.5-0.5B", "lognormal",
          "empirical", "cluster/cpu-2dev.yaml", "model/tiny-actor.yaml", "workload/demo-cpu.yaml",
          "nope.yaml", "colocate", "partial", "rollout", "trainer"]
YAMLISH = st.one_of(st.lists(st.sampled_from(TOKENS), max_size=40).map("".join), st.text(max_size=80))


@FUZZ
@given(YAMLISH)
def test_any_yaml_text_gives_a_spec_or_one_line(text):
    try:
        data = parse_yaml(text, file="fuzz.yaml")
    except InputError as e:
        assert_one_line(e)
        return
    spec_or_clean_error(load_experiment_data, data)
    spec_or_clean_error(load_plan_data, data)


@FUZZ
@given(mutated(BASE_EXPERIMENT), st.booleans())
def test_edited_experiment_gives_a_spec_or_one_line(data, via_text):
    if via_text:  # the same document through the YAML text path
        try:
            data = parse_yaml(yaml.safe_dump(data), file="fuzz.yaml")
        except InputError as e:
            assert_one_line(e)
            return
    spec_or_clean_error(load_experiment_data, data)


@FUZZ
@given(st.data())
def test_edited_plan_gives_a_spec_or_one_line(data):
    spec_or_clean_error(load_plan_data, data.draw(mutated(base_plan(), max_edits=4)))


def test_bases_are_valid():
    load_experiment_data(BASE_EXPERIMENT)
    load_plan_data(base_plan())
