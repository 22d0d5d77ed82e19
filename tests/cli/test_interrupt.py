"""Ctrl-C: a verb interrupted mid-work exits with status 130 and one line, `yatt:
interrupted`, whatever it was doing (simulating in the main process or in the search's
worker pool).

Each case runs the real CLI in a subprocess of its own process group and sends SIGINT to
the whole group, as a terminal's Ctrl-C does. To interrupt it *while it works*, a wrapper
(HOOK) holds the first SimPy run of the chosen process until the signal arrives (and notes
whether a pool worker took it); every
verb below simulates (plan and run: the placement search; replay: the replay and its
what-if rows; calibrate: the fit's re-simulations). The hook only waits; the signal, its
handling and the exit status are the CLI's own."""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "demo-cpu.yaml"
TRACE = ROOT / "traces" / "small-1.5b-7b-h100x16.jsonl.gz"
MARK = "yatt-test: simulating"

HOOK = f'''
import os, sys, time
import simpy
_run, _parent, _where, _armed = simpy.Environment.run, os.getpid(), sys.argv.pop(1), [True]

def run(self, until=None):
    here = "parent" if os.getpid() == _parent else "worker"
    if _armed[0] and here == _where:
        _armed[0] = False
        os.write(2, ("{MARK} in the " + here + "\\n").encode())   # one write: whole lines
        end = time.monotonic() + 300
        try:
            while time.monotonic() < end:   # the test's SIGINT arrives here
                time.sleep(0.05)
        except KeyboardInterrupt:   # a worker would print a traceback: leave a note
            if here == "worker":
                open("worker-took-sigint", "w").close()
            raise
    return _run(self, until)

simpy.Environment.run = run
from yatt.cli.main import main
sys.exit(main(sys.argv[1:]))
'''


def _interrupt(tmp_path: Path, where: str, argv: list[str]) -> tuple[int, list[str], list[str]]:
    """Run `yatt ARGV`, SIGINT its process group once the hook holds a simulation in
    `where` (parent|worker); its exit status, and its stderr lines before and after."""
    hook = tmp_path / "hook.py"
    hook.write_text(HOOK)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, str(hook), where, *argv], cwd=tmp_path, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         start_new_session=True,
                         # as from a terminal, even when pytest itself was started in the
                         # background (which leaves SIGINT ignored, and children inherit it)
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: "queue.Queue[str | None]" = queue.Queue()
    threading.Thread(target=lambda: ([lines.put(ln) for ln in p.stderr], lines.put(None)),
                     daemon=True).start()
    err: list[str] = []
    after: list[str] = []
    try:
        while True:
            ln = lines.get(timeout=300)
            if ln is None:
                pytest.fail(f"yatt {argv[0]} ended (status {p.wait()}) without simulating in "
                            f"the {where}: {''.join(err)[-2000:]}")
            err.append(ln.rstrip("\n"))
            if ln.startswith(MARK):
                break
        os.killpg(p.pid, signal.SIGINT)
        rc = p.wait(timeout=120)
        while (ln := lines.get(timeout=30)) is not None:
            after.append(ln.rstrip("\n"))
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return rc, err, after


CASES = {
    "plan": ("parent", ["plan", str(DEMO), "--no-progress", "--out", "o"]),
    "plan-pool": ("worker", ["plan", str(DEMO), "--no-progress", "--out", "o"]),
    "replay": ("parent", ["replay", str(TRACE), "--gpus", "16", "--no-progress", "--out", "o"]),
    "calibrate": ("parent", ["calibrate", str(TRACE), "-o", "p.yaml", "--no-progress"]),
    "run": ("parent", ["run", str(DEMO), "--steps", "1", "--no-progress", "--out", "o"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_ctrl_c_exits_130_with_one_line(tmp_path, case):
    where, argv = CASES[case]
    if where == "worker" and (os.cpu_count() or 1) < 2:
        pytest.skip("the search runs its simulations in a worker pool only with 2+ cores")
    if argv[0] == "run":
        pytest.importorskip("transformers")   # `yatt run` checks its job before planning
    rc, before, after = _interrupt(tmp_path, where, argv)
    said = [ln for ln in after if not ln.startswith(MARK)]   # (another worker's hold)
    assert rc == 130, before + after
    assert said == ["yatt: interrupted"], before + after
    # pool workers leave the signal to the main process (whether or not their traceback
    # made it out before the pool was terminated)
    assert not (tmp_path / "worker-took-sigint").exists()
