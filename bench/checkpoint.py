"""Checkpoint stall: how long training waits for a checkpoint, and what it costs in all.

Runs one plan several times in one Ray session, side by side: `--rounds` interleaved rounds
of (no checkpoints; a checkpoint after every step written asynchronously by a thread of
each trainer, the CPU default; the same written by megatron's forked writer process), so
host drift hits the three alike, then one run with synchronous writes. The trainer is DP=2
on the 2 CPU "devices", model + optimizer state (Adam) + RNG + counters, plus state.json
and the trace so far. Step times are medians over the pooled steps >= 2 of a variant's runs.

  stall_s      seconds the step loop waits per checkpoint (`ckpt_stall_s` in metrics.csv:
               the previous save call's result collected, state.json and trace handed to
               the driver's I/O thread, the save call sent; in that call the trainers
               finalise the previous write, then plan and hand off this one while the next
               step runs, and the manifest + rename run on the I/O thread), median over
               checkpointed steps >= 2 (step 0 pays one-off process warm-up, step 1 the
               first write's set-up)
  step_s       median step time (steps >= 2) of the run WITHOUT checkpoints
  stall_ratio  stall_s / step_s, for a checkpoint after EVERY step (the worst case;
               the default is every 10 steps or 30 minutes, i.e. a tenth of it)
  cost_ratio   (step time with checkpoints + stall_s - step_s) / step_s: the whole cost of
               a checkpoint per step, the writer's share hidden in the next step included
               (a difference of runs on shared cores: noisier than stall_ratio);
               process_cost_ratio the same with the forked writer
  snapshot_s   seconds the step loop spends on the per-step in-memory snapshot fault
               recovery uses (not a checkpoint; the ranks copy their state during the next
               step, in both runs)
  overhead_s   median `overhead_s` of the run without checkpoints: step time in which no
               traced phase ran (orchestration between phases); overhead_frac of step_s

Workloads: configs/demo-learn.yaml (128 samples/step, 0.3-1 s steps by host: the worst case for a
fixed per-checkpoint cost; the top-level numbers) and, under "also", configs/fidelity/wide.yaml
(longer steps), colocate, engines resident. Writes bench/results/checkpoint.json.
Usage: .venv/bin/python bench/checkpoint.py [--steps 8] [--rounds 2] [--config C] [--also C2|'']
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _results import write_result  # noqa: E402  (bench/ holds the script: on sys.path)


def _col(run_dir: Path, name: str, first: int = 2) -> list[float]:
    rows = list(csv.DictReader(open(run_dir / "metrics.csv")))
    return [float(r[name]) for r in rows if int(r["step"]) >= first and r.get(name) not in ("", None)]


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    every: int              # checkpoint every N steps (0: none)
    async_save: bool = True
    writer: str = "auto"    # CheckpointSpec.writer


VARIANTS = (Variant("none", 0), Variant("async", 1, writer="thread"),
            Variant("async_process", 1, writer="process"))
SYNC = Variant("sync", 1, async_save=False)


def measure(config: str, steps: int, rounds: int) -> dict:
    """Runs of one experiment, side by side: `rounds` rounds of (none, thread-written async,
    process-written async) interleaved so host drift hits them alike, then one synchronous run."""
    from yatt.core.config import load_experiment
    from yatt.core.layout import make_plan
    from yatt.core.roles import Mode, ReleasePolicy
    from yatt.core.specs import CkptWriter
    from yatt.exec.env import ensure_ray
    from yatt.exec.runner import run_plan

    exp = load_experiment(config)
    base = make_plan(exp, Mode.COLOCATE, release=ReleasePolicy.RESIDENT)
    ensure_ray(base.cluster.num_gpus)
    root = Path(tempfile.mkdtemp(prefix="yatt-ckpt-bench-"))
    dirs: dict[str, list[Path]] = {}
    load: dict[str, list[float]] = {}
    order = [v for _ in range(rounds) for v in VARIANTS] + [SYNC]
    for i, v in enumerate(order):
        ck = dataclasses.replace(exp.checkpoint, every_steps=v.every, every_minutes=0.0,
                                 async_save=v.async_save, keep_last=2, writer=CkptWriter(v.writer))
        plan = dataclasses.replace(base, experiment=dataclasses.replace(exp, checkpoint=ck))
        load.setdefault(v.name, []).append(round(os.getloadavg()[0], 2))
        out = root / f"{i}-{v.name}"
        run_plan(plan, steps=steps, out_dir=out, seed=0, progress=False, log=lambda m: None)
        dirs.setdefault(v.name, []).append(out)
    runs = {}
    for name, ds in dirs.items():
        col = {c: [x for d in ds for x in _col(d, c)]
               for c in ("step_s", "snapshot_s", "overhead_s", "overhead_frac", "ckpt_stall_s")}
        r = {k: round(statistics.median(col[k]), 4)
             for k in ("step_s", "snapshot_s", "overhead_s", "overhead_frac")}
        r["runs"] = len(ds)
        if name != "none":
            r["stall_s"] = round(statistics.median(col["ckpt_stall_s"]), 4)
            r["stall_s_max"] = round(max(col["ckpt_stall_s"]), 4)
            ck_dir = sorted((ds[-1] / "checkpoints").glob("step-*"))[-1]
            r["checkpoint_mb"] = round(
                sum(p.stat().st_size for p in ck_dir.rglob("*") if p.is_file()) / 2**20, 2)
        runs[name] = r
    step_s = runs["none"]["step_s"]

    def cost(name: str) -> float:
        return round((runs[name]["step_s"] + runs[name]["stall_s"] - step_s) / step_s, 4)

    return {"step_s": step_s, "stall_s": runs["async"]["stall_s"],
            "stall_ratio": round(runs["async"]["stall_s"] / step_s, 4),
            "cost_ratio": cost("async"),
            "process_stall_s": runs["async_process"]["stall_s"],
            "process_cost_ratio": cost("async_process"),
            "sync_stall_s": runs["sync"]["stall_s"],
            "sync_stall_ratio": round(runs["sync"]["stall_s"] / step_s, 4),
            "snapshot_s": runs["none"]["snapshot_s"],
            "snapshot_ratio": round(runs["none"]["snapshot_s"] / step_s, 4),
            "overhead_s": runs["none"]["overhead_s"], "overhead_frac": runs["none"]["overhead_frac"],
            "checkpoint_every_steps": 1, "steps": steps, "rounds": rounds,
            "config": os.path.relpath(config, ROOT), "plan": base.describe(), "runs": runs,
            "load_avg_at_start": load}


def main() -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds of the async runs")
    ap.add_argument("--config", default=str(ROOT / "configs" / "demo-learn.yaml"))
    ap.add_argument("--also", default=str(ROOT / "configs" / "fidelity" / "wide.yaml"),
                    help="a second experiment with longer steps ('' to skip)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "checkpoint.json"))
    args = ap.parse_args()
    out = measure(args.config, args.steps, args.rounds)
    if args.also:
        out["also"] = measure(args.also, args.steps, args.rounds)
    out["machine"] = "2 shared cores, CPU only, one thread per device"
    write_result(args.out, out)
    for o in [out] + ([out["also"]] if "also" in out else []):
        print(f"checkpoint {o['config']}: step {o['step_s']:.3f} s, async stall {o['stall_s']:.3f} s "
              f"({o['stall_ratio'] * 100:.1f}%, all in {o['cost_ratio'] * 100:.1f}%; forked writer all in "
              f"{o['process_cost_ratio'] * 100:.1f}%), sync stall {o['sync_stall_s']:.3f} s "
              f"({o['sync_stall_ratio'] * 100:.1f}%), snapshot {o['snapshot_s']:.3f} s, "
              f"overhead {o['overhead_s']:.3f} s ({o['overhead_frac'] * 100:.1f}%)")
    return out


if __name__ == "__main__":
    main()
