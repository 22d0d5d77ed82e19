"""Fault injection for reliability tests: kill an actor inside a method, or poison a loss.

Why: recovery code that is never exercised does not work. The tests (and anyone rehearsing
an incident on a real cluster) set `YATT_FAULTS`; ordinary runs never set it and pay one
environment lookup per hooked call.

Syntax: comma-separated `ROLE.EVENT@N` (fire on the N-th call, 1-based) or `ROLE.EVENT@N+`
(fire on the N-th call and every later one), e.g. `rollout.exit@2,trainer.nan@3`.
`ROLE[I]` picks the role's actor I for the events that fire in one actor (exit, stall, the
trainer's enospc; default 0), e.g. `trainer[2].stall@2`: trainer rank 2.

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
                fires in one actor of the role (index 0 or `ROLE[I]`), once per run: a marker
                file in `YATT_FAULT_DIR` (default: the system temp dir) keeps the
                restarted actor from dying again
         nan    the trainer's loss becomes NaN on every rank (`train_step`)
         enospc checkpoint: the driver's write of the checkpoint's `trace.jsonl` fails
                half-way with ENOSPC, as on a full disk (the trainer's shards are already
                written); trainer: rank 0's shard writer fails half-way with ENOSPC in the
                asynchronous checkpoint started after its N-th `train_step` (once per run,
                as `exit`)
         stall  rollout/genrm/trainer/reference: the hooked method writes its marker file
                (as `exit`, once per run, one actor), holding its Ray node id, and then
                blocks, so that a harness can take that node away under a step in progress
                (node-loss tests: `cluster.remove_node` once the marker is there)

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
EVENTS = ("exit", "nan", "enospc", "stall")
STALL_S = 3600.0   # a stalled call blocks this long (its node is taken away first)
ONLY = {"nan": ("trainer",), "enospc": ("checkpoint", "trainer"),
        "stall": ("rollout", "genrm", "trainer", "reference")}   # events of some roles only
ONCE = {("enospc", "trainer")}   # besides exit: met again by a restarted actor


@dataclass(frozen=True)
class Fault:
    role: str
    event: str
    call: int              # 1-based call number
    repeat: bool = False   # also every later call
    index: int = 0         # the actor it fires in (events that fire in one actor)

    def due(self, count: int) -> bool:
        return count == self.call or (self.repeat and count > self.call)

    @property
    def marker(self) -> str:
        at = f"[{self.index}]" if self.index else ""
        return f"yatt-fault-{self.role}{at}.{self.event}@{self.call}"


def parse(text: str) -> tuple[Fault, ...]:
    """Parse a `YATT_FAULTS` value; a malformed item is an InputError naming it."""
    out = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        try:
            what, when = item.split("@")
            role, event = what.split(".")
            index = 0
            if role.endswith("]") and "[" in role:
                role, i = role[:-1].split("[")
                index = int(i)
                if index < 0 or not i.isdigit():
                    raise ValueError(i)
            repeat = when.endswith("+")
            n = int(when.rstrip("+"))
        except ValueError:
            raise InputError(f"got {item!r}; allowed: ROLE.EVENT@N, ROLE.EVENT@N+ or "
                             "ROLE[I].EVENT@N", field=ENV) from None
        if (role not in ROLES or event not in EVENTS or n < 1
                or role not in ONLY.get(event, (role,))
                or (role == "checkpoint" and event != "enospc")):
            raise InputError(f"got {item!r}; allowed roles {'|'.join(ROLES)}, events "
                             f"{'|'.join(EVENTS)} (nan: trainer only; enospc: checkpoint or "
                             "trainer; stall: an actor role; checkpoint: enospc only), N >= 1", field=ENV)
        out.append(Fault(role, event, n, repeat, index))
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
        again (exit, stall; the trainer's enospc) fire at most once per run, in one actor."""
        return self._fire(event) is not None

    def _fire(self, event: str) -> Optional[Path]:
        """The marker file of the fault firing on this call (touched now; a fault of every
        actor and call has none: its own path, not touched), else None."""
        for f in self.faults:
            if f.event != event or not f.due(self.count):
                continue
            marker = Path(os.environ.get(DIR_ENV) or tempfile.gettempdir()) / f.marker
            if (event, self.role) not in ONCE and event not in ("exit", "stall"):
                return marker
            if self.index != f.index or marker.exists():
                continue
            marker.touch()
            return marker
        return None

    def maybe_exit(self, before: Callable[[], None] = lambda: None) -> None:
        """Die (`os._exit(1)`) if an exit fault fires on this call, after `before()`."""
        if self.fires("exit"):
            before()
            os._exit(1)

    def maybe_stall(self) -> None:
        """Block (STALL_S) if a stall fault fires on this call: its marker file tells the
        harness that a step is in progress on this actor's node."""
        marker = self._fire("stall")
        if marker is not None:
            import time

            import ray
            marker.write_text(ray.get_runtime_context().get_node_id())   # whose node to take
            time.sleep(STALL_S)


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
