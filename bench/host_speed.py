"""Host speed over time: how steady is this machine's CPU between one measurement and the next?

Why: fidelity compares a profile measured at one time with runs at another. On a shared
VM the vCPUs can run at different speeds from one few-second window to the next (neighbours,
host power management), which no cost model can predict. This bench measures the noise
floor so fidelity errors can be read against it. For `--seconds` it repeats, every
`--every` seconds, three fixed probes in one process with nothing else of ours running:
  train   one Megatron train_step of the demo actor on 16 x 32 tokens (median of 3)
  python  a pure-Python loop (300k additions)
  matmul  100 fp32 256x256 matmuls (torch, one thread)
and reports per probe the fastest, median and 90th-percentile times, the share of samples
more than 20% above the fastest ("slow windows") and the median slow/fast ratio; and how
well the two host-probe parts (python, matmul) follow the real train step over the same
seconds: per sample and over windows of WINDOW samples, the correlation of their log times
with the train step's and the train step's elasticity on each (the slope of log train time
on log probe time: 1 means a ratio of the probe carries over to the train step as it is,
less means the probe over-reacts). This is what `yatt.planner.hostscale.own_drift` rests
on: how much a few seconds of probe say about the next minute's speed.
Writes bench/results/host_speed.json and prints one line.
Usage: .venv/bin/python bench/host_speed.py [--seconds 90] [--every 2]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _results import write_result  # noqa: E402  (bench/ holds the script: on sys.path)
OUT = ROOT / "bench" / "results" / "host_speed.json"
SLOW = 1.2   # a sample this much above the fastest counts as a slow window
WINDOW = 6   # samples averaged per window for the tracking numbers (~15 s at --every 2)


def probes():
    """name -> zero-argument callable returning seconds (built once, warm)."""
    import numpy as np
    import torch

    from yatt.core.config import load_experiment
    from yatt.profiling import microbench as mb

    mb.prepare("cpu")
    exp = load_experiment(ROOT / "configs" / "demo-cpu.yaml")
    tb = mb.TrainBench(exp.actor, mb.model_path(exp.actor), "cpu", exp.algo.micro_batch_tokens)
    rng = np.random.default_rng(0)
    x = torch.randn(256, 256)

    return {"train": lambda: tb.step_time(16, 32, 3, rng),
            "python": lambda: mb.python_loop_time(300_000),
            "matmul": lambda: mb.matmul_loop_time(x, 100)}


def summarize(xs: list[float]) -> dict:
    fast = min(xs)
    slow = [x for x in xs if x > SLOW * fast]
    quick = [x for x in xs if x <= SLOW * fast]
    return {"n": len(xs), "min_s": round(fast, 5), "median_s": round(statistics.median(xs), 5),
            "p90_s": round(sorted(xs)[int(0.9 * (len(xs) - 1))], 5),
            "slow_share": round(len(slow) / len(xs), 3),
            "slow_over_fast": round(statistics.median(slow) / statistics.median(quick), 3)
            if slow else 1.0}


def tracking(samples: dict[str, list[float]], ref: str = "train") -> dict:
    """Per probe other than `ref`: correlation of log times with `ref`'s and `ref`'s
    elasticity on it (least-squares slope), per sample and over WINDOW-sample means."""
    import numpy as np

    def windows(xs: list[float], w: int) -> np.ndarray:
        a = np.asarray(xs, dtype=float)
        n = len(a) // w
        return np.log(a[:n * w].reshape(n, w).mean(axis=1))

    out = {}
    for name, xs in samples.items():
        if name == ref:
            continue
        row = {}
        for label, w in (("sample", 1), (f"window{WINDOW}", WINDOW)):
            x, y = windows(xs, w), windows(samples[ref], w)
            if len(x) < 3 or x.std() == 0 or y.std() == 0:
                continue
            row[label] = {"corr": round(float(np.corrcoef(x, y)[0, 1]), 3),
                          "elasticity": round(float(np.polyfit(x, y, 1)[0]), 3)}
        out[name] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=90.0)
    ap.add_argument("--every", type=float, default=2.0)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    import os

    ps = probes()
    for f in ps.values():
        f()   # warm-up
    samples: dict[str, list[float]] = {k: [] for k in ps}
    series = []
    load0 = os.getloadavg()[0]
    end = time.time() + args.seconds
    while time.time() < end:
        row = {k: f() for k, f in ps.items()}
        for k, v in row.items():
            samples[k].append(v)
        series.append({"t": round(args.seconds - (end - time.time()), 1),
                       **{k: round(v, 5) for k, v in row.items()}})
        time.sleep(args.every)
    res = {"seconds": args.seconds, "every_s": args.every, "slow_threshold": SLOW,
           "load_avg": round((load0 + os.getloadavg()[0]) / 2, 2),
           "probes": {k: summarize(v) for k, v in samples.items()},
           "train_tracking": tracking(samples), "series": series}
    out = Path(args.out)
    write_result(out, res, indent=2)
    p = res["probes"]
    print("host speed: " + ", ".join(
        f"{k} median/min {v['median_s'] / v['min_s']:.2f}, slow share {v['slow_share']:.0%} "
        f"(x{v['slow_over_fast']})" for k, v in p.items())
        + "; train follows " + ", ".join(
            f"{k} at corr {v[f'window{WINDOW}']['corr']} (elasticity {v[f'window{WINDOW}']['elasticity']})"
            for k, v in res["train_tracking"].items() if f"window{WINDOW}" in v) + f" -> {out}")


if __name__ == "__main__":
    main()
