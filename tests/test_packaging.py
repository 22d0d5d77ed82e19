"""The wheel is a real package: built from this checkout, installed into a fresh virtual
environment, `yatt plan` runs from an unrelated directory on the bundled default config.

The fresh environment gets yatt only from the wheel; its third-party dependencies come from
the test's own interpreter through a `.pth` line (the wheel is installed with --no-deps, so
the test needs no network). A `.pth`-added directory's own `.pth` files are not processed,
so the editable yatt of the test environment stays invisible.
"""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}   # only the wheel's yatt


@pytest.fixture(scope="module")
def fresh_env(tmp_path_factory) -> Path:
    pytest.importorskip("setuptools")
    tmp = tmp_path_factory.mktemp("pkg")
    wheels = tmp / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(wheels), str(ROOT)], check=True, cwd=tmp, capture_output=True, timeout=300)
    (wheel,) = wheels.glob("yatt-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--target", str(site), str(wheel)], check=True, capture_output=True, timeout=300)
    (site / "yatt_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def test_plan_runs_from_an_unrelated_directory(fresh_env, tmp_path):
    py = fresh_env / "bin" / "python"
    where = subprocess.run([str(py), "-c", "import yatt, yatt.core.bundled as b; "
                            "print(yatt.__file__); print(b.configs_dir())"],
                           cwd=tmp_path, capture_output=True, text=True, check=True, env=ENV)
    mod, configs = where.stdout.split()
    assert Path(mod).is_relative_to(fresh_env) and Path(configs).is_relative_to(fresh_env)
    r = subprocess.run([str(py), "-m", "yatt.cli", "plan", "--no-progress", "--top", "2", "--out", "o"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600, env=ENV)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "o" / "plan.yaml").is_file()


def test_shipped_files_are_in_the_wheel(fresh_env):
    py = fresh_env / "bin" / "python"
    r = subprocess.run([str(py), "-c", "from yatt.core.bundled import bundled, shipped_profile_path; "
                        "print(bundled('demo-cpu.yaml').is_file(), bundled('demo-learn.yaml').is_file(), "
                        "shipped_profile_path('cpu-local') is not None, "
                        "(bundled('demo-models') / 'demo-actor-actor-s0' / 'model.safetensors').is_file())"],
                       capture_output=True, text=True, check=True, env=ENV)
    assert r.stdout.split() == ["True"] * 4


def test_one_version_number(fresh_env):
    py = fresh_env / "bin" / "python"
    r = subprocess.run([str(py), "-m", "yatt.cli", "--version"], capture_output=True, text=True, check=True,
                       env=ENV)
    text = (ROOT / "pyproject.toml").read_text()
    version = next(line.split('"')[1] for line in text.splitlines() if line.startswith("version ="))
    assert r.stdout.strip() == f"yatt {version}"
