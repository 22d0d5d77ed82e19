"""DP load balancing of training sequences: pure functions shared by sim and exec.

Why: the trainer's step time is the slowest DP rank's. Both the simulator (to predict)
and the executor (to act) must split a step's sequences the same way, so the policies
live here in core and return decisions only.

Each policy maps per-sequence costs to `k` bins and returns, for each bin, the indices of
its sequences. Every index appears in exactly one bin. `naive`, `greedy` (LPT) and
`karmarkar_karp` (LDM) are the raw algorithms; `partition` applies the policies in
`POLICIES`, where GREEDY and KK keep the best of their candidates so that, by max load,
KK <= GREEDY <= NAIVE always holds (see `guarded_greedy`).

`mini_batches` splits one DP rank's share into the mini-batches of its optimizer steps.

`pack_padded` is the padded packing the trainer's micro-batches and the reference worker's
forwards use: sequences longest first, so long responses share groups with each other
instead of widening groups of short ones (as in arrival order), and no order packs the
same sequences into fewer groups. It lives here so the profiled cost model charges the
same padding.
"""
from __future__ import annotations

import bisect
import heapq
from typing import Callable, Sequence

from .roles import BalanceCost, BalancePolicy

Partition = list[list[int]]

# padded tokens per forward of the reference worker (`exec.workers.ReferenceWorker.logprobs`):
# it right-pads sequences, longest first, into groups of count x longest <= this, so the
# profiled cost model charges the same padding (`planner.profiled`)
REF_BATCH_TOKENS = 8192


def group_consecutive(lengths: Sequence[int], fits: Callable[[int, int], bool]) -> list[list[int]]:
    """Consecutive index groups; a group grows while `fits(count, longest)` holds for it
    with the next sequence added (a group always takes at least one sequence)."""
    out: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for i, n in enumerate(lengths):
        if cur and not fits(len(cur) + 1, max(longest, n)):
            out.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    if cur:
        out.append(cur)
    return out


def pack_padded(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Index groups of at most `budget` padded tokens (count x longest) over the sequences
    sorted longest first (ties in index order); a longer sequence than `budget` is alone."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    groups = group_consecutive([lengths[i] for i in order],
                               lambda count, longest: count * longest <= budget)
    return [[order[j] for j in g] for g in groups]


