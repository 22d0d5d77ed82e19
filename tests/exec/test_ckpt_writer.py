"""The trainer's thread checkpoint writer (yatt/exec/ckpt_writer.py) on real megatron saves."""
from pathlib import Path

import pytest

pytest.importorskip("megatron.core")
from _train_helpers import _spawn_on_free_port, run_thread_writer  # noqa: E402


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    import torch
    out = tmp_path_factory.mktemp("thread-writer")
    _spawn_on_free_port(run_thread_writer, 2, {}, out)
    return [torch.load(Path(out) / f"rank{r}.pt", weights_only=False) for r in range(2)]


def test_the_write_holds_the_state_as_saved_without_forking(two_ranks):
    for rank, r in enumerate(two_ranks):
        assert r["finalised"] == [0]
        # written after the hand-off from a copy: the +100 the next step made is not in it
        assert r["loaded"] == [float(10 * rank + i) for i in range(4)]
        assert r["forks"] == 0


def test_a_full_disk_in_one_ranks_writer_fails_the_save_on_every_rank(two_ranks):
    r0, r1 = two_ranks
    assert r0["full_disk"].startswith("No space left on device")
    assert r0["full_disk"].endswith("trainer rank 0")
    assert r1["full_disk"] == "the shard write failed on another trainer rank"
    assert r0["write_item_restored"] and r1["write_item_restored"]
