"""Node loss: which plan devices a dead Ray node took, waiting for capacity to come back,
and a driver-held copy of the trainer snapshots so the last good state outlives the node.

Why: when a whole node goes, all of its actors die at once and so does its object store,
with the primary copies of the snapshots its trainer ranks took (an actor's results live
on its own node). Ray restarts the lost actors (`max_restarts`) only once their placement
group is placed again, which needs a node offering the lost node's devices. So, when a
plan device lives on a Ray node other than the driver's (the driver's own node cannot be
lost without ending the run: it holds the driver and, on the head node, Ray's GCS):

* after each snapshot, the driver fetches a copy of every rank's state on the
  supervisor's I/O thread, off the step's critical path (`keep`); recovery puts it back in
  the object store (`replica`). It costs the driver one copy of the trainer state in host
  memory;
* `lost()` names the devices whose node died, `wait_placed()` waits up to
  `checkpoint.node_wait_s` for every placement group to be placed again;
* if capacity does not return, the supervisor writes the copy as a snapshot checkpoint:
  one torch file per rank (`snapshot_files`), loaded with `weights_only=True` by `--resume`
  with the same plan (trainer_state.py).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Optional

SNAPSHOT = "snapshot-rank-{:05d}.pt"   # one file per trainer rank in a snapshot checkpoint
FETCH_TIMEOUT_S = 300.0


def snapshot_name(rank: int) -> str:
    return SNAPSHOT.format(rank)


def is_snapshot_name(name: str) -> bool:
    return name.startswith("snapshot-rank-") and name.endswith(".pt") and name[14:-3].isdigit()


def write_snapshots(trainer_dir: Path, states: list[Any]) -> None:
    """Every rank's snapshot (tensors and plain data) as its own torch file."""
    import torch

    trainer_dir.mkdir(parents=True, exist_ok=True)
    for rank, st in enumerate(states):
        torch.save(st, trainer_dir / snapshot_name(rank))


class NodeWatch:
    """The Ray nodes under a run's placement groups, and the snapshot copy that outlives them."""

    def __init__(self, placement: Any):
        self.placement = placement
        import ray

        self.nodes: dict[int, str] = placement.bundle_nodes()   # plan device -> Ray node id
        here = ray.get_runtime_context().get_node_id()
        self.replicate = any(n != here for n in self.nodes.values())   # keep a copy
        self._copy: Optional[tuple[list, list]] = None          # (snapshot refs, their values)

    # ---- the snapshot copy -----------------------------------------------------------
    def keep(self, refs: list) -> None:
        """Fetch the values of `refs` into the driver (run on the I/O thread). A rank that
        died before its snapshot landed leaves the older copy; `replica` then refuses it."""
        import ray

        try:
            values = ray.get(refs, timeout=FETCH_TIMEOUT_S)
        except Exception:   # noqa: BLE001 - a lost rank; recovery reports it
            return
        self._copy = (refs, values)

    def values(self, refs: list) -> Optional[list]:
        """The fetched values of exactly these snapshot refs, else None."""
        if self._copy is None or self._copy[0] is not refs:
            return None
        return self._copy[1]

    def replica(self, refs: list) -> Optional[list]:
        """Fresh object-store refs holding the driver's copy of `refs` (None: no copy)."""
        import ray

        values = self.values(refs)
        return None if values is None else [ray.put(v) for v in values]

    # ---- nodes -----------------------------------------------------------------------
    def lost(self) -> dict[str, list[int]]:
        """Ray node id -> the plan devices it held, for every node of the run that died."""
        import ray

        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        out: dict[str, list[int]] = {}
        for device, node in sorted(self.nodes.items()):
            if node not in alive:
                out.setdefault(node, []).append(device)
        return out

    def placed(self) -> bool:
        """Whether every placement group of the run is placed (on live nodes)."""
        from ray.util.placement_group import placement_group_table

        if any(placement_group_table(pg).get("state") != "CREATED"
               for pg in self.placement.groups.values()):
            return False
        return not self._refresh_lost()

    def _refresh_lost(self) -> dict[str, list[int]]:
        self.nodes = self.placement.bundle_nodes()
        return self.lost()

    def wait_placed(self, timeout_s: float, log: Callable[[str], None],
                    every_s: float = 30.0) -> bool:
        """Wait until the placement groups are placed again; True if they were within
        `timeout_s`. Logs how long it has waited every `every_s`."""
        start = time.monotonic()
        told = start
        while True:
            try:
                if self.placed():
                    return True
            except Exception:   # noqa: BLE001 - the GCS still updating its tables
                pass
            now = time.monotonic()
            if now - start >= timeout_s:
                return False
            if now - told >= every_s:
                told = now
                log(f"still waiting for capacity ({now - start:.0f} of {timeout_s:.0f} s)")
            time.sleep(0.5)