def mini_batches(share: Sequence[int], k: int) -> list[list[int]]:
    """One DP rank's share (sequence indices, in order) as `k` consecutive mini-batches, one
    per optimizer step (`AlgoSpec.mini_batches`), of near-equal count: the first
    len(share) % k take one more. A rank with fewer than `k` sequences has empty
    mini-batches (it still joins each step's gradient reduction). Each rank splits its own
    share, as verl splits its local batch by `ppo_mini_batch_size / dp`."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    n = len(share)
    out, start = [], 0
    for m in range(k):
        size = n // k + (1 if m < n % k else 0)
        out.append(list(share[start:start + size]))
        start += size
    return out


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
    """Largest differencing method (LDM) for k-way partitioning.

    Each item starts as a k-tuple of bins (itself + k-1 empty). Repeatedly take the two
    tuples with the largest spread (max-min) and merge them: the heaviest bin of one with
    the lightest of the other.

    Implementation: single items never change, so they stay in one cost-sorted list and
    only merged tuples ("compounds", loads kept ascending) live in a heap. Merging an item
    into a compound adds it to the compound's lightest bin (O(k) list moves in C), which
    is what the k-tuple merge reduces to; two compounds merge in O(k log k). Ties between
    equal spreads go to compounds first, then lower indices. O(n log n + n k).
    """
    n = len(costs)
    if k <= 1:
        return [list(range(n))]
    order = sorted(range(n), key=lambda i: (-costs[i], i))
    pos = 0  # next unused single item in `order`
    heap: list[tuple[float, int, list[float], list[list[int]]]] = []  # (-spread, tie, L, B)
    tie = 0

    def push(L: list[float], B: list[list[int]]) -> None:
        nonlocal tie
        tie += 1
        heapq.heappush(heap, (-(L[-1] - L[0]), tie, L, B))

    def absorb(L: list[float], B: list[list[int]], i: int) -> None:
        new = L[0] + float(costs[i])
        b = B[0]
        b.append(i)
        j = bisect.bisect_right(L, new, 1)
        L.insert(j, new)
        B.insert(j, b)
        del L[0], B[0]

    while True:
        singles = n - pos
        if singles + len(heap) <= 1:
            break
        top_c = -heap[0][0] if heap else -1.0
        # the two largest spreads among: best compound, next compound, next two singles
        if heap and (singles == 0 or top_c >= costs[order[pos]]):
            _, _, L, B = heapq.heappop(heap)
            second_c = -heap[0][0] if heap else -1.0
            if singles and (not heap or costs[order[pos]] > second_c):
                absorb(L, B, order[pos])
                pos += 1
                push(L, B)
            else:
                _, _, L2, B2 = heapq.heappop(heap)
                merged = [L[k - 1 - j] + L2[j] for j in range(k)]
                bins = []
                for j in range(k):
                    a, b = B[k - 1 - j], B2[j]
                    if len(a) < len(b):
                        a, b = b, a
                    a.extend(b)
                    bins.append(a)
                idx = sorted(range(k), key=merged.__getitem__)
                push([merged[j] for j in idx], [bins[j] for j in idx])
        else:
            i = order[pos]
            pos += 1
            if heap and (pos >= n or top_c >= costs[order[pos]]):
                _, _, L, B = heapq.heappop(heap)
                absorb(L, B, i)
                push(L, B)
            else:
                j = order[pos]
                pos += 1
                L = [0.0] * (k - 2) + [float(costs[j]), float(costs[i])]
                B = [[] for _ in range(k - 2)] + [[j], [i]]
                push(L, B)
    if heap:
        bins = heap[0][3]
    elif pos < n:
        bins = [[order[pos]]] + [[] for _ in range(k - 1)]
    else:
        bins = [[] for _ in range(k)]
    result = [sorted(b) for b in bins]
    result.sort(key=lambda b: (b[0] if b else n))
    return result


def max_load(costs: Sequence[float], bins: Partition) -> float:
    return max(loads(costs, bins), default=0.0)


def best_of(costs: Sequence[float], k: int,
            *policies: Callable[[Sequence[float], int], Partition]) -> Partition:
    """The partition with the smallest max load among `policies` (first wins ties)."""
    best, best_load = None, 0.0
    for pol in policies:
        bins = pol(costs, k)
        m = max_load(costs, bins)
        if best is None or m < best_load:
            best, best_load = bins, m
    assert best is not None
    return best


def guarded_greedy(costs: Sequence[float], k: int) -> Partition:
    """The GREEDY policy: LPT, or the naive split when that is better.

    Neither LPT nor LDM is optimal, and either can lose to the naive contiguous split by
    luck of the order: costs [2, 2, 2, 3, 3] on k=2 ranks split naively as [2,2,2] | [3,3]
    (max 6, optimal) while LPT and LDM both reach max 7. The policies therefore keep the
    better candidate, which guarantees max load: KK <= GREEDY <= NAIVE on every input.
    """
    return best_of(costs, k, greedy, naive)


def guarded_kk(costs: Sequence[float], k: int) -> Partition:
    """The KK policy: the best of LDM, LPT and the naive split (see `guarded_greedy`).
    LDM usually wins; LPT beats it on some inputs (e.g. many small near-equal items)."""
    return best_of(costs, k, karmarkar_karp, greedy, naive)


POLICIES: dict[BalancePolicy, Callable[[Sequence[float], int], Partition]] = {
    BalancePolicy.NAIVE: naive,
    BalancePolicy.GREEDY: guarded_greedy,
    BalancePolicy.KK: guarded_kk,
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
