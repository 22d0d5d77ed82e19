"""ReferenceWorker: batched (right-padded) log-probs equal one-sequence-at-a-time forwards."""
from __future__ import annotations

import random

import pytest

pytest.importorskip("transformers")

from tests.exec._tolerance import logprob_tol  # noqa: E402


def test_reference_logprobs_batched_equal_unbatched(actor_path, demo_experiment):
    from yatt.exec.workers import ReferenceWorker

    w = ReferenceWorker(str(actor_path))
    rng = random.Random(0)
    seqs, plens = [], []
    for _ in range(12):
        p, r = rng.randint(2, 9), rng.randint(1, 14)
        seqs.append(tuple(rng.randint(3, 60) for _ in range(p + r)))
        plens.append(p)
    batched = w.logprobs(seqs, plens)                  # one padded batch
    single = w.logprobs(seqs, plens, max_tokens=1)     # one sequence per forward
    # other shapes pick other kernels and summation orders: equal within rounding
    tol = logprob_tol(demo_experiment.actor, max(len(x) for x in seqs),
                      max(abs(x) for s in single for x in s))
    for b, s, ids, p in zip(batched, single, seqs, plens):
        assert len(b) == len(s) == len(ids) - p
        assert max(abs(x - y) for x, y in zip(b, s)) <= tol
