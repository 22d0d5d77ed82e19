"""Trainer → vLLM weight sync, through the executor's own push (`StepRunner.push_weights`):
after it, the engine's log-probs equal the trainer's on a fixed sequence (vLLM float32),
for a TP=1 trainer and for a TP=2 trainer whose shards are gathered into the engine's one
full copy. Both push into the same TP=1 engine, so each test also starts by overwriting
what the one before left there."""
from __future__ import annotations

import types

import pytest

pytest.importorskip("vllm")
pytest.importorskip("megatron.core")
ray = pytest.importorskip("ray")


from tests.exec._tolerance import logprob_tol  # noqa: E402

SEQ, PROMPT = [1, 10, 11, 12, 13, 14, 15, 16, 17], 4


def _env():
    from yatt.exec.env import worker_env
    return {"runtime_env": {"env_vars": worker_env(True)}, "num_gpus": 0.5}


@pytest.fixture(scope="module")
def engine(ray_cluster, actor_path):
    from yatt.core.release import ReleaseAction
    from yatt.exec.rollout import EngineConfig, engine_actor_class

    e = engine_actor_class().options(**_env()).remote(
        EngineConfig(str(actor_path), max_model_len=128, release=ReleaseAction.KEEP))
    ray.get(e.acquire.remote())
    yield e
    ray.kill(e)


@pytest.mark.slow
@pytest.mark.parametrize("tp", [1, 2])
def test_rollout_logprobs_match_trainer_after_sync(engine, demo_experiment, actor_path, tp):
    from tests.exec._train_helpers import plain_algo
    from yatt.core.roles import Role
    from yatt.exec.schedules import Actors, StepRunner
    from yatt.exec.workers import TrainItem, TrainerArgs, TrainerWorker

    exp = demo_experiment
    args = TrainerArgs(exp.actor, str(actor_path), plain_algo(lr=1e-2), tp=tp, dp=1, seed=0)
    cls = ray.remote(num_cpus=0)(TrainerWorker)
    ranks = [cls.options(**_env()).remote(args, r) for r in range(tp)]
    # the executor's push, on a stand-in runner holding just these actors: every TP rank of
    # the first DP group gathers, rank 0's full copy goes to each rollout engine
    runner = types.SimpleNamespace(actors=Actors({Role.ROLLOUT: [engine]}, ranks, [ranks], []))

    def trainer_logprobs() -> list[float]:
        per_rank = ray.get([w.logprobs.remote([SEQ], [PROMPT]) for w in ranks])
        assert all(r == per_rank[0] for r in per_rank)   # gathered: every rank has the same
        return per_rank[0][0]

    # Megatron's kernels against vLLM's on the same weights: within the forward's rounding
    tol = lambda ref: logprob_tol(exp.actor, len(SEQ), max(abs(x) for x in ref))  # noqa: E731
    gap = lambda a, b: max(abs(x - y) for x, y in zip(a, b))  # noqa: E731
    try:
        addr, port = ray.get(ranks[0].address.remote())
        ray.get([w.setup.remote(addr, port) for w in ranks])
        t0 = trainer_logprobs()
        StepRunner.push_weights(runner)
        e0 = ray.get(engine.score.remote(SEQ, PROMPT))
        assert gap(t0, e0) <= tol(t0)
        items = [TrainItem(i, tuple(SEQ[:PROMPT] + [20 + i, 21, 22]), PROMPT,
                           1.0 if i % 2 else -1.0) for i in range(4)]
        ray.get([w.stage.remote(items) for w in ranks])      # each TP rank gets the batch
        outs = ray.get([w.train_step.remote() for w in ranks])
        assert all(o["grad_norm"] > 0 for o in outs)
        t1 = trainer_logprobs()
        assert gap(t0, t1) > 1e-3                             # the step changed weights
        StepRunner.push_weights(runner)
        e1 = ray.get(engine.score.remote(SEQ, PROMPT))
        assert gap(t1, e1) <= tol(t1)
    finally:
        ray.get([w.shutdown.remote() for w in ranks])
        for w in ranks:
            ray.kill(w)
