"""Hostile reward functions, found only once the run is going (tests/data/bad/job-runtime/):
one that raises, one that returns NaN, one that hangs. Each real `yatt run` stops at the
first bad call with exit status 2 and one `yatt run: error:` line naming the function, the
sample and the reason (the corpus file's `# expect:` line), and leaves a run directory
that is whole: its plan, run file and metrics read back, and no checkpoint is half-written.

The runs share the session's Ray cluster and use one device, rule rewards and no
reference worker, so each costs one engine and one trainer start.
"""
from __future__ import annotations

import contextlib
import csv
import io
import json
from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytest.importorskip("megatron.core")

ROOT = Path(__file__).resolve().parents[2]
CASES = sorted((ROOT / "tests" / "data" / "bad" / "job-runtime").glob("*.yaml"))


def _expect(path: Path) -> tuple[str, str]:
    first = path.read_text().split("\n", 1)[0]
    field, _, message = first.removeprefix("# expect: ").partition(" | ")
    return field.strip(), message.strip()


@pytest.mark.slow
@pytest.mark.parametrize("path", CASES, ids=[p.name for p in CASES])
def test_bad_reward_function_stops_the_run_in_one_line(ray_cluster, path, tmp_path):
    from yatt.cli.main import main
    out = tmp_path / "run"
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(["run", str(path), "--steps", "2", "--out", str(out), "--no-progress"])
    text = err.getvalue()
    assert "Traceback" not in text, text[-3000:]
    assert rc == 2, text[-3000:]
    lines = [ln for ln in text.splitlines() if ln.startswith("yatt run: error:")]
    assert len(lines) == 1, text[-3000:]
    field, message = _expect(path)
    assert field in lines[0] and message in lines[0], lines[0]
    assert "two-rows.jsonl row" in lines[0]            # names the dataset row too
    # the run directory is whole
    from yatt.core.config import load_plan
    load_plan(out / "plan.yaml")
    assert json.loads((out / "run.json").read_text())["steps"] == 2
    assert list(csv.DictReader(open(out / "metrics.csv"))) == []   # no step completed
    assert not list((out / "checkpoints").glob("*.partial")) if (out / "checkpoints").exists() else True
