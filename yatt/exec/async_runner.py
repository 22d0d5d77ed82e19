"""Async (one-step off-policy) steps: generators and trainer on disjoint devices, overlapped.

Why: in `mode: async` the rollout (and GenRM) engines generate step s + 1 while the trainer
trains step s. The order of each side's stages comes from `yatt.core.schedule`'s async
schedule (generate, refill, finish), the same the simulator walks; this module runs the two
sides at once and keeps the weight versions exact:

- a generator thread generates step after step on its own step runner (its own controllers),
  first taking weight version `min_policy_version(s, k)`, the oldest the staleness bound
  allows; it waits until the trainer has published that version (the bounded queue: it is k
  steps ahead);
- the driver's thread trains each step once its samples are ready, then publishes the new
  version (the trainer's HF weights, kept in the object store) and commits it after the
  supervisor's step boundary (a rolled-back step republishes first);
- each sample records the version that generated it (`SampleRecord.policy_version`), and
  the trainer weights the loss by min(pi_old / pi_behaviour, algo.behaviour_is_cap) with the
  engine's log-probs of the sampled tokens (`algo.behaviour_weight`).

Taking exactly version s - k (not the newest) makes a run a function of its seed: the same
samples whatever the timing, so a resumed run repeats an uninterrupted one. A checkpoint
after step s holds the trainer at version s + 1 and the engines' version for step s + 1
(`ENGINE_WEIGHTS`, safetensors), so resume regenerates step s + 1 exactly.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

from yatt.core.plan import Plan
from yatt.core.release import ReleaseAction
from yatt.core.roles import Phase, Role
from yatt.core.schedule import Stage, async_summary, min_policy_version

from .controller import ControllerGroup
from .rayutil import get_all
from .recorder import Recorder
from .schedules import Actors, StepRunner

ENGINE_WEIGHTS = "engine_weights.safetensors"   # in a checkpoint: the engines' next version


def runners_needed(k: int) -> int:
    """Step runners (each with its own controllers) an async run cycles through: a runner is
    reused for step s + k + 2 only after its step s was trained and recorded."""
    return k + 2


class AsyncRunner:
    def __init__(self, plan: Plan, actors: Actors, groups: list[ControllerGroup], rec: Recorder,
                 release: dict[Role, ReleaseAction], genrm: bool, total_steps: int):
        self.plan, self.actors, self.rec = plan, actors, rec
        self.k = plan.max_staleness
        assert len(groups) == runners_needed(self.k), len(groups)
        self.runners = [StepRunner(plan, actors, g, rec, release, genrm, total_steps)
                        for g in groups]
        for r in self.runners:
            r.handlers[Phase.WEIGHT_SYNC] = self._publish
        self._cv = threading.Condition()
        self._published: dict[int, Any] = {}    # version -> object ref of replica 0's HF weights
        self._committed = 0                     # newest version the generator may take
        self._engine_version = 0
        self._ready: dict[int, float] = {}      # step -> wall time its samples were ready
        self._timing: dict[int, dict[str, float]] = {}   # step -> generator times (run seconds)
        self._error: Optional[BaseException] = None
        self._stop = False
        self._thread: Optional[threading.Thread] = None
        self._train_end: Optional[float] = None

    # ---- versions --------------------------------------------------------------------
    def _gather(self) -> Any:
        """Replica 0's HF weights into the object store (a collective over its ranks, so all
        are called; rank 0's copy is kept)."""
        import ray

        states = [w.hf_state_dict.remote() for w in self.actors.trainer_groups[0]]
        ray.wait(states, num_returns=len(states), fetch_local=False)
        return states[0]

    def start(self, first_step: int, steps: int, engine_weights: Any = None) -> None:
        """Publish the trainer's weights as version `first_step` and start the generator.
        `engine_weights` (a state dict or its object ref): on resume, the engines' version
        for `first_step` (else they hold the initial weights, version 0)."""
        import ray

        self._committed = first_step
        self._published[first_step] = self._gather()
        want = min_policy_version(first_step, self.k)
        if engine_weights is not None:
            ref = engine_weights if isinstance(engine_weights, ray.ObjectRef) else ray.put(engine_weights)
            self._published[want] = ref
            get_all([e.update_weights.remote(ref) for e in self.actors.engines[Role.ROLLOUT]])
        self._engine_version = want
        self._train_end = time.time()
        self._thread = threading.Thread(target=self._generate_all, args=(first_step, steps),
                                        name="yatt-async-generator", daemon=True)
        self._thread.start()

    def _publish(self, step: int, stage: Stage) -> None:
        """The trainer's side of the weight push (its WEIGHT_SYNC stage): version step + 1."""
        t = time.time()
        ref = self._gather()
        with self._cv:
            self._published[step + 1] = ref
        self.rec.span(step, Role.TRAINER, Phase.WEIGHT_SYNC, self.plan.placement(Role.TRAINER).devices,
                      t, time.time(), 0, "weight_sync send")

    def republish(self) -> None:
        """The newest version again, from the trainer as it is now (after a NaN rollback)."""
        with self._cv:
            v = max(self._published)
        ref = self._gather()
        with self._cv:
            self._published[v] = ref

    def commit(self, step: int) -> None:
        """Step `step` passed the supervisor's boundary: the generator may take version step + 1."""
        with self._cv:
            self._committed = step + 1
            keep = min(self._engine_version, min_policy_version(step + 1, self.k))
            for v in [v for v in self._published if v < keep]:
                del self._published[v]
            self._cv.notify_all()

    def engine_weights_for(self, next_step: int) -> Callable[[Path], None]:
        """A writer of the engines' version for `next_step` (a checkpoint's extra file)."""
        with self._cv:
            ref = self._published[min_policy_version(next_step, self.k)]

        def write(d: Path) -> None:
            import warnings

            import ray
            from safetensors.torch import save_file

            # the object store hands tensors over read-only; they are only read here
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            save_file({n: t.contiguous() for n, t in ray.get(ref).items()}, str(d / ENGINE_WEIGHTS))
        return write

    def restart(self, step: int, steps: int) -> None:
        """Generate again from `step` after a recovery (the supervisor brought the trainer
        back to the start of `step`): what the generator made for `step` and later is
        dropped, and the engines are given version `min_policy_version(step, k)` again, so
        the redone steps see exactly the samples the lost ones would have."""
        self.stop()
        with self._cv:
            engines = self._published[min_policy_version(step, self.k)]
            self._published = {v: r for v, r in self._published.items() if v < step}
            self._ready.clear()
            self._timing.clear()
            self._error, self._stop = None, False
        for s in range(step, steps):
            self.rec.drop_step(s)
        self.start(step, steps, engines)

    # ---- the generator ---------------------------------------------------------------
    def _take(self, step: int, version: int) -> None:
        """The engines' side of the weight push, between two of their steps."""
        with self._cv:
            ref = self._published[version]
        t = time.time()
        get_all([e.update_weights.remote(ref) for e in self.actors.engines[Role.ROLLOUT]])
        self.rec.span(step, Role.ROLLOUT, Phase.WEIGHT_SYNC, self.plan.placement(Role.ROLLOUT).devices,
                      t, time.time(), 0, "weight_sync receive")
        with self._cv:
            self._engine_version = version

    def _generate_all(self, first: int, steps: int) -> None:
        try:
            for s in range(first, steps):
                want = min_policy_version(s, self.k)
                t_ready = time.time()
                with self._cv:
                    self._cv.wait_for(lambda: self._stop or self._committed >= want)
                    if self._stop:
                        return
                blocked = time.time() - t_ready
                if want > self._engine_version:
                    self._take(s, want)
                r = self.runner(s)
                r.policy_version = want
                t0 = time.time()
                r.generate(s)
                with self._cv:
                    self._ready[s] = time.time()
                    self._timing[s] = {"gen_start_s": self.rec.rel(t0), "gen_blocked_s": blocked,
                                       "gen_end_s": self.rec.rel(self._ready[s])}
                    self._cv.notify_all()
                for stage in r.schedule.refill:
                    r.handlers[stage.phase](s, stage)
        except BaseException as e:   # noqa: BLE001 - surfaced on the driver's thread
            with self._cv:
                self._error = e
                self._cv.notify_all()

    def runner(self, step: int) -> StepRunner:
        return self.runners[step % len(self.runners)]

    # ---- the trainer -----------------------------------------------------------------
    def train_step(self, step: int) -> dict[str, Any]:
        """Train step `step` once its samples are ready; its metrics row. The step's time
        runs from the previous train end (the first: from the run's start of steps)."""
        with self._cv:
            self._cv.wait_for(lambda: step in self._ready or self._error is not None)
            if step not in self._ready:
                assert self._error is not None
                raise self._error
            del self._ready[step]
            timing = self._timing.pop(step)
        start = self._train_end
        assert start is not None
        t = time.time()
        row = self.runner(step).finish(step, start)
        self._train_end = time.time()
        # the simulator's per-step record (`yatt.sim.metrics` reads the steady state from it)
        per = self.rec.extra.setdefault("steps", [])
        per.append({"step": step, "step_time_s": round(self._train_end - start, 6),
                    "policy_version": min_policy_version(step, self.k), **timing,
                    "train_start_s": self.rec.rel(t), "train_waiting_s": t - start,
                    "train_end_s": self.rec.rel(self._train_end)})
        self.rec.extra["async"] = async_summary(per, self.k)
        return row

    def stop(self, timeout_s: float = 600.0) -> None:
        """Stop the generator after the step it is generating (waited up to `timeout_s`)."""
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
