"""Token-level GRPO/PPO loss pieces on (possibly vocab-sharded) Megatron logits.

Why: the loss must be exact under tensor parallelism, where each TP rank holds a vocab
slice of the logits. Cross-entropy uses megatron's `vocab_parallel_cross_entropy`;
entropy is reduced over the TP group with `reduce_from_tensor_model_parallel_region`
(forward all-reduce, backward identity), which is the correct gradient for a sum.
The rest of the loss (PPO-clip, KL estimators, the total with its signs) is plain torch
in `algo.py`.
"""
from __future__ import annotations

import torch


def token_logprobs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log p(label) per position, logits [b, s, v/tp] fp32 -> [b, s]."""
    from megatron.core import tensor_parallel
    z = logits.float()
    # vocab_parallel_cross_entropy rewrites its input in place (max-subtract, exp); without
    # this copy the caller's fp32 logits would be overwritten, and an entropy computed from
    # them afterwards would be ~log(vocab) whatever the model.
    return -tensor_parallel.vocab_parallel_cross_entropy(z.clone() if z is logits else z, labels)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) per position, exact across TP vocab shards -> [b, s]."""
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region
    z = logits.float()
    m = z.detach().max(dim=-1, keepdim=True).values
    if ps.get_tensor_model_parallel_world_size() > 1:
        torch.distributed.all_reduce(m, op=torch.distributed.ReduceOp.MAX,
                                     group=ps.get_tensor_model_parallel_group())
    e = torch.exp(z - m)
    s = reduce_from_tensor_model_parallel_region(e.sum(-1))
    ez = reduce_from_tensor_model_parallel_region((e * z).sum(-1))
    return m.squeeze(-1) + torch.log(s) - ez / s
