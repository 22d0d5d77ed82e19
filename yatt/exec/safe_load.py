"""Loading trainer checkpoints without running code from them.

Why: `yatt run --resume RUN_DIR` reads files anyone with write access to RUN_DIR may have
replaced, and the manifest's hashes authenticate nothing (whoever wrote the files wrote
the hashes). Pickle runs whatever a file tells it to (`__reduce__`), and three loaders on
the path unpickle: yatt's own read of `common.pt`, torch's `FileSystemReader.read_metadata`
(`.metadata`, plain `pickle.load`) and torch's `DefaultLoadPlanner.load_bytes` (objects
inside `.distcp` files, `weights_only=False`). So:

- every torch file and object is loaded with `torch.load(..., weights_only=True)`: tensors
  and plain containers only. Nothing yatt saves needs more (the RNG state is stored as
  tensors and plain tuples: `TrainerState._rng_state`);
- `.metadata` is unpickled by `_MetadataUnpickler`, which resolves only the classes of
  `METADATA_GLOBALS` (torch's checkpoint metadata records, `torch.Size`, dtypes);
- `install()` puts both into torch's and megatron's loaders (`PATCH_TARGETS`; a test fails
  if an upgrade moves them), so the trainer's real load is safe even if a file changes
  after the driver checked it;
- `scan(checkpoint_dir)` checks every trainer file that way before anything starts, and
  returns a one-line reason naming the file: the driver refuses the checkpoint with it.
"""
from __future__ import annotations

import io
import json
import os
import pickle
import threading
from pathlib import Path
from typing import Any, BinaryIO, Optional

import torch

from .nodes import is_snapshot_name

TRAINER = "trainer"
COMMON = "common.pt"
METADATA = ".metadata"
MEGATRON_METADATA = "metadata.json"

# (module, name) the `.metadata` pickle may name; anything else is refused unloaded.
METADATA_GLOBALS: frozenset[tuple[str, str]] = frozenset({
    ("torch", "Size"),
    *(("torch", n) for n in ("float32", "float16", "bfloat16", "float64", "int64", "int32",
                             "int16", "int8", "uint8", "bool", "float8_e4m3fn", "float8_e5m2")),
    ("torch.serialization", "_get_layout"),
    # `_StoragePrefix` (a file-name prefix): in the metadata of saves that reuse megatron's
    # cached plan, i.e. every checkpoint after a run's first few
    *(("torch.distributed.checkpoint.filesystem", n) for n in ("_StorageInfo", "_StoragePrefix")),
    *(("torch.distributed.checkpoint.metadata", n) for n in (
        "Metadata", "MetadataIndex", "StorageMeta", "TensorProperties", "TensorStorageMetadata",
        "BytesStorageMetadata", "ChunkStorageMetadata", "_MEM_FORMAT_ENCODING")),
    *(("torch.distributed.checkpoint.planner", n) for n in (
        "SavePlan", "WriteItem", "WriteItemType", "TensorWriteData")),
})

# (module, attribute) that install() replaces.
PATCH_TARGETS: tuple[tuple[str, str], ...] = (
    ("torch.distributed.checkpoint.filesystem", "FileSystemReader.read_metadata"),
    ("torch.distributed.checkpoint.default_planner", "DefaultLoadPlanner.load_bytes"),
    ("megatron.core.dist_checkpointing.strategies.common", "TorchCommonLoadStrategy.load_common"),
)


class UnsafeCheckpoint(Exception):
    """A checkpoint file that would run code, or is not what a checkpoint holds."""


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in METADATA_GLOBALS:
            raise UnsafeCheckpoint(f"names {module}.{name}, which a checkpoint's metadata "
                                   "never holds (refused unloaded)")
        return super().find_class(module, name)


def _short(e: BaseException) -> str:
    text = " ".join(str(e).split())
    # torch's weights-only message is long; its first sentence says what was refused
    for marker in ("Unsupported global:", "Unsupported operand", "unsupported"):
        i = text.find(marker)
        if i >= 0:
            return text[i:i + 160]
    return text[:160] or type(e).__name__


def load_metadata(f: BinaryIO) -> Any:
    """Unpickle a `.metadata` stream through the allow-list; UnsafeCheckpoint otherwise."""
    try:
        return _MetadataUnpickler(f).load()
    except UnsafeCheckpoint:
        raise
    except Exception as e:   # noqa: BLE001 - any failure of hostile bytes is a refusal
        raise UnsafeCheckpoint(f"not a checkpoint metadata file ({_short(e)})") from None


def torch_load(src: Any) -> Any:
    """`torch.load` of tensors and plain containers only; UnsafeCheckpoint otherwise."""
    try:
        return torch.load(src, map_location="cpu", weights_only=True)
    except Exception as e:   # noqa: BLE001 - UnpicklingError, RuntimeError, EOFError, ...
        raise UnsafeCheckpoint(f"not a plain tensor file ({_short(e)})") from None


# ---- patching torch's and megatron's loaders ----------------------------------------------
_lock = threading.Lock()
_installed = False


