"""`yatt replay` on measured traces: every `traces/measured-*.jsonl.gz` the fidelity bench
wrote (`bench/fidelity.py --save-traces traces`) replays with the shipped profile, and its
provenance sidecar names the trace, the plan it recorded, the command, host, commit and
date. Where no measured trace is committed, a 2-step demo run of the real executor stands
in (one run for the module)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from yatt.cli.main import main
from yatt.core.roles import TraceSource
from yatt.core.trace import Trace
from yatt.planner.replay import sample_steps

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "configs" / "profiles" / "cpu-local.yaml"
MEASURED = sorted((ROOT / "traces").glob("measured-*.jsonl.gz"))
PROVENANCE = ("trace", "command", "rerun", "config", "plan", "plan_yaml", "steps", "seed", "host",
              "git_commit", "date", "measured_step_s")


@pytest.fixture(scope="module")
def demo_run_trace(request, tmp_path_factory) -> Path:
    """A measured trace of 2 demo steps (only where no traces/measured-* file exists)."""
    pytest.importorskip("vllm")
    pytest.importorskip("megatron.core")
    request.getfixturevalue("ray_cluster")
    from yatt.core.config import load_experiment
    from yatt.core.layout import make_plan
    from yatt.core.roles import Mode, ReleasePolicy
    from yatt.exec.runner import run_plan

    exp = load_experiment(ROOT / "configs" / "demo-cpu.yaml")
    out = tmp_path_factory.mktemp("measured")
    run_plan(make_plan(exp, Mode.COLOCATE, release=ReleasePolicy.TEARDOWN), steps=2,
             out_dir=out, seed=0, progress=False)
    return out / "trace.jsonl"


@pytest.mark.slow
@pytest.mark.parametrize("name", [p.name for p in MEASURED] or ["demo-run"])
def test_replay_of_a_measured_trace(name, request, tmp_path, capsys):
    path = ROOT / "traces" / name if MEASURED else request.getfixturevalue("demo_run_trace")
    trace = Trace.read_jsonl(path)
    assert trace.meta.source is TraceSource.MEASURED
    out = tmp_path / "o"
    assert main(["replay", str(path), "--profile", str(SHIPPED), "--no-host-check",
                 "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "measured trace" in text and "Recorded vs predicted" in text and "What if" in text
    # step 0's one-off warm-up is left out of the comparison, as `yatt run` leaves it out
    assert "step 0 excluded" in text and f"({len(sample_steps(trace)) - 1} steps;" in text
    for f in ("replay_timeline.json", "replay_timeline.png", "scaling.csv", "scaling.png"):
        assert (out / f).stat().st_size > 0, f
    if not MEASURED:
        return
    side = json.loads(path.with_name(name.replace(".jsonl.gz", ".provenance.json")).read_text())
    assert set(PROVENANCE) <= set(side)
    assert side["trace"] == name and side["source"] == "measured"
    assert side["plan"] == trace.meta.plan.describe()
    assert side["steps"] == trace.meta.steps and len(side["git_commit"]) == 40


@pytest.mark.skipif(not MEASURED, reason="no measured trace committed")
def test_replay_without_profile_uses_the_shipped_one_for_the_traces_device(tmp_path, capsys):
    """A CPU trace replayed without --profile gets the profile shipped for its device kind,
    as `yatt plan` and `yatt run` do: the same table as naming that profile."""
    path = MEASURED[0]
    tables = []
    for extra in ([], ["--profile", str(SHIPPED)]):
        out = tmp_path / f"o{len(extra)}"
        assert main(["replay", str(path), *extra, "--no-host-check", "--out", str(out),
                     "--no-progress"]) == 0
        text = capsys.readouterr().out
        assert "cost model: profile" in text and "cpu-local.yaml" in text
        tables.append((out / "scaling.csv").read_text())
    assert tables[0] == tables[1]
