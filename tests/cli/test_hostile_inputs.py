"""Hostile input: every malformed config, plan, trace, profile and job (the user's data,
reward, judge and models: `yatt run` checks them before anything starts) under
tests/data/bad/ ends its CLI verb with exit status 2, exactly one stderr line naming the
field and the problem, no traceback, and nothing written to the output directory.
A kind's `files/` folder holds what its cases point at (datasets, reward code, models).

Each corpus file states what it must say: a first-line comment
`# expect: <field fragment> | <message fragment>`, or, for files that cannot carry one
(JSONL, empty, binary), an entry in the EXPECT.yaml next to it.
"""
from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml

from yatt.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
BAD = ROOT / "tests" / "data" / "bad"
DEMO = ROOT / "configs" / "demo-cpu.yaml"
DEFAULT = ROOT / "configs" / "default.yaml"
# placement/*.txt: the `# expect:` line, then the text given to `yatt plan default.yaml --placement`
KINDS = ("config", "plan", "trace", "profile", "placement", "job")


def _expectation(path: Path, sidecar: dict[str, str]) -> tuple[str, str]:
    if path.name in sidecar:
        text = sidecar[path.name]
    else:
        first = path.read_bytes().split(b"\n", 1)[0].decode("utf-8", "replace")
        assert first.startswith("# expect: "), f"{path}: no `# expect:` line and no EXPECT.yaml entry"
        text = first[len("# expect: "):]
    field, sep, message = text.partition(" | ")
    assert sep and field.strip() and message.strip(), f"{path}: malformed expectation {text!r}"
    return field.strip(), message.strip()


def _corpus() -> list[tuple[str, Path, str, str]]:
    cases = []
    for kind in KINDS:
        d = BAD / kind
        sidecar_path = d / "EXPECT.yaml"
        sidecar = yaml.safe_load(sidecar_path.read_text()) if sidecar_path.is_file() else {}
        for name in sidecar:
            assert (d / name).is_file(), f"{sidecar_path}: lists missing file {name}"
        for p in sorted(d.iterdir()):
            if p.name == "EXPECT.yaml" or p.is_dir():
                continue
            cases.append((kind, p, *_expectation(p, sidecar)))
    return cases


CORPUS = _corpus()


def _argv(kind: str, path: Path, out: Path, verb: str = "") -> list[str]:
    if kind == "plan" and verb == "plan":  # a plan file given to `yatt plan` to score
        return ["plan", str(path), "--out", str(out), "--no-progress"]
    if kind == "config":
        return ["plan", str(path), "--out", str(out), "--no-progress"]
    if kind == "plan":
        return ["run", str(path), "--out", str(out), "--no-progress"]
    if kind == "job":
        return ["run", str(path), "--steps", "1", "--out", str(out), "--no-progress"]
    if kind == "profile":
        return ["plan", str(DEMO), "--profile", str(path), "--out", str(out), "--no-progress"]
    if kind == "placement":
        text = path.read_text().split("\n", 1)[1].rstrip("\n")
        return ["plan", str(DEFAULT), "--placement", text, "--out", str(out), "--no-progress"]

    if verb == "calibrate":
        return ["calibrate", str(path), "-o", str(out / "profile.yaml"), "--no-progress"]
    return ["replay", str(path), "--out", str(out), "--no-progress"]


def _check(rc: int, stdout: str, stderr: str, verb: str, field: str, message: str, out: Path) -> None:
    assert "Traceback" not in stdout + stderr, stderr
    assert rc == 2, (rc, stderr)
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    line = lines[0]
    assert line.startswith(f"yatt {verb}: error: "), line
    assert field in line, f"expected field fragment {field!r} in: {line}"
    assert message in line, f"expected message fragment {message!r} in: {line}"
    assert not out.exists() or not any(out.iterdir()), f"{out} was written to: {list(out.iterdir())}"


@pytest.fixture
def no_executor(monkeypatch):
    """Fail loudly, instead of starting Ray, if a bad plan ever got past validation."""
    fake = types.ModuleType("yatt.exec.runner")

    def refuse(*a, **k):
        raise AssertionError("a hostile plan reached the executor")

    fake.run_plan = refuse
    monkeypatch.setitem(sys.modules, "yatt.exec.runner", fake)


def test_corpus_is_large_and_covers_every_kind():
    counts = {k: sum(1 for c in CORPUS if c[0] == k) for k in KINDS}
    assert sum(counts.values()) >= 30, counts
    assert counts["config"] >= 30 and counts["plan"] >= 15 and counts["trace"] >= 20 \
        and counts["profile"] >= 8 and counts["placement"] >= 15 and counts["job"] >= 15, counts


@pytest.mark.parametrize("kind,path,field,message", CORPUS,
                         ids=[f"{c[0]}/{c[1].name}" for c in CORPUS])
def test_bad_input_exits_2_with_one_line(kind, path, field, message, tmp_path, capsys, no_executor):
    out = tmp_path / "out"
    argv = _argv(kind, path, out)
    assert main(argv) == 2
    cap = capsys.readouterr()
    _check(2, cap.out, cap.err, argv[0], field, message, out)


PLANS = [c for c in CORPUS if c[0] == "plan"]


@pytest.mark.parametrize("kind,path,field,message", PLANS, ids=[c[1].name for c in PLANS])
def test_bad_plan_scored_by_plan_exits_2(kind, path, field, message, tmp_path, capsys):
    """`yatt plan PLAN.yaml` refuses the same plans `yatt run` does, before searching."""
    out = tmp_path / "out"
    argv = _argv(kind, path, out, verb="plan")
    assert main(argv) == 2
    cap = capsys.readouterr()
    _check(2, cap.out, cap.err, "plan", field, message, out)


TRACES = [c for c in CORPUS if c[0] == "trace"]


@pytest.mark.parametrize("kind,path,field,message", TRACES[::3],
                         ids=[c[1].name for c in TRACES[::3]])
def test_bad_trace_calibrate_writes_no_profile(kind, path, field, message, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()  # calibrate needs -o's directory to exist; it must stay empty
    argv = _argv(kind, path, out, verb="calibrate")
    rc = main(argv)
    cap = capsys.readouterr()
    _check(rc, cap.out, cap.err, "calibrate", field, message, out)


# A real process for a few of the nastiest: proves nothing reaches stderr but the one line.
SUBPROCESS = ["config/deep-nesting.yaml", "config/binary.yaml", "config/huge-int-literal.yaml",
              "plan/genrm-placed-without-genrm-model.yaml", "trace/deep-nesting.jsonl",
              "trace/corrupt.jsonl.gz", "profile/train-mfu-above-one.yaml",
              "job/non-utf8-jsonl.yaml"]


@pytest.mark.parametrize("rel", SUBPROCESS)
def test_bad_input_in_a_real_process(rel, tmp_path):
    kind, path = rel.split("/")[0], BAD / rel
    field, message = next((f, m) for k, p, f, m in CORPUS if p == path)
    out = tmp_path / "out"
    exe = Path(sys.executable).with_name("yatt")
    cmd = [str(exe)] if exe.is_file() else [sys.executable, "-m", "yatt.cli"]
    argv = _argv(kind, path, out)
    r = subprocess.run(cmd + argv, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    _check(r.returncode, r.stdout, r.stderr, argv[0], field, message, out)
