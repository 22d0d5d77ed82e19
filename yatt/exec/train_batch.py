"""The batch a trainer rank receives each step, and how it is cut into micro-batches.

Why: the controllers build `TrainBatch`es and the trainer consumes them; the contract and
its checks are plain data (no torch), shared by both sides and by the profiler.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from yatt.core.balance import pack_padded
from yatt.core.errors import InputError


@dataclass(frozen=True)
class TrainBatch:
    """One DP rank's share of a step."""

    input_ids: tuple[tuple[int, ...], ...]            # prompt + response tokens per sequence
    prompt_lens: tuple[int, ...]                      # loss only on response tokens
    advantages: tuple[float, ...]                     # one per sequence (GRPO)
    old_logprobs: Optional[tuple[tuple[float, ...], ...]] = None  # behaviour policy, per response token
    ref_logprobs: Optional[tuple[tuple[float, ...], ...]] = None  # reference policy, per response token
    # the engine's log-probs of the sampled tokens when stale weights sampled them (async):
    # the loss is weighted by min(pi_old / mu, algo.behaviour_is_cap)
    behav_logprobs: Optional[tuple[tuple[float, ...], ...]] = None

    def __post_init__(self) -> None:
        n = len(self.input_ids)
        if len(self.prompt_lens) != n or len(self.advantages) != n:
            raise InputError("input_ids, prompt_lens and advantages must have equal length")
        for name in ("old_logprobs", "ref_logprobs", "behav_logprobs"):
            lp = getattr(self, name)
            if lp is None:
                continue
            if len(lp) != n or any(len(x) != len(ids) - p
                                   for x, ids, p in zip(lp, self.input_ids, self.prompt_lens)):
                raise InputError(f"{name} must hold one value per response token", field=name)
        if any(not 1 <= p < len(ids) for p, ids in zip(self.prompt_lens, self.input_ids)):
            raise InputError("each sequence needs 1 <= prompt_len < len(input_ids)", field="prompt_lens")


def micro_batches(lengths: Sequence[int], micro_batch_tokens: int) -> list[list[int]]:
    """Index groups whose padded size (count x longest) fits the token budget, longest
    sequences first (`core.balance.pack_padded`)."""
    return pack_padded(lengths, micro_batch_tokens)
