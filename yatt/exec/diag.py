"""Python stacks of every process of a run, on demand, without stopping it.

Why: a hung run (a collective waiting for a peer, a queue nobody fills) prints nothing and
spans many processes. SIGUSR1 makes a `yatt` driver or any of its Ray workers write all of
its threads' stacks to its stderr (workers: the `worker-*.err` files under Ray's session
log directory) and carry on. The standard library's faulthandler does the dumping; this
module installs it (in the driver, and in every worker as Ray's worker setup hook) and
finds the processes to signal: `python -m yatt.exec.diag [PID...]`.
"""
from __future__ import annotations

import faulthandler
import os
import signal
import sys
from pathlib import Path

SIGNAL = getattr(signal, "SIGUSR1", None)
HOOK = "yatt.exec.diag.install"     # Ray's `worker_process_setup_hook` takes an import path


def install() -> None:
    """Dump every thread's stack to stderr on SIGUSR1 (no-op where the signal is missing or
    stderr is no file, e.g. captured)."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):   # io.UnsupportedOperation is an OSError
        return
    if SIGNAL is not None:
        faulthandler.register(SIGNAL, file=fd, all_threads=True, chain=False)


def _catches(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler for `signum` (Linux: SigCgt in /proc/PID/status).
    Ray's own agents are `ray::` processes too, and SIGUSR1 would end them (and their node)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def ray_workers() -> list[int]:
    """This machine's Ray worker processes that dump their stacks on SIGUSR1."""
    if SIGNAL is None or not Path("/proc").is_dir():
        return []
    pids = []
    for d in Path("/proc").iterdir():
        try:
            if (d.name.isdigit() and (d / "cmdline").read_bytes().startswith(b"ray::")
                    and _catches(int(d.name), SIGNAL)):
                pids.append(int(d.name))
        except OSError:   # gone meanwhile, or not ours to read
            pass
    return pids


def dump(pids: list[int]) -> list[int]:
    """Signal `pids` and every Ray worker here to dump their stacks; returns those signalled."""
    done = []
    for pid in dict.fromkeys([*pids, *ray_workers()]):
        try:
            os.kill(pid, SIGNAL)
            done.append(pid)
        except OSError:
            pass
    return done


if __name__ == "__main__":
    hit = dump([int(a) for a in sys.argv[1:]])
    print(f"asked {len(hit)} process(es) for their stacks: Ray workers write them to "
          "worker-*.err in the session's log directory ($RAY_TMPDIR/session_*/logs)")
