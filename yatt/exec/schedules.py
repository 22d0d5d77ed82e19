"""One RL step, executed by walking the core step schedule of the plan's mode.

Why: the simulator and the executor must run the same phases in the same order, so the
order comes from `yatt.core.schedule.step_schedule` and this module only maps each phase
to an action (a dict of handlers keyed by Phase). Full colocate: stages run one after
another over all devices; between them each engine role does what the plan's release
policy resolves to on this device (`yatt.core.release`), recorded as `offload`/`reload`
spans with measured cost. Partial colocate: the rollout stage
streams into the GenRM stage (disjoint devices, bounded queue), then training on all
devices, then weight sync. Step semantics (prompts, seeds, balancing, loss) are identical.
With `algo.old_logprobs: recompute` the trainer's own forward pass over the staged batch
is its own stage (the schedule puts it after the trainer's reload, before the reference
pass), recorded as an `old_logprob` span.
Dynamic sampling repeats the generate stages (after the schedule's `between_rounds`
switches) while controllers have replacement groups queued, up to the workload's cap.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Callable

from yatt.core.balance import attention_weight, partition, sequence_cost
from yatt.core.plan import Plan
from yatt.core.release import ReleaseAction
from yatt.core.roles import Phase, Role
from yatt.core.schedule import Stage, step_schedule

from .algo import lr_at
from .data import eval_due
from .controller import StepController
from .controller_group import ControllerGroup
from .step_stats import Moments, PhaseReport
from .recorder import Recorder
from .rayutil import get_all


@dataclass
class Actors:
    """Handles of the plan's workers, by role (engines: one per TP group)."""

    engines: dict[Role, list]          # ROLLOUT / GENRM engine actors
    trainers: list                     # all trainer ranks, rank order
    trainer_groups: list[list]         # [dp][tp * pp] ranks: one model replica each
    refs: list                         # reference workers (one per group)


