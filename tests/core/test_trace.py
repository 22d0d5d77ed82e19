"""Trace JSONL I/O: round trips (plain and gzip), strict validation, per-phase busy time."""
from __future__ import annotations

import json

import pytest

from yatt.core import InputError, Phase, Role, SpanRecord, Trace


def _tiny_trace() -> Trace:
    from yatt.core import ClusterSpec, Experiment, LengthDist, Mode, Workload, catalog
    from yatt.core.roles import DistKind
    from yatt.planner.costmodel import AnalyticCostModel
    from yatt.sim import make_plan, simulate

    w = Workload(prompts_per_step=8, samples_per_prompt=4,
                 response_len=LengthDist(DistKind.LOGNORMAL, 300, sigma=0.6, min=8, max=2000),
                 dynamic_sampling=True, all_equal_prob=0.3)
    exp = Experiment("t", ClusterSpec(catalog.gpu("H100-SXM"), nodes=1, gpus_per_node=8),
                     catalog.model("Qwen2.5-0.5B"), w, genrm=catalog.model("Qwen2.5-1.5B"))
    plan = make_plan(exp, Mode.PARTIAL, rollout_devices=4)
    return simulate(plan, w, AnalyticCostModel.for_experiment(exp), seed=1, steps=2)


@pytest.fixture(scope="module")
def trace() -> Trace:
    return _tiny_trace()


@pytest.mark.parametrize("name", ["t.jsonl", "t.jsonl.gz"])
def test_round_trip(tmp_path, trace, name):
    p = tmp_path / name
    trace.write_jsonl(p)
    back = Trace.read_jsonl(p)
    assert back == trace
    assert not (tmp_path / (name + ".tmp")).exists()


def test_phase_role_busy_merges_overlaps_per_step(trace):
    spans = (SpanRecord(step=0, role=Role.TRAINER, phase=Phase.OFFLOAD, devices=(0,), start_s=0, end_s=2),
             SpanRecord(step=0, role=Role.TRAINER, phase=Phase.OFFLOAD, devices=(1,), start_s=1, end_s=3),
             SpanRecord(step=0, role=Role.TRAINER, phase=Phase.OFFLOAD, devices=(0,), start_s=10, end_s=11))
    t = Trace(trace.meta, (), spans)
    assert t.phase_role_busy() == {(0, Phase.OFFLOAD, Role.TRAINER): pytest.approx(4.0)}
    busy = trace.phase_role_busy()
    assert {k[0] for k in busy} == {0, 1}
    assert busy[(0, Phase.ROLLOUT, Role.ROLLOUT)] > 0


def test_malformed_lines_name_line_and_field(tmp_path, trace):
    p = tmp_path / "t.jsonl"
    trace.write_jsonl(p)
    lines = p.read_text().splitlines()
    rec = json.loads(lines[3])
    del rec["response_tokens"]
    lines[3] = json.dumps(rec)
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as ei:
        Trace.read_jsonl(p)
    assert ei.value.field == "line 4: response_tokens"
