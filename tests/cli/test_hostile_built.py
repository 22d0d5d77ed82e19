"""Hostile inputs built at test time (tests/cli/_hostile_cases.py): bombs, huge files,
links under --out, unwritable outputs, outputs that are inputs, hostile run directories,
markup and control bytes. Each runs as its own capped `yatt` process; the rules it is held
to are in the registry's module doc. Tampered trainer checkpoints: tests/exec.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from _hostile_cases import CASES, report, run_case

ROOT = Path(__file__).resolve().parents[2]
REGEN = "python tests/cli/_hostile_cases.py > docs/hostile-inputs.md"


def _has(*mods: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in mods)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_case(case, tmp_path):
    if case.needs == "exec" and not _has("torch", "ray"):
        pytest.skip("needs the exec install")
    run_case(case, tmp_path)


def test_every_class_of_the_issue_has_cases():
    classes = {c.klass for c in CASES}
    assert {"links", "bombs", "sizes", "markup", "unwritable out", "output is input",
            "resume files", "faults env"} <= classes, classes


def test_report_is_current():
    text = (ROOT / "docs" / "hostile-inputs.md").read_text()
    assert text == report(), f"docs/hostile-inputs.md is stale; run: {REGEN}"
