"""The published-numbers table (docs/published.md) is generated from configs/published/ and
must stay current; every row carries its source and assumptions and fits in memory."""
from __future__ import annotations

from pathlib import Path

import pytest

from yatt.core import InputError
from yatt.planner.explain import peak_memory
from yatt.planner.published import document, load_registry, row_plan

ROOT = Path(__file__).resolve().parents[2]
REGEN = "python -m yatt.planner.published > docs/published.md"


def test_registry_rows_are_complete_and_placeable():
    registry, path = load_registry()
    ids = [r.id for r in registry.rows] + [x.id for x in registry.excluded]
    assert len(ids) == len(set(ids))
    assert len(registry.rows) >= 8 and registry.excluded
    for row in registry.rows:
        assert row.source and row.assumptions and row.measure, row.id
        plan = row_plan(row, path.parent)
        peak, cap = peak_memory(plan)
        assert peak <= cap, (row.id, peak / 1e9, cap / 1e9)
    for x in registry.excluded:
        assert x.source and x.why


def test_bad_registry_is_one_line_naming_file_and_field(tmp_path):
    _, path = load_registry()
    bad = tmp_path / "published.yaml"
    bad.write_text(path.read_text().replace("  published_s: 749\n", "  published_s: -749\n"))
    with pytest.raises(InputError) as ei:
        load_registry(bad)
    line = ei.value.one_line()
    assert str(bad) in line and "rows[0].published_s" in line and ">" in line


def test_published_table_is_current():
    text = (ROOT / "docs" / "published.md").read_text()
    assert text == document(), f"docs/published.md is stale; run: {REGEN}"
