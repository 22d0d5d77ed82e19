"""The learning demo end to end: GRPO against the trained GenRM on CPU (Ray + vLLM +
Megatron), a shortened `bench/learning.py` with a fixed seed.

What is asserted strictly: the run works with the prepared checkpoints and the GenRM as
the reward source, metrics.csv carries the exact checker's `accuracy` each step, and
learning.png lands in the run directory.

Not asserted, because it is not achieved yet (README, "RL algorithm and the learning
demo"): accuracy rising with the GenRM as the reward. The 3-seed bench is flat (0.315 ->
0.317; with the exact checker as the reward it rises, 0.324 -> 0.417): the lenient GenRM
is the weak link. A test for it belongs here once the demo learns (no always-passing
expected-failure test in the meantime).
"""
from __future__ import annotations

import csv
import os

import pytest

pytest.importorskip("vllm")
pytest.importorskip("megatron.core")

from yatt.core.roles import Mode, ReleasePolicy  # noqa: E402

STEPS = 3
ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


@pytest.fixture(scope="module")
def learn_run(ray_cluster, tmp_path_factory):
    from yatt.core.config import load_experiment
    from yatt.exec.demo_plans import demo_plan
    from yatt.exec.runner import run_plan

    out = tmp_path_factory.mktemp("learn")
    exp = load_experiment(os.path.join(ROOT, "configs", "demo-learn.yaml"))
    plan = demo_plan(exp, Mode.PARTIAL, release=ReleasePolicy.RESIDENT)
    run_plan(plan, steps=STEPS, out_dir=out, seed=0, progress=False)
    return out, list(csv.DictReader(open(out / "metrics.csv")))


@pytest.mark.slow
def test_demo_runs_with_genrm_reward_and_records_accuracy(learn_run):
    out, rows = learn_run
    acc = [float(r["accuracy"]) for r in rows]
    assert len(acc) == STEPS and all(0.0 <= a <= 1.0 for a in acc)
    assert acc[0] > 0.2                       # the SFT warm start: the policy is partly right
    assert all(float(r["reward_mean"]) > 0 for r in rows)
    assert (out / "learning.png").stat().st_size > 1000
