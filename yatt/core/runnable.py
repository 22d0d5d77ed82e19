"""What the executor can run, stated once: the planner searches inside it, the CLI and the
Python API plan with it, and the executor refuses plans outside it.

Why: a plan the planner recommends must be a plan `yatt run` accepts. Keeping the limits
as data plus one pure check in core lets `yatt.planner` and `yatt.exec` share them
without importing each other.
"""
from __future__ import annotations

import dataclasses

from .errors import InputError
from .plan import Plan, SearchSpec
from .roles import Role
from .specs import AdamMoments

# Inference engines (rollout, GenRM) and the reference worker run one per device.
ENGINE_TP_CHOICES: tuple[int, ...] = (1,)
# The Megatron trainer runs TP x DP; pipeline parallelism is not executed.
TRAINER_PP_CHOICES: tuple[int, ...] = (1,)


def executor_search(search: SearchSpec) -> SearchSpec:
    """`search` narrowed to the placements the executor runs."""
    engine = tuple(t for t in search.engine_tps if t in ENGINE_TP_CHOICES) or ENGINE_TP_CHOICES
    pp = tuple(p for p in search.pp_choices if p in TRAINER_PP_CHOICES) or TRAINER_PP_CHOICES
    return dataclasses.replace(search, engine_tp_choices=engine, pp_choices=pp)


def check_runnable(plan: Plan, steps: int) -> None:
    """Raise `InputError` (one line, naming the field) for a plan the executor can't run."""
    if steps < 1:
        raise InputError(f"got {steps}; allowed: >= 1", field="steps")
    wl = plan.experiment.workload
    if plan.experiment.algo.adam_moments is not AdamMoments.FP32:
        raise InputError(f"adam_moments {plan.experiment.algo.adam_moments.value} is planned but "
                         "not executed; allowed: fp32", field="algo.adam_moments")
    if wl.dynamic_sampling and wl.samples_per_prompt < 2:
        raise InputError("dynamic sampling drops groups whose rewards are all equal, which "
                         "every 1-sample group is; allowed: samples_per_prompt >= 2",
                         field="workload.samples_per_prompt")
    for p in plan.placements:
        if p.role in (Role.ROLLOUT, Role.GENRM, Role.REFERENCE) and (
                p.tp not in ENGINE_TP_CHOICES or p.pp != 1):
            raise InputError(f"{p.role.value} TP*PP={p.tp * p.pp}: inference engines run one per "
                             f"device here; allowed: tp {'|'.join(map(str, ENGINE_TP_CHOICES))}, pp 1",
                             field=f"{p.role.value}.tp")
        if p.role is Role.TRAINER and p.pp not in TRAINER_PP_CHOICES:
            raise InputError(f"trainer PP={p.pp} is not executed; allowed: pp "
                             + "|".join(map(str, TRAINER_PP_CHOICES)), field="trainer.pp")
    trainer_dp = plan.placement(Role.TRAINER).dp
    if wl.samples_per_step < trainer_dp:
        raise InputError(f"{wl.samples_per_step} samples cannot feed {trainer_dp} DP ranks",
                         field="workload")
