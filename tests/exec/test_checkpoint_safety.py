"""Resuming a tampered run directory runs no code: a pickled `__reduce__` payload in any
checkpoint file (common.pt, .metadata, an object inside a .distcp file, state.json,
manifest.json) is refused with one line, and the payload's marker file never appears.

The cases (tests/cli/_hostile_cases.py, CHECKPOINT_CASES) run `yatt run --resume` on a real
trainer checkpoint; the loaders themselves are also tested in-process, since the trainer
loads through torch's and megatron's code, which `safe_load.install()` makes safe.
"""
from __future__ import annotations

import importlib
import io
import os
import pickle
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from _hostile_cases import CHECKPOINT_CASES, MARKER, run_case  # noqa: E402
from _train_helpers import spawn_trainers  # noqa: E402

from yatt.exec import safe_load  # noqa: E402


@pytest.fixture(scope="module")
def trainer_checkpoint(tmp_path_factory) -> Path:
    """A real `dist_checkpointing` checkpoint of the tiny actor (model, optimizer, RNG)."""
    root = tmp_path_factory.mktemp("ckpt")
    spawn_trainers({"tp": 1, "dp": 1, "steps": 1, "ckpt_dir": str(root / "trainer")}, root / "run")
    return root / "trainer"


@pytest.mark.parametrize("case", CHECKPOINT_CASES, ids=[c.name for c in CHECKPOINT_CASES])
def test_tampered_run_directory(case, tmp_path, trainer_checkpoint):
    run_case(case, tmp_path, checkpoint=trainer_checkpoint)


def test_an_untampered_checkpoint_scans_clean(tmp_path, trainer_checkpoint):
    import shutil
    shutil.copytree(trainer_checkpoint, tmp_path / "trainer")
    assert safe_load.scan(tmp_path) is None


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch '{self.marker}'",))


def test_the_loaders_refuse_a_payload_in_process(tmp_path, trainer_checkpoint):
    """What the trainer itself calls: torch's metadata reader and load_bytes, megatron's
    common-state load and yatt's counter read; none may run the payload."""
    import shutil

    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    from yatt.exec.trainer_state import _saved_counters

    safe_load.install()
    d = tmp_path / "trainer"
    shutil.copytree(trainer_checkpoint, d)
    marker = tmp_path / MARKER
    (d / ".metadata").write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(safe_load.UnsafeCheckpoint, match="posix.system"):
        FileSystemReader(str(d)).read_metadata()
    blob = io.BytesIO()
    torch.save(_Payload(marker), blob)
    blob.seek(0)
    with pytest.raises(safe_load.UnsafeCheckpoint, match="not a plain tensor file"):
        DefaultLoadPlanner().load_bytes(None, blob)
    torch.save({"counters": _Payload(marker)}, d / "common.pt")
    with pytest.raises(safe_load.UnsafeCheckpoint):
        _saved_counters(str(d))
    from megatron.core.dist_checkpointing.strategies.common import TorchCommonLoadStrategy
    with pytest.raises(safe_load.UnsafeCheckpoint):
        TorchCommonLoadStrategy().load_common(d)
    assert not marker.exists()


def test_patched_symbols_still_exist():
    """An upgrade that moves what install() patches must fail here, not leave a pickle
    loader in place."""
    for module, attr in safe_load.PATCH_TARGETS:
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        assert callable(obj), (module, attr)


def test_the_payload_is_live(tmp_path):
    """The control: unpickled the unsafe way, the payload does create its marker."""
    marker = tmp_path / MARKER
    pickle.loads(pickle.dumps(_Payload(marker)))
    assert marker.exists()
