"""Run supervision: in-memory snapshots, asynchronous checkpoints, fault recovery, NaN rollback.

Why: a multi-day RL run meets dead processes, non-finite losses and crashes of the
driver itself. The step loop (runner.py) stays simple; this module owns what happens
around each step:

* after every good step, each trainer rank's full state (weights, optimizer, RNG,
  counters) is snapshotted into host memory outside the rank's process (its own host
  file on one node, host_snapshot.py; the object store when the run spans nodes), so a
  step can always be redone from the state it started with; the ranks take the copy
  while the driver already starts the next step;
* on the plan's checkpoint schedule, an asynchronous `dist_checkpointing` save starts
  while the driver already starts the next step; the driver's files, the sealing and a
  failed write's line are ckpt_driver.py's;
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
from . import host_snapshot
from .ckpt_driver import CheckpointDriver, RunAborted
from .controller import StepController
from .nodes import NodeWatch
from .rayutil import get_all, is_actor_fault, wait_alive
from .worker_errors import describe


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
        self.counters = Counters()
        self.snaps: list = []
        self.generation = 0                        # of the host-file snapshots
        self.host_root: Optional[Path] = None      # their directory (host_snapshot.py)
        self._dead: Optional[tuple[str, str]] = None   # found by is_fault, used by recover
        self.data_position = data_position or (lambda next_step: {})
        # extra files of a checkpoint: next step -> a writer into the checkpoint's directory
        self.extra_files: Optional[Callable[[int], Callable[[Path], None]]] = None
        self.checkpoints = CheckpointDriver(spec, self.out, actors, self._driver_files, rec, log)
        self.watch: Optional[NodeWatch] = None   # set by the runner: node loss (nodes.py)

    def resumed(self, state: dict) -> None:
        """Continue the counters of a resumed run (state.json `run`)."""
        r = state.get("run", {})
        self.counters = Counters(int(r.get("restarts", 0)), int(r.get("rollbacks", 0)),
                                 int(r.get("nonfinite_streak", 0)), list(r.get("faults", [])))

    # ---- snapshots -------------------------------------------------------------------
    def snapshot(self, wait: bool = True) -> None:
        """Keep every trainer rank's current state (the last good state). On one node each
        rank writes it into its own host file (host_snapshot.py) and the driver keeps the
        tokens; when the run spans nodes it goes to the object store, owned by the driver,
        and a copy is fetched to the driver's node (nodes.py). Unless `wait`, the calls are
        sent and not awaited: a rank runs its calls in order, so the copy is taken before
        the next step touches its state. The next snapshot or a restore waits for it and
        surfaces its error."""
        get_all(self.snaps)
        trainers = self.actors.trainers
        if self.watch is not None and self.watch.replicate:   # a copy that outlives a node
            self.snaps = refs = [w.snapshot.remote() for w in trainers]
            self.checkpoints.background(lambda: self.watch.keep(refs))
        else:
            self.generation += 1
            root = str(self._host_root())
            self.snaps = [w.snapshot_host.remote(root, self.generation) for w in trainers]
        if wait:
            get_all(self.snaps)

    def _host_root(self) -> Path:
        """The run's snapshot directory (made at the first snapshot): host RAM when it has
        room for every rank's state, with fp32 Adam moments and main weights."""
        if self.host_root is None:
            tp = self.plan.placement(Role.TRAINER)
            per_rank = self.plan.experiment.actor.params * 16 // (tp.tp * tp.pp)
            self.host_root = host_snapshot.choose_root(per_rank * len(self.actors.trainers))
        return self.host_root

    def close(self) -> None:
        """Remove the run's snapshot files (the end of the run)."""
        if self.host_root is not None:
            host_snapshot.remove(self.host_root)
            self.host_root = None

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
        self.checkpoints.boundary(step)
        row.update(restarts=self.counters.restarts, rollbacks=self.counters.rollbacks,
                   ckpt_stall_s=round(time.perf_counter() - t, 4))
        self.next_step = step + 1
        return row

    # ---- checkpoints (ckpt_driver.py) ----------------------------------------------
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

    def checkpoint_now(self, last_good: int, aborted: Optional[int] = None) -> Optional[Path]:
        """A preempted run (preempt.py): checkpoint the last good step synchronously and
        return the newest sealed checkpoint (None if there is none). `aborted`: a step cut
        short; its records are forgotten and the trainers restored to the snapshot of the
        last good step (a rank runs its calls in order: the restore waits for the step's
        training call, if one was sent)."""
        if aborted is not None:
            self.rec.drop_step(aborted)
            self._restore()
        return self.checkpoints.sync_save(last_good)

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
            self.checkpoints.forget_ranks()
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
        self.checkpoints.wait_io()           # the copy of the last snapshot, if it was taken
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
        where = self.checkpoints.seal_snapshots(self.next_step - 1, self.watch.values(self.snaps))
        raise RunAborted(
            f"stopping: lost {what} at step {step} and no capacity returned within {wait:.0f} s "
            f"(checkpoint.node_wait_s); "
            + (f"the last good step is checkpointed in {where.name}; resume with: {resume}"
               if where is not None else "no step was completed; run the same command again"))

    def _engines_up_at_step_start(self) -> dict[Role, bool]:
        """Which engine roles hold their devices when a step begins (as after `_launch`):
        all in partial colocate, and in async unless the GenRM shares the rollout's devices."""
        p = self.plan
        partial = p.mode is Mode.PARTIAL or (p.mode is Mode.ASYNC and not p.genrm_shares_rollout)
        return {r: (r is Role.ROLLOUT or partial or self.release[r] is ReleaseAction.KEEP)
                for r in self.actors.engines}
