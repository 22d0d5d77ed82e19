"""Trainer-side phases: DP balancing, old and reference log-probs, training, grad sync.

Why: these phases are deterministic given the kept samples, so they are computed as
arithmetic (no per-rank SimPy process is needed): each DP rank gets its balanced share
(`yatt.core.balance`, the same code the executor uses), runs for `cost.train_time` on it,
and the slowest rank gates the gradient sync. Each rank's span ends when it finishes, so
imbalance shows up as idle time (bubbles) on the faster ranks. Training runs
`algo.ppo_epochs` epochs of `algo.mini_batches` optimizer steps: each rank trains on one
mini-batch of its share (`balance.mini_batches`), then every rank reduces gradients and
steps Adam (`cost.grad_sync_time`) before the next mini-batch starts.
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


def rank_phase(plan: Plan, cost: CostModel, role: Role, phase: Phase, bins: list,
               seq: np.ndarray, start: float, step: int, spans: list, name: str = "") -> float:
    """One compute pass (train, or a forward for old or reference log-probs) of every DP
    rank over its bin of pool indices, from `start`; returns the time the slowest rank ends."""
    pl = plan.placement(role)
    par, model = pl.parallel, plan.model_for(role)
    fn = cost.train_time if phase is Phase.TRAIN else cost.logprob_time
    k = slowdown(cost, phase, len(pl.devices))  # every rank runs at once on its devices
    end = start
    for group, members in zip(pl.groups(), bins):
        lens = seq[members].tolist() if members else []
        t = k * fn(model, lens, par) if lens else 0.0
        spans.append(SpanRecord(step=step, role=role, phase=phase, devices=tuple(group),
                                start_s=start, end_s=start + t, tokens=int(sum(lens)), name=name))
        end = max(end, start + t)
    return end


def train_epochs(plan: Plan, cost: CostModel, sp: Split, seq: np.ndarray, start: float,
                 step: int, spans: list) -> float:
    """algo.ppo_epochs x algo.mini_batches of (train one mini-batch on every rank, then DP
    grad sync and the optimizer step); returns the end time. Spans are named by epoch
    ("train e0"), and by mini-batch too when there are several ("train e0 mb1")."""
    pl = plan.placement(Role.TRAINER)
    model = plan.experiment.actor
    algo = plan.experiment.algo
    gs = cost.grad_sync_time(model, pl.parallel)
    k = algo.mini_batches
    per_rank = [balance.mini_batches(b, k) for b in sp.bins]
    t = start
    for e in range(algo.ppo_epochs):
        for m in range(k):
            label = f"e{e}" if k == 1 else f"e{e} mb{m}"
            t = rank_phase(plan, cost, Role.TRAINER, Phase.TRAIN, [mbs[m] for mbs in per_rank],
                           seq, t, step, spans, name=f"train {label}")
            spans.append(SpanRecord(step=step, role=Role.TRAINER, phase=Phase.TRAIN,
                                    devices=pl.devices, start_s=t, end_s=t + gs,
                                    name=f"grad_sync {label}"))
            t += gs
    return t
