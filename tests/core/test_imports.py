"""Layering: which package may import which (docs/design.md), no import circles, and the
light packages import with torch/ray/vllm/megatron unavailable."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "yatt"

# layer -> layers it may import (besides itself). The root package `yatt` and `yatt.api`
# sit on top with `cli`.
ALLOWED = {
    "core": set(),
    "sim": {"core"},
    "planner": {"core", "sim"},
    "exec": {"core"},
    "profiling": {"core", "exec", "planner", "sim"},
    "demo": {"core", "exec"},
    "api": {"core", "sim", "planner", "exec", "demo"},
    "cli": {"core", "sim", "planner", "exec", "profiling", "demo"},
    "": {"api", "core"},   # yatt/__init__.py
}


def _modules() -> dict[str, Path]:
    mods = {}
    for f in PKG.rglob("*.py"):
        name = ".".join(f.relative_to(ROOT).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = f
    return mods


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> yatt modules it imports anywhere in its text (lazy imports included)."""
    graph = {}
    for mod, f in mods.items():
        deps = set()
        is_pkg = f.name == "__init__.py"
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[:len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                names = [target] + [f"{target}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            deps.update(n for n in names if n in mods and n != mod)
        graph[mod] = deps
    return graph


def _layer(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_no_package_imports_a_layer_above_it():
    graph = _imports(_modules())
    bad = [f"{a} imports {b}" for a, deps in sorted(graph.items()) for b in sorted(deps)
           if _layer(b) != _layer(a) and _layer(b) not in ALLOWED[_layer(a)]]
    assert not bad, "\n".join(bad)


def test_the_layer_table_covers_every_package():
    assert {_layer(m) for m in _modules()} <= set(ALLOWED)


def test_no_import_circles():
    graph = _imports(_modules())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles = []

    def visit(v: str) -> None:   # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert not circles, circles


PROBE = r"""
import importlib, pkgutil, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"torch", "ray", "vllm", "megatron", "transformers"}:
            raise ImportError("blocked heavy import: " + name)
sys.meta_path.insert(0, Block())
import yatt.core, yatt.sim, yatt.planner
for pkg in (yatt.core, yatt.sim, yatt.planner):
    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        importlib.import_module(m.name)
import yatt.cli.main, yatt.api
yatt.cli.main.build_parser()
print("ok")
"""


def test_light_packages_import_without_heavy_deps():
    r = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith("ok")
