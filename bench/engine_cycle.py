"""What a CPU engine's teardown-and-re-create costs, and what yatt's three measures save.

Why: on CPU "devices" vLLM has no sleep mode, so a phase that releases an engine destroys
it and the next phase re-creates it (`release: teardown`, the demo's policy). With vLLM's
defaults most of that cycle is not the model: its eight `gc.collect()` calls walk the whole
heap of torch, vLLM and Megatron objects (its shutdown unfreezes it first), and the KV cache
(`VLLM_CPU_KVCACHE_SPACE`, whole GiB) is zeroed at every start. yatt's CPU engine collects
only the young generations inside start and teardown, holds vLLM's freeze and unfreeze
there, freezes the heap alive before it builds an engine so that the one full collection
ending a teardown walks the engine's objects only (`yatt.exec.gcscope`), and sizes the KV
cache to the engine's own sequences (`yatt.exec.rollout.cpu_kv_bytes`). This bench times
the cycle of the demo models' engines (`yatt.exec.rollout.EngineCore`, the executor's
class, in one process with Megatron imported as in a trainer-colocated actor) in four
variants, interleaved round by round so host drift hits them alike:
  vllm_defaults   vLLM's own full collections and a 1 GiB KV cache
  young_gc        young collections, 1 GiB KV cache
  sized_kv        young collections and the sized KV cache
  yatt            all three: the frozen heap too (what `yatt run` does)
A variant without the frozen heap starts from an unfrozen one; `yatt` from the heap frozen
once, outside the timing, as an engine actor's first start leaves it. Each round re-creates the
engine, generates one small batch (so the engine is used), and tears it down. Reports the
median create, teardown and cycle seconds per variant and model, and the process's
resident memory after the last round (no growth means the collections still return the
engine's memory).
Writes bench/results/engine_cycle.json and prints one line per variant.
Usage: .venv/bin/python bench/engine_cycle.py [--rounds 5]
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _results import write_result  # noqa: E402  (bench/ holds the script: on sys.path)
OUT = ROOT / "bench" / "results" / "engine_cycle.json"
ONE_GIB = 1 << 30


@dataclass(frozen=True)
class Variant:
    """Which of yatt's three measures a variant keeps (the others are patched out)."""

    name: str
    young_gc: bool
    sized_kv: bool
    frozen_heap: bool


VARIANTS = (Variant("vllm_defaults", young_gc=False, sized_kv=False, frozen_heap=False),
            Variant("young_gc", young_gc=True, sized_kv=False, frozen_heap=False),
            Variant("sized_kv", young_gc=True, sized_kv=True, frozen_heap=False),
            Variant("yatt", young_gc=True, sized_kv=True, frozen_heap=True))


@contextlib.contextmanager
def variant(v: Variant):
    """The executor's engine as `v` runs it."""
    from yatt.exec import rollout

    young, kv, freeze = rollout.young_collections, rollout.cpu_kv_bytes, rollout.freeze_heap
    if not v.young_gc:
        rollout.young_collections = lambda enabled=True: contextlib.nullcontext()
    if not v.sized_kv:
        rollout.cpu_kv_bytes = lambda cfg: ONE_GIB
    if not v.frozen_heap:
        gc.unfreeze()   # what an earlier round froze
        rollout.freeze_heap = lambda: None
    else:   # an executor's engine actor froze its heap at its first start, once
        freeze()
    try:
        yield
    finally:
        rollout.young_collections, rollout.cpu_kv_bytes = young, kv
        rollout.freeze_heap = freeze


def cycle(cfg) -> tuple[float, float, float]:
    """(create s, generate s, teardown s) of one engine life."""
    from yatt.exec.rollout import EngineCore, GenRequest

    core = EngineCore(cfg)
    t0 = time.perf_counter()
    core.start()
    t1 = time.perf_counter()
    for i in range(8):
        core.add(str(i), GenRequest(i, (5, 6, 7, 8), 8, seed=i))
    while core.has_unfinished():
        core.step()
    t2 = time.perf_counter()
    core.stop()
    return t1 - t0, t2 - t1, time.perf_counter() - t2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    from yatt.exec.env import apply_local_env

    apply_local_env(cpu=True)
    os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)   # it would override the sized cache
    import megatron.core  # noqa: F401  (the heap a trainer-colocated engine lives with)
    import psutil

    from yatt.core.config import load_experiment
    from yatt.core.jobspec import Dtype
    from yatt.exec.models import resolve_model
    from yatt.exec.rollout import EngineConfig, cpu_kv_bytes

    exp = load_experiment(ROOT / "configs" / "demo-cpu.yaml")
    models = {"actor": exp.actor, "genrm": exp.genrm}
    cfgs = {k: EngineConfig(str(resolve_model(m, 0)), max_model_len=128, max_num_seqs=64,
                            dtype=Dtype.FLOAT32.value) for k, m in models.items()}
    for cfg in cfgs.values():   # one-off first-start costs (imports, kernel registration)
        cycle(cfg)
    times: dict = {(v, k): [] for v in VARIANTS for k in cfgs}
    for _ in range(args.rounds):
        for v in VARIANTS:
            for k, cfg in cfgs.items():
                with variant(v):
                    times[(v, k)].append(cycle(cfg))
    rows = []
    for (v, k), ts in times.items():
        create, gen, stop = (statistics.median(t[i] for t in ts) for i in range(3))
        rows.append({"variant": v.name, "model": k, "create_s": round(create, 3),
                     "teardown_s": round(stop, 3), "cycle_s": round(create + stop, 3),
                     "generate_s": round(gen, 3)})
    base = {r["model"]: r["cycle_s"] for r in rows if r["variant"] == VARIANTS[0].name}
    for r in rows:
        r["speedup"] = round(base[r["model"]] / r["cycle_s"], 2)
    data = {"rounds": args.rounds, "models": {k: m.name for k, m in models.items()},
            "kv_bytes_yatt": {k: cpu_kv_bytes(c) for k, c in cfgs.items()},
            "rss_mb_after": round(psutil.Process().memory_info().rss / 1e6),
            "rows": rows}
    write_result(args.out, data, command="python bench/engine_cycle.py"
                 + (f" --rounds {args.rounds}" if args.rounds != 5 else ""))
    for r in rows:
        print(f"{r['variant']:14s} {r['model']:6s} create {r['create_s']:.2f} s, teardown "
              f"{r['teardown_s']:.2f} s, cycle {r['cycle_s']:.2f} s ({r['speedup']}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
