"""Trainer snapshots in a host file per rank, outside the trainer processes.

Why: fault recovery and NaN rollback need every rank's whole state of the last good step,
and it must outlive the rank (a dead trainer restarts every rank). Sent through the Ray
object store, the state is cloned, serialised and kept by the driver every step; at scale
that is two host copies per step and an object store that spills. Here each rank copies
its tensors straight into its own file on a host RAM filesystem (`/dev/shm` when it has
room) and returns a small token; a restarted rank on the same node reads the file back.
Runs whose trainers sit on other nodes than the driver keep the object store path
(supervisor.py), since that copy must leave the node.

A file holds one generation: the header is cleared before the tensors are written and
committed after, so a rank that dies mid-write leaves no readable snapshot rather than a
torn one (the reader names the missing generation). The layout is plain: the state's
structure with each tensor replaced by its place in the data file, saved with
`torch.save` and read back with `weights_only=True`.
"""
from __future__ import annotations

import math
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TENSOR_KEY = "__yatt_tensor__"   # a tensor's placeholder in the skeleton: {TENSOR_KEY: its index}
ALIGN = 64                       # each tensor starts on a cache-line boundary
VIEW_MIN_BYTES = 1 << 16         # `read` hands out views of tensors this large, else copies


@dataclass(frozen=True)
class HostSnapshot:
    """Which snapshot to restore: the run's snapshot directory and the generation the
    supervisor asked for (the rank's file must hold exactly it)."""

    root: str
    generation: int


def choose_root(state_bytes_on_node: int, prefer: str = "/dev/shm") -> Path:
    """A fresh private directory for a run's snapshot files: on `prefer` (host RAM) when it
    has room for 1.5x the node's snapshots, else the temporary directory (page cache)."""
    base = Path(prefer)
    try:
        roomy = base.is_dir() and shutil.disk_usage(base).free >= 1.5 * state_bytes_on_node
    except OSError:
        roomy = False
    if not roomy:
        base = Path(tempfile.gettempdir())
    root = base / f"yatt-snapshots-{uuid.uuid4().hex[:12]}"
    root.mkdir(mode=0o700)
    return root


def _paths(root: str, rank: int) -> tuple[Path, Path]:
    d = Path(root)
    return d / f"rank-{rank:05d}.bin", d / f"rank-{rank:05d}.meta"


def _flatten(x: Any, tensors: list) -> Any:
    """`x` with every tensor appended to `tensors` and replaced by its index."""
    import torch
    if torch.is_tensor(x):
        tensors.append(x)
        return {TENSOR_KEY: len(tensors) - 1}
    if isinstance(x, dict):
        return {k: _flatten(v, tensors) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        out = [_flatten(v, tensors) for v in x]
        return out if isinstance(x, list) else tuple(out)
    return x


def _unflatten(x: Any, tensors: list) -> Any:
    if isinstance(x, dict):
        if set(x) == {TENSOR_KEY}:
            return tensors[x[TENSOR_KEY]]
        return {k: _unflatten(v, tensors) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        out = [_unflatten(v, tensors) for v in x]
        return out if isinstance(x, list) else tuple(out)
    return x


def _bytes_view(t):
    """A flat uint8 view of tensor `t`'s elements (a contiguous copy first if needed)."""
    import torch
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


_MAPPED: dict[Path, Any] = {}   # data file -> its shared mapping, kept between generations


def _mapping(data: Path, size: int):
    """A shared uint8 mapping of `data`, `size` bytes long. Kept from one generation to the
    next (same file, same size), so its pages are faulted in once, not at every snapshot."""
    import torch
    buf = _MAPPED.get(data)
    if buf is None or buf.numel() != size or not data.exists():
        _MAPPED.pop(data, None)
        with open(data, "ab") as f:
            f.truncate(size)
        buf = _MAPPED[data] = torch.from_file(str(data), shared=True, size=size,
                                              dtype=torch.uint8)
    return buf


def write(root: str, rank: int, generation: int, state: Any) -> int:
    """Copy `state` (nested dicts, lists and tuples of tensors and plain data; tensors on
    any device) into rank `rank`'s file as `generation`. Returns the bytes written."""
    import torch
    tensors: list = []
    skeleton = _flatten(state, tensors)
    places, end = [], 0
    for t in tensors:
        places.append((str(t.dtype).removeprefix("torch."), tuple(t.shape), end))
        end += -(-t.numel() * t.element_size() // ALIGN) * ALIGN
    data, meta = _paths(root, rank)
    meta.unlink(missing_ok=True)               # no readable generation while writing
    if end:
        buf = _mapping(data, end)
        for t, (_, _, off) in zip(tensors, places):
            src = _bytes_view(t)
            buf[off:off + src.numel()].copy_(src)
    tmp = meta.with_suffix(".meta.tmp")
    torch.save({"generation": generation, "size": end, "places": places,
                "skeleton": skeleton}, tmp)
    os.replace(tmp, meta)
    return end


def read(snap: HostSnapshot, rank: int) -> Any:
    """Rank `rank`'s state of `snap.generation`, as host tensors of its own. Raises
    FileNotFoundError when the rank holds no committed snapshot of that generation."""
    import torch
    data, meta = _paths(snap.root, rank)
    try:
        m = torch.load(meta, weights_only=True)
    except FileNotFoundError:
        raise FileNotFoundError(f"trainer rank {rank} holds no committed snapshot in {snap.root} "
                                f"(wanted generation {snap.generation}; the rank died while "
                                f"writing it)") from None
    if m["generation"] != snap.generation:
        raise FileNotFoundError(f"trainer rank {rank}'s snapshot in {snap.root} is generation "
                                f"{m['generation']}, not the {snap.generation} asked for")
    # a private mapping: the large tensors handed out are views of it, and writing to them
    # changes neither the file nor a later read. Small ones (RNG states, counters) are
    # copied: torch.set_rng_state crashes on a view that starts inside its storage.
    buf = (torch.from_file(str(data), shared=False, size=m["size"], dtype=torch.uint8)
           if m["size"] else torch.empty(0, dtype=torch.uint8))
    tensors = []
    for dtype, shape, off in m["places"]:
        dt = getattr(torch, dtype)
        n = math.prod(shape) * torch.empty(0, dtype=dt).element_size()
        t = buf[off:off + n].view(dt).view(shape)
        tensors.append(t if n >= VIEW_MIN_BYTES else t.clone())
    return _unflatten(m["skeleton"], tensors)


def remove(root: Path) -> None:
    """Delete a run's snapshot directory (the driver, at the end of the run)."""
    shutil.rmtree(root, ignore_errors=True)
