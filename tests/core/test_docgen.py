"""docs/config.md is generated from the specs' field metadata and must stay current."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from yatt.core import docgen
from yatt.core.schema import from_dict
from yatt.core.specs import AlgoSpec, EngineSpec, LengthDist
from yatt.planner.docgen import SECTIONS, reference

ROOT = Path(__file__).resolve().parents[2]
REGEN = "python -m yatt.planner.docgen > docs/config.md"


def test_every_config_field_has_help():
    missing = docgen.missing_help(SECTIONS)
    assert not missing, f"add help= (spec_field) to: {', '.join(missing)}; then {REGEN}"


def test_config_reference_is_current():
    text = (ROOT / "docs" / "config.md").read_text()
    assert text == reference(), f"docs/config.md is stale; run: {REGEN}"


def test_every_spec_reachable_from_an_experiment_or_plan_is_documented():
    documented = {s.cls for s in SECTIONS}
    seen, todo = set(), [s.cls for s in SECTIONS]
    while todo:
        cls = todo.pop()
        for f in docgen.fields_of(cls):
            for t in _dataclasses_in(__import__("typing").get_type_hints(cls)[f.name]):
                if t not in seen:
                    seen.add(t)
                    todo.append(t)
    assert seen <= documented, seen - documented


def _dataclasses_in(tp):
    import typing
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        yield tp
    for a in typing.get_args(tp):
        yield from _dataclasses_in(a)


def test_rows_show_type_default_range_and_help():
    text = docgen.section_text(docgen.Section("`algo`", AlgoSpec))
    assert "| `clip_eps` | float | 0.2 | > 0, < 1 |" in text
    assert "| `kl_estimator` | k1\\|k3 | k3 |" in text
    assert "| `adv_std` | bool | true |" in text
    assert docgen.value_text(EngineSpec()) == "the [EngineSpec](#enginespec) defaults"
    assert docgen.value_text(LengthDist(value=256)) == "{value: 256}"


def test_help_strings_do_not_change_loading():
    spec = from_dict(AlgoSpec, {"adv_std": False, "kl_estimator": "k1", "lr": 1e-5})
    assert spec.adv_std is False and spec.kl_estimator.value == "k1"
