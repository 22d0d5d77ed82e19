"""The learning demo end to end: GRPO against the trained GenRM on CPU (Ray + vLLM +
Megatron), a shortened `bench/learning.py` with a fixed seed.

What is asserted strictly: the run works with the prepared checkpoints and the GenRM as
the reward source, metrics.csv carries the exact checker's `accuracy` each step, and
learning.png lands in the run directory.

What is NOT yet achieved (README, "RL algorithm and the learning demo"): accuracy rising.
`test_accuracy_rises` asks the mean accuracy of the last 3 steps to exceed the mean of the
first 2 by MARGIN = 0.08 (per-step accuracy over 128 samples has a binomial std of about
0.04 at p = 0.4, so the difference of a 3-step and a 2-step mean has std ~0.04: 0.08 is
2 sigma). With the GenRM as the reward the 3-seed bench is flat (0.315 -> 0.317; with the
exact checker as the reward it rises, 0.324 -> 0.417): the lenient GenRM is the weak link,
so that test is an expected failure until the demo learns; it passes (XPASS) once it does.
"""
from __future__ import annotations

import csv
import os

import pytest

pytest.importorskip("vllm")
pytest.importorskip("megatron.core")

from yatt.core.roles import Mode, ReleasePolicy  # noqa: E402

STEPS = 12
MARGIN = 0.08
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


@pytest.mark.slow
@pytest.mark.xfail(strict=False, reason="the demo does not learn yet (README: RL algorithm "
                   "and the learning demo)")
def test_accuracy_rises(learn_run):
    acc = [float(r["accuracy"]) for r in learn_run[1]]
    start, end = sum(acc[:2]) / 2, sum(acc[-3:]) / 3
    assert end >= start + MARGIN, f"accuracy {start:.3f} -> {end:.3f}: {acc}"