class StepRunner:
    def __init__(self, plan: Plan, actors: Actors, controllers: ControllerGroup,
                 rec: Recorder, release: dict[Role, ReleaseAction], genrm: bool,
                 total_steps: int = 1):
        self.plan, self.actors, self.ctl, self.rec = plan, actors, controllers, rec
        self.total_steps = total_steps
        self.release, self.genrm = release, genrm
        self.reference = plan.experiment.algo.use_reference
        self.schedule = step_schedule(plan.mode, genrm=genrm, reference=self.reference,
                                      old_logprobs=plan.experiment.algo.old_logprobs,
                                      genrm_shared=plan.genrm_shares_rollout)
        self.policy_version: int | None = None   # async: the weight version generating the step
        m = plan.experiment.actor
        self.attn_w = attention_weight(m.hidden, m.params, m.layers)
        self.handlers: dict[Phase, Callable[[int, Stage], None]] = {
            Phase.ROLLOUT: self._rollout, Phase.GENRM: self._genrm,
            Phase.OFFLOAD: self._offload, Phase.RELOAD: self._reload,
            Phase.REF_LOGPROB: self._ref, Phase.OLD_LOGPROB: self._old_logprob,
            Phase.TRAIN: self._train, Phase.WEIGHT_SYNC: self._sync}

    def devices(self, role: Role) -> tuple[int, ...]:
        return self.plan.placement(role).devices

    def run_step(self, step: int) -> dict[str, Any]:
        t = time.time()
        self.generate(step)
        return self.finish(step, t)

    def generate(self, step: int) -> None:
        """The step's generate stages, once per dynamic-sampling round."""
        self.round = 0   # the dynamic-sampling round in progress, then the last (fault records)
        self._streamed = False
        self._train_out: dict[str, float] = {}
        self._step = step
        self._assign: dict[int, int] | None = None     # the step's batch, once staged
        self.ctl.call(StepController.begin, step)
        wl = self.plan.experiment.workload
        last = wl.max_resample_rounds if wl.dynamic_sampling else 0
        for rnd in range(last + 1):
            self.round = rnd
            if rnd:
                for stage in self.schedule.between_rounds:
                    self.handlers[stage.phase](step, stage)
            self._streamed = False
            for stage in self.schedule.generate:
                self.handlers[stage.phase](step, stage)
            if not sum(self.ctl.call(StepController.resample, rnd, rnd == last)):
                break

    def finish(self, step: int, start: float) -> dict[str, Any]:
        """The step's finish stages (training, weight sync), then its metrics row; `start`:
        the wall-clock time the step began."""
        for stage in self.schedule.finish:
            self.handlers[stage.phase](step, stage)
        mom = sum(self.ctl.call(StepController.moments), Moments())
        o = self._train_out
        extra: dict[str, Any] = mom.extra_means()
        if eval_due(self.plan.experiment.data, step):
            ev = sum(self.ctl.call(StepController.eval_moments), Moments())
            extra.update(eval_reward=ev.mean, eval_accuracy=ev.accuracy, eval_samples=ev.n)
            mom = mom + Moments(reward_errors=ev.reward_errors, example=ev.example)
        self.last_moments = mom
        return self.rec.step_metrics(step, {
            **extra, "reward_errors": mom.reward_errors,
            "step_s": round(time.time() - start, 4), "reward_mean": mom.mean, "reward_std": mom.std,
            "accuracy": mom.accuracy, "samples": mom.n, "dropped": mom.dropped,
            "rounds": self.round + 1, "kl": o.get("kl", 0.0), "entropy": o.get("entropy", 0.0),
            "loss": o.get("loss", 0.0), "grad_norm": o.get("grad_norm", 0.0),
            "lr": o.get("lr", 0.0), "clip_frac": o.get("clip_frac", 0.0),
            "accept_frac": o.get("accept_frac", 1.0), "skipped": o.get("skipped", 0.0),
            "is_weight": o.get("is_weight", 1.0),
            **({} if self.policy_version is None else {"policy_version": self.policy_version}),
            "nonfinite_steps": o.get("nonfinite_steps", 0.0),
            "train_prep_s": round(o.get("train_prep_s", 0.0), 4),
            "train_rank_s": round(o.get("train_rank_s", 0.0), 4),
            "genrm_parse_fail": mom.parse_fail, "response_tokens": mom.response_tokens},
            start=start)

    # ---- generation ------------------------------------------------------------------
    def _rollout(self, step: int, stage: Stage) -> None:
        if stage.streams:
            reps = self.ctl.call(StepController.rollout_and_judge)
            start = min(r.start_s for r in reps)
            self.rec.span(step, Role.ROLLOUT, Phase.ROLLOUT, self.devices(Role.ROLLOUT), start,
                          max(r.end_s for r in reps), sum(r.tokens for r in reps), "streaming")
            self.rec.span(step, Role.GENRM, Phase.GENRM, self.devices(Role.GENRM), start,
                          max(r.genrm_end_s for r in reps), sum(r.genrm_tokens for r in reps),
                          "streaming")
            self._streamed = True
            return
        reps = self.ctl.call(StepController.rollout)
        self._phase_span(step, Role.ROLLOUT, Phase.ROLLOUT, reps)

    def _genrm(self, step: int, stage: Stage) -> None:
        if self._streamed:
            return
        reps = self.ctl.call(StepController.judge)
        self._phase_span(step, Role.GENRM, Phase.GENRM, reps, genrm=True)

    def _phase_span(self, step: int, role: Role, phase: Phase, reps: list[PhaseReport],
                    genrm: bool = False) -> None:
        tokens = sum(r.genrm_tokens if genrm else r.tokens for r in reps)
        end = time.time()
        self.rec.span(step, role, phase, self.devices(role), min(r.start_s for r in reps), end,
                      tokens)

    # ---- release / reload ------------------------------------------------------------
    def _switch(self, step: int, stage: Stage, phase: Phase, pick: Callable[[Any], Any]) -> None:
        """Engines of the stage's roles that do not stay resident switch; roles on disjoint
        devices concurrently. The trainer and reference are not switched (they have no
        engines)."""
        import ray

        roles = [r for r in stage.roles
                 if self.actors.engines.get(r) and self.release[r] is not ReleaseAction.KEEP]
        waves: list[list[Role]] = []
        for r in roles:
            devs = set(self.devices(r))
            for w in waves:
                if all(not devs & set(self.devices(x)) for x in w):
                    w.append(r)
                    break
            else:
                waves.append([r])
        labels = {ReleaseAction.TEARDOWN: ("teardown", "re-create"),
                  ReleaseAction.OFFLOAD: ("sleep", "wake")}
        for wave in waves:
            t = time.time()
            refs = {r: [pick(e).remote() for e in self.actors.engines[r]] for r in wave}
            for r, rs in refs.items():
                ray.get(rs)
                label = labels[self.release[r]][0 if phase is Phase.OFFLOAD else 1]
                self.rec.span(step, r, phase, self.devices(r), t, time.time(), 0, label)

    def _offload(self, step: int, stage: Stage) -> None:
        self._switch(step, stage, Phase.OFFLOAD, lambda e: e.release)

    def _reload(self, step: int, stage: Stage) -> None:
        self._switch(step, stage, Phase.RELOAD, lambda e: e.acquire)

    # ---- training --------------------------------------------------------------------
    def _ref(self, step: int, stage: Stage) -> None:
        reps = self.ctl.call(StepController.ref_logprobs)
        self.rec.span(step, Role.REFERENCE, Phase.REF_LOGPROB, self.devices(Role.REFERENCE),
                      min(r.start_s for r in reps), time.time(), sum(r.tokens for r in reps))

    def _stage_batch(self) -> None:
        """Balance the step's kept samples over the DP replicas and stage them into every
        rank (once per step; the old-log-prob pass and training both use it)."""
        if self._assign is not None:
            return
        self._costs = [c for part in self.ctl.call(StepController.costs) for c in part]
        dp = len(self.actors.trainer_groups)
        weights = [sequence_cost(n, self.plan.balance_cost, self.attn_w) for _, n in self._costs]
        bins = partition(weights, dp, self.plan.balance)
        self._assign = {self._costs[i][0]: r for r, b in enumerate(bins) for i in b}
        norm = (0.0, 1.0)
        if self.plan.experiment.algo.reward_norm:
            km = sum(self.ctl.call(StepController.kept_moments), Moments())
            norm = (km.mean, km.std)
        self.ctl.call(StepController.stage, self._assign, *norm)

    def _old_logprob(self, step: int, stage: Stage) -> None:
        """The actor's forward pass over the staged batch before training (`algo.old_logprobs:
        recompute`), its own stage where the core schedule puts it (after the trainer's
        reload, before the reference pass); its span covers staging the batch."""
        t = time.time()
        self._stage_batch()
        get_all([w.recompute_old_logprobs.remote() for w in self.actors.trainers])
        self.rec.span(step, Role.TRAINER, Phase.OLD_LOGPROB, self.devices(Role.TRAINER), t,
                      time.time(), sum(n for _, n in self._costs))

    def _train(self, step: int, stage: Stage) -> None:
        t = time.time()
        self._stage_batch()
        a = self.plan.experiment.algo
        lr = lr_at(self._step, a.lr, self.total_steps, a.lr_schedule, a.lr_warmup_steps,
                   a.lr_min_ratio)
        t_step = time.time()
        outs = get_all([w.train_step.remote(lr) for w in self.actors.trainers])
        self._train_out = {k: float(v) for k, v in outs[0].items()
                           if isinstance(v, (int, float))}
        # where the train span's time goes (fidelity diagnostics): driver/controller work
        # before the ranks start, and the slowest rank's own in-process step time
        self._train_out["train_prep_s"] = t_step - t
        self._train_out["train_rank_s"] = max(float(o.get("step_time_s", 0.0)) for o in outs)
        self.rec.span(step, Role.TRAINER, Phase.TRAIN, self.devices(Role.TRAINER), t,
                      time.time(), sum(n for _, n in self._costs))
        for recs in self.ctl.call(StepController.records, self._assign):
            if self.policy_version is not None:
                recs = [dataclasses.replace(r, policy_version=self.policy_version) for r in recs]
            self.rec.add_samples(recs)

    def push_weights(self) -> None:
        """Trainer weights (HF names) -> every rollout engine. Gathering them is a collective
        over the first replica's TP and PP ranks, so all of them are called; rank 0's copy
        is sent."""
        states = [w.hf_state_dict.remote() for w in self.actors.trainer_groups[0]]
        get_all([e.update_weights.remote(states[0]) for e in self.actors.engines[Role.ROLLOUT]]
                + states[1:])

    def _sync(self, step: int, stage: Stage) -> None:
        t = time.time()
        self.push_weights()
        # same role and devices as the simulator's weight_sync span (replay compares them)
        devs = tuple(sorted(set(self.devices(Role.ROLLOUT)) | set(self.devices(Role.TRAINER))))
        self.rec.span(step, Role.TRAINER, Phase.WEIGHT_SYNC, devs, t, time.time())
