"""Fault-injection hook parsing and firing (yatt/exec/faults.py)."""
from __future__ import annotations

import pytest

from yatt.core.errors import InputError
from yatt.exec import faults


def test_parse():
    fs = faults.parse("rollout.exit@2, trainer.nan@3+, reference.exit@1")
    assert fs == (faults.Fault("rollout", "exit", 2), faults.Fault("trainer", "nan", 3, True),
                  faults.Fault("reference", "exit", 1))


def test_full_disk_is_per_role():
    assert faults.parse("trainer.enospc@2,checkpoint.enospc@1") == (
        faults.Fault("trainer", "enospc", 2), faults.Fault("checkpoint", "enospc", 1))


def test_the_trainers_full_disk_fires_once_per_run_in_rank_0(monkeypatch, tmp_path):
    monkeypatch.setenv(faults.ENV, "trainer.enospc@2,trainer.nan@2+")
    monkeypatch.setenv(faults.DIR_ENV, str(tmp_path))
    ranks = [faults.hook("trainer", index=i) for i in (0, 1)]
    for h in ranks:
        h.tick()
        h.tick()
    assert [h.fires("enospc") for h in ranks] == [True, False]
    assert [h.fires("nan") for h in ranks] == [True, True]       # nan: every rank, each time
    restarted = faults.hook("trainer", index=0)
    restarted.tick()
    restarted.tick()
    assert not restarted.fires("enospc") and restarted.fires("nan")


def test_full_disk_writes_part_then_fails_and_is_undone(tmp_path):
    import errno
    import types

    def write_item(transform, stream, data):
        stream.write(data)
        return len(data)

    mod = types.SimpleNamespace(write_item=write_item)
    with faults.full_disk(mod, "write_item"):
        with open(tmp_path / "shard", "wb") as f, pytest.raises(OSError) as e:
            mod.write_item(None, f, b"x" * 4096)
    assert e.value.errno == errno.ENOSPC and str(tmp_path / "shard") in str(e.value)
    assert 0 < (tmp_path / "shard").stat().st_size < 4096
    assert mod.write_item is write_item


@pytest.mark.parametrize("bad", ["rollout.exit", "rollout.exit@x", "judge.exit@1",
                                 "rollout.boom@1", "rollout.nan@1", "reference.nan@1",
                                 "trainer.exit@0", "rollout.enospc@1", "checkpoint.exit@1"])
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


def test_a_trainer_write_failure_is_one_line():
    from yatt.exec.trainer_state import _write_failure

    class Failed(BaseException):   # torch's CheckpointException: rank -> (exception, stack)
        def __init__(self, failures):
            self.failures = failures

    wrapped = RuntimeError("Worker failure: [Errno 28] No space left on device: "
                           "'/run/checkpoints/step-000000.partial/trainer/__0_0.distcp'")
    assert (_write_failure(Failed({0: (wrapped, None)}))
            == "No space left on device: __0_0.distcp, trainer rank 0")
    assert (_write_failure(Failed({1: (OSError(28, "No space left on device", "/a/b.distcp"), None)}))
            == "No space left on device: b.distcp, trainer rank 1")
    assert _write_failure(Failed({0: (RuntimeError("boom\nmore"), None)})) == "RuntimeError: boom, trainer rank 0"
    assert _write_failure(Failed({})) == "the shard write failed on another trainer rank"


def test_an_actor_index_picks_which_actor_a_one_actor_event_fires_in(monkeypatch, tmp_path):
    monkeypatch.setenv(faults.ENV, "trainer[2].stall@2,genrm.stall@1")
    monkeypatch.setenv(faults.DIR_ENV, str(tmp_path))
    assert faults.parse("trainer[2].stall@2") == (faults.Fault("trainer", "stall", 2, index=2),)
    ranks = [faults.hook("trainer", index=i) for i in range(4)]
    for h in ranks:
        h.tick()
        h.tick()
    assert [h.fires("stall") for h in ranks] == [False, False, True, False]
    assert (tmp_path / "yatt-fault-trainer[2].stall@2").exists()   # the harness's signal
    again = faults.hook("trainer", index=2)                        # restarted: once per run
    again.tick()
    again.tick()
    assert not again.fires("stall")


@pytest.mark.parametrize("bad", ["trainer[x].stall@1", "trainer[-1].exit@1", "controller.stall@1",
                                 "checkpoint.stall@1", "driver.stall@1"])
def test_parse_rejects_bad_indices_and_stall_roles(bad):
    with pytest.raises(InputError) as e:
        faults.parse(bad)
    assert bad in str(e.value)
