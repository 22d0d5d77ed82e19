"""Partial colocate (rollout streaming into the GenRM) with dynamic sampling and real
rewards, once uninterrupted and once with a GenRM engine, the rollout engine and a
reference worker killed mid-step (Ray + vLLM + Megatron on CPU). The recovered run must
equal the uninterrupted one step by step, and dynamic sampling must record each sample
once and count each dropped group once, however often a step was redone.

Plan: the learning demo's prepared actor (right about a third of the time) and trained
GenRM (agrees with the exact checker on 99% of its answers), 8 prompts x 4 samples per
step, so some groups score all-equal and are replaced in further rounds; a KL term, so
the reference log-probs enter the loss. 2 devices: 1 rollout engine, 1 GenRM engine,
2 trainer ranks and 2 reference workers, all resident.
"""
from __future__ import annotations

import csv
import dataclasses
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytest.importorskip("megatron.core")

from yatt.core.roles import Mode, ReleasePolicy  # noqa: E402

STEPS = 3
ROOT = Path(__file__).resolve().parents[2]
# everything the trainer, the sampler and the reward compute, and the sampling bookkeeping
EXACT = ("loss", "kl", "entropy", "grad_norm", "reward_mean", "reward_std", "accuracy",
         "response_tokens", "samples", "dropped", "rounds")


def _rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def plan():
    from yatt.core.config import load_experiment
    from yatt.core.layout import make_plan

    exp = load_experiment(ROOT / "configs" / "demo-learn.yaml")
    wl = dataclasses.replace(exp.workload, prompts_per_step=8, samples_per_prompt=4,
                             dynamic_sampling=True, max_resample_rounds=2)
    # no checkpoint files: recovery restores the in-memory snapshot of the last good step
    exp = dataclasses.replace(exp, workload=wl,
                              algo=dataclasses.replace(exp.algo, kl_coef=0.05),
                              checkpoint=dataclasses.replace(exp.checkpoint, final=False))
    return make_plan(exp, Mode.PARTIAL, release=ReleasePolicy.RESIDENT)


def _run(plan, out, **kw):
    from yatt.exec.runner import run_plan
    return run_plan(plan, steps=STEPS, out_dir=out, seed=0, progress=False, **kw)


@pytest.fixture(scope="module")
def reference(ray_cluster, plan, tmp_path_factory):
    out = tmp_path_factory.mktemp("partial") / "reference"
    return out, _run(plan, out)


def _fault_plan(rounds: list[int]) -> tuple[str, list[tuple[int, int, str]]]:
    """YATT_FAULTS for the faulty run, and the (step, round, role) each fault must hit.

    The rollout engine is called once per round (one engine, one controller). The GenRM
    engine dies in its first call, in step 0's round 0, after the rollout engine's first
    call: step 0 is redone, so the reference run's n-th rollout call is the faulty run's
    (n+1)-th. The rollout engine then dies in round 1 of the first step >= 1 that has one
    (after a training step, so its restart must be given the trained weights, not load the
    checkpoint it started from), and the reference worker in its 2nd call (step 1: each
    step calls it once, after the rounds)."""
    first = next(s for s in range(1, len(rounds)) if rounds[s] >= 2)
    call = sum(rounds[:first]) + 2          # that step's round 1, in the reference run
    faults = f"genrm.exit@1,rollout.exit@{call + 1},reference.exit@2"
    # the reference worker runs after the last round of its step
    return faults, sorted([(0, 0, "genrm"), (first, 1, "rollout"), (1, rounds[1] - 1, "reference")])


@pytest.fixture(scope="module")
def faulty(reference, plan, tmp_path_factory):
    ref_dir, _ = reference
    rounds = [int(r["rounds"]) for r in _rows(ref_dir)]
    spec, expect = _fault_plan(rounds)
    where = tmp_path_factory.mktemp("partial-faults")
    mp = pytest.MonkeyPatch()
    mp.setenv("YATT_FAULTS", spec)
    mp.setenv("YATT_FAULT_DIR", str(where))
    logs: list[str] = []
    try:
        trace = _run(plan, where / "run", log=logs.append)
    finally:
        mp.undo()
    return where, trace, logs, spec, expect


@pytest.mark.slow
def test_dynamic_sampling_resamples_and_records_each_sample_once(reference, plan):
    out, trace = reference
    rows = _rows(out)
    k = plan.experiment.workload.samples_per_prompt
    assert any(int(r["rounds"]) >= 2 for r in rows)          # groups were replaced
    keys = [(s.step, s.sample_id) for s in trace.samples]
    assert len(keys) == len(set(keys))
    for r in rows:
        step = int(r["step"])
        mine = [s for s in trace.samples if s.step == step]
        dropped = [s for s in mine if not s.kept]
        groups = Counter((s.round, s.prompt_id) for s in dropped)
        assert all(n == k for n in groups.values())             # whole groups only
        assert int(r["dropped"]) == len(dropped) == k * len(groups)
        assert int(r["samples"]) == len(mine)                   # every round's rollouts
        assert max(s.round for s in mine) == int(r["rounds"]) - 1
        assert all(s.dp_rank == -1 for s in dropped) and all(s.dp_rank >= 0 for s in mine if s.kept)
        # a dropped group below the last round was replaced by one group of the next round
        for rnd in range(int(r["rounds"]) - 1):
            replaced = len({p for (g, p) in groups if g == rnd})
            assert len({s.prompt_id for s in mine if s.round == rnd + 1}) == replaced
    assert all(float(r["kl"]) != 0.0 for r in rows[1:])   # the reference log-probs count


@pytest.mark.slow
def test_killed_genrm_rollout_and_reference_workers_are_recovered_exactly(reference, faulty):
    ref_dir, ref_trace = reference
    where, trace, logs, spec, expect = faulty
    for item in spec.split(","):                             # every fault really fired
        assert (where / f"yatt-fault-{item}").exists(), item
    assert sorted((f["step"], f["round"], f["role"]) for f in trace.meta.extra["faults"]) == expect
    for role in ("genrm", "rollout", "reference"):
        assert any(f"{role} actor died" in m for m in logs), role
    ref_rows, rows = _rows(ref_dir), _rows(where / "run")
    assert [r["step"] for r in rows] == [r["step"] for r in ref_rows]
    for a, b in zip(ref_rows, rows):
        for c in EXACT:
            assert a[c] == b[c], (a["step"], c, a[c], b[c])
    assert rows[-1]["restarts"] == "3"
    # exactly once, with the same outcome: every sample of every round of every step,
    # none from the attempts that were cut short
    key = lambda t: sorted((s.step, s.sample_id, s.prompt_id, s.round, s.kept, s.reward,  # noqa: E731
                            s.response_tokens) for s in t.samples)
    assert key(trace) == key(ref_trace)
