"""vLLM tensor parallelism inside the engine actor: a TP=2 engine on 2 devices generates what
the TP=1 engine does, is torn down and re-created, and takes weight updates on every TP
rank, from new weights and from a TP=2 or PP=2 trainer (its log-probs then match the
source's)."""
from __future__ import annotations

import pytest

pytest.importorskip("vllm")
ray = pytest.importorskip("ray")

# Greedy log-probs of the same fp32 model at TP=1 and TP=2 differ only by the summation
# order of the row-parallel matmuls (an all-reduce of 2 partial sums instead of one sum):
# a few fp32 ulps per reduction (eps 1.2e-7 x sums of length <= 384 -> ~5e-5 relative in
# the worst, all-same-sign case, far less in practice) through 2 layers; 1e-4 bounds that
# on log-probs of magnitude <= ~5.
LOGPROB_TOL = 1e-4


@pytest.fixture(scope="module")
def engines(ray_cluster, actor_path):
    from yatt.core.release import ReleaseAction
    from yatt.exec.env import worker_env
    from yatt.exec.rollout import EngineConfig, engine_actor_class

    opts = dict(num_gpus=1, runtime_env={"env_vars": worker_env(True)})
    cfg = EngineConfig(str(actor_path), seed=0, max_model_len=128, release=ReleaseAction.TEARDOWN)
    one = engine_actor_class().options(**opts).remote(cfg)
    two = engine_actor_class().options(**opts).remote(
        EngineConfig(str(actor_path), seed=0, max_model_len=128, tp=2,
                     release=ReleaseAction.TEARDOWN))
    ray.get([one.acquire.remote(), two.acquire.remote()])
    yield one, two
    for a in (one, two):
        ray.kill(a)


def _requests(temperature: float):
    from yatt.exec.rollout import GenRequest

    prompts = [(1, 10, 11, 12), (1, 20, 21), (1, 30, 31, 32, 33), (1, 5)]
    return [GenRequest(key=i * 2 + j, prompt_ids=p, max_tokens=12, temperature=temperature,
                       seed=100 + i * 2 + j) for i, p in enumerate(prompts) for j in range(2)]


def test_tp2_greedy_equals_tp1(engines):
    one, two = engines
    a = {o.key: o for o in ray.get(one.generate.remote(_requests(0.0)))}
    b = {o.key: o for o in ray.get(two.generate.remote(_requests(0.0)))}
    assert {k: o.token_ids for k, o in a.items()} == {k: o.token_ids for k, o in b.items()}
    diff = max(abs(x - y) for k in a for x, y in zip(a[k].logprobs, b[k].logprobs))
    assert diff < LOGPROB_TOL, diff


def test_tp2_teardown_recreate_and_weight_update(engines, actor_path):
    """Teardown joins the TP workers and re-creation starts new ones (the same greedy
    outputs); new weights reach every rank (each keeps its shard, the tied LM head is
    re-packed per rank): the log-probs equal `transformers` on the new weights."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    _, two = engines
    before = ray.get(two.generate.remote(_requests(0.0)))
    assert ray.get(two.release.remote()) >= 0
    assert ray.get(two.acquire.remote()) > 0
    again = ray.get(two.generate.remote(_requests(0.0)))
    assert {o.key: o.token_ids for o in before} == {o.key: o.token_ids for o in again}
    seq, p = [1, 10, 11, 12, 13, 14, 15, 16], 3
    sd = load_file(str(actor_path / "model.safetensors"))
    g = torch.Generator().manual_seed(0)
    new = {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in sd.items()}
    ray.get(two.update_weights.remote(new))
    got = ray.get(two.score.remote(seq, p))
    hf = AutoModelForCausalLM.from_pretrained(str(actor_path), dtype=torch.float32)
    hf.load_state_dict(new, strict=False)
    hf.tie_weights()
    with torch.no_grad():
        lp = hf(torch.tensor([seq])).logits[0].log_softmax(-1)
    ref = [float(lp[i - 1, seq[i]]) for i in range(p, len(seq))]
    assert max(abs(a - b) for a, b in zip(got, ref)) < LOGPROB_TOL


@pytest.mark.parametrize("tp,pp", [(2, 1), (1, 2), (2, 2)],
                         ids=["trainer-tp2", "trainer-pp2", "trainer-tp2pp2"])
def test_weight_sync_from_a_sharded_trainer_into_the_tp2_engine(engines, demo_experiment,
                                                                 actor_path, tp, pp):
    """One train step on a TP=2, PP=2 or TP=2 x PP=2 trainer (2 or 4 Ray actors), its full
    HF state dict (gathered over TP and PP) pushed into the TP=2 engine: the engine's
    log-probs then equal the trainer's (fp32 both; 1e-4 as above)."""
    from tests.exec._train_helpers import plain_algo
    from yatt.exec.env import worker_env
    from yatt.exec.workers import TrainerArgs, TrainerWorker, TrainItem

    _, two = engines
    args = TrainerArgs(demo_experiment.actor, str(actor_path), plain_algo(lr=1e-2), tp=tp,
                       pp=pp, dp=1, seed=0)
    cls = ray.remote(num_cpus=0)(TrainerWorker)
    ranks = [cls.options(num_gpus=0.5, runtime_env={"env_vars": worker_env(True)}).remote(args, r)
             for r in range(tp * pp)]
    addr, port = ray.get(ranks[0].address.remote())
    ray.get([w.setup.remote(addr, port) for w in ranks])
    seq, p = [1, 10, 11, 12, 13, 14, 15, 16, 17], 4
    try:
        items = [TrainItem(i, tuple(seq[:p] + [20 + i, 21, 22]), p, 1.0 if i % 2 else -1.0)
                 for i in range(4)]
        ray.get([w.stage.remote(items) for w in ranks])
        outs = ray.get([w.train_step.remote() for w in ranks])
        assert all(o["grad_norm"] > 0 for o in outs)
        states = [w.hf_state_dict.remote() for w in ranks]
        ray.get([two.update_weights.remote(states[0])] + states[1:])
        got = ray.get(two.score.remote(seq, p))
        want = ray.get([w.logprobs.remote([seq], [p]) for w in ranks])
        assert want[0] == want[-1]                  # every rank returns the same log-probs
        assert max(abs(a - b) for a, b in zip(got, want[0][0])) < LOGPROB_TOL
    finally:
        ray.get([w.shutdown.remote() for w in ranks])
        for w in ranks:
            ray.kill(w)
