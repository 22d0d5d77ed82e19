"""Young-generation garbage collection while a vLLM engine starts or is torn down (CPU).

Why: vLLM calls `gc.collect()` eight times across one engine start and teardown, and its
shutdown unfreezes the heap first (`gc.unfreeze()`), so each call walks every object that
torch, vLLM and Megatron created at import: ~0.3-0.5 s a call on a CPU "device", about
3 s of the ~5 s a CPU teardown-and-re-create cycle takes for the demo models. The objects
an engine start or stop leaves behind are young, so inside `young_collections()` those
calls collect generations 0 and 1 only; the caller runs one full collection where memory
must really be returned (the end of a teardown). Used on CPU only: on a GPU, vLLM's full
collections before `torch.cuda.empty_cache()` decide how much memory its KV cache gets.
No library offers this; `gc` itself has no per-caller setting.
"""
from __future__ import annotations

import contextlib
import gc
from typing import Iterator

_FULL = gc.collect


def _young(generation: int = 2) -> int:
    return _FULL(min(generation, 1))


@contextlib.contextmanager
def young_collections(enabled: bool = True) -> Iterator[None]:
    """Within the block, `gc.collect(g)` collects at most generation 1 (when `enabled`)."""
    if not enabled or gc.collect is not _FULL:   # off, or already inside such a block
        yield
        return
    gc.collect = _young
    try:
        yield
    finally:
        gc.collect = _FULL
