"""--emit: what verl, OpenRLHF and NeMo-RL can express, their nearest layouts, and the
emitted settings pinned for the bundled configs (tests/data/emit/; after a deliberate change
regenerate them with `YATT_UPDATE_GOLDEN=1 pytest tests/planner/test_emit.py`)."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from yatt.core import InputError, RewardSource, Role
from yatt.core.config import load_experiment
from yatt.planner.costmodel import AnalyticCostModel
from yatt.planner.emit import cannot_express, emission_text, emit, families, static_target
from yatt.planner.frameworks import Framework, parse_framework
from yatt.planner.placement_text import parse_placement
from yatt.planner.assess import score_plan

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "emit"

CASES = [  # (bundled config, placement)
    ("default.yaml", "partial R4(tp2) G44(tp4) T48(tp1)"),
    ("default.yaml", "colocate R48(tp1) G48(tp4) T48(tp1)"),
    ("demo-cpu.yaml", "partial R1(tp1) G1(tp1) T2(tp1)"),
    ("demo-cpu.yaml", "colocate R2(tp1) G2(tp1) T2(tp1)"),
    ("published/verl-dapo-7b-h20x32.yaml", "colocate R32(tp2) T32(tp1)"),      # rule reward
    ("published/nemo-aligner-70b-ppo-h100x96.yaml", "colocate R96(tp8) G96(tp8) T96(tp8,pp2)"),
]


def _golden_name(config: str, placement: str, fw: Framework) -> str:
    stem = config.removesuffix(".yaml").replace("/", "-")
    return f"{stem}__{placement.split()[0]}__{fw.value}.sh"


@pytest.mark.parametrize("config,placement", CASES)
@pytest.mark.parametrize("fw", list(Framework), ids=[f.value for f in Framework])
def test_emitted_text_is_pinned(config, placement, fw):
    exp = load_experiment(ROOT / "configs" / config)
    plan = parse_placement(placement, exp)
    reasons, target, label = static_target(fw, plan)
    text = emission_text(fw, plan, reasons, target, label)
    path = GOLDEN / _golden_name(config, placement, fw)
    if os.environ.get("YATT_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"missing {path}; run YATT_UPDATE_GOLDEN=1 pytest {__file__}"
    assert text == path.read_text(), f"{path.name} changed; if on purpose, regenerate it"


@pytest.fixture(scope="module")
def default():
    return load_experiment(ROOT / "configs/default.yaml")


def test_what_each_framework_expresses(default):
    partial = parse_placement("partial R4(tp2) G44(tp4) T48(tp1)", default)
    colocate = parse_placement("colocate R48(tp1) G48(tp4) T48(tp1)", default)
    assert not cannot_express(Framework.VERL, colocate)
    assert cannot_express(Framework.VERL, partial)
    for fw in (Framework.OPENRLHF, Framework.NEMO_RL):
        assert cannot_express(fw, colocate) and cannot_express(fw, partial)
    rule = dataclasses.replace(default, genrm=None,
                               algo=dataclasses.replace(default.algo, reward=RewardSource.RULE))
    plain = parse_placement("colocate R48(tp1) T48(tp1)", rule)
    for fw in Framework:
        assert not cannot_express(fw, plain), fw
    deep = parse_placement("colocate R48(tp1) T48(tp1,pp2)", rule)
    assert any("pipeline" in r for r in cannot_express(Framework.OPENRLHF, deep))
    assert not cannot_express(Framework.VERL, deep) and not cannot_express(Framework.NEMO_RL, deep)


def test_nearest_layouts_respect_each_framework(default):
    partial = parse_placement("partial R4(tp2) G44(tp4) T48(tp1)", default)
    (nemo,) = families(Framework.NEMO_RL, partial)
    assert all(r % 8 == 0 for r in nemo.splits)  # GenRM and policy on whole nodes
    verl = families(Framework.VERL, partial)
    assert [f.splits == (0,) for f in verl] == [False, True]  # a split family, then colocate
    best_colocate = parse_placement("colocate R48(tp1) G48(tp8) T48(tp2)", default)
    assert families(Framework.VERL, partial, best_colocate)[1].build(0) is best_colocate
    plan = verl[0].build(4)
    assert plan.placement(Role.TRAINER).devices == plan.placement(Role.ROLLOUT).devices == tuple(range(4))
    assert plan.placement(Role.GENRM).devices == tuple(range(4, 48))


def test_emit_simulates_and_picks_the_fastest_layout():
    exp = load_experiment(ROOT / "configs/demo-cpu.yaml")
    cost = AnalyticCostModel.for_experiment(exp)
    chosen = score_plan(parse_placement("partial R1(tp1) G1(tp1) T2(tp1)", exp), cost, 1)
    e = emit(Framework.VERL, chosen, cost, 1)
    assert not e.exact and e.target is not None
    alts = [score_plan(f.build(f.splits[0]), cost, 1) for f in families(Framework.VERL, chosen.plan)]
    assert e.target.mean == pytest.approx(min(a.mean for a in alts))
    assert f"predicted {e.target.mean:.1f} s/step" in e.text()
    d = e.as_dict()
    assert d["framework"] == "verl" and d["exact"] is False and d["cannot"]
    # a framework that expresses the plan emits it unchanged
    colo = score_plan(parse_placement("colocate R2(tp1) G2(tp1) T2(tp1)", exp), cost, 1)
    same = emit(Framework.VERL, colo, cost, 1)
    assert same.exact and same.target is colo


def test_parse_framework():
    assert parse_framework(" nemo-rl") is Framework.NEMO_RL
    with pytest.raises(InputError, match="allowed: verl|openrlhf|nemo-rl"):
        parse_framework("nemo_rl")
