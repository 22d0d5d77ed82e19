"""The vLLM engine actor: token prompts, n samples, logprobs, streaming, release, weights."""
from __future__ import annotations

import pytest

pytest.importorskip("vllm")
ray = pytest.importorskip("ray")

from tests.exec._tolerance import logprob_tol  # noqa: E402
from tests.exec._train_helpers import load_spec  # noqa: E402


@pytest.fixture(scope="module")
def engine(ray_cluster, actor_path):
    from yatt.exec.env import worker_env
    from yatt.core.release import ReleaseAction
    from yatt.exec.rollout import EngineConfig, engine_actor_class

    cfg = EngineConfig(str(actor_path), seed=0, max_model_len=128, release=ReleaseAction.TEARDOWN)
    actor = engine_actor_class().options(num_gpus=1, runtime_env={"env_vars": worker_env(True)}
                                         ).remote(cfg)
    start_s = ray.get(actor.acquire.remote())
    yield actor, start_s
    ray.kill(actor)


def _requests(temperature=1.0):
    from yatt.exec.rollout import GenRequest

    prompts = [(1, 10, 11, 12), (1, 20, 21), (1, 30, 31, 32, 33)]
    return [GenRequest(key=i * 4 + j, prompt_ids=p, max_tokens=8, temperature=temperature,
                       seed=1000 + i * 4 + j) for i, p in enumerate(prompts) for j in range(4)]


def test_generate_n_samples_with_logprobs(engine):
    actor, start_s = engine
    assert start_s > 0
    out = ray.get(actor.generate.remote(_requests()))
    assert sorted(o.key for o in out) == list(range(12))
    for o in out:
        assert 1 <= len(o.token_ids) <= 8
        assert len(o.logprobs) == len(o.token_ids)
        assert all(lp <= 0.0 for lp in o.logprobs)
    # per-request seeds: identical results whatever the batching (exact: the same requests
    # in another order are the same rows, each computed and sampled on its own)
    again = ray.get(actor.generate.remote(_requests()[::-1]))
    assert {o.key: o.token_ids for o in out} == {o.key: o.token_ids for o in again}


def test_streams_finished_samples_to_a_bounded_queue(engine):
    from yatt.exec.stream_queue import StreamQueue

    actor, _ = engine
    q = StreamQueue(maxsize=4, actor_options={"num_cpus": 0})
    ref = actor.generate.remote(_requests(), sink=q)
    seen = []
    while len(seen) < 12:
        for batch in q.get_all(timeout=60):
            seen.extend(batch)
    assert sorted(r.key for r in seen) == sorted(r.key for r in ray.get(ref))
    ray.kill(q.actor)


def test_a_blocked_sink_does_not_stall_the_engine(engine):
    """Each finished batch is handed to the sink without the engine waiting for the put.
    The sink's first put blocks until the test opens a gate; meanwhile another call on the
    same engine still completes (a stalled engine would never finish it). `generate`
    returns only after its last put has landed, and the puts arrive in finishing order."""
    import asyncio
    import time

    from yatt.exec.rollout import GenRequest

    @ray.remote(num_cpus=0)
    class Gated:
        def __init__(self):
            self.got, self.arrived = [], 0
            self.gate = asyncio.Event()

        async def put(self, items):
            self.arrived += 1
            await self.gate.wait()
            self.got.append((time.time(), [r.key for r in items]))

        def open(self):
            self.gate.set()

        def state(self):
            return self.arrived, self.got

    class Sink:   # the put_async surface of StreamQueue
        def __init__(self, actor):
            self.actor = actor

        async def put_async(self, items):
            await self.actor.put.remote(items)

    actor, _ = engine
    sink = Gated.remote()
    # budgets 1..6: requests finish at (at least) two different engine steps
    reqs = [GenRequest(key=i, prompt_ids=(1, 10 + i, 11), max_tokens=1 + i % 6,
                       temperature=1.0, seed=500 + i) for i in range(12)]
    ref = actor.generate.remote(reqs, sink=Sink(sink))
    deadline = time.monotonic() + 120     # liveness only: the first put must arrive at all
    while ray.get(sink.state.remote())[0] == 0:
        assert time.monotonic() < deadline, "the engine never handed a batch to the sink"
        time.sleep(0.05)
    # the first put is blocked; the engine keeps stepping: a later call finishes
    probe = GenRequest(key=99, prompt_ids=(1, 40, 41), max_tokens=16, temperature=1.0, seed=7)
    assert [o.key for o in ray.get(actor.generate.remote([probe]), timeout=120)] == [99]
    checked_at = time.time()
    ready, _ = ray.wait([ref], timeout=0)
    assert not ready and ray.get(sink.state.remote()) == (1, [])   # still waiting on the put
    ray.get(sink.open.remote())
    out = ray.get(ref, timeout=120)
    returned_at = time.time()
    # every request had finished before that check: the call was waiting for its puts only
    assert max(o.end_s for o in out) <= checked_at
    _, got = ray.get(sink.state.remote())
    assert sorted(k for _, ks in got for k in ks) == list(range(12))
    assert len(got) >= 2
    assert got[-1][0] <= returned_at                         # returned after the last put
    by_end = {o.key: o.end_s for o in out}
    firsts = [min(by_end[k] for k in ks) for _, ks in got]
    assert firsts == sorted(firsts)                          # puts kept finishing order
    ray.kill(sink)


def test_teardown_recreate_and_weight_update(engine, actor_path):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    actor, _ = engine
    greedy = ray.get(actor.generate.remote(_requests(0.0)))
    down = ray.get(actor.release.remote())
    up = ray.get(actor.acquire.remote())
    assert down >= 0 and up > 0
    greedy2 = ray.get(actor.generate.remote(_requests(0.0)))   # exact: same weights, same batch
    assert {o.key: o.token_ids for o in greedy} == {o.key: o.token_ids for o in greedy2}

    seq = [1, 10, 11, 12, 13, 14, 15, 16]
    before = ray.get(actor.score.remote(seq, 3))
    sd = load_file(str(actor_path / "model.safetensors"))
    g = torch.Generator().manual_seed(0)
    new = {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in sd.items()}
    ray.get(actor.update_weights.remote(new))
    after = ray.get(actor.score.remote(seq, 3))
    assert max(abs(a - b) for a, b in zip(before, after)) > 1e-3

    hf = AutoModelForCausalLM.from_pretrained(str(actor_path), dtype=torch.float32)
    hf.load_state_dict(new, strict=False)
    hf.tie_weights()
    with torch.no_grad():
        logits = hf(torch.tensor([seq])).logits[0].log_softmax(-1)
    ref = [float(logits[i - 1, seq[i]]) for i in range(3, len(seq))]
    # vLLM's kernels against transformers' on the same weights: within the forward's rounding
    tol = logprob_tol(load_spec(), len(seq), max(abs(x) for x in ref))
    assert max(abs(a - b) for a, b in zip(after, ref)) <= tol
