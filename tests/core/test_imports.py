"""Layering: core, sim and planner import with torch/ray/vllm/megatron unavailable."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import importlib, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"torch", "ray", "vllm", "megatron", "transformers"}:
            raise ImportError("blocked heavy import: " + name)
sys.meta_path.insert(0, Block())
import pkgutil, yatt.core, yatt.sim, yatt.planner
for pkg in (yatt.core, yatt.sim, yatt.planner):
    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        if m.name == "yatt.planner.profile":
            continue  # profiling measures real engines: it imports torch lazily, by design
        importlib.import_module(m.name)
import yatt.cli
print("ok")
"""


def test_light_packages_import_without_heavy_deps():
    r = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith("ok")
