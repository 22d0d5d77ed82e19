"""Snapshot checkpoints written when a node is lost for good (yatt/exec/nodes.py): their
file names, and that the checkpoint scan loads them as tensors and plain data only."""
from __future__ import annotations

import pickle

import pytest

torch = pytest.importorskip("torch")

from yatt.exec import nodes, safe_load  # noqa: E402


def _state(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"model": {"w": torch.randn(3, 2, generator=g)}, "optimizer": {"state": {}},
            "rng": {"torch": torch.get_rng_state(), "python": (3, (1, 2), None)},
            "steps": seed, "nonfinite_steps": 0}


def test_names_round_trip():
    assert nodes.snapshot_name(7) == "snapshot-rank-00007.pt"
    assert nodes.is_snapshot_name(nodes.snapshot_name(123))
    for other in ("common.pt", "snapshot-rank-x.pt", "snapshot-rank-00001.distcp", "__0_0.distcp"):
        assert not nodes.is_snapshot_name(other)


def test_a_snapshot_checkpoint_scans_clean_and_loads_back(tmp_path):
    states = [_state(0), _state(1)]
    nodes.write_snapshots(tmp_path / "trainer", states)
    assert sorted(p.name for p in (tmp_path / "trainer").iterdir()) == [
        nodes.snapshot_name(0), nodes.snapshot_name(1)]
    assert safe_load.scan(tmp_path) is None
    back = safe_load.torch_load(tmp_path / "trainer" / nodes.snapshot_name(1))
    assert torch.equal(back["model"]["w"], states[1]["model"]["w"]) and back["steps"] == 1


class _Evil:
    def __reduce__(self):
        return (print, ("ran code",))


def test_a_snapshot_file_that_would_run_code_is_refused(tmp_path):
    nodes.write_snapshots(tmp_path / "trainer", [_state(0)])
    with open(tmp_path / "trainer" / nodes.snapshot_name(1), "wb") as f:
        pickle.dump({"model": _Evil()}, f)
    why = safe_load.scan(tmp_path)
    assert why is not None and nodes.snapshot_name(1) in why and "refused" in why
