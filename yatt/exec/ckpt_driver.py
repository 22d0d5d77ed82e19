"""The driver's side of checkpoints: when to save, the files the driver writes, sealing
what the trainer ranks finalised, and a write that failed reported in one line.

Why: a checkpoint is written by two parties. The trainer ranks write their shards
(trainer.py, ckpt_writer.py) while the driver goes on; the driver writes `state.json`, the
trace so far and any extra files on one I/O thread, and seals the checkpoint (manifest,
then one rename: checkpoint.py) once the ranks report the write finalised. That
bookkeeping lives here, apart from the supervisor's fault recovery, which uses it.

What the driver writes comes from a callable the supervisor passes in (`files`), since
the run state in `state.json` is the supervisor's.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Optional

from yatt.core.specs import CheckpointSpec

from . import checkpoint as ckpt
from . import faults
from .nodes import write_snapshots
from .rayutil import get_all

# step -> (state.json's content, the trace so far, the extra files' writer or None)
DriverFiles = Callable[[int], "tuple[dict, Any, Optional[Callable[[Path], None]]]"]


class RunAborted(RuntimeError):
    """The run cannot continue (e.g. repeated non-finite steps, restarts exhausted)."""


def _why(e: OSError) -> str:
    """`[Errno 28] No space left on device: 'FILE'` without the run's absolute path noise."""
    return f"{e.strerror or type(e).__name__}" + (f": {Path(e.filename).name}" if e.filename else "")


