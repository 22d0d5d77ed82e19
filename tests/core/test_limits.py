"""Ceilings and the work budget (`yatt.core.limits`), the bounded JSONL reader and the
batch validator that reads traces fast without accepting anything the exact path refuses."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from yatt.core import limits
from yatt.core.errors import InputError
from yatt.core.schema import from_dict, from_dicts
from yatt.core.trace import SampleRecord, SpanRecord, Trace

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "traces" / "small-1.5b-7b-h100x16.jsonl.gz"


def test_knobs_read_the_environment_and_refuse_junk(monkeypatch):
    monkeypatch.setenv("YATT_MAX_SIM_WORK", "1e6")
    assert limits.SIM_WORK.value() == 1_000_000
    for bad in ("-1", "0", "lots", "1.5", "1e400"):
        monkeypatch.setenv("YATT_MAX_SIM_WORK", bad)
        with pytest.raises(InputError, match="YATT_MAX_SIM_WORK"):
            limits.SIM_WORK.value()


def test_the_meter_refuses_work_past_the_budget(monkeypatch):
    from yatt.core.config import load_experiment
    from yatt.core.layout import make_plan
    from yatt.core.roles import Mode
    from yatt.planner.profiled import cost_model_for
    from yatt.sim.simulate import simulate

    exp = load_experiment(ROOT / "configs" / "demo-cpu.yaml")
    plan = make_plan(exp, Mode.COLOCATE)
    cost = cost_model_for(exp, None)
    simulate(plan, exp.workload, cost, seed=0)             # unmetered outside a budget
    monkeypatch.setenv("YATT_MAX_SIM_WORK", "100")
    with limits.work_budget():
        simulate(plan, exp.workload, cost, seed=0)         # 32 samples + 2 devices: 56
        with pytest.raises(InputError, match="raise YATT_MAX_SIM_WORK"):
            simulate(plan, exp.workload, cost, seed=0)


def _lines() -> list[str]:
    with gzip.open(SMALL, "rt") as f:
        return f.read().splitlines()


def test_the_batch_path_builds_what_the_exact_path_builds():
    rows = [json.loads(x) for x in _lines()[1:]]
    for cls, kind in ((SampleRecord, "sample"), (SpanRecord, "span")):
        mine = [r for r in rows if r["kind"] == kind]
        fast = from_dicts(cls, mine, frozenset({"kind"}))
        exact = [from_dict(cls, {k: v for k, v in r.items() if k != "kind"}) for r in mine]
        assert fast == exact and len(fast) > 100


@pytest.mark.parametrize("change", [
    {"step": True}, {"step": 1.0}, {"step": 2**70}, {"reward": "1"}, {"reward": float("inf")},
    {"kept": 1}, {"prompt_tokens": -1}, {"rollout_end_s": 1e16}, {"extra": 1}, {"round": 10**6}])
def test_the_batch_path_leaves_doubt_to_the_exact_path(change):
    row = {k: v for k, v in json.loads(_lines()[1]).items() if k != "kind"}
    assert from_dicts(SampleRecord, [row]) is not None
    assert from_dicts(SampleRecord, [{**row, **change}]) is None


def test_caps_refuse_in_one_line_naming_the_variable(tmp_path, monkeypatch):
    lines = _lines()
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("YATT_TRACE_MAX_BYTES", str(p.stat().st_size - 1))
    with pytest.raises(InputError, match="YATT_TRACE_MAX_BYTES"):
        Trace.read_jsonl(p)
    monkeypatch.setenv("YATT_TRACE_MAX_BYTES", str(p.stat().st_size))
    monkeypatch.setenv("YATT_TRACE_MAX_LINE_BYTES", str(len(lines[0]) - 1))
    with pytest.raises(InputError, match="line 1.*YATT_TRACE_MAX_LINE_BYTES"):
        Trace.read_jsonl(p)
    monkeypatch.setenv("YATT_TRACE_MAX_LINE_BYTES", str(len(lines[0])))
    assert len(Trace.read_jsonl(p).samples) > 0


def test_blank_lines_keep_their_line_numbers(tmp_path):
    lines = _lines()[:3]
    p = tmp_path / "t.jsonl"
    p.write_text(lines[0] + "\n\n   \n" + lines[1] + "\n" + lines[2].replace('"step":0', '"step":-1') + "\n")
    with pytest.raises(InputError, match="line 5: step"):
        Trace.read_jsonl(p)


def test_a_trace_written_and_read_back_is_the_same(tmp_path):
    t = Trace.read_jsonl(SMALL)
    for name in ("t.jsonl", "t.jsonl.gz"):
        t.write_jsonl(tmp_path / name)
        assert Trace.read_jsonl(tmp_path / name) == t


def test_reading_is_fast_enough_for_a_million_lines(tmp_path):
    """~100k records read back; the budget is generous for a shared 2-core box (the exact
    path alone reads ~2k lines/s)."""
    import resource

    lines = _lines()
    body = lines[1:] * 45
    p = tmp_path / "big.jsonl"
    p.write_text(lines[0] + "\n" + "\n".join(body) + "\n")
    t0 = resource.getrusage(resource.RUSAGE_SELF)
    with pytest.raises(InputError, match="recorded twice"):   # the copies repeat sample ids
        Trace.read_jsonl(p)
    t1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (t1.ru_utime + t1.ru_stime) - (t0.ru_utime + t0.ru_stime)
    assert len(body) / cpu > 10_000, f"{len(body) / cpu:,.0f} lines/s"
