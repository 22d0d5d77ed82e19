"""The planner says when `release: resident` fits in full colocate and when it does not
(memory model, all roles resident at once), and never overrides the configured policy."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from yatt.core.config import load_experiment
from yatt.core.roles import ReleasePolicy
from yatt.planner.space import placement_space, resident_colocate_memory

ROOT = Path(__file__).resolve().parents[2]


def _exp(release: ReleasePolicy, util: float):
    e = load_experiment(ROOT / "configs" / "demo-learn.yaml")
    return dataclasses.replace(e, search=dataclasses.replace(e.search, release=release),
                               engine=dataclasses.replace(e.engine, gpu_memory_utilization=util))


def _release_notes(exp) -> list[str]:
    return [n for n in placement_space(exp).notes if n.startswith("release:")]


def test_suggests_resident_when_everything_fits():
    exp = _exp(ReleasePolicy.OFFLOAD, 0.3)          # 2 engines x 30% + a 0.45M trainer
    need, cap = resident_colocate_memory(exp, 1, 1, 1)
    assert 0.6 * cap < need < cap
    (note,) = _release_notes(exp)
    assert "resident would fit" in note and "offload/reload" in note
    assert exp.search.release is ReleasePolicy.OFFLOAD   # a note, not a silent override


def test_warns_when_resident_does_not_fit():
    exp = _exp(ReleasePolicy.RESIDENT, 0.5)          # 2 engines x 50% leave no room
    need, cap = resident_colocate_memory(exp, 1, 1, 1)
    assert need > cap
    (note,) = _release_notes(exp)
    assert "resident needs" in note and "gpu_memory_utilization=0.5" in note


@pytest.mark.parametrize("util", [0.3, 0.5])
def test_no_note_for_offload_that_must_offload(util):
    exp = _exp(ReleasePolicy.TEARDOWN, util)
    fits = resident_colocate_memory(exp, 1, 1, 1)[0] <= exp.cluster.gpu.hbm_bytes
    assert bool(_release_notes(exp)) == fits
