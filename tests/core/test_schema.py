"""Hypothesis: specs round-trip through plain data, and any input gives a spec or a clean error."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from yatt.core import InputError, LengthDist, Workload
from yatt.core.config import parse_yaml
from yatt.core.roles import DistKind
from yatt.core.schema import from_dict, to_dict

dists = st.builds(
    LengthDist,
    kind=st.sampled_from([DistKind.CONST, DistKind.UNIFORM, DistKind.LOGNORMAL]),
    value=st.floats(1, 1e5), sigma=st.floats(0, 3), min=st.integers(0, 100),
    max=st.integers(100, 100000))

workloads = st.builds(
    Workload, prompts_per_step=st.integers(1, 4096), samples_per_prompt=st.integers(1, 64),
    prompt_len=dists, response_len=dists, genrm_template_tokens=st.integers(0, 1000),
    dynamic_sampling=st.booleans(), all_equal_prob=st.floats(0, 0.99),
    max_resample_rounds=st.integers(0, 5))


@settings(max_examples=80, deadline=None)
@given(workloads)
def test_workload_round_trip(w):
    assert from_dict(Workload, to_dict(w)) == w


json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["prompts_per_step", "samples_per_prompt", "prompt_len",
                                        "response_len", "all_equal_prob", "junk"]), json_like))
def test_any_mapping_gives_spec_or_clean_error(data):
    try:
        from_dict(Workload, data)
    except InputError as e:
        assert "\n" not in str(e)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_any_yaml_text_parses_or_errors_cleanly(text):
    """Bad YAML and a bad spec alike end in an InputError (one line by construction), never
    another exception; text PyYAML itself refuses is reported as invalid YAML."""
    try:
        data = parse_yaml(text)
    except InputError as e:
        assert "invalid YAML" in str(e) and "\n" not in str(e)
        return
    try:
        from_dict(Workload, data)
    except InputError as e:
        assert "\n" not in str(e)
