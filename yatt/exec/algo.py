"""The RL algorithm as pure torch functions: advantages, PPO-clip loss, KL, lr, acceptance.

Why: the math of GRPO/PPO is easy to get subtly wrong (a sign, a mean over the wrong
axis, a clip on the wrong side), and it must not depend on Megatron, Ray or vLLM to be
tested. Everything here works on plain tensors and is unit-tested on hand-computed
values (tests/exec/test_algo.py). The trainer calls these functions; the TP-exact
pieces that need Megatron (log-probs and entropy over vocab shards) stay in
`megatron_loss.py`.

Sign convention (a loss is *minimised*):
    token loss = L_clip + kl_coef * KL(pi || pi_ref) - entropy_coef * H(pi)
so a larger KL is penalised and a larger entropy is a *bonus* (lowers the loss).
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import torch

from yatt.core.balance import group_consecutive
from yatt.core.specs import KLEstimator, LrSchedule


# ---------------------------------------------------------------------------- advantages
def normalize_rewards(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Batch-level reward normalisation: (r - mean) / (std + eps), population std."""
    r = rewards.double()
    return ((r - r.mean()) / (r.std(unbiased=False) + eps)).to(rewards.dtype)


def group_advantages(rewards: torch.Tensor, groups: torch.Tensor, use_std: bool = True,
                     eps: float = 1e-6) -> torch.Tensor:
    """GRPO: each reward minus its prompt group's mean, over the group's std (+eps) if
    `use_std`. `groups[i]` is sample i's group id (any integers). Population std, so a
    group whose rewards are all equal gets advantage 0 (no signal)."""
    r = rewards.double()
    _, inv = torch.unique(groups, return_inverse=True)
    k = int(inv.max()) + 1 if inv.numel() else 0
    cnt = torch.zeros(k, dtype=torch.float64).index_add_(0, inv, torch.ones_like(r))
    mean = torch.zeros(k, dtype=torch.float64).index_add_(0, inv, r) / cnt
    adv = r - mean[inv]
    if use_std:
        var = torch.zeros(k, dtype=torch.float64).index_add_(0, inv, adv * adv) / cnt
        adv = adv / (var.sqrt()[inv] + eps)
    return adv.to(rewards.dtype if rewards.is_floating_point() else torch.float32)


def step_advantages(rewards: torch.Tensor, groups: torch.Tensor, *, use_std: bool = True,
                    reward_norm: bool = False, batch_mean: float = 0.0, batch_std: float = 1.0,
                    eps: float = 1e-6) -> torch.Tensor:
    """Advantages as the executor computes them: optional batch-level normalisation with
    the *global* (all-controller) mean/std, then GRPO group advantages. With `use_std`
    the batch step cancels (group normalisation is scale-invariant); it matters for the
    mean-only variant, where it sets the advantage scale."""
    r = rewards.double()
    if reward_norm:
        r = (r - batch_mean) / (batch_std + eps)
    return group_advantages(r, groups, use_std, eps).float()


# ---------------------------------------------------------------------------- policy loss
def ppo_clip_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor,
                  clip_eps: float, dual_clip: float = 0.0) -> torch.Tensor:
    """Token-level PPO-clip loss (to be masked and averaged): -min(rA, clip(r)A).

    dual_clip c > 1 (Ye et al. 2020, "dual-clip PPO"): for A < 0 the loss is also
    bounded by -c*A, so a huge ratio on a bad action cannot blow the update up."""
    ratio = torch.exp(logp - old_logp)
    loss = -torch.minimum(ratio * adv, torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv)
    if dual_clip:
        loss = torch.where(adv < 0, torch.minimum(loss, -dual_clip * adv), loss)
    return loss


def behaviour_weight(prox_logp: torch.Tensor, behav_logp: torch.Tensor, cap: float) -> torch.Tensor:
    """Off-policy correction per token: min(pi_prox / mu, cap), without gradient. `mu` is the
    behaviour policy that sampled the token (stale weights, from the engine); `pi_prox` the
    policy the PPO ratio is taken against (the trainer's weights before this step's update).
    The PPO-clip loss is multiplied by it (decoupled PPO); truncation at `cap` bounds the
    variance a rare token with a tiny behaviour probability would add (truncated IS)."""
    return torch.clamp(torch.exp(prox_logp - behav_logp), max=cap).detach()


def clipped_tokens(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor,
                   clip_eps: float) -> torch.Tensor:
    """Bool per token: the clip is active (the token gives no gradient) — ratio above
    1+eps with A > 0, or below 1-eps with A < 0."""
    ratio = torch.exp(logp - old_logp)
    return ((adv > 0) & (ratio > 1.0 + clip_eps)) | ((adv < 0) & (ratio < 1.0 - clip_eps))


