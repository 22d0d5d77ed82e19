"""Trainer-side phases: DP balancing, reference log-probs, training epochs, grad sync.

Why: these phases are deterministic given the kept samples, so they are computed as
arithmetic (no per-rank SimPy process is needed): each DP rank gets its balanced share
(`yatt.core.balance`, the same code the executor uses), runs for `cost.train_time` on it,
and the slowest rank gates the gradient sync. Each rank's span ends when it finishes, so
imbalance shows up as idle time (bubbles) on the faster ranks.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from yatt.core import CostModel, Phase, Plan, Role, SpanRecord
from yatt.core import balance

from .contention import slowdown


@dataclass(frozen=True)
class Split:
    """How one step's kept sequences were spread over DP ranks."""

    bins: list  # per rank: list of pool sample indices
    loads: list  # per rank: balance cost
    policy: str

    @property
    def max_over_mean(self) -> float:
        mean = sum(self.loads) / len(self.loads) if self.loads else 0.0
        return max(self.loads) / mean if mean > 0 else 1.0


def split(plan: Plan, seq_lens: np.ndarray, index: np.ndarray, dp: int) -> Split:
    """Balanced split of sequences (pool indices `index`, lengths `seq_lens`) over dp ranks."""
    m = plan.experiment.actor
    w = balance.attention_weight(m.hidden, m.params, m.layers)
    costs = [balance.sequence_cost(t, plan.balance_cost, w) for t in seq_lens.tolist()]
    parts = balance.partition(costs, dp, plan.balance)
    idx = index.tolist()
    bins = [[idx[j] for j in p] for p in parts]
    return Split(bins, balance.loads(costs, parts), plan.balance.value)


def rank_phase(plan: Plan, cost: CostModel, role: Role, phase: Phase, sp: Split,
               seq: np.ndarray, start: float, step: int, spans: list, name: str = "") -> float:
    """One compute pass (train or ref log-prob) of every DP rank from `start`; returns the
    time the slowest rank ends."""
    pl = plan.placement(role)
    par, model = pl.parallel, plan.model_for(role)
    fn = cost.train_time if phase is Phase.TRAIN else cost.logprob_time
    k = slowdown(cost, phase, len(pl.devices))  # every rank runs at once on its devices
    end = start
    for group, members in zip(pl.groups(), sp.bins):
        lens = seq[members].tolist() if members else []
        t = k * fn(model, lens, par) if lens else 0.0
        spans.append(SpanRecord(step=step, role=role, phase=phase, devices=tuple(group),
                                start_s=start, end_s=start + t, tokens=int(sum(lens)), name=name))
        end = max(end, start + t)
    return end


def train_epochs(plan: Plan, cost: CostModel, sp: Split, seq: np.ndarray, start: float,
                 step: int, spans: list) -> float:
    """algo.ppo_epochs of (train on every rank, then DP grad sync); returns the end time."""
    pl = plan.placement(Role.TRAINER)
    model = plan.experiment.actor
    gs = cost.grad_sync_time(model, pl.parallel)
    t = start
    for e in range(plan.experiment.algo.ppo_epochs):
        t = rank_phase(plan, cost, Role.TRAINER, Phase.TRAIN, sp, seq, t, step, spans,
                       name=f"train e{e}")
        spans.append(SpanRecord(step=step, role=Role.TRAINER, phase=Phase.TRAIN, devices=pl.devices,
                                start_s=t, end_s=t + gs, name=f"grad_sync e{e}"))
        t += gs
    return t
