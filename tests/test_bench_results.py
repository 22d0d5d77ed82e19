"""Every bench result has its generated table, every bench writes through the helper, and
every result the documentation cites was written, whole, by one run of a bench script."""
from __future__ import annotations

import ast
import importlib.util
import json
import re
import shlex
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


# ---- provenance of the results the documentation cites ----------------------------------
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CITED = re.compile(r"bench/results/([a-z0-9][\w.-]*?)\.(?:md|json|png)\b")   # not `NAME`


def _cited() -> dict[str, list[str]]:
    """Result name -> the documents that cite it (its .md, .json or .png)."""
    out: dict[str, list[str]] = {}
    for doc in DOCS:
        for name in CITED.findall(doc.read_text()):
            out.setdefault(name, []).append(doc.name)
    return out


def _command(result: Path) -> list[str]:
    return shlex.split(json.loads(result.read_text())["_meta"]["command"])


def _script(result: Path) -> Path:
    """The bench script `_meta.command` runs (`python bench/NAME.py ARGS`, one command)."""
    raw = json.loads(result.read_text())["_meta"]["command"]
    assert not set("();&|") & set(raw), f"{result.name}: not one command: {raw}"
    argv = _command(result)
    assert len(argv) >= 2 and argv[0].startswith("python") and \
        re.fullmatch(r"bench/[\w]+\.py", argv[1]), (result.name, argv)
    return ROOT / argv[1]


def _writes(script: Path, result: Path) -> bool:
    """Whether that command writes `result`: it passes the path (or its bare name, which
    the benches put in bench/results/), or the script's source names the file (its default
    output)."""
    rel = str(result.relative_to(ROOT))
    args = _command(result)[2:]
    return rel in args or result.name in args or f'"{result.name}"' in script.read_text()


def _names_in(script: Path) -> list[re.Pattern]:
    """The keys the script can write: its string literals, keyword-argument names
    (`dict(key=...)`, `res.update(key=...)`) and f-strings (`f"seconds_{name}"`: any text
    where the script fills in a value)."""
    out: list[re.Pattern] = []
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append(re.compile(re.escape(node.value)))
        elif isinstance(node, ast.keyword) and node.arg:
            out.append(re.compile(re.escape(node.arg)))
        elif isinstance(node, ast.JoinedStr):
            out.append(re.compile("".join(re.escape(v.value) if isinstance(v, ast.Constant)
                                          else ".+" for v in node.values)))
    return out


def test_the_docs_cite_results():
    assert {"fidelity", "learning", "plan_speed", "gpu_h200"} <= set(_cited())


def test_every_cited_result_was_written_by_one_run_of_a_bench_script():
    """The cited file exists; `_meta.command` is one plain run of a script in bench/ (no
    notes of other runs merged in); that script exists, writes through `write_result` and
    writes that very file."""
    for name, docs in _cited().items():
        result = BENCH / "results" / f"{name}.json"
        assert result.is_file(), f"{', '.join(docs)} cite bench/results/{name}: no {name}.json"
        script = _script(result)
        assert script.is_file(), (name, script)
        assert "write_result(" in script.read_text(), script.name
        assert _writes(script, result), f"{script.name} does not write {result.name}"


def test_every_result_has_only_keys_its_script_writes():
    """Checked statically, at the top level: each key of a results file is a name the
    producing script spells out. Deeper keys are data (seeds, case and model names, counts)
    and are not checked; a key that no script writes, or one left from a merged run of
    older code, fails here."""
    for result in sorted((BENCH / "results").glob("*.json")):
        names = _names_in(_script(result))
        extra = [k for k in json.loads(result.read_text())
                 if k != "_meta" and not any(n.fullmatch(k) for n in names)]
        assert not extra, f"{result.name}: {extra} are not written by {_script(result).name}"

