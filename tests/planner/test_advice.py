"""Scoring a given placement, the `predicted:` section, the ranking rows, costs and the
PlanResult the CLI and `yatt.plan()` share (on the CPU demo config: fast)."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from yatt.core import InputError, Phase, Role
from yatt.core.config import dump_yaml, load_experiment, load_plan
from yatt.core.prediction import Prediction, RoleMemory
from yatt.core.runnable import check_runnable
from yatt.core.trace import Trace
from yatt.planner.advice import plan_experiment
from yatt.planner.assess import gap_text, prediction, score_plan, with_prediction
from yatt.planner.costmodel import AnalyticCostModel
from yatt.planner.costs import Pricing, cost_view
from yatt.planner.placement_text import parse_placement
from yatt.planner.ranking import device_ranges
from yatt.sim.simulate import simulate

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo():
    exp = load_experiment(ROOT / "configs/demo-cpu.yaml")
    return exp, AnalyticCostModel.for_experiment(exp)


@pytest.fixture(scope="module")
def result(demo):
    exp, cost = demo
    given = parse_placement("colocate R2(tp1) G2(tp1) T2(tp1)", exp)
    return plan_experiment(exp, cost, given=given, top=3, pricing=Pricing(100, 2.0))


def test_given_is_simulated_like_the_shortlist(result):
    assert len(result.given.step_times) == len(result.best.step_times) == 2
    assert result.given.mean >= result.best.mean
    gap = result.gap()
    assert "colocate R2(tp1) G2(tp1) T2(tp1)" in gap and "slower than the best found" in gap


def test_the_best_scored_again_is_the_best(demo, result):
    exp, cost = demo
    again = score_plan(result.best.plan, cost, 2)
    assert again.step_times == result.best.step_times
    assert "is the best one the search found" in gap_text(again, result.best)


def test_prediction_section_round_trips_and_runs(tmp_path, result):
    plan = result.best_plan()
    p = plan.predicted
    assert p.step_s == pytest.approx(result.best.mean, abs=1e-3) and p.seeds == 2
    assert p.phase_seconds(Phase.TRAIN) > 0 and p.memory_gb(Role.TRAINER) > 0
    assert {m.role for m in p.memory} == {q.role for q in plan.placements}
    path = tmp_path / "plan.yaml"
    dump_yaml(plan, path)
    text = path.read_text()
    assert "predicted:" in text
    back = load_plan(path)
    assert back == plan
    dump_yaml(back, tmp_path / "again.yaml")
    assert (tmp_path / "again.yaml").read_text() == text
    check_runnable(back, 2)  # the executor's own checks accept it


def test_a_plan_without_prediction_writes_no_section(tmp_path, result):
    dump_yaml(result.best.plan, tmp_path / "p.yaml")
    assert "predicted" not in (tmp_path / "p.yaml").read_text()


def test_trace_meta_carries_the_prediction(tmp_path, demo, result):
    exp, cost = demo
    plan = result.best_plan()
    trace = simulate(plan, exp.workload, cost, seed=0)
    trace.write_jsonl(tmp_path / "t.jsonl")
    assert Trace.read_jsonl(tmp_path / "t.jsonl").meta.plan.predicted == plan.predicted


def test_prediction_rejects_memory_of_an_unplaced_role(result):
    import yatt.core.roles as roles

    plan = result.best_plan()
    pred = dataclasses.replace(plan.predicted, memory=(RoleMemory(roles.Role.GENRM, 1.0, 4.0),))
    no_genrm = tuple(q for q in plan.placements if q.role is not roles.Role.GENRM)
    rule = dataclasses.replace(plan.experiment, genrm=None,
                               algo=dataclasses.replace(plan.experiment.algo,
                                                        reward=roles.RewardSource.RULE))
    with pytest.raises(InputError, match="no placement"):
        dataclasses.replace(plan, experiment=rule, placements=no_genrm, predicted=pred)


def test_prediction_rejects_a_phase_twice():
    from yatt.core.prediction import PhaseSeconds
    with pytest.raises(InputError, match="listed twice"):
        Prediction(1.0, phases=(PhaseSeconds(Phase.TRAIN, 1.0), PhaseSeconds(Phase.TRAIN, 2.0)))


def test_ranking_has_one_column_per_role_field(result):
    df = result.ranking
    for role in ("rollout", "genrm", "trainer", "reference"):
        for f in ("devices", "tp", "pp", "dp", "device_ids"):
            assert f"{role}_{f}" in df.columns
    assert list(df["source"]).count("given") == 1 and df["rank"].isna().sum() == 1
    best = df.iloc[0]
    assert best["rank"] == 1 and best["step_s_mean"] == pytest.approx(result.best.mean, abs=1e-3)
    assert best["gpu_hours_run"] == pytest.approx(100 * 2 * result.best.mean / 3600, rel=1e-3)
    assert best["dollars_run"] == pytest.approx(2.0 * best["gpu_hours_run"], rel=1e-3)


def test_throughput_pools_the_seeds_everywhere(result):
    # plan.yaml, ranking rows, the JSON summary's cost and the given row all read the
    # pooled throughput the ranking table prints, not seed 0's
    best, given = result.best, result.given
    assert len(best.runs) == 2
    pooled = sum(r.kept for r in best.runs) / sum(r.step_time * r.steps for r in best.runs)
    assert best.samples_per_s == pytest.approx(pooled, rel=1e-12)
    rows = result.rows()
    assert rows[0]["samples_per_s"] == round(best.samples_per_s, 4)
    assert rows[0]["tokens_per_s"] == round(best.tokens_per_s, 1)
    assert rows[0]["bubble"] == round(best.bubble, 4)
    assert rows[-1]["source"] == "given" and rows[-1]["samples_per_s"] == round(given.samples_per_s, 4)
    assert result.best_plan().predicted.samples_per_s == rows[0]["samples_per_s"]
    cv = cost_view(best.plan.cluster.num_gpus, best.mean, best.samples_per_s, result.pricing)
    assert result.summary()["cost"]["gpu_hours_run"] == round(cv.gpu_hours_run, 4)


def test_summary_is_plain_json(result):
    s = json.loads(json.dumps(result.summary(), allow_nan=False))
    assert s["schema"] == "yatt.plan-summary/1"
    assert s["best"]["predicted"]["step_s"] == pytest.approx(result.best.mean, abs=1e-3)
    assert s["given"]["gap_s"] > 0 and "slower" in s["given"]["why"]
    assert s["cost"]["steps"] == 100 and s["cost"]["price_per_gpu_hour"] == 2.0
    assert len(s["ranking"]) == len(result.ranked) + 1
    assert s["search"]["trainer_note"] == ""  # the demo's trainer runs no pipeline
    noted = dataclasses.replace(result, search=dataclasses.replace(result.search, trainer_note="why"))
    assert noted.summary()["search"]["trainer_note"] == "why"


def test_repr_is_one_short_line(result):
    for obj in (result, result.search, result.best):
        r = repr(obj)
        assert "\n" not in r and len(r) < 300, r


def test_costs():
    cv = cost_view(48, 712.0, 11.5, Pricing(200, 2.5))
    assert cv.gpu_hours_per_step == pytest.approx(48 * 712 / 3600)
    assert cv.gpu_hours_run == pytest.approx(200 * 48 * 712 / 3600)
    assert cv.dollars_run == pytest.approx(2.5 * cv.gpu_hours_run)
    assert cv.samples_per_s_per_gpu == pytest.approx(11.5 / 48)
    assert cost_view(8, 1.0, 1.0).dollars_run is None
    for bad in (dict(steps=0), dict(steps=1, price=0.0), dict(steps=1, price=math.nan),
                dict(steps=1, price=math.inf)):
        with pytest.raises(InputError):
            Pricing(**bad)


def test_device_ranges():
    assert device_ranges([0, 1, 2, 3, 8, 9, 11]) == "0-3 8-9 11"
    assert device_ranges([5]) == "5"
