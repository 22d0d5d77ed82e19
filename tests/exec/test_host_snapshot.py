"""Host snapshot files (yatt/exec/host_snapshot.py): exact round trips, one committed
generation per rank, no torn reads, and a file that outlives the process that wrote it."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from yatt.exec import host_snapshot as hs


def _state(seed: int, n: int = 16) -> dict:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, 8, generator=g)
    return {"model": {"w": w, "w_t": w.t(), "half": torch.randn(n, generator=g).to(torch.bfloat16),
                      "_extra_state": None},
            "optimizer": {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(n, generator=g)}},
                          "param_groups": [{"lr": 1e-4, "betas": (0.9, 0.999), "params": [0],
                                            "foreach": None}]},
            "rng": {"torch": torch.Generator().manual_seed(seed).get_state(), "python": (3, tuple(range(5)), None),
                    "numpy": ("MT19937", torch.arange(7, dtype=torch.int64), 2, 0, 0.0)},
            "mask": torch.tensor([True, False, True]), "empty": torch.zeros(0, 4),
            "steps": seed, "nonfinite_steps": 0}


def _leaves(x, path=""):
    if isinstance(x, dict):
        return {k: v for key, val in x.items() for k, v in _leaves(val, f"{path}/{key}").items()}
    if isinstance(x, (list, tuple)):
        out = {f"{path}#type": type(x).__name__}
        for i, v in enumerate(x):
            out.update(_leaves(v, f"{path}/{i}"))
        return out
    return {path: x}


def _same(a, b) -> list[str]:
    la, lb = _leaves(a), _leaves(b)
    bad = sorted(set(la) ^ set(lb))
    for k in set(la) & set(lb):
        x, y = la[k], lb[k]
        if torch.is_tensor(x):
            if not (torch.is_tensor(y) and x.dtype == y.dtype and x.shape == y.shape
                    and torch.equal(x, y)):
                bad.append(k)
        elif type(x) is not type(y) or x != y:
            bad.append(k)
    return bad


def test_a_state_round_trips_bit_exactly_as_fresh_tensors(tmp_path):
    st = _state(1)
    n = hs.write(str(tmp_path), 3, 7, st)
    assert n >= sum(t.numel() * t.element_size() for t in (st["model"]["w"], st["model"]["w_t"]))
    back = hs.read(hs.HostSnapshot(str(tmp_path), 7), 3)
    assert _same(back, st) == []
    assert back["model"]["w_t"].is_contiguous()
    back["model"]["w"].add_(1.0)           # the copy read is the caller's own
    again = hs.read(hs.HostSnapshot(str(tmp_path), 7), 3)
    assert _same(again, st) == []


def test_a_new_generation_replaces_the_old_one(tmp_path):
    hs.write(str(tmp_path), 0, 1, _state(1, n=64))
    hs.write(str(tmp_path), 0, 2, _state(2, n=4))     # smaller: the file shrinks
    assert _same(hs.read(hs.HostSnapshot(str(tmp_path), 2), 0), _state(2, n=4)) == []
    with pytest.raises(FileNotFoundError, match="generation 2, not the 1 asked for"):
        hs.read(hs.HostSnapshot(str(tmp_path), 1), 0)
    with pytest.raises(FileNotFoundError, match="rank 5 holds no committed snapshot"):
        hs.read(hs.HostSnapshot(str(tmp_path), 2), 5)


def test_a_write_cut_short_leaves_no_readable_snapshot(tmp_path, monkeypatch):
    hs.write(str(tmp_path), 0, 1, _state(1))
    calls = []

    def dies_on_the_third(t):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("the rank died here")
        return t.detach().contiguous().reshape(-1).view(torch.uint8)

    monkeypatch.setattr(hs, "_bytes_view", dies_on_the_third)
    with pytest.raises(RuntimeError, match="died here"):
        hs.write(str(tmp_path), 0, 2, _state(2))
    for gen in (1, 2):   # neither the old generation nor a torn new one is handed out
        with pytest.raises(FileNotFoundError, match="holds no committed snapshot"):
            hs.read(hs.HostSnapshot(str(tmp_path), gen), 0)


def test_the_file_outlives_the_process_that_wrote_it(tmp_path):
    code = ("import os, sys, torch\n"
            "sys.path.insert(0, sys.argv[2])\n"
            "from tests.exec.test_host_snapshot import _state\n"
            "from yatt.exec import host_snapshot as hs\n"
            "hs.write(sys.argv[1], 1, 4, _state(9))\n"
            "os._exit(0)\n")                              # no clean-up of any kind
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code, str(tmp_path), str(root)], check=True,
                   env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=120)
    assert _same(hs.read(hs.HostSnapshot(str(tmp_path), 4), 1), _state(9)) == []


def test_the_directory_is_private_and_falls_back_to_the_temporary_directory(tmp_path):
    small = hs.choose_root(1, prefer=str(tmp_path))
    assert small.parent == tmp_path
    assert stat.S_IMODE(small.stat().st_mode) == 0o700
    huge = hs.choose_root(1 << 62, prefer=str(tmp_path))   # no filesystem has that free
    assert huge.parent == Path(tempfile.gettempdir())
    hs.write(str(huge), 0, 1, _state(0))
    hs.remove(huge)
    assert not huge.exists()


def test_a_read_rng_state_can_be_set(tmp_path):
    st = {"rng": torch.get_rng_state(), "w": torch.randn(1 << 15)}   # w: a view when read
    hs.write(str(tmp_path), 0, 1, st)
    back = hs.read(hs.HostSnapshot(str(tmp_path), 1), 0)
    torch.set_rng_state(back["rng"])
    assert torch.equal(torch.get_rng_state(), st["rng"]) and torch.equal(back["w"], st["w"])
