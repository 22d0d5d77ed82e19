"""Files shipped inside the package: the default and demo configs, profiles, demo models.

Why: `yatt plan` with no argument, `yatt run`'s CPU demo, the shipped profiles and the
demo checkpoints must work after `pip install yatt` from any directory, not only from a
checkout. They live in `yatt/configs/` (the checkout's top-level `configs/` points there)
and every lookup goes through this module, through `importlib.resources`.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

from .errors import InputError

DEFAULT_EXPERIMENT = "default.yaml"
DEMO_EXPERIMENT = "demo-cpu.yaml"
DEMO_LEARN_EXPERIMENT = "demo-learn.yaml"


def configs_dir() -> Path:
    """The bundled configs directory, as a filesystem path (configs name their parts by
    relative paths, so they must be read from a real directory)."""
    root = resources.files("yatt").joinpath("configs")
    path = Path(str(root))
    if not path.is_dir():
        raise InputError("the bundled configs are missing from this installation; allowed: "
                         "reinstall yatt (pip install yatt) or pass a config path",
                         file=str(path))
    return path


def bundled(relpath: str) -> Path:
    """A file under the bundled configs, e.g. `bundled("default.yaml")`."""
    return configs_dir() / relpath


def shipped_profile_path(gpu_name: str) -> Path | None:
    """The profile shipped for a device kind (`profiles/<gpu>.yaml`), if there is one."""
    p = configs_dir() / "profiles" / f"{gpu_name}.yaml"
    return p if p.is_file() else None
