"""`yatt profile` on the light install: one line naming the install it needs, exit 2,
nothing written. The light install is imitated by blocking the exec stack's imports."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import sys
BLOCK = set(sys.argv[1].split(","))
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCK:
            raise ImportError("blocked heavy import: " + name)
sys.meta_path.insert(0, Block())
from yatt.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("blocked", ["torch,ray,vllm,megatron,transformers", "transformers",
                                     "safetensors"])
def test_profile_on_the_light_install_says_which_install(tmp_path, blocked):
    out = tmp_path / "p.yaml"
    r = subprocess.run([sys.executable, "-c", PROBE, blocked, "profile",
                        str(ROOT / "configs" / "demo-cpu.yaml"), "--quick", "--no-progress",
                        "-o", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    line = lines[0]
    assert line.startswith("yatt profile: error: needs the exec install (")
    assert line.split("(")[1].split(" ")[0] in blocked.split(","), line
    assert "pip install 'yatt[exec]'" in line and "scripts/install.sh exec" in line
    assert not out.exists()
