"""Run supervision: in-memory snapshots, asynchronous checkpoints, fault recovery, NaN rollback.

Why: a multi-day RL run meets dead processes, non-finite losses and crashes of the
driver itself. The step loop (runner.py) stays simple; this module owns what happens
around each step:

* after every good step, each trainer rank's full state (weights, optimizer, RNG,
  counters) is snapshotted into host memory (Ray object store, owned by the driver), so
  a step can always be redone from the state it started with; the ranks take the copy
  while the driver already starts the next step;
* on the plan's checkpoint schedule, an asynchronous `dist_checkpointing` save starts
  (the trainers plan it and hand the write off while the driver already starts the next
  step), together with `state.json` (step counter, data position, run state, metrics) and
  the trace so far, written on a driver thread; a finished write is finalised by the
  trainers at a later step boundary and sealed (manifest + atomic rename, checkpoint.py)
  on that thread;
* when an actor dies mid-step (`RayActorError`), Ray restarts it (`max_restarts`); the
  supervisor re-forms the trainer process group if a trainer died, restores every
  trainer rank from the snapshot, resets and re-arms the engines with those weights,
  forgets the step's partial records and lets the runner redo the step;
* when a step's loss or gradients were non-finite, the trainer has already skipped the
  optimizer update; the supervisor also restores the snapshot (the last good state),
  counts and logs it, and stops the run after `max_nonfinite_steps` in a row;
* when a whole node is lost (its actors and its object store with them), the supervisor
  waits `node_wait_s` for capacity, restores every rank from the driver's copy of the
  snapshot (nodes.py) and redoes the step; if no capacity comes, it checkpoints that copy
  and stops with the `--resume` command.

Prompts and sampling seeds are functions of (seed, step, round), so the data position is
the step counter and a redone or resumed step sees exactly the same data.
"""
from __future__ import annotations

import contextlib
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from yatt.core.release import ReleaseAction
from yatt.core.roles import Mode, Role
from yatt.core.specs import CheckpointSpec

from . import checkpoint as ckpt
from . import faults
from .nodes import NodeWatch, write_snapshots
from .controller import StepController
from .rayutil import get_all, is_actor_fault, wait_alive
from .worker_errors import describe


def _why(e: OSError) -> str:
    """`[Errno 28] No space left on device: 'FILE'` without the run's absolute path noise."""
    return f"{e.strerror or type(e).__name__}" + (f": {Path(e.filename).name}" if e.filename else "")


class RunAborted(RuntimeError):
    """The run cannot continue (e.g. repeated non-finite steps, restarts exhausted)."""


def _alive(handles: list, fresh: bool = False) -> None:
    try:
        wait_alive(handles, fresh)
    except TimeoutError as e:
        raise RunAborted(str(e)) from None


@dataclass
class Counters:
    restarts: int = 0            # recoveries from dead actors (the step was redone)
    rollbacks: int = 0           # non-finite steps rolled back
    nonfinite_streak: int = 0    # consecutive non-finite steps
    faults: list = field(default_factory=list)


