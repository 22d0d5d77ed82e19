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

    def phases(self) -> tuple[Phase, ...]:
        """Phases of a step without resampling, in order."""
        return tuple(s.phase for s in self.generate + self.finish)


def step_schedule(mode: Mode, *, genrm: bool = True, reference: bool = True,
                  old_logprobs: OldLogprobs = OldLogprobs.REUSE) -> StepSchedule:
    """Ordered stages of one RL step for `mode`.

    genrm: the reward comes from a GenRM engine (else rule-based, free at rollout end).
    reference: the algorithm needs reference log-probs.
    old_logprobs: RECOMPUTE adds the trainer's forward over the batch (the PPO ratio's old
    log-probs, as verl and NeMo-RL compute them) before the reference pass; REUSE takes
    them from each sequence's first forward in training (no stage).
    """
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
