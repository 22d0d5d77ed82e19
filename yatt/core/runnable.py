"""What the executor can run, stated once: the planner searches inside it, the CLI and the
Python API plan with it, and the executor refuses plans outside it.

Why: a plan the planner recommends must be a plan `yatt run` accepts. Keeping the limits
as data plus one pure check in core lets `yatt.planner` and `yatt.exec` share them
without importing each other.

What runs (yatt/exec): inference engines (rollout, GenRM) at any TP that the model allows
and a node holds (vLLM's own tensor parallelism; the Plan already keeps every TP group
inside one node), never pipelined; the reference worker one per TP group (an HF forward
on the group's first device), never pipelined; the Megatron trainer at any TP x PP x DP
whose PP divides the layers (the Plan checks that) and whose TP divides the KV heads and
the vocabulary (`trainer_tp_problem`), with fp32 Adam moments (bf16 is planned only) and,
at more than one mini-batch, recomputed old log-probs. Async plans (`mode: async`) run at
max_staleness 1 (one-step off-policy); larger bounds are planned and simulated only.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from .errors import InputError
from .plan import Plan, SearchSpec
from .roles import Mode, Role
from .specs import AdamMoments, ModelSpec, OldLogprobs

# Engine TP sizes the executor runs; None: every size the model and a node allow.
ENGINE_TP_CHOICES: Optional[tuple[int, ...]] = None
# Pipeline sizes for inference roles (rollout, GenRM, reference): vLLM PP is not wired.
ENGINE_PP_CHOICES: tuple[int, ...] = (1,)
# Trainer PP sizes the executor runs; None: every size that divides the actor's layers.
TRAINER_PP_CHOICES: Optional[tuple[int, ...]] = None

_INFERENCE = (Role.ROLLOUT, Role.GENRM, Role.REFERENCE)
# Placement modes the executor walks.
EXECUTED_MODES: tuple[Mode, ...] = (Mode.COLOCATE, Mode.PARTIAL, Mode.ASYNC)
# Async staleness bounds the executor runs (its generator takes exactly version step - k).
EXECUTED_STALENESS: tuple[int, ...] = (1, 2)


def executor_search(search: SearchSpec) -> SearchSpec:
    """`search` narrowed to the placements the executor runs."""
    changes: dict = {}
    if any(m not in EXECUTED_MODES for m in search.modes):
        changes["modes"] = tuple(m for m in search.modes if m in EXECUTED_MODES) or EXECUTED_MODES
    if Mode.ASYNC in search.modes and any(k not in EXECUTED_STALENESS for k in search.staleness_choices):
        changes["staleness_choices"] = (tuple(k for k in search.staleness_choices
                                              if k in EXECUTED_STALENESS) or EXECUTED_STALENESS)
    if ENGINE_TP_CHOICES is not None:
        changes["engine_tp_choices"] = (tuple(t for t in search.engine_tps if t in ENGINE_TP_CHOICES)
                                        or ENGINE_TP_CHOICES)
    if TRAINER_PP_CHOICES is not None:
        changes["pp_choices"] = (tuple(p for p in search.pp_choices if p in TRAINER_PP_CHOICES)
                                 or TRAINER_PP_CHOICES)
    return dataclasses.replace(search, **changes) if changes else search


def trainer_tp_problem(model: ModelSpec, tp: int) -> Optional[str]:
    """Why the Megatron trainer can't shard `model` at TP=`tp` (None if it can): it splits
    the KV heads and the vocabulary evenly (no KV-head replication, no vocab padding)."""
    if model.kv_heads % tp or model.vocab % tp:
        return (f"trainer TP={tp} must divide {model.name}'s {model.kv_heads} KV heads and "
                f"{model.vocab}-token vocabulary")
    return None


def _choices(xs: tuple[int, ...]) -> str:
    return "|".join(map(str, xs))


def check_runnable(plan: Plan, steps: int) -> None:
    """Raise `InputError` (one line, naming the field) for a plan the executor can't run."""
    if steps < 1:
        raise InputError(f"got {steps}; allowed: >= 1", field="steps")
    if plan.mode not in EXECUTED_MODES:
        raise InputError(f"{plan.mode.value} plans are simulated but not executed; allowed: "
                         + "|".join(m.value for m in EXECUTED_MODES), field="mode")
    if plan.mode is Mode.ASYNC and plan.max_staleness not in EXECUTED_STALENESS:
        raise InputError(f"async max_staleness {plan.max_staleness} is simulated but not executed; "
                         f"allowed: {_choices(EXECUTED_STALENESS)}", field="max_staleness")
    wl = plan.experiment.workload
    algo = plan.experiment.algo
    if algo.adam_moments is not AdamMoments.FP32:
        raise InputError(f"adam_moments {algo.adam_moments.value} is planned but "
                         "not executed; allowed: fp32", field="algo.adam_moments")
    if algo.mini_batches > 1 and algo.old_logprobs is OldLogprobs.REUSE:
        # the executor's reuse is the first training forward: pre-update only for the
        # first mini-batch
        raise InputError(f"mini_batches={algo.mini_batches} needs pre-update old log-probs; "
                         "allowed: old_logprobs: recompute, or mini_batches: 1",
                         field="algo.old_logprobs")
    if wl.dynamic_sampling and wl.samples_per_prompt < 2:
        raise InputError("dynamic sampling drops groups whose rewards are all equal, which "
                         "every 1-sample group is; allowed: samples_per_prompt >= 2",
                         field="workload.samples_per_prompt")
    for p in plan.placements:
        if p.role in _INFERENCE and p.pp not in ENGINE_PP_CHOICES:
            raise InputError(f"{p.role.value} PP={p.pp}: inference runs tensor parallel only; "
                             f"allowed: pp {_choices(ENGINE_PP_CHOICES)}", field=f"{p.role.value}.pp")
        if p.role in _INFERENCE and ENGINE_TP_CHOICES is not None and p.tp not in ENGINE_TP_CHOICES:
            raise InputError(f"{p.role.value} TP={p.tp} is not executed; allowed: tp "
                             + _choices(ENGINE_TP_CHOICES), field=f"{p.role.value}.tp")
        if (p.role is Role.TRAINER and TRAINER_PP_CHOICES is not None
                and p.pp not in TRAINER_PP_CHOICES):
            raise InputError(f"trainer PP={p.pp} is not executed; allowed: pp "
                             + _choices(TRAINER_PP_CHOICES), field="trainer.pp")
    why = trainer_tp_problem(plan.experiment.actor, plan.placement(Role.TRAINER).tp)
    if why:
        raise InputError(why, field="trainer.tp")
    trainer_dp = plan.placement(Role.TRAINER).dp
    if wl.samples_per_step < trainer_dp:
        raise InputError(f"{wl.samples_per_step} samples cannot feed {trainer_dp} DP ranks",
                         field="workload")
