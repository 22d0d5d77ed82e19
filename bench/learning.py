"""Learning bench: GRPO on the demo task against the trained GenRM, exact-checker accuracy
from -> to over several seeds. Writes bench/results/learning.json, whole, and prints one
line.

    .venv/bin/python bench/learning.py [--steps 50] [--seeds 0,1,2] [--mode partial]
    .venv/bin/python bench/learning.py --mode async --result bench/results/learning-async.json

A comparison (`--reward rule`: the exact checker as the reward; `--lr`, `--kl`; `--mode
async`: one-step off-policy, the rollout engine and the GenRM on half the devices, the
trainer on the rest) is a run of its own and needs `--result` naming its own file: every results file is what one run of
this script wrote, nothing merged from another.

Each seed is a full `run_plan` of configs/demo-learn.yaml (one Ray session for all seeds);
"from" is the mean exact-checker accuracy of the first 5 steps, "to" the mean of the last 5
(one step's accuracy is a 128-sample estimate, +-0.04, so single steps are too noisy to
compare). Also measured, before the runs: the GenRM's agreement with the exact checker on a
balanced correct/near-miss set and on the SFT actor's own T=1 rollouts
(`demo_eval.generated_agreement`, `demo_eval.rollout_agreement`).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _results import write_result  # noqa: E402  (bench/ holds the script: on sys.path)


WINDOW = 5    # steps averaged for "from" (the first ones) and "to" (the last ones)


def summarize(rows: list[dict]) -> dict:
    acc = [float(r["accuracy"]) for r in rows]
    rew = [float(r["reward_mean"]) for r in rows]
    k = min(WINDOW, len(acc))
    return {"accuracy_from": round(sum(acc[:k]) / k, 4), "accuracy_to": round(sum(acc[-k:]) / k, 4),
            "reward_from": round(sum(rew[:k]) / k, 4), "reward_to": round(sum(rew[-k:]) / k, 4),
            "accuracy_curve": [round(a, 4) for a in acc], "step_s_mean": round(
                sum(float(r["step_s"]) for r in rows) / len(rows), 3)}


def _vs_synchronous(fr: float, to: float, steps: int) -> dict:
    """The async rise against the synchronous default run's, as recorded in learning.json
    (the target: at least half of it over the same steps). Read, not re-run: the accuracy
    curve is a function of the seeds, not of the host's speed."""
    ref_path = ROOT / "bench" / "results" / "learning.json"
    ref = json.loads(ref_path.read_text())
    if ref["steps"] != steps:
        raise SystemExit(f"{ref_path.name} ran {ref['steps']} steps, this run {steps}: "
                         "not comparable")
    sync_rise = ref["accuracy_to_mean"] - ref["accuracy_from_mean"]
    rise = to - fr
    return {"reference": f"bench/results/{ref_path.name} ({ref['_meta']['date']}, {ref['plan']})",
            "sync_rise": round(sync_rise, 4), "async_rise": round(rise, 4),
            "rise_ratio": round(rise / sync_rise, 3) if sync_rise > 0 else None,
            "target_ratio": 0.5, "met": sync_rise > 0 and rise >= 0.5 * sync_rise}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--mode", default="partial", choices=["partial", "colocate", "async"])
    ap.add_argument("--config", default=str(ROOT / "configs" / "demo-learn.yaml"))
    ap.add_argument("--out", default="/tmp/yatt-learning")
    ap.add_argument("--result", default=None,
                    help="results file (default bench/results/learning.json; required with "
                         "--reward rule, --lr or --kl)")
    ap.add_argument("--reward", default="genrm", choices=["genrm", "rule"],
                    help="reward source (rule: the exact checker itself, for comparison)")
    ap.add_argument("--lr", type=float, default=None, help="override algo.lr")
    ap.add_argument("--kl", type=float, default=None, help="override algo.kl_coef")
    a = ap.parse_args()
    if a.result is None:
        if a.reward != "genrm" or a.lr is not None or a.kl is not None or a.mode == "async":
            ap.error("a comparison run needs --result FILE: learning.json holds the default run")
        a.result = str(ROOT / "bench" / "results" / "learning.json")

    from yatt.core.config import load_experiment
    from yatt.core.roles import Mode, ReleasePolicy
    from yatt.core.layout import make_plan
    from yatt.exec.env import apply_local_env, ensure_ray
    from yatt.exec.models import resolve_model
    from yatt.exec.runner import run_plan

    apply_local_env(cpu=True)
    import dataclasses

    from yatt.core.roles import RewardSource
    exp = load_experiment(a.config)
    algo = dataclasses.replace(exp.algo, reward=RewardSource(a.reward))
    if a.lr is not None:
        algo = dataclasses.replace(algo, lr=a.lr)
    if a.kl is not None:
        algo = dataclasses.replace(algo, kl_coef=a.kl)
    exp = dataclasses.replace(exp, algo=algo)
    t0 = time.perf_counter()
    resolve_model(exp.actor), resolve_model(exp.genrm)          # prepare once, before timing
    prep_s = time.perf_counter() - t0
    demo = json.loads((resolve_model(exp.genrm) / "yatt_demo.json").read_text())["report"]
    actor = json.loads((resolve_model(exp.actor) / "yatt_demo.json").read_text())["report"]
    agreement = {}
    if a.reward == "genrm":
        from yatt.demo.evaluate import generated_agreement, rollout_agreement
        agreement = {"balanced_near_miss": generated_agreement(resolve_model(exp.genrm)),
                     "actor_rollouts": rollout_agreement(resolve_model(exp.actor),
                                                         resolve_model(exp.genrm))}
        print(f"genrm agreement: {agreement}", flush=True)
    asynchronous = Mode(a.mode) is Mode.ASYNC
    plan = make_plan(exp, Mode(a.mode), release=ReleasePolicy.RESIDENT,
                     rollout_devices=exp.cluster.num_gpus // 2 if asynchronous else None)
    import ray
    started = ensure_ray(plan.cluster.num_gpus)
    per_seed = {}
    try:
        for seed in [int(s) for s in a.seeds.split(",")]:
            out = Path(a.out) / f"seed{seed}"
            t = time.perf_counter()
            run_plan(plan, steps=a.steps, out_dir=out, seed=seed, progress=False)
            rows = list(csv.DictReader(open(out / "metrics.csv")))
            per_seed[seed] = {**summarize(rows), "wall_s": round(time.perf_counter() - t, 1),
                              "run_dir": str(out)}
            print(f"seed {seed}: accuracy {per_seed[seed]['accuracy_from']:.3f} -> "
                  f"{per_seed[seed]['accuracy_to']:.3f}", flush=True)
    finally:
        if started:
            ray.shutdown()
    fr = sum(v["accuracy_from"] for v in per_seed.values()) / len(per_seed)
    to = sum(v["accuracy_to"] for v in per_seed.values()) / len(per_seed)
    res = {"config": os.path.relpath(a.config, ROOT), "plan": plan.describe(), "steps": a.steps,
           "samples_per_step": exp.workload.samples_per_step, "reward": exp.algo.reward.value,
           "accuracy_from_mean": round(fr, 4), "accuracy_to_mean": round(to, 4),
           "seeds": per_seed, "prep_s": round(prep_s, 1), "actor_prep": actor, "genrm_prep": demo,
           "genrm_agreement": agreement, "from_to": f"mean of the first {WINDOW} / last {WINDOW} steps",
           "machine": "2 shared cores, CPU only, 1 thread per device"}
    res.update(lr=exp.algo.lr, kl_coef=exp.algo.kl_coef, lr_warmup_steps=exp.algo.lr_warmup_steps,
               temperature=exp.algo.temperature)
    line = ""
    if asynchronous:
        res["vs_synchronous"] = line = _vs_synchronous(fr, to, a.steps)
    write_result(a.result, res)
    print(f"learning: accuracy {fr:.3f} -> {to:.3f} over seeds {a.seeds} "
          f"({a.steps} steps, {a.reward} reward) -> {a.result}"
          + (f"; rise {line['rise_ratio']:.2f}x the synchronous run's" if line else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
