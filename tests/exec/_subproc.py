"""`yatt run` as a child process, with every process's Python stacks when it hangs.

A run that outlives its timeout is first sent SIGUSR1 (yatt.exec.diag: the driver and every
Ray worker dump their threads' stacks to stderr and the worker logs), then killed; the test
fails with those stacks, so a hang in CI says where it hung.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


KEEP = ("hread 0x", "/yatt/", "/megatron/", "/vllm/", "torch/distributed", "/ray/")


def _frames(dump: str) -> str:
    """A stack dump's thread headers and the frames in yatt and its engines (the rest is
    the interpreter's and the libraries' plumbing)."""
    return "\n".join(ln for ln in dump.splitlines() if any(k in ln for k in KEEP))


def _worker_dumps(ray_tmp: str, since: float) -> str:
    """The stack dumps Ray workers wrote to their logs after `since`."""
    out = []
    for f in Path(ray_tmp).glob("session_*/logs/worker-*.err"):
        try:
            if f.stat().st_mtime < since:
                continue
            text = f.read_text(errors="replace")
        except OSError:
            continue
        at = text.find("hread 0x")   # "Thread 0x..." / "Current thread 0x..." lines
        if at >= 0:
            out.append(f"--- {f.name}\n{_frames(text[text.rfind(chr(10), 0, at) + 1:])[-2500:]}")
    return "\n".join(out)


def run_yatt(args: list[str], env: dict, timeout_s: float = 600) -> subprocess.CompletedProcess:
    """`python -m yatt.cli ARGS`; on a timeout, fail with the stacks of the hung processes."""
    import pytest

    cmd = [sys.executable, "-m", "yatt.cli", *args]
    t0 = time.time()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=ROOT)
    try:
        out, err = p.communicate(timeout=timeout_s)
        return subprocess.CompletedProcess(cmd, p.returncode, out, err)
    except subprocess.TimeoutExpired:
        from yatt.exec import diag
        diag.dump([p.pid])
        time.sleep(5)
        p.kill()
        out, err = p.communicate()
        workers = _worker_dumps(env.get("RAY_TMPDIR", "/tmp"), t0)
        pytest.fail(f"`yatt {' '.join(args)}` hung for {timeout_s:.0f} s\n"
                    f"stdout: {out[-1500:]}\ndriver stderr (frames): {_frames(err)[-4000:]}\n"
                    f"driver stderr (end): {err[-1500:]}\nworkers:\n{workers}",
                    pytrace=False)
