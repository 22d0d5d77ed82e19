"""Preemption: SIGTERM or SIGINT ends `yatt run` with a checkpoint of the last good step.

Why: clusters take machines back (SLURM preemption, a Kubernetes eviction, a spot
instance) with SIGTERM and, a grace period later (SLURM's GraceTime, Kubernetes'
terminationGracePeriodSeconds, 30 s by default), SIGKILL. A run that dies on the first
signal loses everything since its last checkpoint.

`Guard` owns SIGTERM and SIGINT on the driver's main thread (Python runs signal handlers
there, between bytecodes, also while it waits in `ray.get`). The first signal is recorded;
the run loop starts no new step. The step in progress gets half of
`checkpoint.preempt_grace_s` to finish; if it has not by then, `Abort` is raised
into the main thread (out of whatever Ray wait it is in) and the supervisor brings the
trainers back to the last good step from the in-memory snapshot. Either way the
supervisor then writes a synchronous checkpoint of the last good step and `run_plan`
raises `Preempted`; `yatt run` prints the `--resume` command and exits 0. A signal during
start-up (nothing new to save) ends the process at once with that line, exit 0. A second signal stops the
driver at once, without a checkpoint (exit 128 + the signal's number).

The Ray cluster a driver starts runs outside its process group (localray.py), so a
signal sent to the whole group reaches the driver and spares the actors.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Callable, Optional

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Abort(BaseException):
    """Raised into the driver's main thread when the step in progress overran its share of
    the grace period. A BaseException: an `except Exception` between the handler and the
    run loop must not swallow it."""


def is_abort(e: BaseException) -> bool:
    """Whether `e` is an `Abort`, or an error it caused: raised inside a Ray call, the
    handler's exception can surface wrapped (a SystemError whose cause is the Abort)."""
    seen: set[int] = set()
    x: Optional[BaseException] = e
    while x is not None and id(x) not in seen:
        if isinstance(x, Abort):
            return True
        seen.add(id(x))
        x = x.__cause__ or x.__context__
    return False


def line(signame: str, how: str, checkpoint: Optional[str], elapsed_s: Optional[float],
         run_dir: Path) -> str:
    """The one line a preempted run ends with: what happened and how to go on.
    `elapsed_s`: when the checkpoint was sealed after the signal (None: it is older)."""
    import shlex
    if checkpoint is None:
        return (f"preempted by {signame} {how}: no checkpoint to resume from; run the same "
                "command again")
    when = (f"checkpoint {checkpoint} sealed {elapsed_s:.1f} s after the signal"
            if elapsed_s is not None else f"newest checkpoint {checkpoint}")
    return f"preempted by {signame} {how}: {when}; resume with: yatt run --resume " + \
        shlex.quote(str(run_dir))


class Preempted(Exception):
    """The run stopped on a signal with its last good step checkpointed (`checkpoint`: the
    newest sealed checkpoint, None when there is none). str(): the line to print."""

    def __init__(self, signame: str, how: str, checkpoint: Optional[Path],
                 elapsed_s: Optional[float], run_dir: Path):
        self.signame, self.how, self.checkpoint, self.elapsed_s = signame, how, checkpoint, elapsed_s
        super().__init__(line(signame, how, checkpoint.name if checkpoint else None, elapsed_s,
                              run_dir))


def _say(text: str) -> None:
    """One line to stderr from a signal handler (os.write: no buffered writer to re-enter)."""
    os.write(2, (text.replace("\n", " ") + "\n").encode(errors="replace"))


class Guard:
    """SIGTERM/SIGINT handling of one run. `install()` (again after `ray.init`, which sets
    its own SIGTERM handler), `restore()` at the end; `starting()` / `in_step()` say where
    the main thread is; `requested` once a signal came."""

    def __init__(self, grace_s: float, run_dir: Path,
                 last_checkpoint: Callable[[], Optional[str]] = lambda: None):
        self.grace_s, self.run_dir = grace_s, run_dir
        self.last_checkpoint = last_checkpoint
        self.signum: Optional[int] = None
        self.t0 = 0.0
        self.overdue = False          # the step's share of the grace period has passed
        self._where = "start"         # start | step | between
        self._old: dict[int, object] = {}

    # ---- installation ----------------------------------------------------------------
    def install(self) -> None:
        """Take SIGTERM, SIGINT and SIGALRM (the step deadline). Only the main thread can
        (a run driven from another thread keeps the process's handlers)."""
        import threading
        if threading.current_thread() is not threading.main_thread():
            return
        for s in (*SIGNALS, signal.SIGALRM):
            old = signal.signal(s, self._on_alarm if s == signal.SIGALRM else self._on_signal)
            self._old.setdefault(s, old)

    def restore(self) -> None:
        if not self._old:
            return
        signal.setitimer(signal.ITIMER_REAL, 0)
        for s, old in self._old.items():
            signal.signal(s, old)
        self._old = {}

    # ---- state -----------------------------------------------------------------------
    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def signame(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""

    def elapsed_s(self) -> float:
        return time.monotonic() - self.t0 if self.requested else 0.0

    def running(self) -> None:
        """Start-up is over: from here a signal lets the step finish and checkpoints."""
        self._where = "between"

    def enter_step(self) -> None:
        """The main thread starts a step (or redoes one): it may be aborted from here."""
        self._where = "step"
        if self.overdue:
            raise Abort()

    def leave_step(self) -> None:
        self._where = "between"

    # ---- handlers ----------------------------------------------------------------------
    def _on_signal(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if self.requested:
            _say(f"yatt run: second signal ({name}): stopping now, without a checkpoint "
                 f"(last sealed checkpoint: {self.last_checkpoint() or 'none'})")
            os._exit(128 + signum)
        self.signum, self.t0 = signum, time.monotonic()
        if self._where == "start":
            # nothing new to save: stop at once (the local cluster's helper sees the driver
            # go and shuts the cluster down; localray.py)
            _say(line(name, "during start-up", self.last_checkpoint(), None, self.run_dir))
            os._exit(0)
        _say(f"yatt run: {name}: finishing the step (at most {self.grace_s / 2:g} s), then "
             f"checkpointing the last good step (checkpoint.preempt_grace_s={self.grace_s:g}); "
             "a second signal stops at once")
        signal.setitimer(signal.ITIMER_REAL, max(self.grace_s / 2, 1e-3))

    def _on_alarm(self, signum: int, frame) -> None:
        self.overdue = True
        if self._where == "step":
            raise Abort()
