"""The planner's fork-based simulation pool in a process that already handles SIGTERM
itself (a driver such as `yatt run`, or a test session that ran one): the pool must still
stop its workers and return."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import signal, sys
signal.signal(signal.SIGTERM, lambda signum, frame: None)   # notes the signal, as a driver's does
from yatt.cli.main import main
sys.exit(main(["plan", sys.argv[1], "--no-progress", "--out", sys.argv[2]]))
"""


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="the pool runs with 2 or more cores")
def test_the_pool_stops_its_workers_under_an_inherited_sigterm_handler(tmp_path):
    p = subprocess.run([sys.executable, "-c", PROBE, str(ROOT / "configs" / "demo-cpu.yaml"),
                        str(tmp_path / "o")], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert (tmp_path / "o" / "plan.yaml").is_file()
