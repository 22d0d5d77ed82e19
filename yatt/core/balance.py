"""DP load balancing of training sequences: pure functions shared by sim and exec.

Why: the trainer's step time is the slowest DP rank's. Both the simulator (to predict)
and the executor (to act) must split a step's sequences the same way, so the policies
live here in core and return decisions only.

Each policy maps per-sequence costs to `k` bins and returns, for each bin, the indices of
its sequences. Every index appears in exactly one bin.
"""
from __future__ import annotations

import heapq
from typing import Callable, Sequence

from .roles import BalanceCost, BalancePolicy

Partition = list[list[int]]


def sequence_cost(tokens: int, kind: BalanceCost, attn_weight: float = 0.0) -> float:
    """Cost of one sequence: its tokens, or tokens + attn_weight*tokens^2 (attention FLOPs
    relative to the linear FLOPs; see `attention_weight`)."""
    if kind is BalanceCost.TOKENS:
        return float(tokens)
    return float(tokens) + attn_weight * float(tokens) ** 2


def attention_weight(hidden: int, params: float, layers: int) -> float:
    """Ratio of the seq^2 attention FLOPs to 6*N per token, per extra token of context.

    Training FLOPs for a sequence of s tokens ~ 6*N*s + 6*layers*hidden*s^2 (causal QK^T
    and AV, forward+backward, halved by causality). Dividing by 6*N gives
    s + (layers*hidden/N)*s^2.
    """
    return layers * hidden / max(params, 1.0)


def naive(costs: Sequence[float], k: int) -> Partition:
    """Contiguous, equal-count chunks: what a plain DataLoader split does."""
    n = len(costs)
    bins: Partition = []
    start = 0
    for r in range(k):
        size = n // k + (1 if r < n % k else 0)
        bins.append(list(range(start, start + size)))
        start += size
    return bins


def greedy(costs: Sequence[float], k: int) -> Partition:
    """Longest-processing-time first: each sequence goes to the currently lightest bin."""
    bins: Partition = [[] for _ in range(k)]
    heap = [(0.0, r) for r in range(k)]
    for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        load, r = heapq.heappop(heap)
        bins[r].append(i)
        heapq.heappush(heap, (load + costs[i], r))
    return bins


def karmarkar_karp(costs: Sequence[float], k: int) -> Partition:
    """Largest differencing method for k-way partitioning.

    Each item starts as a k-tuple of bins (itself + k-1 empty). Repeatedly take the two
    tuples with the largest spread (max-min) and merge them: the heaviest bin of one with
    the lightest of the other. O(n k log n).
    """
    if k <= 1:
        return [list(range(len(costs)))]
    heap: list[tuple[float, int, list[tuple[float, list[int]]]]] = []
    for i, c in enumerate(costs):
        bins = [(float(c), [i])] + [(0.0, []) for _ in range(k - 1)]
        heapq.heappush(heap, (-float(c), i, bins))
    tie = len(costs)
    while len(heap) > 1:
        _, _, a = heapq.heappop(heap)
        _, _, b = heapq.heappop(heap)
        a_sorted = sorted(a, key=lambda x: -x[0])
        b_sorted = sorted(b, key=lambda x: x[0])
        merged = [(la + lb, ia + ib) for (la, ia), (lb, ib) in zip(a_sorted, b_sorted)]
        loads = [m[0] for m in merged]
        tie += 1
        heapq.heappush(heap, (-(max(loads) - min(loads)), tie, merged))
    if not heap:
        return [[] for _ in range(k)]
    result = [sorted(idx) for _, idx in heap[0][2]]
    result.sort(key=lambda b: (b[0] if b else len(costs)))
    return result


POLICIES: dict[BalancePolicy, Callable[[Sequence[float], int], Partition]] = {
    BalancePolicy.NAIVE: naive,
    BalancePolicy.GREEDY: greedy,
    BalancePolicy.KK: karmarkar_karp,
}


def partition(costs: Sequence[float], k: int, policy: BalancePolicy) -> Partition:
    """Split sequences over k DP ranks with the given policy."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return POLICIES[policy](costs, k)


def loads(costs: Sequence[float], bins: Partition) -> list[float]:
    return [sum(costs[i] for i in b) for b in bins]


def imbalance(costs: Sequence[float], bins: Partition) -> float:
    """max/mean load (1.0 = perfect)."""
    ls = loads(costs, bins)
    mean = sum(ls) / len(ls) if ls else 0.0
    return max(ls) / mean if mean > 0 else 1.0
