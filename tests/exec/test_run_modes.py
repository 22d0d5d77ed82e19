"""End-to-end: 2 real steps in each placement mode (Ray + vLLM + Megatron, CPU)."""
from __future__ import annotations

import csv
import dataclasses
import json

import pytest

pytest.importorskip("vllm")
pytest.importorskip("megatron.core")

from yatt.core.roles import Mode, Phase, ReleasePolicy, Role, TraceSource  # noqa: E402


def _run(exp, mode, release, out_dir):
    from yatt.core.layout import make_plan
    from yatt.exec.runner import run_plan

    plan = make_plan(exp, mode, release=release)
    return run_plan(plan, steps=2, out_dir=out_dir, seed=0, progress=False)


@pytest.fixture(scope="module")
def greedy_exp(demo_experiment):
    return dataclasses.replace(demo_experiment,
                               algo=dataclasses.replace(demo_experiment.algo, temperature=0.0))


@pytest.fixture(scope="module")
def runs(ray_cluster, greedy_exp, tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    colo = _run(greedy_exp, Mode.COLOCATE, ReleasePolicy.TEARDOWN, root / "colocate")
    part = _run(greedy_exp, Mode.PARTIAL, ReleasePolicy.RESIDENT, root / "partial")
    return root, colo, part


@pytest.mark.slow
def test_run_dir_outputs(runs):
    root, colo, _ = runs
    d = root / "colocate"
    for name in ("trace.jsonl", "timeline.json", "metrics.csv", "plan.yaml"):
        assert (d / name).is_file(), name
    rows = list(csv.DictReader(open(d / "metrics.csv")))
    assert [r["step"] for r in rows] == ["0", "1"]
    for col in ("reward_mean", "kl", "entropy", "loss", "grad_norm", "rollout_s", "train_s"):
        assert col in rows[0]
    for r in rows:   # step time in which no traced phase ran: within [0, step_s]
        assert 0.0 <= float(r["overhead_s"]) <= float(r["step_s"])
        assert 0.0 <= float(r["overhead_frac"]) <= 1.0
    assert json.load(open(d / "timeline.json"))["traceEvents"]
    assert colo.meta.source is TraceSource.MEASURED
    assert len(colo.samples) == 2 * colo.meta.plan.experiment.workload.samples_per_step


@pytest.mark.slow
def test_colocate_records_measured_release(runs):
    _, colo, _ = runs
    off = [s for s in colo.spans if s.phase is Phase.OFFLOAD]
    rel = [s for s in colo.spans if s.phase is Phase.RELOAD]
    assert {s.role for s in off} == {Role.ROLLOUT, Role.GENRM}
    assert all(s.duration > 0 for s in off + rel)
    # phases in sequence: rollout ends before GenRM starts, in every step
    for step in (0, 1):
        ro = [s for s in colo.spans if s.step == step and s.phase is Phase.ROLLOUT][0]
        ge = [s for s in colo.spans if s.step == step and s.phase is Phase.GENRM][0]
        assert ro.end_s <= ge.start_s


@pytest.mark.slow
def test_partial_streams_and_modes_agree(runs):
    _, colo, part = runs
    for step in (0, 1):
        ro = [s for s in part.spans if s.step == step and s.phase is Phase.ROLLOUT][0]
        ge = [s for s in part.spans if s.step == step and s.phase is Phase.GENRM][0]
        assert ro.devices == (0,) and ge.devices == (1,)
        assert ge.start_s < ro.end_s          # GenRM ran while rollout was still going
    assert not [s for s in part.spans if s.phase is Phase.OFFLOAD]   # resident
    key = lambda t: sorted((s.step, s.prompt_id, s.sample_id, s.response_tokens, s.reward)
                           for s in t.samples)
    assert key(colo) == key(part)             # same prompts, same greedy samples, same rewards
    assert [s.dp_rank for s in colo.samples] == [s.dp_rank for s in part.samples]


@pytest.mark.slow
def test_losses_agree_across_modes(runs):
    root = runs[0]
    rows = {m: list(csv.DictReader(open(root / m / "metrics.csv"))) for m in ("colocate", "partial")}
    for col in ("loss", "kl", "entropy", "grad_norm"):
        a = [float(r[col]) for r in rows["colocate"]]
        b = [float(r[col]) for r in rows["partial"]]
        assert a == pytest.approx(b, rel=1e-4, abs=1e-6), col
