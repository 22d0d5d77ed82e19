"""Run checkpoints on disk: layout, checksum manifest, atomic commit, keep-last-k, verify.

Why: a run that lasts days must be resumable from its newest *complete, uncorrupted*
checkpoint, and a crash in the middle of a write must never leave something that looks
complete. So a checkpoint is written into `step-NNNNNN.partial/`; when every byte is on
disk (the trainer's asynchronous `dist_checkpointing` write has been finalised) the driver
writes `manifest.json` (sha256 and size of every file) and renames the directory to
`step-NNNNNN/` in one `os.replace`. Loading re-hashes every file; a mismatch names the file
and the loader falls back to the previous checkpoint.

Layout of `RUN_DIR/checkpoints/step-NNNNNN/` (NNNNNN = the last completed step):
  trainer/        Megatron dist_checkpointing: model + optimizer shards, per-rank RNG
  state.json      step counter, data position, controller and run state, metrics so far
  trace.jsonl     the run's trace up to and including that step
  manifest.json   written last: {"files": {relpath: {"sha256", "bytes"}}}

This module is plain file handling (no torch, no Ray) so it is tested on its own.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from yatt.core.errors import InputError

FORMAT = "yatt.checkpoint/1"
MANIFEST = "manifest.json"
STATE = "state.json"
TRACE = "trace.jsonl"
TRAINER = "trainer"
_NAME = re.compile(r"^step-(\d{6,})$")


def root(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def final_dir(run_dir: Path, step: int) -> Path:
    return root(run_dir) / f"step-{step:06d}"


def partial_dir(run_dir: Path, step: int) -> Path:
    return root(run_dir) / f"step-{step:06d}.partial"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _files(d: Path) -> list[Path]:
    return sorted(p for p in d.rglob("*") if p.is_file() and p.name != MANIFEST)


def write_manifest(d: Path) -> dict:
    """Hash every file under `d` into `d/manifest.json` (written via a temp file)."""
    files = {str(p.relative_to(d)): {"sha256": _sha256(p), "bytes": p.stat().st_size}
             for p in _files(d)}
    man = {"format": FORMAT, "files": files}
    tmp = d / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(man, indent=1, sort_keys=True))
    _fsync(tmp)
    tmp.replace(d / MANIFEST)
    return man


def commit(run_dir: Path, step: int, keep_last: int) -> Path:
    """Seal a finished partial checkpoint: manifest, atomic rename, prune to keep_last."""
    part, final = partial_dir(run_dir, step), final_dir(run_dir, step)
    write_manifest(part)
    if final.exists():          # a redone step (after a fault) replaces its older copy
        shutil.rmtree(final)
    os.replace(part, final)
    _fsync_dir(final.parent)
    prune(run_dir, keep_last)
    return final


def prune(run_dir: Path, keep_last: int) -> list[Path]:
    """Delete all but the newest `keep_last` complete checkpoints, and partial ones older
    than the newest complete checkpoint (left behind by a crash)."""
    done = complete(run_dir)
    gone = [d for _, d in done[:-keep_last]] if keep_last > 0 else []
    newest = done[-1][0] if done else -1
    for p in root(run_dir).glob("step-*.partial"):
        m = re.match(r"^step-(\d+)\.partial$", p.name)
        if m and int(m.group(1)) <= newest:
            gone.append(p)
    for d in gone:
        shutil.rmtree(d, ignore_errors=True)
    return gone


def complete(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, dir) of every sealed checkpoint (has a manifest), oldest first. Not verified."""
    r = root(run_dir)
    if not r.is_dir():
        return []
    out = []
    for d in r.iterdir():
        m = _NAME.match(d.name)
        if m and d.is_dir() and (d / MANIFEST).is_file():
            out.append((int(m.group(1)), d))
    return sorted(out)


def verify(d: Path) -> Optional[str]:
    """None if every file in the manifest is present with its size and sha256, else a
    one-line reason that names the offending file."""
    try:
        man = json.loads((d / MANIFEST).read_text())
        files = man["files"]
        if man.get("format") != FORMAT or not isinstance(files, dict):
            return f"{d / MANIFEST}: not a {FORMAT} manifest"
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"{d / MANIFEST}: unreadable manifest ({type(e).__name__})"
    for rel, want in sorted(files.items()):
        p = d / rel
        if not p.is_file():
            return f"{p}: missing"
        size = p.stat().st_size
        if size != want.get("bytes"):
            return f"{p}: {size} bytes, manifest says {want.get('bytes')} (truncated or corrupt)"
        if _sha256(p) != want.get("sha256"):
            return f"{p}: sha256 mismatch (corrupt)"
    for p in _files(d):
        if str(p.relative_to(d)) not in files:
            return f"{p}: not in the manifest"
    return None


def latest_valid(run_dir: Path, warn: Callable[[str], None]) -> tuple[int, Path]:
    """The newest checkpoint that verifies; each refused one is reported through `warn`
    with the file that failed. InputError when none is usable."""
    found = complete(run_dir)
    if not found:
        raise InputError(f"no complete checkpoint under {root(run_dir)} (the run saved none "
                         "before it stopped; set checkpoint.every_steps)", field="--resume")
    reasons = []
    for step, d in reversed(found):
        why = verify(d)
        if why is None:
            return step, d
        reasons.append(why)
        older = [s for s, _ in found if s < step]
        warn(f"refusing checkpoint {d.name}: {why}; "
             + (f"falling back to step-{older[-1]:06d}" if older else "no older checkpoint"))
    raise InputError(f"no valid checkpoint under {root(run_dir)}: {reasons[0]}", field="--resume")


@dataclass
class Schedule:
    """When to save: every N steps, every M minutes (checked after each step), and at the
    steps the plan names. `due(step)` is asked after `step` completed."""

    every_steps: int = 0
    every_minutes: float = 0.0
    at_steps: tuple[int, ...] = ()
    last_save_s: float = 0.0

    def __post_init__(self) -> None:
        self.last_save_s = self.last_save_s or time.monotonic()

    @property
    def enabled(self) -> bool:
        return bool(self.every_steps or self.every_minutes or self.at_steps)

    def due(self, step: int, now: Optional[float] = None) -> bool:
        now = time.monotonic() if now is None else now
        return ((self.every_steps > 0 and (step + 1) % self.every_steps == 0)
                or step in self.at_steps
                or (self.every_minutes > 0 and now - self.last_save_s >= 60 * self.every_minutes))

    def saved(self, now: Optional[float] = None) -> None:
        self.last_save_s = time.monotonic() if now is None else now


def write_state(d: Path, state: dict[str, Any]) -> None:
    """state.json: JSON-clean run state (step counter, data position, controllers, metrics)."""
    d.mkdir(parents=True, exist_ok=True)
    (d / STATE).write_text(json.dumps({"format": FORMAT, **state}, indent=1, sort_keys=True,
                                      allow_nan=True))


def read_state(d: Path) -> dict[str, Any]:
    data = json.loads((d / STATE).read_text())
    if data.get("format") != FORMAT:
        raise InputError(f"{d / STATE}: format {data.get('format')!r}; allowed: {FORMAT}",
                         field="format")
    return data


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    try:
        _fsync(path)
    except OSError:   # some filesystems refuse directory fsync; the rename is still atomic
        pass
