"""Node-loss drills on an emulated cluster: take a Ray node away under a step in progress.

Why: a lost node is the commonest failure of a real cluster, and the recovery path
(supervisor.py, nodes.py) is only trusted once exercised. On one machine,
`ray.cluster_utils.Cluster` emulates the nodes; a `stall` fault (faults.py) blocks one actor
mid-step and writes its node id into its marker file; `NodeDrill` then removes that node
and, per stall, adds a replacement after a delay or none. The tests and `bench/faults.py`
share it.

The drill watches from a thread of the driver, but adds nodes through one keeper thread
that lives as long as the process: a raylet started from a thread dies with that thread
(the kernel's parent-death signal), and a node dying late, after its drill, can abort the
driver (a Ray CHECK in its subscriber). Ray's node start-up sets a SIGTERM handler, which
only the main thread may, so the keeper skips that for the nodes it adds.
"""
from __future__ import annotations

import os
import queue
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Optional


def emulated_cluster(nodes: int = 2, gpus_per_node: int = 2, head_cpus: int = 2) -> Any:
    """A started `ray.cluster_utils.Cluster`: a head node without devices (Ray's GCS and the
    driver, as on many clusters, and the one node a drill never takes) and `nodes` nodes of
    `gpus_per_node` fake GPUs each. The caller connects (`ray.init(address=c.address)`)."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": head_cpus, "num_gpus": 0, "include_dashboard": False})
    for _ in range(nodes):
        cluster.add_node(num_cpus=0, num_gpus=gpus_per_node)
    cluster.wait_for_nodes()
    return cluster


class _Keeper:
    """One daemon thread for the life of the process that adds emulated nodes."""

    def __init__(self) -> None:
        self.jobs: "queue.Queue[tuple[Any, dict, Future]]" = queue.Queue()
        threading.Thread(target=self._serve, daemon=True, name="yatt-node-keeper").start()

    def _serve(self) -> None:
        import ray._private.utils as ray_utils

        ray_utils_set = ray_utils.set_sigterm_handler
        while True:
            fn, kwargs, done = self.jobs.get()
            ray_utils.set_sigterm_handler = lambda handler: None
            try:
                done.set_result(fn(**kwargs))
            except BaseException as e:   # noqa: BLE001 - handed to the caller
                done.set_exception(e)
            finally:
                ray_utils.set_sigterm_handler = ray_utils_set

    def call(self, fn: Any, **kwargs: Any) -> Any:
        done: Future = Future()
        self.jobs.put((fn, kwargs, done))
        return done.result()


_KEEPER: Optional[_Keeper] = None
_KEEPER_LOCK = threading.Lock()


def _keeper() -> _Keeper:
    global _KEEPER
    with _KEEPER_LOCK:
        if _KEEPER is None:
            _KEEPER = _Keeper()
        return _KEEPER


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
                _keeper().call(self.cluster.add_node, num_cpus=0, num_gpus=self.gpus)
                self.events.append("a node joined")
