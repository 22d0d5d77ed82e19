"""The preemption guard (yatt/exec/preempt.py) in a real process receiving real signals,
without Ray: the step deadline, the second signal, a signal during start-up."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import os, signal, sys, time
from pathlib import Path
from yatt.exec import preempt
g = preempt.Guard(float(sys.argv[2]), Path("/runs/r 1"), lambda: "step-000003")
g.install()
if sys.argv[1] != "start":
    g.running()
print("ready", flush=True)
if sys.argv[1] == "step":
    g.enter_step()
    try:
        time.sleep(60)              # a step that overruns its share of the grace period
    except preempt.Abort:
        print(f"aborted after {g.elapsed_s():.2f} s", flush=True)
    g.leave_step()
    sys.exit(5)
time.sleep(60)
sys.exit(6)
"""


def _run(mode: str, grace_s: float, signals: list[int]) -> tuple[int, str, str, float]:
    p = subprocess.Popen([sys.executable, "-c", PROBE, mode, str(grace_s)], cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline() == "ready\n"
    t = time.monotonic()
    for s in signals:
        p.send_signal(s)
        time.sleep(0.2)
    out, err = p.communicate(timeout=60)
    return p.returncode, out, err, time.monotonic() - t


def test_a_step_that_overruns_half_the_grace_period_is_aborted():
    rc, out, err, _ = _run("step", 1.0, [signal.SIGTERM])
    assert rc == 5, err
    secs = float(out.split("aborted after ")[1].split()[0])
    assert 0.5 <= secs < 5, out          # half of the 1 s grace period, plus scheduling
    assert "SIGTERM: finishing the step (at most 0.5 s)" in err


def test_a_second_signal_stops_at_once_without_a_checkpoint():
    rc, _, err, took = _run("between", 600.0, [signal.SIGINT, signal.SIGTERM])
    assert rc == 128 + signal.SIGTERM, err
    assert took < 10, took               # not the 600 s grace period
    lines = err.strip().splitlines()
    assert lines[0].startswith("yatt run: SIGINT: finishing the step")
    assert lines[1] == ("yatt run: second signal (SIGTERM): stopping now, without a "
                        "checkpoint (last sealed checkpoint: step-000003)")


def test_a_signal_during_start_up_stops_at_once_with_the_resume_line():
    rc, _, err, took = _run("start", 600.0, [signal.SIGTERM])
    assert rc == 0 and took < 10, (rc, err)
    assert err.strip() == ("preempted by SIGTERM during start-up: newest checkpoint "
                           "step-000003; resume with: yatt run --resume '/runs/r 1'")
