"""The one-line placement syntax: every label the tables print parses back to its plan, and
mistakes are refused with one line on --placement (more cases: tests/data/bad/placement/)."""
from __future__ import annotations

from pathlib import Path

import pytest

from yatt.core import InputError, Mode, Role
from yatt.core.config import load_experiment
from yatt.core.layout import make_plan
from yatt.planner.placement_text import parse_placement, placement_text

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def exp():
    return load_experiment(ROOT / "configs/default.yaml")


def test_partial_lays_out_like_the_search(exp):
    plan = parse_placement("partial R4(tp2) G44(tp4) T48(tp1)", exp)
    assert plan == make_plan(exp, Mode.PARTIAL, rollout_devices=4, rollout_tp=2, genrm_tp=4,
                             trainer_tp=1, reference_tp=1)
    assert plan.placement(Role.ROLLOUT).devices == (0, 1, 2, 3)
    assert plan.placement(Role.GENRM).devices == tuple(range(4, 48))


@pytest.mark.parametrize("text", [
    "partial R4(tp2) G44(tp4) T48(tp1)",
    "colocate R48(tp1) G48(tp4) T48(tp2)",
    "colocate R48(tp1) G48(tp8) T48(tp1,pp2)",
])
def test_round_trip(exp, text):
    assert placement_text(parse_placement(text, exp)) == text


def test_describe_order_and_dp_parse(exp):
    """Plan.describe() prints the trainer before the GenRM, and labels may carry dp."""
    plan = parse_placement("partial R4(tp2) G44(tp4) T48(tp1)", exp)
    assert parse_placement(plan.describe(), exp) == plan
    assert parse_placement("partial R4(tp2,dp2) T48(tp1,dp48) G44(tp4,dp11)", exp) == plan


def test_trainer_pp_reaches_the_plan(exp):
    plan = parse_placement("colocate R48(tp1) G48(tp4) T48(tp2,pp2)", exp)
    t = plan.placement(Role.TRAINER)
    assert (t.tp, t.pp, t.dp) == (2, 2, 12)


def test_pipelined_trainer_lays_out_like_the_search():
    # the search's reference mirrors the trainer's TP x PP; a parsed label must give the
    # plan the search simulated, so `--placement` scores the same thing the ranking shows
    from yatt.planner.assess import plan_key
    from yatt.planner.costmodel import AnalyticCostModel
    from yatt.planner.simjobs import Evaluator

    exp70 = load_experiment(ROOT / "configs/llama70b-h100x16.yaml")
    ev = Evaluator(exp70, AnalyticCostModel.for_experiment(exp70))
    key = (Mode.COLOCATE, 0, 4, 1, 4, 4, 0, 0)
    plan = ev.plan(key)
    assert plan.placement(Role.REFERENCE).pp == 4
    text = placement_text(plan)
    assert text == "colocate R16(tp4) T16(tp4,pp4)"
    assert parse_placement(text, exp70) == plan
    assert plan_key(plan) == key


def test_rule_reward_experiment(exp):
    import dataclasses

    from yatt.core.roles import RewardSource
    rule = dataclasses.replace(exp, genrm=None,
                               algo=dataclasses.replace(exp.algo, reward=RewardSource.RULE))
    plan = parse_placement("colocate R48(tp1) T48(tp1)", rule)
    assert not plan.has(Role.GENRM)
    with pytest.raises(InputError, match="no GenRM"):
        parse_placement("colocate R48(tp1) G48(tp4) T48(tp1)", rule)
    with pytest.raises(InputError, match="needs a GenRM"):
        parse_placement("partial R48(tp1) T48(tp1)", rule)


def test_errors_are_one_line_on_the_flag(exp):
    with pytest.raises(InputError) as ei:
        parse_placement("partial R4(tp2) G44(tp3) T48(tp1)", exp)
    assert ei.value.field == "--placement" and "\n" not in ei.value.one_line()
