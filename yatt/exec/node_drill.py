"""Node-loss drills on an emulated cluster: take a Ray node away under a step in progress.

Why: a lost node is the commonest failure of a real cluster, and the recovery path
(supervisor.py, nodes.py) is only trusted once exercised. On one machine,
`ray.cluster_utils.Cluster` emulates the nodes; a `stall` fault (faults.py) blocks one actor
mid-step and writes its node id into its marker file; `NodeDrill` then removes that node
and, per stall, adds a replacement after a delay or none. The tests and `bench/faults.py`
share it.

Run it from a thread of the driver and keep the thread alive until the run ends
(`stop()`): a raylet started from a thread dies with that thread (the kernel's parent-death
signal), and Ray's node start-up sets a SIGTERM handler, which only the main thread may, so
the drill skips that for the nodes it adds.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, Optional


class NodeDrill:
    """Remove the node of the n-th stalled actor; `rejoin_s[n]` later add a node with
    `gpus` devices (None: add none)."""

    def __init__(self, cluster: Any, fault_dir: Path, rejoin_s: list[Optional[float]],
                 gpus: int = 2):
        self.cluster, self.dir, self.rejoin_s, self.gpus = cluster, Path(fault_dir), rejoin_s, gpus
        self.events: list[str] = []
        self.times: list[float] = []          # monotonic time of each removal
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="yatt-node-drill")

    def start(self) -> "NodeDrill":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _marker(self, n: int) -> str:
        """The node id in the n-th stall marker (1-based, by time written), '' if none yet."""
        ms = sorted((self.dir / m for m in os.listdir(self.dir) if m.startswith("yatt-fault-")),
                    key=lambda m: m.stat().st_mtime)
        return ms[n - 1].read_text() if len(ms) >= n else ""

    def _run(self) -> None:
        import ray._private.utils as ray_utils

        real = ray_utils.set_sigterm_handler
        ray_utils.set_sigterm_handler = lambda handler: None
        try:
            for n, rejoin in enumerate(self.rejoin_s, 1):
                while not (node_id := self._marker(n)):
                    if self._done.wait(0.1):
                        return
                (node,) = [w for w in self.cluster.worker_nodes if w.node_id == node_id]
                self.cluster.remove_node(node)
                self.times.append(time.monotonic())
                self.events.append(f"removed a node at stall {n}")
                if rejoin is not None:
                    if self._done.wait(rejoin):
                        return
                    self.cluster.add_node(num_cpus=0, num_gpus=self.gpus)
                    self.events.append("a node joined")
            self._done.wait()
        finally:
            ray_utils.set_sigterm_handler = real