def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k1 = log pi - log pi_ref (unbiased for KL(pi||ref) under pi; may be < 0 per token)."""
    return logp - ref_logp


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 = exp(r) - r - 1, r = log pi_ref - log pi (unbiased and >= 0 per token)."""
    r = ref_logp - logp
    return torch.exp(r) - r - 1.0


KL_ESTIMATORS: dict[KLEstimator, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    KLEstimator.K1: kl_k1, KLEstimator.K3: kl_k3}


def total_token_loss(pg: torch.Tensor, kl: torch.Tensor, entropy: torch.Tensor,
                     kl_coef: float, entropy_coef: float) -> torch.Tensor:
    """L = L_clip + kl_coef * KL - entropy_coef * H (entropy is a bonus)."""
    return pg + kl_coef * kl - entropy_coef * entropy


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last axis (unsharded; see megatron_loss for TP)."""
    lp = logits.float().log_softmax(-1)
    return -(lp.exp() * lp).sum(-1)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def is_finite(x: torch.Tensor | float) -> bool:
    """NaN/Inf guard for a loss or a gradient norm."""
    if isinstance(x, torch.Tensor):
        return bool(torch.isfinite(x).all())
    return math.isfinite(float(x))


# ---------------------------------------------------------------------------- lr schedule
def lr_at(step: int, base_lr: float, total_steps: int, schedule: LrSchedule = LrSchedule.CONSTANT,
          warmup_steps: int = 0, min_ratio: float = 0.0) -> float:
    """Learning rate for optimizer step `step` (0-based) of `total_steps`.

    Linear warmup: lr * (step+1) / warmup for step < warmup. Then CONSTANT stays at lr;
    COSINE goes from lr (first step after warmup) to lr*min_ratio (last step):
    lr * (min + (1-min) * (1 + cos(pi * t)) / 2), t = (step-warmup) / (total-warmup-1)."""
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    if schedule is LrSchedule.CONSTANT:
        return base_lr
    span = max(1, total_steps - warmup_steps - 1)
    t = min(1.0, (step - warmup_steps) / span)
    return base_lr * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * t)))


# ---------------------------------------------------------------------------- WeChat-YATT options
SEQ_LEN_BATCH: tuple[tuple[int, int], ...] = ((512, 32), (1024, 16))
LONG_SEQ_BATCH = 8


def batch_size_for_len(seq_len: int) -> int:
    """Per-device sequences per micro-batch from sequence length: <=512 -> 32,
    <=1024 -> 16, longer -> 8."""
    for limit, size in SEQ_LEN_BATCH:
        if seq_len <= limit:
            return size
    return LONG_SEQ_BATCH


def micro_batches_by_length(lengths: Sequence[int]) -> list[list[int]]:
    """Consecutive index groups; a group grows while its size stays within
    `batch_size_for_len(longest sequence in the group)`."""
    return group_consecutive(lengths, lambda count, longest: count <= batch_size_for_len(longest))


ACCEPT_RULE: tuple[tuple[float, float], ...] = ((0.1, 1.0), (0.3, 0.7))
ACCEPT_FLOOR = 0.5


def acceptance_fraction(clip_ratio: float) -> float:
    """Share of the batch kept for the update, from the clipped-token ratio:
    < 0.1 -> 1.0, < 0.3 -> 0.7, else 0.5."""
    for limit, keep in ACCEPT_RULE:
        if clip_ratio < limit:
            return keep
    return ACCEPT_FLOOR


def accept_sequences(seq_clip_frac: Sequence[float], fraction: float) -> list[int]:
    """Indices kept: the ceil(fraction * n) sequences with the lowest clipped-token
    fraction (the least off-policy ones), ties by index; returned in index order."""
    n = len(seq_clip_frac)
    if n == 0:
        return []
    keep = min(n, max(1, math.ceil(fraction * n - 1e-9)))
    order = sorted(range(n), key=lambda i: (seq_clip_frac[i], i))
    return sorted(order[:keep])


# ---------------------------------------------------------------------------- dynamic sampling
def all_equal_groups(rewards_by_group: dict[int, Sequence[float]], tol: float = 0.0) -> list[int]:
    """Group ids whose rewards are all equal (no GRPO signal) — DAPO's dynamic sampling
    drops these and refills the batch with new prompts."""
    return [g for g, rs in rewards_by_group.items()
            if len(rs) and max(rs) - min(rs) <= tol]
