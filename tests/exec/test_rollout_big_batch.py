"""A step whose prompts exceed the engine's per-step token budget (vLLM would chunk a
prefill) must still generate on CPU, with each seeded sample independent of batching.

Why: vLLM-CPU rewinds a seeded request's generator after a partial (chunked) prefill with
`set_offset`, which CPU generators do not support ("CPU Generator does not use offset"), so
a large seeded batch (bench/vs_trl.py's 512-request job) would kill the step.
"""
from __future__ import annotations

import pytest

pytest.importorskip("vllm")


def _run(core, reqs):
    from itertools import count
    ids = count()
    for r in reqs:
        core.add(f"r{next(ids)}-{r.key}", r)
    out = {}
    while core.has_unfinished():
        for o in core.step():
            out[int(o.request_id.split("-")[1])] = tuple(o.outputs[0].token_ids)
    return out


def _check(actor_path: str) -> None:
    """The test body; runs in a spawned process so vLLM's process-global distributed state
    never enters the pytest process (later in-process engines and trainers would trip on it)."""
    from yatt.exec.env import apply_local_env
    from yatt.core.release import ReleaseAction
    from yatt.exec.rollout import EngineConfig, EngineCore, GenRequest

    apply_local_env(cpu=True)
    core = EngineCore(EngineConfig(str(actor_path), max_model_len=128, max_num_seqs=256,
                                   release=ReleaseAction.KEEP))
    core.start()
    try:
        budget = core.llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens
        plen = 24
        n = 256
        assert n * plen > budget          # the prompts cannot all prefill in one step
        reqs = [GenRequest(i, (1,) + tuple(3 + (i * 7 + j) % 60 for j in range(plen - 1)), 6,
                           1.0, 100 + i) for i in range(n)]
        together = _run(core, reqs)
        assert len(together) == n and all(together.values())
        alone = _run(core, reqs[:8])      # same seeds, a batch that fits in one step
        assert all(alone[k] == together[k] for k in alone)
    finally:
        core.stop()


def test_prefill_over_the_token_budget_generates_and_is_batch_invariant(actor_path):
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(1) as pool:
        pool.apply(_check, (str(actor_path),))
