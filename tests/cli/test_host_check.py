"""The host check of `yatt plan|run|replay --profile`: it times the profile's probe on this
host (real torch, real timing), prints the ratio, plans with the rescaled profile and,
past the band, says in one line how to refresh the profile; --no-host-check and
YATT_HOST_CHECK=off keep the profile as measured. The rest of the suite plans with the
check off (tests/conftest.py)."""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from yatt.cli.main import main
from yatt.planner.profile_io import load_profile
from yatt.profiling.hostcheck import check_host

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "demo-cpu.yaml"
SHIPPED = ROOT / "configs" / "profiles" / "cpu-local.yaml"


def _plan(tmp_path, capsys, *extra) -> tuple[str, dict]:
    out = tmp_path / "out"
    js = tmp_path / "plan.json"
    assert main(["plan", str(DEMO), "--profile", str(SHIPPED), "--out", str(out), "--no-progress",
                 "--json", str(js), *extra]) == 0
    return capsys.readouterr().out, json.loads(js.read_text())


def test_plan_probes_prints_the_ratio_and_plans_rescaled(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("YATT_HOST_CHECK", "on")
    text, summary = _plan(tmp_path, capsys)
    line = next(x for x in text.splitlines() if x.startswith("host check: this host ran"))
    ratio = float(line.split("probe in ")[1].split("x")[0])
    assert ratio > 0
    # the shipped profile records the probe's two parts: every term follows the interpreter
    # part, and the matmul part is shown beside it
    assert "every term but engine teardown x" in line and "(its matmul part: x" in line
    assert f"rescaled to this host: probe x{ratio:.2f} (interpreter x" in text
    assert "rescaled to this host" in summary["cost_model"]     # the JSON says it too
    # the flag turns it off, and the plan is then the profile's as measured
    off, base = _plan(tmp_path / "b", capsys, "--no-host-check")
    assert "host check: off" in off and "rescaled" not in off
    monkeypatch.setenv("YATT_HOST_CHECK", "off")
    _, again = _plan(tmp_path / "c", capsys)
    assert again["best"]["predicted"] == base["best"]["predicted"]   # reproducible: no probe
    assert "rescaled" not in again["cost_model"]


def test_bad_env_value_is_one_line_exit_2_nothing_written(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("YATT_HOST_CHECK", "maybe")
    out = tmp_path / "out"
    assert main(["plan", str(DEMO), "--profile", str(SHIPPED), "--out", str(out),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "YATT_HOST_CHECK" in err[0] and "on|off" in err[0]
    assert not out.exists()


def test_profile_from_another_host_gets_the_refresh_line():
    """A profile whose probe took a tenth of what any host here takes: far outside the band."""
    pytest.importorskip("torch")
    prof = load_profile(SHIPPED)
    t = prof.tables
    fast = dataclasses.replace(prof, tables=dataclasses.replace(
        t, host_probe_s=t.host_probe_s / 10, host_probe_python_s=0.0005, host_probe_matmul_s=0.001))
    got = check_host(fast, "configs/demo-cpu.yaml", seconds=0.3)
    assert got.ratios is not None and got.ratios.split and got.ratios.whole > 1.18
    assert len(got.lines) == 2 and "different host" in got.lines[1]
    assert "`yatt profile configs/demo-cpu.yaml --device cpu --quick -o profile.yaml`" in got.lines[1]
    assert got.profile.tables.host_probe_s == pytest.approx(got.probe.total_s, abs=1e-6)
    # the engine re-create (interpreter-bound) follows the Python part's ratio
    start = t.models["tiny-actor"].engine.start_s
    assert got.profile.tables.models["tiny-actor"].engine.start_s == pytest.approx(
        start * got.ratios.interpreter, abs=1e-6)


def test_skips_are_one_line_each(monkeypatch):
    prof = load_profile(SHIPPED)
    no_probe = dataclasses.replace(prof, tables=dataclasses.replace(prof.tables, host_probe_s=0.0))
    gpu = dataclasses.replace(prof, tables=dataclasses.replace(prof.tables, device="cuda"))
    for p, words in ((no_probe, "recorded no host probe"), (gpu, "a cuda profile")):
        got = check_host(p, "c.yaml")
        assert got.profile is p and len(got.lines) == 1 and words in got.lines[0]
    assert check_host(prof, "c.yaml", enabled=False).lines == (
        "host check: off; the profile's times as measured",)
    # no tables (efficiencies only): nothing to rescale, nothing said
    eff = dataclasses.replace(prof, tables=None)
    assert check_host(eff, "c.yaml").lines == ()
    # the light install: torch cannot be imported
    monkeypatch.setitem(sys.modules, "torch", None)
    got = check_host(prof, "c.yaml")
    assert got.profile is prof and len(got.lines) == 1 and "needs torch" in got.lines[0]


def test_recorded_probe_rescales_only_what_the_host_check_would(monkeypatch):
    """`check_recorded` refuses what `check_host` skips (no probe in the profile, a GPU
    profile, no tables, off, nothing recorded) and names the run's host in the source."""
    from yatt.planner.hostscale import HostProbe
    from yatt.profiling.hostcheck import check_recorded

    prof = load_profile(SHIPPED)
    t = prof.tables
    probe = HostProbe(python_s=t.host_probe_python_s * 1.3, matmul_s=t.host_probe_matmul_s)
    no_probe = dataclasses.replace(prof, tables=dataclasses.replace(t, host_probe_s=0.0))
    gpu = dataclasses.replace(prof, tables=dataclasses.replace(t, device="cuda"))
    eff = dataclasses.replace(prof, tables=None)
    for p in (no_probe, gpu, eff, None):
        assert check_recorded(p, probe) is None
    assert check_recorded(prof, None) is None
    assert check_recorded(prof, probe, enabled=False) is None
    got = check_recorded(prof, probe)
    assert got.where == "the run's host" and got.probe == probe
    assert got.profile.source.endswith(got.note) and "rescaled to the run's host" in got.note
    assert got.profile.tables.rpc_s == pytest.approx(t.rpc_s * got.ratios.interpreter, abs=1e-6)


def _tiny_trace(path: Path) -> Path:
    sys.path.insert(0, str(ROOT / "tests" / "planner"))
    from _trace_helpers import synthetic_trace

    synthetic_trace(steps=2).write_jsonl(path)
    return path


def test_replay_checks_the_host_and_titles_the_rescaled_prediction(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("YATT_HOST_CHECK", "on")
    trace = _tiny_trace(tmp_path / "t.jsonl")
    assert main(["replay", str(trace), "--profile", str(SHIPPED), "--gpus", "16", "--mode",
                 "colocate", "--out", str(tmp_path / "o"), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "host check: this host ran the profile's probe" in text
    assert "mean; profile rescaled to this host: probe x" in text     # the phase table's title
    assert main(["replay", str(trace), "--profile", str(SHIPPED), "--gpus", "16", "--mode",
                 "colocate", "--out", str(tmp_path / "o2"), "--no-progress",
                 "--no-host-check"]) == 0
    text = capsys.readouterr().out
    assert "host check: off" in text and "rescaled" not in text


def test_replay_of_a_run_that_recorded_its_probe_rescales_to_that_run(tmp_path, capsys,
                                                                      monkeypatch):
    """A measured trace carries the probe its run timed: replay re-simulates that run at
    that run's host speed, and times nothing here."""
    from yatt.core.trace import Trace
    from yatt.planner.hostscale import HostProbe, host_ratios
    from yatt.profiling import hostcheck

    monkeypatch.setenv("YATT_HOST_CHECK", "on")

    def no_timing(*_a, **_k):
        raise AssertionError("the host was timed")

    monkeypatch.setattr(hostcheck, "measure", no_timing)
    trace = Trace.read_jsonl(_tiny_trace(tmp_path / "t.jsonl"))
    prof = load_profile(SHIPPED)
    t = prof.tables
    # a run on a host 1.3x slower (interpreter part) than the profile's
    probe = HostProbe(python_s=t.host_probe_python_s * 1.3, matmul_s=t.host_probe_matmul_s)
    extra = {**trace.meta.extra, **probe.record()}
    path = tmp_path / "recorded.jsonl"
    Trace(dataclasses.replace(trace.meta, extra=extra), trace.samples, trace.spans).write_jsonl(path)
    r = host_ratios(t, HostProbe.from_record(extra))
    assert main(["replay", str(path), "--profile", str(SHIPPED), "--gpus", "16", "--mode",
                 "colocate", "--out", str(tmp_path / "o"), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert (f"host check: the trace's run timed the profile's probe in {r.whole:.2f}x" in text
            and f"(interpreter x{r.interpreter:.2f})" in text), text
    assert "profile rescaled to the run's host" in text
    assert main(["replay", str(path), "--profile", str(SHIPPED), "--gpus", "16", "--mode",
                 "colocate", "--out", str(tmp_path / "o2"), "--no-progress",
                 "--no-host-check"]) == 0
    assert "host check: off" in capsys.readouterr().out


def test_run_report_says_the_prediction_was_rescaled(tmp_path):
    """`yatt run`'s predicted-vs-measured table and line name the rescale they used."""
    from rich.console import Console

    from yatt.cli.run import fidelity_report
    from yatt.core.trace import Trace
    from yatt.planner.costmodel import AnalyticCostModel

    trace = Trace.read_jsonl(_tiny_trace(tmp_path / "t.jsonl"))
    cost = AnalyticCostModel.for_experiment(trace.meta.plan.experiment)
    con = Console(record=True, width=200)
    fidelity_report(con, trace, cost, "rescaled to this host: probe x0.90")
    text = con.export_text()
    line = next(x for x in text.splitlines() if x.startswith("fidelity: predicted"))
    assert "; profile rescaled to this host: probe x0.90" in line
    assert "mean; profile rescaled to this host: probe x0.90)" in text
    con = Console(record=True, width=200)
    fidelity_report(con, trace, cost)
    assert "rescaled" not in con.export_text()


def test_run_report_says_when_too_few_steps_to_be_steady(tmp_path):
    """A run shorter than STEADY_STEPS compares steps that still warm up: the line says so
    and how many steps compare steady ones; a run that long gets no such words."""
    from rich.console import Console

    from yatt.cli.run import fidelity_report
    from yatt.planner.costmodel import AnalyticCostModel
    from yatt.planner.explain import STEADY_STEPS

    sys.path.insert(0, str(ROOT / "tests" / "planner"))
    from _trace_helpers import synthetic_trace

    for steps, hint in ((2, True), (STEADY_STEPS - 1, True), (STEADY_STEPS, False)):
        trace = synthetic_trace(steps=steps)
        con = Console(record=True, width=300)
        fidelity_report(con, trace, AnalyticCostModel.for_experiment(trace.meta.plan.experiment))
        line = next(x for x in con.export_text().splitlines() if x.startswith("fidelity: predicted"))
        assert line.endswith(f"; {steps} steps: the first ones still warm up, --steps "
                             f"{STEADY_STEPS} or more compares steady steps") is hint, line
        assert "; median step " in line, line


def test_machine_id_names_this_boot_and_the_probe_carries_it(monkeypatch, tmp_path):
    from yatt.profiling import hostcheck

    me = hostcheck.machine_id()
    assert me == hostcheck.machine_id()          # stable on one machine and boot
    if hostcheck.BOOT_ID.is_file():
        assert len(me) == 16 and int(me, 16) >= 0
    pytest.importorskip("torch")
    assert hostcheck.measure(0.05).host_id == me
    # a system that does not say which boot this is: no id, so every profile is another host's
    monkeypatch.setattr(hostcheck, "BOOT_ID", tmp_path / "missing")
    assert hostcheck.machine_id() == ""


def test_a_profile_made_on_the_runs_machine_is_kept_inside_the_band():
    """A trace whose run timed the probe on the profile's own machine and boot: inside the
    band the profile stays as measured (its drift is printed, not applied); past it, or on
    another machine, the profile is rescaled to the run's host as before."""
    from yatt.planner.hostscale import HostProbe
    from yatt.profiling.hostcheck import check_recorded

    prof = load_profile(SHIPPED)
    t = prof.tables
    here = dataclasses.replace(prof, tables=dataclasses.replace(t, host_id="feedc0de00000001"))
    drift = HostProbe(python_s=t.host_probe_python_s * 1.1, matmul_s=t.host_probe_matmul_s,
                      host_id="feedc0de00000001")
    got = check_recorded(here, drift)
    assert got.profile is here and got.ratios is None and got.note == ""
    assert len(got.lines) == 1 and "one machine and boot" in got.lines[0]
    far = dataclasses.replace(drift, python_s=t.host_probe_python_s * 1.5,
                              matmul_s=t.host_probe_matmul_s * 1.5)
    other = dataclasses.replace(drift, host_id="feedc0de00000002")
    for probe in (far, other):
        moved = check_recorded(here, probe)
        assert moved.ratios is not None and moved.profile is not here
        assert "rescaled to the run's host" in moved.note