class Supervisor:
    def __init__(self, plan, actors, ctl, rec, release: dict[Role, ReleaseAction],
                 spec: CheckpointSpec, out_dir: Path, push_weights: Callable[[], None],
                 total_steps: int,
                 log: Callable[[str], None] = lambda m: print(m, file=sys.stderr),
                 data_position: Optional[Callable[[int], dict]] = None):
        self.plan, self.actors, self.ctl, self.rec = plan, actors, ctl, rec
        self.release, self.spec, self.out = release, spec, Path(out_dir)
        self.next_step = 0   # the first step not yet done (after_step advances it)
        self.ctls = [ctl]    # every controller group (async runs cycle through several)
        self.push_weights, self.total_steps, self.log = push_weights, total_steps, log
        self.schedule = ckpt.Schedule(spec.every_steps, spec.every_minutes, spec.at_steps)
        self.counters = Counters()
        self.snaps: list = []
        self.pending: dict[str, int] = {}       # trainer dir being written -> step
        self._io = None                          # driver-side checkpoint I/O thread (lazy)
        self._io_jobs: list = []
        self._saving: list = []                  # trainers' save calls not yet awaited
        self._dead: Optional[tuple[str, str]] = None   # found by is_fault, used by recover
        self.data_position = data_position or (lambda next_step: {})
        self.last_saved = -1
        # extra files of a checkpoint: next step -> a writer into the checkpoint's directory
        self.extra_files: Optional[Callable[[int], Callable[[Path], None]]] = None
        self.failed: dict[int, str] = {}         # checkpoint step -> why its write failed
        self._told: set[int] = set()             # failures already logged
        self._disk = faults.hook("checkpoint")   # tests: a write fails as on a full disk
        self.watch: Optional[NodeWatch] = None   # set by the runner: node loss (nodes.py)

    def resumed(self, state: dict) -> None:
        """Continue the counters of a resumed run (state.json `run`)."""
        r = state.get("run", {})
        self.counters = Counters(int(r.get("restarts", 0)), int(r.get("rollbacks", 0)),
                                 int(r.get("nonfinite_streak", 0)), list(r.get("faults", [])))

    # ---- snapshots -------------------------------------------------------------------
    def snapshot(self, wait: bool = True) -> None:
        """Keep every trainer rank's current state (the last good state). Unless `wait`, the
        calls are sent and not awaited: a rank runs its calls in order, so the copy is taken
        before the next step touches its state, and it lands in the object store (owned by
        the driver, so it outlives a rank that dies later). The next snapshot or a restore
        waits for it and surfaces its error."""
        get_all(self.snaps)
        self.snaps = refs = [w.snapshot.remote() for w in self.actors.trainers]
        if self.watch is not None and self.watch.replicate:   # a copy that outlives a node
            self._background(lambda: self.watch.keep(refs))
        if wait:
            get_all(self.snaps)

    def _restore(self) -> None:
        get_all([w.restore.remote(s) for w, s in zip(self.actors.trainers, self.snaps)])

    # ---- after a step ----------------------------------------------------------------
    def after_step(self, step: int, row: dict[str, Any]) -> dict[str, Any]:
        """NaN rollback, snapshot, checkpoint schedule. Adds run columns to `row`."""
        bad = row.get("skipped", 0) > 0 or not math.isfinite(row.get("loss", 0.0))
        if bad:
            self.counters.rollbacks += 1
            self.counters.nonfinite_streak += 1
            self._restore()
            self.push_weights()
            row.update(restarts=self.counters.restarts, rollbacks=self.counters.rollbacks)
            self.log(f"step {step}: non-finite loss or gradients; update skipped, trainer "
                     f"rolled back to the state before the step "
                     f"({self.counters.nonfinite_streak} in a row, {self.counters.rollbacks} in all)")
            if self.counters.nonfinite_streak >= self.spec.max_nonfinite_steps:
                last = ckpt.complete(self.out)
                raise RunAborted(
                    f"stopping: {self.counters.nonfinite_streak} consecutive steps "
                    f"(through step {step}) had a non-finite loss or gradients "
                    f"(checkpoint.max_nonfinite_steps={self.spec.max_nonfinite_steps}); "
                    + (f"last checkpoint: {last[-1][1]}" if last else "no checkpoint saved")
                    + "; lower algo.lr or inspect the step's samples in trace.jsonl")
        else:
            self.counters.nonfinite_streak = 0
            t = time.perf_counter()
            self.snapshot(wait=False)
            row["snapshot_s"] = round(time.perf_counter() - t, 4)
        t = time.perf_counter()
        self.boundary(step)
        row.update(restarts=self.counters.restarts, rollbacks=self.counters.rollbacks,
                   ckpt_stall_s=round(time.perf_counter() - t, 4))
        self.next_step = step + 1
        return row

    # ---- checkpoints -----------------------------------------------------------------
    def save(self, step: int, async_save: Optional[bool] = None) -> None:
        """Start a checkpoint of the state after `step`. The trainer's write is asynchronous
        (megatron's writer process); the driver's part (state.json, the trace so far, and
        later the manifest + rename) runs on one background thread, in order."""
        try:
            part = ckpt.fresh_dir(self.out, step)   # made by us: no link planted in its place
        except OSError as e:
            self.failed[step] = _why(e)
            return
        state, trace, extra = self._driver_files(step)
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
        self._background(write)
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

    def _driver_files(self, step: int) -> tuple[dict, Any, Optional[Callable[[Path], None]]]:
        """What the driver writes into the checkpoint of `step`: state.json's content, the
        trace so far, and the extra files' writer (None: none)."""
        import copy

        done = step + 1
        state = {
            "step": step, "next_step": done, "total_steps": self.total_steps,
            "seed": self.rec.seed,
            "data_position": {"next_step": done, "round": 0, **self.data_position(done)},
            "controllers": {"count": self.ctl.count,
                            "note": "per-step state only: prompts/seeds derive from (seed, step, round)"},
            "run": copy.deepcopy({"restarts": self.counters.restarts,
                                  "rollbacks": self.counters.rollbacks,
                                  "nonfinite_streak": self.counters.nonfinite_streak,
                                  "faults": self.counters.faults}),
            "trace_end_s": max((s.end_s for s in self.rec.spans), default=0.0),
            "metrics": [dict(m) for m in self.rec.metrics], "extra": copy.deepcopy(self.rec.extra)}
        trace = self.rec.trace(done)            # immutable records: a consistent copy
        extra = self.extra_files(done) if self.extra_files is not None else None
        return state, trace, extra

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

    def _collect_finished(self) -> None:
        """`_collect` when every save call has returned; else forget the calls (their ranks
        died with them)."""
        import ray
        calls = self._saving
        if calls and len(ray.wait(calls, num_returns=len(calls), timeout=0)[0]) == len(calls):
            with contextlib.suppress(Exception):   # a rank died inside its save call
                self._collect()
        self._saving = []

    def _background(self, fn: Callable[[], None]) -> None:
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
        self._background(seal)

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

    def checkpoint_now(self, last_good: int, aborted: Optional[int] = None) -> Optional[Path]:
        """A preempted run (preempt.py): checkpoint the last good step synchronously and
        return the newest sealed checkpoint (None if there is none). `aborted`: a step cut
        short; its records are forgotten and the trainers restored to the snapshot of the
        last good step (a rank runs its calls in order: the restore waits for the step's
        training call, if one was sent)."""
        if aborted is not None:
            self.rec.drop_step(aborted)
            self._restore()
        self.poll(blocking=True)     # the writes in flight, sealed on the I/O thread
        if last_good >= 0 and self.last_saved != last_good and not (
                (d := ckpt.complete(self.out)) and d[-1][0] >= last_good):
            self.save(last_good, async_save=False)
        self._drain()
        done = ckpt.complete(self.out)
        return done[-1][1] if done else None

    # ---- faults ----------------------------------------------------------------------
    def _groups(self) -> dict[str, list]:
        return {"trainer": self.actors.trainers, "reference": self.actors.refs,
                **{r.value: es for r, es in self.actors.engines.items()},
                "controller": [c for g in self.ctls for c in getattr(g, "remote", [])]}

    def _role_of(self, e: BaseException) -> str:
        aid = getattr(e, "actor_id", None)
        for name, hs in self._groups().items():
            if aid and any(h._actor_id.hex() == aid for h in hs):
                return name
        return "unknown"

    def dead_actor(self) -> Optional[tuple[str, str]]:
        """(role, actor id) of an actor that died or is restarting, else None. Used when a
        step failed with an error that is not itself an actor death (e.g. a trainer rank
        whose gloo peer vanished raises "Connection reset by peer" before Ray reports the
        dead peer)."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        for name, hs in self._groups().items():
            for h in hs:
                try:
                    ray.get(h.ping.remote(), timeout=10)
                except (RayActorError, GetTimeoutError):
                    return name, h._actor_id.hex()
        return None

    def is_fault(self, e: BaseException) -> bool:
        """Whether a failed step is recoverable: an actor died (directly or as the cause)."""
        if is_actor_fault(e):
            return True
        found = self.dead_actor()
        if found is not None:
            self._dead = found
        return found is not None

    def recover(self, e: BaseException, step: int, rnd: int = 0, push: bool = True) -> None:
        """Bring every actor back to the state at the start of `step` (see module doc);
        `rnd`: the dynamic-sampling round the step was in when the actor died. Unless
        `push`, the engines are left for the caller to load (an async run gives them an
        older version than the trainer's)."""
        import ray

        role, dead = self._role_of(e), getattr(e, "actor_id", None)
        if not is_actor_fault(e) and self._dead:
            role, dead = self._dead
        self._dead = None
        self.counters.restarts += 1
        why = describe(e)
        lost = self.watch.lost() if self.watch is not None else {}
        if lost:
            role = "node"
        else:
            self.log(f"step {step}: {role} actor died ({type(e).__name__}); restarting it and "
                     f"redoing the step (restart {self.counters.restarts}/{self.spec.max_restarts})"
                     + (f"; {why}" if why else ""))
        if self.counters.restarts > self.spec.max_restarts:
            raise RunAborted(f"stopping: actor failures exceeded checkpoint.max_restarts="
                             f"{self.spec.max_restarts} (last: {role} at step {step}: "
                             f"{why or ' '.join(str(e).split())[:300]})") from e
        t = time.perf_counter()
        survivors: set[int] = set()
        if lost:
            gone = {d for ds in lost.values() for d in ds}
            survivors = {i for i, d in enumerate(self.plan.placement(Role.TRAINER).devices)
                         if d not in gone}
            self._await_nodes(lost, step, {"step": step, "round": rnd, "role": role,
                                           "error": type(e).__name__})
        for g in self.ctls:
            _alive(list(getattr(g, "remote", [])))   # a dead controller: restarted by Ray
            g.call(StepController.shutdown)              # drop the step's queues
        trainers = self.actors.trainers
        if role in ("trainer", "unknown"):
            # Peers of a dead rank wait in a collective forever: restart every rank.
            for w in trainers:
                if w._actor_id.hex() != dead:
                    ray.kill(w, no_restart=False)
        elif role == "node":   # the lost node's ranks restart with it; restart the others
            for i in sorted(survivors):
                ray.kill(trainers[i], no_restart=False)
        engines = [x for es in self.actors.engines.values() for x in es]
        restart_all = role in ("trainer", "unknown", "node")
        _alive(engines + self.actors.refs)
        _alive(trainers, fresh=restart_all)
        if restart_all:
            # The old ranks' writer queues are gone: a checkpoint they had not finalised is
            # never sealed (prune removes it later). A save call that returned before the
            # rank died still reports what it finalised.
            self._collect_finished()
            self.pending.clear()
            addr, port = ray.get(trainers[0].address.remote())
            get_all([w.setup.remote(addr, port) for w in trainers])
        else:
            get_all([w.clear_staged.remote() for w in trainers])
        self._restore()
        get_all([x.reset.remote() for x in engines])
        up = self._engines_up_at_step_start()
        get_all([x.acquire.remote() if up[r] else x.release.remote()
                 for r, es in self.actors.engines.items() for x in es])
        if push:
            self.push_weights()
        self.rec.drop_step(step)
        self.counters.faults.append({"step": step, "round": rnd, "role": role,
                                     "error": type(e).__name__,
                                     "recovery_s": round(time.perf_counter() - t, 3)})
        self.rec.extra["faults"] = self.counters.faults

    def _await_nodes(self, lost: dict[str, list[int]], step: int, record: dict) -> None:
        """A node of the run died: wait for capacity and put the driver's copy of the last
        good snapshot back in the object store; if capacity does not return within
        `checkpoint.node_wait_s`, record the fault (`record`, with no recovery time),
        checkpoint that copy and stop with the `--resume` line."""
        import shlex

        assert self.watch is not None
        what = "; ".join(f"node {n[:12]} (devices {','.join(map(str, d))})"
                         for n, d in lost.items())
        wait = self.spec.node_wait_s
        resume = f"yatt run --resume {shlex.quote(str(self.out))}"
        self.wait_io()                       # the copy of the last snapshot, if it was taken
        if self.watch.values(self.snaps) is None:
            done = ckpt.complete(self.out)
            raise RunAborted(
                f"stopping: lost {what} at step {step} before the driver held a copy of the "
                f"last good state; newest checkpoint: "
                f"{done[-1][1].name if done else 'none'}; resume with: {resume}")
        self.log(f"step {step}: lost {what}; waiting up to {wait:.0f} s for a node with its "
                 f"devices to join (checkpoint.node_wait_s)")
        t = time.monotonic()
        if self.watch.wait_placed(wait, self.log):
            self.log(f"capacity is back after {time.monotonic() - t:.0f} s; restarting the lost "
                     f"actors and redoing step {step}")
            self.snaps = self.watch.replica(self.snaps) or self.snaps
            return
        self.counters.faults.append({**record, "recovery_s": None, "stopped": True})
        self.rec.extra["faults"] = self.counters.faults
        import ray
        # ranks left waiting on lost peers have nothing to finish; stopped first, so that no
        # writer of theirs is still writing into the checkpoint directory made below
        for w in self.actors.trainers:
            ray.kill(w, no_restart=True)
        where = self._checkpoint_copy()
        raise RunAborted(
            f"stopping: lost {what} at step {step} and no capacity returned within {wait:.0f} s "
            f"(checkpoint.node_wait_s); "
            + (f"the last good step is checkpointed in {where.name}; resume with: {resume}"
               if where is not None else "no step was completed; run the same command again"))

    def _checkpoint_copy(self) -> Optional[Path]:
        """Seal a snapshot checkpoint of the last good step from the driver's copy (unless a
        sealed checkpoint already holds it); the newest sealed checkpoint, or None."""
        assert self.watch is not None
        last = self.next_step - 1
        done = ckpt.complete(self.out)
        values = self.watch.values(self.snaps)
        if last < 0 or (done and done[-1][0] >= last) or values is None:
            return done[-1][1] if done else None
        part = ckpt.fresh_dir(self.out, last)
        state, trace, extra = self._driver_files(last)
        ckpt.write_state(part, state)
        trace.write_jsonl(part / ckpt.TRACE)
        if extra is not None:
            extra(part)
        write_snapshots(part / ckpt.TRAINER, values)
        final = ckpt.commit(self.out, last, self.spec.keep_last)
        self.log(f"checkpoint {final} sealed (the driver's copy of the last good state)")
        return final

    def _engines_up_at_step_start(self) -> dict[Role, bool]:
        """Which engine roles hold their devices when a step begins (as after `_launch`):
        all in partial colocate, and in async unless the GenRM shares the rollout's devices."""
        p = self.plan
        partial = p.mode is Mode.PARTIAL or (p.mode is Mode.ASYNC and not p.genrm_shares_rollout)
        return {r: (r is Role.ROLLOUT or partial or self.release[r] is ReleaseAction.KEEP)
                for r in self.actors.engines}