def _read_metadata(self: Any, *args: Any, **kwargs: Any) -> Any:
    """FileSystemReader.read_metadata, unpickling through the allow-list."""
    from torch.distributed.checkpoint.metadata import StorageMeta

    path = self._get_metadata_path(kwargs.get("rank"))
    with self.fs.create_stream(path, "rb") as f:
        metadata = load_metadata(f)
    if getattr(metadata, "storage_meta", None) is None:
        metadata.storage_meta = StorageMeta()
    metadata.storage_meta.load_id = self.load_id
    return metadata


def _load_bytes(self: Any, read_item: Any, value: io.BytesIO) -> None:
    """DefaultLoadPlanner.load_bytes with `weights_only=True`."""
    from torch.distributed.checkpoint._traverse import set_element

    obj = torch_load(value)
    if self.flatten_state_dict:
        set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
    else:
        self.state_dict[read_item.dest_index.fqn] = obj


def _load_common(self: Any, checkpoint_dir: Any) -> Any:
    """TorchCommonLoadStrategy.load_common with `weights_only=True`."""
    from megatron.core.dist_checkpointing.core import CheckpointingException

    path = os.path.join(checkpoint_dir, COMMON)
    if not os.path.exists(path):
        raise CheckpointingException(f"Common file {path} does not exist")
    return torch_load(path)


def install() -> None:
    """Make torch's and megatron's checkpoint loaders safe in this process (idempotent)."""
    global _installed
    with _lock:
        if _installed:
            return
        from megatron.core.dist_checkpointing.strategies.common import TorchCommonLoadStrategy
        from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
        from torch.distributed.checkpoint.filesystem import FileSystemReader

        FileSystemReader.read_metadata = _read_metadata
        DefaultLoadPlanner.load_bytes = _load_bytes
        TorchCommonLoadStrategy.load_common = _load_common
        _installed = True


# ---- checking a checkpoint before loading it ----------------------------------------------
def _plain_name(name: Any) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name \
        and "\\" not in name and "\0" not in name


def _scan_trainer(d: Path) -> None:
    """Every file of a `dist_checkpointing` directory, loaded as the trainer would (but
    never running code); UnsafeCheckpoint naming the file otherwise."""
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata

    if not d.is_dir():
        raise UnsafeCheckpoint(f"{d}: missing")
    names = sorted(os.listdir(d))
    if names and all(is_snapshot_name(n) for n in names):   # a snapshot checkpoint (nodes.py)
        for n in names:
            try:
                torch_load(d / n)
            except UnsafeCheckpoint as e:
                raise UnsafeCheckpoint(f"{d / n}: {e}") from None
        return
    for n in names:
        p = d / n
        if n == COMMON:
            try:
                torch_load(p)
            except UnsafeCheckpoint as e:
                raise UnsafeCheckpoint(f"{p}: {e}") from None
        elif n == MEGATRON_METADATA:
            try:
                json.loads(p.read_bytes()[: 1 << 20].decode("utf-8"))
            except (ValueError, OSError) as e:
                raise UnsafeCheckpoint(f"{p}: not JSON ({_short(e)})") from None
        elif n != METADATA and not n.endswith(".distcp"):
            raise UnsafeCheckpoint(f"{p}: a file a trainer checkpoint does not hold")
    if METADATA not in names:
        raise UnsafeCheckpoint(f"{d / METADATA}: missing")
    try:
        with open(d / METADATA, "rb") as f:
            md = load_metadata(f)
    except UnsafeCheckpoint as e:
        raise UnsafeCheckpoint(f"{d / METADATA}: {e}") from None
    if not isinstance(md, Metadata) or not isinstance(md.storage_data, dict):
        raise UnsafeCheckpoint(f"{d / METADATA}: not a checkpoint metadata file")
    # Tensors are read with weights_only=True by torch itself; objects (RNG state, the
    # optimizer's layout) go through load_bytes: check each one now.
    for idx, info in md.storage_data.items():
        rel = getattr(info, "relative_path", None)
        if not _plain_name(rel) or not (d / rel).is_file():
            raise UnsafeCheckpoint(f"{d / METADATA}: storage {str(rel)[:80]!r} is not a file of "
                                   "this checkpoint")
        off, length = getattr(info, "offset", None), getattr(info, "length", None)
        size = (d / rel).stat().st_size
        if not (type(off) is int and type(length) is int and 0 <= off and 0 <= length
                and off + length <= size):
            raise UnsafeCheckpoint(f"{d / rel}: a storage slice outside the file")
        if isinstance(md.state_dict_metadata.get(getattr(idx, "fqn", None)), BytesStorageMetadata):
            with open(d / rel, "rb") as f:
                f.seek(off)
                blob = f.read(length)
            try:
                torch_load(io.BytesIO(blob))
            except UnsafeCheckpoint as e:
                raise UnsafeCheckpoint(f"{d / rel}: object {idx.fqn[:80]!r}: {e}") from None


def scan(checkpoint_dir: Path) -> Optional[str]:
    """None when every trainer file of `checkpoint_dir` loads without running code, else a
    one-line reason naming the file (for `checkpoint.latest_valid`). Needs torch only:
    the driver checks without importing megatron."""
    try:
        _scan_trainer(Path(checkpoint_dir) / TRAINER)
    except UnsafeCheckpoint as e:
        return f"{e} (refused: yatt loads checkpoints as tensors and plain data only)"
    except OSError as e:
        return f"{checkpoint_dir}: unreadable ({e.strerror or type(e).__name__})"
    return None
