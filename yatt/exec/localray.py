"""A local Ray cluster in its own session, held by a helper process that dies with the driver.

Why: `ray.init()` starts the GCS, the raylet and their agents as children in the driver's
process group, and they catch SIGTERM and shut down. A signal to the whole group (a
terminal's Ctrl-C, `kill -TERM -PGID`, a job runner that signals the group) would then
take down every actor, and the last good step's snapshot in the object store with them,
before the driver could write a checkpoint (preempt.py). Ray's workers already run in
process groups of their own; this puts the rest of the cluster out of the driver's group:
a helper started with `setsid` starts the cluster, prints its address and holds it while
its stdin is open. The driver connects to that address. When the driver exits, however it
exits (a SIGKILL included), the pipe closes and the helper shuts the cluster down (Ray's
processes also die with the helper: kernel fate-sharing).

Run as `python -m yatt.exec.localray NUM_CPUS NUM_GPUS|- TEMP_DIR` (by `start`, not by hand).
"""
from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from typing import Optional

_HELPER: Optional[subprocess.Popen] = None
START_TIMEOUT_S = 300.0


def start(num_cpus: int, num_gpus: Optional[int], temp_dir: str) -> str:
    """Start the helper (and the cluster); return the cluster's address. RuntimeError with
    the helper's last output when it fails to start."""
    global _HELPER
    os.makedirs(temp_dir, exist_ok=True)   # RAY_TMPDIR may name a directory not made yet
    err = open(os.path.join(temp_dir, "yatt-localray.err"), "wb")
    cmd = [sys.executable, "-m", "yatt.exec.localray", str(num_cpus),
           "-" if num_gpus is None else str(num_gpus), temp_dir]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                         start_new_session=True)
    err.close()
    deadline = time.monotonic() + START_TIMEOUT_S
    line = b""
    assert p.stdout is not None
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        ready, _, _ = select.select([p.stdout], [], [], max(0.0, left))
        chunk = os.read(p.stdout.fileno(), 4096) if ready else b""
        if not chunk:
            p.kill()
            p.wait()
            tail = open(os.path.join(temp_dir, "yatt-localray.err"), "rb").read()[-1500:]
            raise RuntimeError("the local Ray cluster did not start: "
                               + tail.decode(errors="replace").strip().replace("\n", " | "))
        line += chunk
    _HELPER = p
    return line.decode().strip()


def stop(timeout_s: float = 60.0) -> None:
    """Let the helper shut the cluster down (close its stdin) and wait for it."""
    global _HELPER
    p, _HELPER = _HELPER, None
    if p is None:
        return
    try:
        if p.stdin is not None:
            p.stdin.close()
        p.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def _main(argv: list[str]) -> int:
    import ray

    num_cpus, gpus, temp_dir = int(argv[0]), argv[1], argv[2]
    ray.init(num_cpus=num_cpus, num_gpus=None if gpus == "-" else int(gpus),
             include_dashboard=False, _temp_dir=temp_dir, log_to_driver=False)
    os.write(1, (ray.get_runtime_context().gcs_address + "\n").encode())
    while os.read(0, 4096):   # until the driver closes the pipe (or dies)
        pass
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
