"""gcscope: inside the block a full collection leaves old cycles and vLLM's freeze and
unfreeze are held; outside it the cycles are freed; a frozen heap is not walked."""
from __future__ import annotations

import gc
import weakref

from yatt.exec.gcscope import freeze_heap, young_collections


class _Node:
    def __init__(self) -> None:
        self.me = self   # a reference cycle: only the cyclic collector frees it


def _old_garbage() -> weakref.ref:
    """A cycle promoted to the oldest generation, then made unreachable."""
    node = _Node()
    gc.collect()   # survives: now in generation 2
    ref = weakref.ref(node)
    del node
    return ref


def test_full_collection_is_young_inside_the_block_and_full_after():
    ref = _old_garbage()
    with young_collections():
        assert gc.collect() >= 0
        assert ref() is not None   # generation 2 was not walked
        with young_collections():  # nested: still young, and the outer block restores
            gc.collect(2)
        assert ref() is not None
    gc.collect()
    assert ref() is None


def test_disabled_block_collects_fully():
    ref = _old_garbage()
    with young_collections(enabled=False):
        gc.collect()
        assert ref() is None


def test_the_real_collect_is_restored_after_an_error():
    full = gc.collect
    try:
        with young_collections():
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert gc.collect is full


def test_freeze_and_unfreeze_are_held_inside_the_block_and_restored_after():
    freeze, unfreeze = gc.freeze, gc.unfreeze
    before = gc.get_freeze_count()
    with young_collections():
        gc.freeze()
        assert gc.get_freeze_count() == before
        gc.unfreeze()
        assert gc.get_freeze_count() == before
    assert (gc.freeze, gc.unfreeze) == (freeze, unfreeze)


def test_a_frozen_cycle_outlives_a_full_collection_and_later_garbage_does_not():
    """What `freeze_heap` froze stays put through the teardown's full collection (and
    vLLM's unfreeze inside the block); what was made after it is collected."""
    try:
        old = _Node()
        freeze_heap()
        assert gc.get_freeze_count() > 0
        frozen = weakref.ref(old)
        del old
        young = _old_garbage()
        with young_collections():
            gc.unfreeze()       # vLLM's shutdown: held
        gc.collect()
        assert young() is None
        assert frozen() is not None
    finally:
        gc.unfreeze()
        gc.collect()
