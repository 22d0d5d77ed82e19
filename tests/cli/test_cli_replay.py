"""`yatt replay` / `yatt calibrate` end to end: outputs, profiles, and exit 2 on bad traces."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from yatt.cli.main import main
from yatt.planner.profile_io import load_profile

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "traces" / "small-1.5b-7b-h100x16.jsonl.gz"
sys.path.insert(0, str(ROOT / "tests" / "planner"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from _trace_helpers import synthetic_trace

    p = tmp_path_factory.mktemp("tr") / "tiny.jsonl"
    synthetic_trace(steps=2).write_jsonl(p)
    return p


def test_replay_shipped_trace_answers_what_if(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["replay", str(SMALL), "--gpus", "16,32", "--mode", "best", "--out", str(out),
                 "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "Recorded vs predicted" in text and "What if" in text and "best partial" in text
    assert "samples/s/GPU" in text
    for name in ("replay_timeline.json", "replay_timeline.png", "scaling.csv", "scaling.png"):
        assert (out / name).stat().st_size > 0, name
    csv = (out / "scaling.csv").read_text().splitlines()
    assert csv[0].startswith("scenario,gpus") and len(csv) == 1 + 2 + 4
    assert csv[0].endswith(",samples_per_s_per_gpu") and all(len(r) == 9 for r in __import__("csv").reader(csv))
    assert json.loads((out / "replay_timeline.json").read_text())["traceEvents"]


def test_calibrate_writes_profile_that_replay_accepts(tmp_path, tiny, capsys):
    prof = tmp_path / "p.yaml"
    assert main(["calibrate", str(tiny), "-o", str(prof), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "Fit error per phase" in text and "held out" in text
    p = load_profile(prof)
    assert p.fit_error and 0.2 < p.efficiency.train_mfu < 0.4
    assert main(["replay", str(tiny), "--profile", str(prof), "--gpus", "16", "--mode", "colocate",
                 "--out", str(tmp_path / "r"), "--no-progress"]) == 0
    assert "+0.0%" in capsys.readouterr().out  # replay with the fitted profile matches


def test_calibrate_refuses_too_few_points(tmp_path, tiny, capsys):
    lines = tiny.read_text().splitlines()
    keep = [lines[0]] + [ln for ln in lines[1:] if json.loads(ln)["step"] == 0
                         and (json.loads(ln)["kind"] == "sample" or json.loads(ln).get("phase") in ("train", "weight_sync"))]
    bad = tmp_path / "few.jsonl"
    bad.write_text("\n".join(keep) + "\n")
    prof = tmp_path / "p.yaml"
    assert main(["calibrate", str(bad), "-o", str(prof), "--holdout", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs at least" in err[0] and "train_mfu" in err[0]
    assert not prof.exists()


def _mangle(lines: list[str], how: str) -> tuple[list[str], str]:
    lines = list(lines)
    if how == "truncated":
        lines[5] = lines[5][: len(lines[5]) // 2]
        return lines, "line 6: not valid JSON"
    if how == "schema":
        meta = json.loads(lines[0])
        meta["schema"] = "yatt.trace/0"
        lines[0] = json.dumps(meta)
        return lines, "line 1: schema: got 'yatt.trace/0'; allowed: yatt.trace/1"
    if how == "kind":
        rec = json.loads(lines[7])
        rec["kind"] = "spam"
        lines[7] = json.dumps(rec)
        return lines, "line 8: kind: got 'spam'; allowed: meta|sample|span"
    rec = json.loads(lines[-1])  # a span
    del rec["start_s"]
    del rec["step"]
    lines[-1] = json.dumps(rec)
    return lines, f"line {len(lines)}: step: missing required field"


@pytest.mark.parametrize("how", ["truncated", "schema", "kind", "missing"])
@pytest.mark.parametrize("verb", ["replay", "calibrate"])
def test_malformed_trace_exits_2_with_one_line(tmp_path, tiny, capsys, how, verb):
    lines, expect = _mangle(tiny.read_text().splitlines(), how)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    args = ([verb, str(bad), "--out", str(out)] if verb == "replay" else
            [verb, str(bad), "-o", str(out / "p.yaml")])
    if verb == "calibrate":
        out.mkdir()
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert expect in err[0] and str(bad) in err[0]
    assert not out.exists() or not list(out.iterdir())


def test_replay_suggests_calibrate_when_phases_are_off(tmp_path, tiny, capsys):
    # tiny ran at TRUTH efficiencies, not the defaults: large per-phase errors
    assert main(["replay", str(tiny), "--gpus", "16", "--mode", "colocate",
                 "--out", str(tmp_path / "a"), "--no-progress"]) == 0
    hint = [ln for ln in capsys.readouterr().out.splitlines() if "yatt calibrate" in ln]
    assert hint == [hint[0]] and f"`yatt calibrate {tiny} -o profile.yaml`" in hint[0], hint
    assert "median per-phase error" in hint[0]
    prof = tmp_path / "p.yaml"
    assert main(["calibrate", str(tiny), "-o", str(prof), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["replay", str(tiny), "--profile", str(prof), "--gpus", "16", "--mode", "colocate",
                 "--out", str(tmp_path / "b"), "--no-progress"]) == 0
    assert "yatt calibrate" not in capsys.readouterr().out
