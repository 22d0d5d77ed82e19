"""Fault injection for reliability tests: kill an actor inside a method, or poison a loss.

Why: recovery code that is never exercised does not work. The tests (and anyone rehearsing
an incident on a real cluster) set `YATT_FAULTS`; ordinary runs never set it and pay one
environment lookup per hooked call.

Syntax: comma-separated `ROLE.EVENT@N` (fire on the N-th call, 1-based) or `ROLE.EVENT@N+`
(fire on the N-th call and every later one), e.g. `rollout.exit@2,trainer.nan@3`.

  ROLE   rollout | genrm | trainer | reference | controller | driver | checkpoint
                                             (the hooked actor's role; controller: a step
                                              controller actor, `controllers` > 1 only;
                                              driver: the `yatt run` process, counted per
                                              completed step; checkpoint: the driver's
                                              checkpoint writes, counted per checkpoint)
  EVENT  exit   `os._exit(1)` inside the hooked method: the actor process dies mid-step
                (rollout/genrm: `generate`, which a GenRM's `judge` calls once per batch;
                trainer: `train_step`, after the backward pass, so the other ranks are
                left inside a collective; reference: `logprobs`; controller: `rollout`
                or `rollout_and_judge`, after the engines answered);
                driver: right after the N-th step completed, as a crash would, once
                the driver's checkpoint I/O thread is idle);
                fires in the role's first actor only (index 0), once per run: a marker
                file in `YATT_FAULT_DIR` (default: the system temp dir) keeps the
                restarted actor from dying again
         nan    the trainer's loss becomes NaN on every rank (`train_step`)
         enospc checkpoint: the driver's write of the checkpoint's `trace.jsonl` fails
                half-way with ENOSPC, as on a full disk (the trainer's shards are already
                written); trainer: rank 0's shard writer fails half-way with ENOSPC in the
                asynchronous checkpoint started after its N-th `train_step` (once per run,
                as `exit`)

Calls are counted per process, so after a restart the count starts again at 1.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from yatt.core.errors import InputError

ENV = "YATT_FAULTS"
DIR_ENV = "YATT_FAULT_DIR"
ROLES = ("rollout", "genrm", "trainer", "reference", "controller", "driver", "checkpoint")
EVENTS = ("exit", "nan", "enospc")
ONLY = {"nan": ("trainer",), "enospc": ("checkpoint", "trainer")}   # events of some roles only
ONCE = {("enospc", "trainer")}   # besides exit: met again by a restarted actor


@dataclass(frozen=True)
class Fault:
    role: str
    event: str
    call: int              # 1-based call number
    repeat: bool = False   # also every later call

    def due(self, count: int) -> bool:
        return count == self.call or (self.repeat and count > self.call)

    @property
    def marker(self) -> str:
        return f"yatt-fault-{self.role}.{self.event}@{self.call}"


def parse(text: str) -> tuple[Fault, ...]:
    """Parse a `YATT_FAULTS` value; a malformed item is an InputError naming it."""
    out = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        try:
            what, when = item.split("@")
            role, event = what.split(".")
            repeat = when.endswith("+")
            n = int(when.rstrip("+"))
        except ValueError:
            raise InputError(f"got {item!r}; allowed: ROLE.EVENT@N or ROLE.EVENT@N+",
                             field=ENV) from None
        if (role not in ROLES or event not in EVENTS or n < 1
                or role not in ONLY.get(event, (role,))
                or (role == "checkpoint" and event != "enospc")):
            raise InputError(f"got {item!r}; allowed roles {'|'.join(ROLES)}, events "
                             f"{'|'.join(EVENTS)} (nan: trainer only; enospc: checkpoint or "
                             "trainer; checkpoint: enospc only), N >= 1", field=ENV)
        out.append(Fault(role, event, n, repeat))
    return tuple(out)


def check_env() -> tuple[Fault, ...]:
    """The faults `YATT_FAULTS` asks for, parsed now (InputError naming the item)."""
    return parse(os.environ.get(ENV, ""))


def env_passthrough() -> dict[str, str]:
    """The fault settings of this process, to hand to worker actors (empty when unset)."""
    return {k: os.environ[k] for k in (ENV, DIR_ENV) if os.environ.get(k)}


class Hook:
    """One actor's view of the faults for its role; `hit(event)` counts a call."""

    def __init__(self, role: str, index: int = 0):
        self.role, self.index = role, index
        self.faults = tuple(f for f in parse(os.environ.get(ENV, "")) if f.role == role)
        self.count = 0

    def tick(self) -> None:
        """Count one call of the hooked method."""
        self.count += 1

    def fires(self, event: str) -> bool:
        """Whether `event` fires on the current call. Events a restarted actor would meet
        again (exit; the trainer's enospc) fire at most once per run, in the first actor."""
        for f in self.faults:
            if f.event != event or not f.due(self.count):
                continue
            if (event, self.role) not in ONCE and event != "exit":
                return True
            if self.index != 0:
                continue
            marker = Path(os.environ.get(DIR_ENV) or tempfile.gettempdir()) / f.marker
            if marker.exists():
                continue
            marker.touch()
            return True
        return False

    def maybe_exit(self, before: Callable[[], None] = lambda: None) -> None:
        """Die (`os._exit(1)`) if an exit fault fires on this call, after `before()`."""
        if self.fires("exit"):
            before()
            os._exit(1)


def fill_disk(path: Path, data: bytes) -> None:
    """Write the first half of `data` to `path`, then fail as a full disk does."""
    import errno
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC) + " (YATT_FAULTS)", str(path))


@contextlib.contextmanager
def full_disk(module: Any, name: str) -> Iterator[None]:
    """Within the block, `module.name` (a function writing an item to an open `stream`
    argument) writes part of it and fails as a full disk does; a process forked inside
    the block keeps that behaviour."""
    import errno

    def write(*args: Any, **kwargs: Any) -> Any:
        stream = next(a for a in args if hasattr(a, "write"))
        stream.write(b"\0" * 1024)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC) + " (YATT_FAULTS)",
                      getattr(stream, "name", ""))

    real = getattr(module, name)
    setattr(module, name, write)
    try:
        yield
    finally:
        setattr(module, name, real)


def hook(role: str, index: int = 0) -> Optional[Hook]:
    """A Hook when `YATT_FAULTS` names this role, else None (the normal case)."""
    if not os.environ.get(ENV):
        return None
    h = Hook(role, index)
    return h if h.faults else None
