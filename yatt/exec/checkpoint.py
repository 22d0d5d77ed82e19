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

A run directory is input when resumed, and may have been tampered with: a manifest entry
that leaves its checkpoint (`../../etc/passwd`, an absolute path) is refused unread, links
are never followed or written through, and `state.json` is validated like a config
(`RunState`). The manifest's hashes catch corruption, not tampering (whoever wrote the files
wrote the hashes); the trainer's files are loaded without running pickled code
(`yatt.exec.safe_load`).

This module is plain file handling (no torch, no Ray) so it is tested on its own.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Optional

from yatt.core.errors import InputError
from yatt.core.jsonl import parse_line
from yatt.core.limits import MAX_SECONDS, MAX_STEPS
from yatt.core.safeio import check_out_dir, ensure_dir, read_at_most, write_text
from yatt.core.schema import from_dict, spec_field, to_dict

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


def _entries(d: Path) -> list[tuple[Path, os.stat_result]]:
    """Everything under `d` but the manifest, links not followed, with its lstat."""
    out = []
    for top, dirs, names in os.walk(d, followlinks=False):
        for n in dirs + names:
            p = Path(top) / n
            if p != d / MANIFEST:
                out.append((p, os.lstat(p)))
    return sorted(out)


def _files(d: Path) -> list[Path]:
    return [p for p, st in _entries(d) if stat.S_ISREG(st.st_mode)]


def write_manifest(d: Path) -> dict:
    """Hash every file under `d` into `d/manifest.json` (atomically, never through a link)."""
    files = {str(p.relative_to(d)): {"sha256": _sha256(p), "bytes": p.stat().st_size}
             for p in _files(d)}
    man = {"format": FORMAT, "files": files}
    write_text(d / MANIFEST, json.dumps(man, indent=1, sort_keys=True), fsync=True)
    return man


def remove(p: Path) -> None:
    """Delete a checkpoint directory, or a link or file in its place (never what a link
    points to)."""
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(p)
    else:
        os.unlink(p)


def check_dir(run_dir: Path) -> Path:
    """Before a run starts: `RUN_DIR/checkpoints/` is a real directory a file can be written
    in, or (missing) can be created; InputError naming it otherwise (a file or a link in its
    place, a read-only disk, no permission). Creates nothing."""
    d = root(run_dir)
    field = "checkpoint directory"
    try:
        st = os.lstat(d)
    except FileNotFoundError:
        check_out_dir(d, field=field, create=False)   # its nearest existing parent is probed
        return d
    except OSError as e:
        raise InputError(f"cannot be read ({e.strerror or type(e).__name__}); allowed: a "
                         "directory yatt may write in", field=field, file=str(d)) from None
    if stat.S_ISLNK(st.st_mode):
        raise InputError("is a link; allowed: a real directory (yatt never writes through links)",
                         field=field, file=str(d))
    if not stat.S_ISDIR(st.st_mode):
        raise InputError("exists and is not a directory; allowed: a directory yatt may write in",
                         field=field, file=str(d))
    check_out_dir(d, field=field, create=False)
    return d


def fresh_dir(run_dir: Path, step: int) -> Path:
    """An empty `step-NNNNNN.partial/` made by us (a stale one, or a link in its place, is
    removed first), under a real `checkpoints/` directory."""
    part = partial_dir(run_dir, step)
    ensure_dir(root(run_dir), Path(run_dir))
    remove(part)
    os.mkdir(part)
    return part


def commit(run_dir: Path, step: int, keep_last: int) -> Path:
    """Seal a finished partial checkpoint: manifest, atomic rename, prune to keep_last."""
    part, final = partial_dir(run_dir, step), final_dir(run_dir, step)
    write_manifest(part)
    remove(final)               # a redone step (after a fault) replaces its older copy
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
        try:
            remove(d)
        except OSError:
            pass
    return gone


