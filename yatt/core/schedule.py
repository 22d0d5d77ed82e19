"""The step order of each placement mode, as pure data.

Why: the simulator (to predict) and the executor (to act) must walk the same phases in
the same order, so the order is a policy that lives in core. `step_schedule` returns
which phase runs on which roles, in order; it decides nothing about timing.

A step is three parts:
  generate        produce and judge one round of samples. In partial colocate the
                  rollout stage `streams` into the GenRM stage (they run concurrently,
                  joined by a bounded queue); in full colocate they run one after another.
  between_rounds  the switches needed before another dynamic-sampling round (colocate:
                  put the rollout engines back; partial: nothing, replacement prompts
                  stream straight into the still-running engines).
  finish          once the batch is complete: release the generators, bring the trainer
                  (and reference) in, the actor's own old log-probs (when recomputed),
                  reference log-probs, train (+ grad sync and optimizer step per
                  mini-batch, per PPO epoch), release the trainer, bring the generators
                  back, weight sync.

For a switch stage (OFFLOAD/RELOAD) listing several roles, roles on disjoint devices
switch concurrently and roles sharing devices switch one after another, in the order given.

Async mode (generators and trainer on disjoint devices) overlaps steps: the trainer runs
step t's `finish` (no switches: its devices are its own) while the engines `generate` step
t + 1. Between two of their steps the generators run `refill` (put the rollout engines back
when the GenRM shares their devices) and take the newest trained weights. A bounded queue
of generated steps keeps the weights that generate a step at most `k = max_staleness`
versions older than the trainer's that trains it: `may_start_rollout` and
`policy_version` say so, for the simulator and the executor alike. Version v is the policy
after v train steps (0: the initial weights); train step t trains on step t's samples and
publishes version t + 1.
"""
from __future__ import annotations

from dataclasses import dataclass

from .roles import Mode, Phase, Role
from .specs import OldLogprobs


@dataclass(frozen=True)
class Stage:
    phase: Phase
    roles: tuple[Role, ...]
    streams: bool = False       # runs concurrently with the next stage, fed item by item
    early_release: bool = False  # each role may start this as soon as its own work is done


@dataclass(frozen=True)
class StepSchedule:
    mode: Mode
    generate: tuple[Stage, ...]
    between_rounds: tuple[Stage, ...]
    finish: tuple[Stage, ...]
    refill: tuple[Stage, ...] = ()  # async: the generators' switches between their steps

    @property
    def overlapped(self) -> bool:
        """Whether `finish` of step t runs concurrently with `generate` of step t + 1."""
        return self.mode is Mode.ASYNC

    def phases(self) -> tuple[Phase, ...]:
        """Phases of a step without resampling, in order."""
        return tuple(s.phase for s in self.generate + self.finish)


def step_schedule(mode: Mode, *, genrm: bool = True, reference: bool = True,
                  old_logprobs: OldLogprobs = OldLogprobs.REUSE,
                  genrm_shared: bool = False) -> StepSchedule:
    """Ordered stages of one RL step for `mode`.

    genrm: the reward comes from a GenRM engine (else rule-based, free at rollout end).
    reference: the algorithm needs reference log-probs.
    old_logprobs: RECOMPUTE adds the trainer's forward over the batch (the PPO ratio's old
    log-probs, as verl and NeMo-RL compute them) before the reference pass; REUSE takes
    them from each sequence's first forward in training (no stage).
    genrm_shared (async only): the GenRM sits on the rollout's devices, so generation runs
    as in full colocate (rollout, switch, GenRM); otherwise it streams as in partial.
    """
    if mode is Mode.ASYNC:
        return _async_schedule(genrm, reference, old_logprobs, genrm_shared)
    gen_roles = (Role.ROLLOUT, Role.GENRM) if genrm else (Role.ROLLOUT,)
    train_roles = (Role.TRAINER, Role.REFERENCE) if reference else (Role.TRAINER,)
    mid: list[Stage] = [Stage(Phase.RELOAD, train_roles)]
    if old_logprobs is OldLogprobs.RECOMPUTE:
        mid.append(Stage(Phase.OLD_LOGPROB, (Role.TRAINER,)))
    if reference:
        mid.append(Stage(Phase.REF_LOGPROB, (Role.REFERENCE,)))
    mid.append(Stage(Phase.TRAIN, (Role.TRAINER,)))
    mid.append(Stage(Phase.OFFLOAD, train_roles))
    back = [Stage(Phase.RELOAD, gen_roles if mode is Mode.PARTIAL else (Role.ROLLOUT,)),
            Stage(Phase.WEIGHT_SYNC, (Role.TRAINER, Role.ROLLOUT))]
    if mode is Mode.COLOCATE:
        generate = [Stage(Phase.ROLLOUT, (Role.ROLLOUT,))]
        if genrm:
            generate += [Stage(Phase.OFFLOAD, (Role.ROLLOUT,)), Stage(Phase.RELOAD, (Role.GENRM,)),
                         Stage(Phase.GENRM, (Role.GENRM,))]
            between = (Stage(Phase.OFFLOAD, (Role.GENRM,)), Stage(Phase.RELOAD, (Role.ROLLOUT,)))
            release = Stage(Phase.OFFLOAD, (Role.GENRM,))
        else:
            between = ()
            release = Stage(Phase.OFFLOAD, (Role.ROLLOUT,))
        return StepSchedule(mode, tuple(generate), between, tuple([release] + mid + back))
    generate = [Stage(Phase.ROLLOUT, (Role.ROLLOUT,), streams=genrm)]
    if genrm:
        generate.append(Stage(Phase.GENRM, (Role.GENRM,)))
    release = Stage(Phase.OFFLOAD, gen_roles, early_release=True)
    return StepSchedule(mode, tuple(generate), (), tuple([release] + mid + back))


