"""draw_pool: the stop-length (EOS) model — a response is min(budget, stop)."""
import dataclasses

import numpy as np
from hypothesis import given, settings, strategies as st

from helpers import workload
from yatt.core import DistKind, LengthDist
from yatt.core.config import dump_yaml, read_yaml
from yatt.core.schema import from_dict, to_dict
from yatt.core.specs import Workload
from yatt.sim.pool import draw_pool


@settings(max_examples=40, deadline=None)
@given(prompts=st.integers(1, 12), k=st.integers(1, 6), seed=st.integers(0, 10_000),
       stop=st.integers(1, 400), sigma=st.floats(0.0, 1.5), ds=st.booleans())
def test_stop_len_caps_responses_and_changes_nothing_else(prompts, k, seed, stop, sigma, ds):
    w = workload(prompts=prompts, k=k, ds=ds, p_equal=0.3 if ds else 0.0, resp=120, sigma=sigma)
    s = dataclasses.replace(w, stop_len=LengthDist(DistKind.UNIFORM, min=1, max=stop))
    a = draw_pool(w, 3, np.random.default_rng(seed))
    b = draw_pool(s, 3, np.random.default_rng(seed))
    assert np.all(b.response_tokens <= a.response_tokens)   # never longer than the budget
    assert np.all(b.response_tokens <= stop)                 # never past the model's stop
    assert np.all((b.response_tokens == a.response_tokens) | (b.response_tokens < a.response_tokens))
    for f in ("prompt_tokens", "genrm_out", "reward", "round", "prompt_id", "sample_id",
              "group_dropped"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert np.array_equal(b.genrm_in, b.prompt_tokens + b.response_tokens + w.genrm_template_tokens)


def test_stop_len_round_trips_through_yaml(tmp_path):
    w = dataclasses.replace(workload(), stop_len=LengthDist(DistKind.EMPIRICAL, min=0, max=64,
                                                            values=(2, 3, 64)))
    dump_yaml(to_dict(w), tmp_path / "w.yaml")
    assert from_dict(Workload, read_yaml(tmp_path / "w.yaml")) == w
    assert from_dict(Workload, to_dict(workload())).stop_len is None
