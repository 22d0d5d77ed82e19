"""Per-role cost and memory breakdown of an experiment: the numbers behind a plan.

Why: before (and under) any ranked recommendation, a user should see the raw facts the
planner works from: what each model weighs, the smallest TP it fits at, what a decode
step, a prefill, a training token and a phase switch cost on this cluster.
"""
from __future__ import annotations

from dataclasses import dataclass

from yatt.core.plan import Experiment, Parallel
from yatt.core.roles import ReleasePolicy, Role

from . import memory
from .costmodel import AnalyticCostModel
from .space import legal_layouts, trainer_layout_memory, trainer_parallel


@dataclass(frozen=True)
class RoleFacts:
    role: Role
    model: str
    params_b: float
    weights_gb: float
    min_tp: int | None          # smallest TP that fits (None: fits nowhere in tp_choices)
    mem: memory.MemoryBreakdown | None
    kv_tokens: int              # KV capacity per engine at min_tp (inference roles)
    unit_costs: tuple[tuple[str, float], ...]  # (label, seconds)
    min_pp: int = 1             # the trainer's PP at its smallest fitting layout

    @property
    def layout(self) -> str:
        """The smallest fitting layout, e.g. "4" or "4·pp4" ("none" when nothing fits)."""
        if self.min_tp is None:
            return "none"
        return f"{self.min_tp}" + (f"·pp{self.min_pp}" if self.min_pp > 1 else "")


def _min_trainer_layout(exp: Experiment) -> tuple[tuple[int, int] | None, memory.MemoryBreakdown | None]:
    """The first fitting trainer (TP, PP) layout, fewest pipeline stages first."""
    for lay in legal_layouts(exp):
        mb = trainer_layout_memory(exp, lay)
        if mb.fits():
            return lay, mb
    return None, None


def role_facts(exp: Experiment, cost: AnalyticCostModel) -> list[RoleFacts]:
    gpu = exp.cluster.gpu
    choices = tuple(exp.search.tp_choices) or (1, 2, 4, 8)
    w = exp.workload
    max_seq = w.prompt_len.upper() + w.response_len.upper()
    out: list[RoleFacts] = []
    engines = [(Role.ROLLOUT, exp.actor, exp.engine.max_num_seqs)]
    if exp.genrm is not None:
        engines.append((Role.GENRM, exp.genrm, exp.engine.genrm_max_num_seqs))
    release = exp.search.release
    for role, m, max_seqs in engines:
        tp = memory.min_engine_tp(m, gpu, exp.engine, max_seq, choices)
        mem = memory.engine_memory(m, tp, role, exp.engine, gpu, max_seq) if tp else None
        units: list[tuple[str, float]] = []
        kv = 0
        if tp:
            kv = cost.kv_capacity_tokens(m, tp, exp.engine.gpu_memory_utilization)
            par = Parallel(tp, 1, 1)
            units = [
                ("prefill 1k tokens", cost.prefill_time(m, tp, 1000)),
                ("decode step b=1 ctx=1k", cost.decode_step_time(m, tp, 1, 1000)),
                (f"decode step b={max_seqs} ctx=2k", cost.decode_step_time(m, tp, max_seqs, 2000)),
                (f"reload ({release.value})", cost.reload_time(m, role, par, release)),
                (f"offload ({release.value})", cost.offload_time(m, role, par, release)),
            ]
        out.append(RoleFacts(role, m.name, m.params / 1e9, m.weight_bytes / 1e9, tp, mem, kv,
                             tuple(units)))
    lay, mem = _min_trainer_layout(exp)
    units = []
    tp, pp = lay if lay else (None, 1)
    if lay:
        par = trainer_parallel(exp, lay)
        seq = int(w.prompt_len.mean() + w.response_len.mean())
        units = [
            (f"train 1 seq of {seq} tok", cost.train_time(exp.actor, [seq], par)),
            ("grad sync + Adam", cost.grad_sync_time(exp.actor, par)),
            ("offload (trainer state)", cost.offload_time(exp.actor, Role.TRAINER, par, ReleasePolicy.OFFLOAD)),
            ("weight sync to rollout", cost.weight_sync_time(exp.actor, par, 1, 1, exp.cluster.nodes > 1)),
            ("checkpoint", cost.checkpoint_time(exp.actor, par)),
        ]
    out.append(RoleFacts(Role.TRAINER, exp.actor.name, exp.actor.params / 1e9,
                         exp.actor.weight_bytes / 1e9, tp, mem, 0, tuple(units), pp))
    return out
