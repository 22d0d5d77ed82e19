"""Every bench result has its generated table, and every bench writes through the helper."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"


def _helper():
    spec = importlib.util.spec_from_file_location("bench_results", BENCH / "_results.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_result_has_an_up_to_date_table():
    assert not _helper().stale(), "regenerate with: python bench/_results.py"


def test_every_result_records_date_host_and_command():
    for j in sorted((BENCH / "results").glob("*.json")):
        m = json.loads(j.read_text()).get("_meta", {})
        assert {"date", "host", "command"} <= set(m), j.name


def test_every_bench_writes_through_the_helper():
    for f in sorted(BENCH.glob("*.py")):
        if f.name.startswith("_"):
            continue
        text = f.read_text()
        assert "from _results import" in text and "write_result(" in text, f.name


def test_write_result_writes_json_and_table(tmp_path):
    mod = _helper()
    out = mod.write_result(tmp_path / "sim_speed.json", {"samples": 16, "gpus": 2,
                                                         "seconds_colocate": 0.5},
                           command="python bench/sim_speed.py")
    data = json.loads(out.read_text())
    assert data["_meta"]["command"] == "python bench/sim_speed.py" and data["samples"] == 16
    md = (tmp_path / "sim_speed.md").read_text()
    assert "- command: `python bench/sim_speed.py`" in md and "| colocate |" in md
    assert mod.render("anything-new", {"x": 1, "y": {"z": 2.5}}).count("`y.z`") == 1
