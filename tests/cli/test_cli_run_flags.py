"""`yatt run` reliability flags: bad values and bad --resume targets exit 2 with one line
naming the flag, before any planning, and write nothing."""
from __future__ import annotations

import json

import pytest

from yatt.cli.main import main


@pytest.mark.parametrize("argv, field", [
    (["--ckpt-every", "-1"], "--ckpt-every"),
    (["--ckpt-minutes", "nan"], "--ckpt-minutes"),
    (["--keep", "0"], "--keep"),
    (["--steps", "0"], "--steps"),
])
def test_bad_flags(argv, field, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--out", str(out), "--no-progress", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0] and "allowed" in err[0]
    assert not out.exists()


def test_resume_needs_a_run_dir(tmp_path, capsys):
    pytest.importorskip("ray")
    assert main(["run", "--resume", str(tmp_path / "nope"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--resume" in err[0] and "not a yatt run directory" in err[0]


def test_resume_without_a_checkpoint(tmp_path, capsys, demo_plan_file):
    pytest.importorskip("ray")
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"steps": 3, "seed": 0, "controllers": 1}))
    (run / "plan.yaml").write_text(demo_plan_file.read_text())
    assert main(["run", "--resume", str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no complete checkpoint" in err[0]
    assert sorted(p.name for p in run.iterdir()) == ["plan.yaml", "run.json"]


@pytest.fixture
def demo_plan_file(tmp_path):
    from yatt.core.config import dump_yaml, load_experiment
    from yatt.core.layout import make_plan
    from yatt.core.roles import Mode
    from pathlib import Path
    exp = load_experiment(Path(__file__).resolve().parents[2] / "configs" / "demo-cpu.yaml")
    p = tmp_path / "plan.yaml"
    dump_yaml(make_plan(exp, Mode.COLOCATE), p)
    return p


def test_async_plan_past_the_executed_staleness_is_refused_in_one_line(tmp_path, capsys):
    """Async plans run at max_staleness 1 or 2; a larger bound is simulated only:
    `yatt run` names the field and what runs, before the executor is imported, and writes
    nothing. A bad --mode names the modes that run."""
    from yatt.core.bundled import bundled
    from yatt.core.config import dump_yaml, load_experiment
    from yatt.core.layout import make_plan
    from yatt.core.roles import Mode

    exp = load_experiment(bundled("async-1.5b-a100x8.yaml"))
    plan = tmp_path / "plan.yaml"
    dump_yaml(make_plan(exp, Mode.ASYNC, rollout_devices=4, max_staleness=3), plan)
    out = tmp_path / "run"
    assert main(["run", str(plan), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "max_staleness" in err[0] and "allowed: 1|2" in err[0]
    assert not out.exists()
    assert main(["run", "--mode", "sideways", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--mode" in err[0] and "allowed: colocate|partial|async" in err[0]
    assert not out.exists()