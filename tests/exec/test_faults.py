"""Fault-injection hook parsing and firing (yatt/exec/faults.py)."""
from __future__ import annotations

import pytest

from yatt.core.errors import InputError
from yatt.exec import faults


def test_parse():
    fs = faults.parse("rollout.exit@2, trainer.nan@3+, reference.exit@1")
    assert fs == (faults.Fault("rollout", "exit", 2), faults.Fault("trainer", "nan", 3, True),
                  faults.Fault("reference", "exit", 1))


@pytest.mark.parametrize("bad", ["rollout.exit", "rollout.exit@x", "judge.exit@1",
                                 "rollout.boom@1", "rollout.nan@1", "reference.nan@1",
                                 "trainer.exit@0"])
def test_parse_rejects_with_the_item(bad):
    with pytest.raises(InputError) as e:
        faults.parse(bad)
    assert bad in str(e.value) and faults.ENV in str(e.value)


def test_exit_fires_once_per_run_and_only_on_index_0(tmp_path, monkeypatch):
    monkeypatch.setenv(faults.ENV, "rollout.exit@2")
    monkeypatch.setenv(faults.DIR_ENV, str(tmp_path))
    other = faults.hook("rollout", index=1)
    h = faults.hook("rollout", index=0)
    assert faults.hook("trainer") is None
    fired = []
    for _ in range(3):
        h.tick()
        other.tick()
        fired.append((h.fires("exit"), other.fires("exit")))
    assert fired == [(False, False), (True, False), (False, False)]
    again = faults.hook("rollout", index=0)     # the restarted actor counts from 1 again
    again.tick()
    again.tick()
    assert not again.fires("exit")               # marker: already fired in this run


def test_nan_repeats(monkeypatch):
    monkeypatch.setenv(faults.ENV, "trainer.nan@2+")
    h = faults.hook("trainer", index=1)
    out = []
    for _ in range(4):
        h.tick()
        out.append(h.fires("nan"))
    assert out == [False, True, True, True]


def test_unset_is_none(monkeypatch):
    monkeypatch.delenv(faults.ENV, raising=False)
    assert faults.hook("rollout") is None