def _async_schedule(genrm: bool, reference: bool, old_logprobs: OldLogprobs,
                    genrm_shared: bool) -> StepSchedule:
    train: list[Stage] = []
    if old_logprobs is OldLogprobs.RECOMPUTE:
        train.append(Stage(Phase.OLD_LOGPROB, (Role.TRAINER,)))
    if reference:
        train.append(Stage(Phase.REF_LOGPROB, (Role.REFERENCE,)))
    train += [Stage(Phase.TRAIN, (Role.TRAINER,)),
              Stage(Phase.WEIGHT_SYNC, (Role.TRAINER, Role.ROLLOUT))]
    if genrm and genrm_shared:
        generate = (Stage(Phase.ROLLOUT, (Role.ROLLOUT,)), Stage(Phase.OFFLOAD, (Role.ROLLOUT,)),
                    Stage(Phase.RELOAD, (Role.GENRM,)), Stage(Phase.GENRM, (Role.GENRM,)))
        back = (Stage(Phase.OFFLOAD, (Role.GENRM,)), Stage(Phase.RELOAD, (Role.ROLLOUT,)))
        return StepSchedule(Mode.ASYNC, generate, back, tuple(train), back)
    generate = (Stage(Phase.ROLLOUT, (Role.ROLLOUT,), streams=genrm),)
    if genrm:
        generate += (Stage(Phase.GENRM, (Role.GENRM,)),)
    return StepSchedule(Mode.ASYNC, generate, (), tuple(train), ())


# ---- async: which weights generate a step -------------------------------------------------

def min_policy_version(step: int, k: int) -> int:
    """The oldest weight version that may generate `step` under max_staleness `k`: the
    trainer trains step s at version s, so its samples lag by at most k versions."""
    return max(0, step - k)


def may_start_rollout(step: int, trained: int, k: int) -> bool:
    """Whether rollout of `step` may start once `trained` train steps have finished (their
    weights published): the newest weights, version `trained`, are then at most k versions
    behind the version that will train `step`. False is the bounded queue blocking the
    rollout: it is k steps ahead of the trainer."""
    if k < 1:
        raise ValueError(f"max_staleness must be >= 1, got {k}")
    return step - trained <= k


def may_start_after(step: int, train_step: int, k: int) -> bool:
    """Whether rollout of `step` may start once train step `train_step` (0-based) has
    finished; -1: before any train step."""
    return may_start_rollout(step, train_step + 1, k)


def gating_train_step(step: int, k: int) -> int:
    """The train step whose end unblocks rollout of `step` (-1: none; it may start at once)."""
    return max(-1, step - k - 1)


def policy_version(step: int, trained: int, k: int) -> int:
    """The weight version that generates `step` when its rollout starts after `trained`
    train steps: the newest (engines take new weights between steps). Raises ValueError
    when the queue bound forbids starting it yet."""
    if not may_start_rollout(step, trained, k):
        raise ValueError(f"rollout of step {step} may not start after {trained} train steps "
                         f"(max_staleness {k})")
    return min(trained, step)


def async_summary(per_step: list[dict], k: int, warmup_steps: int = 1) -> dict:
    """An async run's step times, warm-up apart from the steady state: the first
    `warmup_steps` steps fill the pipeline. `per_step`: one dict per step with "step" and
    "step_time_s" (the simulator and the executor record the same keys)."""
    ordered = sorted(per_step, key=lambda x: x["step"])
    warm = ordered[:warmup_steps]
    steady = [x["step_time_s"] for x in ordered[warmup_steps:]]
    return {"max_staleness": k, "warmup_steps": len(warm),
            "warmup_s": sum(x["step_time_s"] for x in warm),
            "steady_step_s": sum(steady) / len(steady) if steady else None}
