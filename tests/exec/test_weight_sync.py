"""After a train step, trainer → vLLM weight sync makes the engine's log-probs equal the
trainer's on a fixed sequence (vLLM float32)."""
from __future__ import annotations

import pytest

pytest.importorskip("vllm")
pytest.importorskip("megatron.core")
ray = pytest.importorskip("ray")


from tests.exec._tolerance import logprob_tol  # noqa: E402


@pytest.mark.slow
def test_rollout_logprobs_match_trainer_after_sync(ray_cluster, demo_experiment, actor_path):
    from yatt.exec.env import worker_env
    from yatt.core.release import ReleaseAction
    from yatt.exec.rollout import EngineConfig, engine_actor_class
    from yatt.exec.workers import TrainItem, TrainerArgs, TrainerWorker
    from tests.exec._train_helpers import plain_algo

    env = {"runtime_env": {"env_vars": worker_env(True)}, "num_gpus": 0.5}
    exp = demo_experiment
    args = TrainerArgs(exp.actor, str(actor_path), plain_algo(lr=1e-2), tp=1, dp=1, seed=0)
    trainer = ray.remote(num_cpus=0)(TrainerWorker).options(**env).remote(args, 0)
    engine = engine_actor_class().options(**env).remote(
        EngineConfig(str(actor_path), max_model_len=128, release=ReleaseAction.KEEP))
    addr, port = ray.get(trainer.address.remote())
    ray.get([trainer.setup.remote(addr, port), engine.acquire.remote()])
    seq, p = [1, 10, 11, 12, 13, 14, 15, 16, 17], 4
    try:
        t0 = ray.get(trainer.logprobs.remote([seq], [p]))[0]
        e0 = ray.get(engine.score.remote(seq, p))
        # Megatron's kernels against vLLM's on the same weights: within the forward's rounding
        tol = lambda ref: logprob_tol(exp.actor, len(seq), max(abs(x) for x in ref))  # noqa: E731
        assert max(abs(a - b) for a, b in zip(t0, e0)) <= tol(t0)
        items = [TrainItem(i, tuple(seq[:p] + [20 + i, 21, 22]), p, 1.0 if i % 2 else -1.0)
                 for i in range(4)]
        ray.get(trainer.stage.remote(items))
        out = ray.get(trainer.train_step.remote())
        assert out["grad_norm"] > 0
        t1 = ray.get(trainer.logprobs.remote([seq], [p]))[0]
        assert max(abs(a - b) for a, b in zip(t0, t1)) > 1e-3     # the step changed weights
        ray.get(engine.update_weights.remote(trainer.hf_state_dict.remote()))
        e1 = ray.get(engine.score.remote(seq, p))
        assert max(abs(a - b) for a, b in zip(t1, e1)) <= tol(t1)
    finally:
        ray.get(trainer.shutdown.remote())
        ray.kill(trainer)
        ray.kill(engine)