def complete(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, dir) of every sealed checkpoint (has a manifest), oldest first. Not verified."""
    r = root(run_dir)
    if not r.is_dir():
        return []
    out = []
    for d in r.iterdir():
        m = _NAME.match(d.name)
        if m and _is_real(d, stat.S_ISDIR) and _is_real(d / MANIFEST, stat.S_ISREG):
            out.append((int(m.group(1)), d))
    return sorted(out)


def _is_real(p: Path, kind: Callable[[int], bool]) -> bool:
    """`p` exists, is not a link, and is of `kind` (stat.S_ISDIR / S_ISREG)."""
    try:
        return kind(os.lstat(p).st_mode)
    except OSError:
        return False


def _inside(rel: Any) -> bool:
    """A manifest path that stays inside its checkpoint: relative, no `..`, no empty part."""
    if not isinstance(rel, str) or not rel or "\0" in rel or "\\" in rel:
        return False
    parts = PurePosixPath(rel).parts
    return (bool(parts) and not PurePosixPath(rel).is_absolute()
            and all(p not in ("", ".", "..") for p in parts))


def verify(d: Path) -> Optional[str]:
    """None if every file in the manifest is present with its size and sha256, else a
    one-line reason that names the offending file."""
    try:
        man = read_json(d / MANIFEST)
        files = man["files"]
        if man.get("format") != FORMAT or not isinstance(files, dict):
            return f"{d / MANIFEST}: not a {FORMAT} manifest"
    except InputError as e:
        return f"{d / MANIFEST}: unreadable manifest ({e.message})"
    except (OSError, KeyError, TypeError, AttributeError) as e:
        return f"{d / MANIFEST}: unreadable manifest ({type(e).__name__})"
    for rel, want in sorted(files.items()):
        if not _inside(rel):   # refused unread: neither its size nor its hash is looked at
            return f"{d / MANIFEST}: entry {rel[:80]!r} leaves the checkpoint directory"
        if not (isinstance(want, dict) and type(want.get("bytes")) is int
                and isinstance(want.get("sha256"), str)):
            return f"{d / MANIFEST}: entry {rel[:80]!r} is not {{sha256, bytes}}"
    for p, st in _entries(d):
        if stat.S_ISLNK(st.st_mode):
            return f"{p}: a link (a checkpoint holds only files and directories)"
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            return f"{p}: not a regular file"
    for rel, want in sorted(files.items()):
        p = d / rel
        if not _is_real(p, stat.S_ISREG):
            return f"{p}: missing"
        size = p.stat().st_size
        if size != want["bytes"]:
            return f"{p}: {size} bytes, manifest says {want['bytes']} (truncated or corrupt)"
        if _sha256(p) != want["sha256"]:
            return f"{p}: sha256 mismatch (corrupt)"
    for p in _files(d):
        if str(p.relative_to(d)) not in files:
            return f"{p}: not in the manifest"
    return None


def read_json(path: Path) -> Any:
    """A small JSON file of a run directory, strictly (duplicate keys refused), as data."""
    if not _is_real(path, stat.S_ISREG):
        raise InputError("missing, or not a regular file", file=str(path))
    raw = read_at_most(path, _JSON_MAX)
    if len(raw) > _JSON_MAX:
        raise InputError(f"larger than {_JSON_MAX:,} bytes", file=str(path))
    return parse_line(raw, 1, str(path)) if raw.strip() else None


def latest_valid(run_dir: Path, warn: Callable[[str], None],
                 check: Optional[Callable[[Path], Optional[str]]] = None) -> tuple[int, Path]:
    """The newest checkpoint that verifies (and passes `check`, a reason or None: the
    trainer files' safety scan); each refused one is reported through `warn` with the file
    that failed. InputError when none is usable."""
    if not Path(run_dir).is_dir():
        raise InputError("not a directory; allowed: a yatt run directory", field="--resume",
                         file=str(run_dir))
    found = complete(run_dir)
    if not found:
        raise InputError(f"no complete checkpoint under {root(run_dir)} (the run saved none "
                         "before it stopped; set checkpoint.every_steps)", field="--resume")
    why = ""
    for step, d in reversed(found):
        why = verify(d)
        if why is None and check is not None:
            why = check(d)
        if why is None:
            return step, d
        older = [s for s, _ in found if s < step]
        if older:   # the last refusal is said by the error below, not twice
            warn(f"refusing checkpoint {d.name}: {why}; falling back to step-{older[-1]:06d}")
    raise InputError(f"no valid checkpoint under {root(run_dir)}: {why}", field="--resume")


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


_JSON_MAX = 256 << 20   # state.json holds the metrics of every step so far


@dataclass(frozen=True)
class RunCounters:
    restarts: int = spec_field(0, ge=0, le=MAX_STEPS)
    rollbacks: int = spec_field(0, ge=0, le=MAX_STEPS)
    nonfinite_streak: int = spec_field(0, ge=0, le=MAX_STEPS)
    faults: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class RunState:
    """state.json, validated as strictly as a config when a run is resumed."""

    format: str
    step: int = spec_field(ge=0, le=MAX_STEPS)
    next_step: int = spec_field(ge=1, le=MAX_STEPS)
    seed: int = spec_field(help="the run's seed")
    total_steps: int = spec_field(0, ge=0, le=MAX_STEPS)
    data_position: dict[str, Any] = spec_field(default_factory=dict)
    controllers: dict[str, Any] = spec_field(default_factory=dict)
    run: RunCounters = spec_field(default_factory=RunCounters)
    trace_end_s: float = spec_field(0.0, ge=0, le=MAX_SECONDS)
    metrics: tuple[dict[str, Any], ...] = ()
    extra: dict[str, Any] = spec_field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.format != FORMAT:
            raise InputError(f"got {self.format!r:.60}; allowed: {FORMAT}", field="format")
        if self.next_step != self.step + 1:
            raise InputError(f"got {self.next_step}; allowed: step + 1 ({self.step + 1})",
                             field="next_step")


def write_state(d: Path, state: dict[str, Any]) -> None:
    """state.json: JSON-clean run state (step counter, data position, controllers, metrics)."""
    write_text(d / STATE, json.dumps({"format": FORMAT, **state}, indent=1, sort_keys=True,
                                     allow_nan=True))


def read_state(d: Path) -> dict[str, Any]:
    """state.json of a checkpoint, validated (`RunState`); InputError naming file and field."""
    path = d / STATE
    try:
        return to_dict(from_dict(RunState, read_json(path)))
    except InputError as e:
        raise e.within(file=str(path)) from None


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
