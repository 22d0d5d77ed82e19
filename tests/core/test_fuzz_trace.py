"""Fuzzing trace reading: random records into `Trace.from_records`, random lines and bytes
into `Trace.read_jsonl` (plain and gzip). Either a Trace (which round-trips) or an
InputError whose text is one line; any other exception escaping is a bug."""
from __future__ import annotations

import functools
import gzip
import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from yatt.core.errors import InputError
from yatt.core.trace import Trace

from _fuzz_helpers import assert_one_line, junk, mutated
from test_fuzz_config import base_plan

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@functools.lru_cache(maxsize=None)
def base_records() -> tuple[dict, ...]:
    meta = {"kind": "meta", "source": "simulated", "plan": base_plan(), "seed": 0,
            "schema": "yatt.trace/1", "steps": 1, "extra": {"note": "fuzz"}}
    sample = {"kind": "sample", "step": 0, "sample_id": 0, "prompt_id": 0, "prompt_tokens": 12,
              "response_tokens": 30, "genrm_input_tokens": 50, "genrm_output_tokens": 4,
              "reward": 1.0, "kept": True, "dp_rank": 0, "round": 0, "rollout_end_s": 1.5}
    span = {"kind": "span", "step": 0, "role": "rollout", "phase": "rollout", "devices": [0, 1],
            "start_s": 0.0, "end_s": 1.5, "tokens": 42, "name": "gen"}
    return meta, sample, span


def trace_or_clean_error(read) -> None:
    try:
        t = read()
    except InputError as e:
        assert_one_line(e)
        return
    assert Trace.from_records(enumerate(t.records(), 1)) == t  # a valid trace round-trips


def records() -> st.SearchStrategy[list]:
    meta, sample, span = base_records()
    one = st.one_of(st.just(sample), st.just(span), mutated(sample), mutated(span), junk())
    return st.tuples(st.one_of(st.just(meta), mutated(meta, max_edits=2), junk()),
                     st.lists(one, max_size=5)).map(lambda t: [t[0], *t[1]])


@FUZZ
@given(records())
def test_random_records_give_a_trace_or_one_line(recs):
    trace_or_clean_error(lambda: Trace.from_records(enumerate(recs, 1), file="fuzz.jsonl"))


def _line(draw) -> bytes:
    kind = draw(st.sampled_from(["record", "record", "junk", "cut", "text", "bytes", "blank"]))
    meta, sample, span = base_records()
    if kind in ("record", "cut"):
        rec = draw(st.one_of(st.just(sample), st.just(span), mutated(sample), mutated(span)))
        text = json.dumps(rec)
        if kind == "cut":
            text = text[: draw(st.integers(0, len(text)))]
        return text.encode()
    if kind == "junk":
        return json.dumps(draw(junk())).encode()
    if kind == "text":
        return draw(st.text(max_size=40)).encode("utf-8", "surrogatepass")
    if kind == "bytes":
        return draw(st.binary(max_size=40))
    return b"   "


@st.composite
def jsonl(draw) -> tuple[bytes, bool]:
    meta = base_records()[0]
    first = draw(st.one_of(st.just(json.dumps(meta).encode()), st.builds(lambda: b"")))
    body = b"\n".join([first] + [_line(draw) for _ in range(draw(st.integers(0, 5)))])
    return body, draw(st.booleans())


@FUZZ
@given(jsonl(), st.integers(0, 64))
def test_random_lines_give_a_trace_or_one_line(doc, cut):
    body, gz = doc
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / ("t.jsonl.gz" if gz else "t.jsonl")
        raw = gzip.compress(body) if gz else body
        if gz and cut:  # sometimes a truncated gzip stream
            raw = raw[: max(0, len(raw) - cut)]
        path.write_bytes(raw)
        trace_or_clean_error(lambda: Trace.read_jsonl(path))
