"""Per-step trainer snapshot: through the Ray object store against the rank's host file.

Why: fault recovery and NaN rollback restore every trainer rank to the last good step, so
after every step each rank copies its whole state (weights, Adam moments, RNG, counters)
out of its process. A run on one node writes it into the rank's own host file
(`yatt/exec/host_snapshot.py`); a run spanning nodes sends it through the object store
(the copy must leave the node). This measures what each costs the rank, side by side in
one Ray session and one actor, rounds interleaved so host drift hits both alike:

  store  `snapshot.remote()` until its object is in the store (`ray.wait`: the rank's
         clone of its state plus Ray's serialisation into the store), then
         `restore.remote(ref)` (the object fetched and loaded)
  file   `snapshot_host.remote(root, generation)` (the live tensors copied into the
         file), then `restore.remote(token)` (read back and loaded)

One rank (DP=1, a single-thread device) after one training step, so Adam holds its
moments, for two models: the demo actor (configs/model/tiny-actor.yaml) and a 19M
random-init one of the same family (6 layers, hidden 512), where copies, not Python, set
the cost. Medians over `--reps` rounds. Writes bench/results/snapshot.json.
Usage: .venv/bin/python bench/snapshot.py [--reps 7]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _results import write_result  # noqa: E402  (bench/ holds the script: on sys.path)
OUT = ROOT / "bench" / "results" / "snapshot.json"
LARGER = dict(name="snapshot-19m", layers=6, hidden=512, intermediate=1536, heads=8,
              kv_heads=4)


def _models():
    from yatt.core.config import read_yaml
    from yatt.core.schema import from_dict
    from yatt.core.specs import ModelSpec

    tiny = from_dict(ModelSpec, read_yaml(ROOT / "configs" / "model" / "tiny-actor.yaml"))
    return [tiny, dataclasses.replace(tiny, **LARGER)]


def measure(spec, reps: int) -> dict:
    """Both paths on one trainer rank of `spec`, `reps` interleaved rounds."""
    import ray

    from yatt.core.specs import AlgoSpec
    from yatt.exec import host_snapshot
    from yatt.exec.env import worker_env
    from yatt.exec.models import resolve_model
    from yatt.exec.workers import TrainerArgs, TrainerWorker, TrainItem

    path = str(resolve_model(spec))
    w = ray.remote(num_cpus=0)(TrainerWorker).options(
        runtime_env={"env_vars": worker_env(True)}).remote(
        TrainerArgs(spec, path, AlgoSpec(), device="cpu"), 0)
    addr, port = ray.get(w.address.remote())
    ray.get(w.setup.remote(addr, port))
    items = [TrainItem(i, tuple((7 * i + j) % 60 + 3 for j in range(48)), 8, 1.0 - 0.1 * i)
             for i in range(16)]
    ray.get(w.stage.remote(items))
    ray.get(w.train_step.remote())           # Adam holds its moments from here on
    root = host_snapshot.choose_root(spec.params * 16)
    times: dict[str, list[float]] = {"store_snapshot_s": [], "store_restore_s": [],
                                     "file_snapshot_s": [], "file_restore_s": []}
    try:
        for gen in range(1, reps + 2):       # the first round warms both paths up
            t = time.perf_counter()
            ref = w.snapshot.remote()
            ray.wait([ref], fetch_local=False)
            t1 = time.perf_counter()
            ray.get(w.restore.remote(ref))
            t2 = time.perf_counter()
            token = w.snapshot_host.remote(str(root), gen)
            ray.wait([token], fetch_local=False)
            t3 = time.perf_counter()
            ray.get(w.restore.remote(token))
            t4 = time.perf_counter()
            del ref
            if gen > 1:
                for k, v in zip(times, (t1 - t, t2 - t1, t3 - t2, t4 - t3)):
                    times[k].append(v)
        size = sum(p.stat().st_size for p in root.iterdir() if p.suffix == ".bin")
    finally:
        host_snapshot.remove(root)
        ray.get(w.shutdown.remote())
        ray.kill(w)
    med = {k: round(statistics.median(v), 4) for k, v in times.items()}
    return {"model": spec.name, "params": spec.params, "state_mb": round(size / 2**20, 1),
            **med,
            "snapshot_speedup": round(med["store_snapshot_s"] / med["file_snapshot_s"], 2),
            "restore_speedup": round(med["store_restore_s"] / med["file_restore_s"], 2),
            "samples_s": {k: [round(x, 4) for x in v] for k, v in times.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    import ray

    from yatt.exec.env import apply_local_env

    apply_local_env(cpu=True)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             _temp_dir=tempfile.mkdtemp(prefix="ray-"))
    try:
        rows = [measure(spec, a.reps) for spec in _models()]
    finally:
        ray.shutdown()
    res = {"reps": a.reps, "models": rows,
           "statements": [f"{r['model']} ({r['state_mb']} MB of state): snapshot "
                          f"{r['store_snapshot_s']} s through the object store vs "
                          f"{r['file_snapshot_s']} s into the host file "
                          f"({r['snapshot_speedup']}x); restore {r['store_restore_s']} s vs "
                          f"{r['file_restore_s']} s ({r['restore_speedup']}x)"
                          for r in rows]}
    write_result(OUT, res, command="python bench/snapshot.py")
    print("\n".join(res["statements"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