class CheckpointDriver:
    """Checkpoints of one run directory, for the trainer ranks in `actors.trainers`."""

    def __init__(self, spec: CheckpointSpec, out: Path, actors: Any, files: DriverFiles,
                 rec: Any, log: Callable[[str], None]):
        self.spec, self.out, self.actors, self.files, self.rec, self.log = (
            spec, Path(out), actors, files, rec, log)
        self.schedule = ckpt.Schedule(spec.every_steps, spec.every_minutes, spec.at_steps)
        self.pending: dict[str, int] = {}       # trainer dir being written -> step
        self._io = None                          # the driver's checkpoint I/O thread (lazy)
        self._io_jobs: list = []
        self._saving: list = []                  # trainers' save calls not yet awaited
        self.last_saved = -1
        self.failed: dict[int, str] = {}         # checkpoint step -> why its write failed
        self._told: set[int] = set()             # failures already logged
        self._disk = faults.hook("checkpoint")   # tests: a write fails as on a full disk

    def save(self, step: int, async_save: Optional[bool] = None) -> None:
        """Start a checkpoint of the state after `step`. The trainer's write is asynchronous
        (megatron's writer process); the driver's part (state.json, the trace so far, and
        later the manifest + rename) runs on one background thread, in order."""
        try:
            part = ckpt.fresh_dir(self.out, step)   # made by us: no link planted in its place
        except OSError as e:
            self.failed[step] = _why(e)
            return
        state, trace, extra = self.files(step)
        full = False
        if self._disk is not None:
            self._disk.tick()
            full = self._disk.fires("enospc")

        def write() -> None:
            try:
                ckpt.write_state(part, state)
                if full:
                    faults.fill_disk(part / ckpt.TRACE, b"x" * 4096)
                trace.write_jsonl(part / ckpt.TRACE)
                if extra is not None:
                    extra(part)
            except OSError as e:   # a full or failing disk: this checkpoint is dropped at its seal
                self.failed[step] = _why(e)
        self.background(write)
        tdir = str(part / ckpt.TRAINER)
        async_save = self.spec.async_save if async_save is None else async_save
        self.pending[tdir] = step
        self.last_saved = step
        self.schedule.saved()
        # Not awaited: each trainer finalises the previous write, then plans and hands off
        # this one while the driver starts the next step (an actor runs its calls one at a
        # time, in order, so the save sees the state after `step` and the next step's
        # training waits for it). `_collect` picks up the result at the next boundary and
        # seals what was finalised.
        self._saving = [w.save_checkpoint.remote(tdir, async_save) for w in self.actors.trainers]
        if not async_save:
            self._collect()
            if tdir in self.pending:   # the thread writer's save comes back finalised
                self._seal(tdir)

    def boundary(self, step: int) -> None:
        """The checkpoint work between two steps: surface the previous boundary's results,
        seal what the trainers finalised, and start a save if one is due. At most one write
        is in flight: a due save's call first finalises the previous one on the trainers, so
        with a checkpoint every step, checkpoint s is sealed at boundary s + 2."""
        self._drain()      # I/O of earlier boundaries: it had a whole step to finish
        self._collect()    # the previous save's hand-off (done before this step trained)
        due = self.schedule.due(step)
        if due:
            self.save(step)      # the trainers finalise the previous write first
        elif self.pending:
            self.poll(blocking=False)

    def _collect(self) -> None:
        """Wait for the trainers' last `save_checkpoint` calls (re-raise their error) and seal
        the writes they finalised."""
        calls, self._saving = self._saving, []
        outs = get_all(calls)
        self._finalised(outs[0] if outs else [])

    def _finalised(self, results: list) -> None:
        """Seal the writes the trainers finalised; one whose shards could not be written (a
        full disk under the trainers' writer) is dropped, as a driver-side failure is."""
        for tdir, why in results:
            if why is not None:
                self.failed.setdefault(self.pending[tdir], why)
            self._seal(tdir)

    def forget_ranks(self) -> None:
        """Every trainer rank is being restarted: collect the save calls that returned, forget
        the others (their ranks die with them) and every write in flight, whose writers die
        with the old ranks unfinalised (`prune` removes its files later)."""
        import ray
        calls = self._saving
        if calls and len(ray.wait(calls, num_returns=len(calls), timeout=0)[0]) == len(calls):
            with contextlib.suppress(Exception):   # a rank died inside its save call
                self._collect()
        self._saving = []
        self.pending.clear()

    def background(self, fn: Callable[[], None]) -> None:
        """Run driver-side checkpoint I/O on one worker thread (FIFO: a checkpoint's files
        are written before it is sealed). Errors surface at the next `_drain`."""
        from concurrent.futures import ThreadPoolExecutor
        if self._io is None:
            self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="yatt-ckpt")
        self._io_jobs.append(self._io.submit(fn))

    def _drain(self) -> None:
        """Wait for the background checkpoint I/O; re-raise its first error. A checkpoint
        that could not be written is one line: a warning, or the run stops when
        `checkpoint.required` (after the trainers finished with it, its files removed)."""
        self.wait_io()
        new = sorted(set(self.failed) - self._told)
        if not new:
            return
        self._told.update(new)
        self.rec.extra["checkpoint_failures"] = [
            {"step": s, "error": w} for s, w in sorted(self.failed.items())]
        # seal what the trainers finalised so far: the line names the newest valid one
        if self.spec.required:
            self.poll(blocking=True)
        else:
            self._collect()
        self.wait_io()
        done = ckpt.complete(self.out)
        newest = done[-1][1].name if done else "none"
        for step in new:
            what = (f"checkpoint step-{step:06d} could not be written ({self.failed[step]}); "
                    f"dropped, its partial files removed; newest valid checkpoint: {newest}")
            if self.spec.required:
                raise RunAborted(f"stopping: {what} (checkpoint.required: true)")
            self.log(f"warning: {what}; the run goes on (checkpoint.required: false)")

    def wait_io(self) -> None:
        """Wait for the driver's checkpoint I/O thread to finish what it was given."""
        jobs, self._io_jobs = self._io_jobs, []
        for j in jobs:
            j.result()

    def poll(self, blocking: bool) -> None:
        """Finalise the trainers' finished asynchronous writes (all of them if `blocking`)
        and seal them on the I/O thread."""
        self._collect()
        if not self.pending:
            return
        outs = get_all([w.poll_checkpoints.remote(blocking) for w in self.actors.trainers])
        self._finalised(outs[0])

    def _seal(self, tdir: str) -> None:
        step = self.pending.pop(tdir)

        def seal() -> None:
            if step not in self.failed:
                try:
                    final = ckpt.commit(self.out, step, self.spec.keep_last)
                except OSError as e:      # the manifest or the rename failed
                    self.failed[step] = _why(e)
                else:
                    self.log(f"checkpoint {final} sealed")
                    return
            # never sealed: the partial files go, the previous checkpoint stays the newest
            ckpt.remove(ckpt.partial_dir(self.out, step))
        self.background(seal)

    def finish(self, last_step: int = -1) -> None:
        """Save the last step unless it was (checkpoint.final), then wait for in-flight
        checkpoint writes and seal them (end of run)."""
        if self.spec.final and last_step >= 0 and self.last_saved != last_step:
            self.poll(blocking=True)
            # written in place: nothing trains after it (and no async writer to start)
            self.save(last_step, async_save=False)
        self.poll(blocking=True)
        self._drain()
        done = ckpt.complete(self.out)
        if done:   # the recorder's extra is only touched from the driver's main thread
            self.rec.extra["checkpoints"] = [d.name for _, d in done]
            self.rec.extra["last_checkpoint"] = done[-1][1].name

    def sync_save(self, last_good: int) -> Optional[Path]:
        """Seal the writes in flight and checkpoint `last_good` synchronously unless a
        sealed checkpoint already holds it; the newest sealed checkpoint (None: none)."""
        self.poll(blocking=True)     # the writes in flight, sealed on the I/O thread
        if last_good >= 0 and self.last_saved != last_good and not (
                (d := ckpt.complete(self.out)) and d[-1][0] >= last_good):
            self.save(last_good, async_save=False)
        self._drain()
        done = ckpt.complete(self.out)
        return done[-1][1] if done else None

    def seal_snapshots(self, last: int, values: Optional[list]) -> Optional[Path]:
        """Seal a snapshot checkpoint of step `last` from trainer snapshots held by the
        driver (`values`, one per rank; nodes.py), unless a sealed checkpoint already holds
        that step; the newest sealed checkpoint, or None."""
        done = ckpt.complete(self.out)
        if last < 0 or (done and done[-1][0] >= last) or values is None:
            return done[-1][1] if done else None
        part = ckpt.fresh_dir(self.out, last)
        state, trace, extra = self.files(last)
        ckpt.write_state(part, state)
        trace.write_jsonl(part / ckpt.TRACE)
        if extra is not None:
            extra(part)
        write_snapshots(part / ckpt.TRAINER, values)
        final = ckpt.commit(self.out, last, self.spec.keep_last)
        self.log(f"checkpoint {final} sealed (the driver's copy of the last good state)")
        return final
