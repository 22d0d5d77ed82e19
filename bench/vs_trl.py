"""Side-by-side speed: yatt's executor vs TRL's GRPOTrainer on the same tiny GRPO job.

    .venv/bin/python bench/vs_trl.py [--steps 10] [--venv /tmp/yatt-trl-venv] [--no-large]

Same actor checkpoint (the prepared demo actor), same prompts (the demo task, in the same
order), the same samples per prompt, max new tokens, temperature 1, a reference model
(KL 0.05), the same reward function (the exact checker, `yatt.exec.task.exact_match`),
constant lr 5e-4 without warmup, no checkpoints, the same number of steps. TRL runs in its
own venv (made here if missing: torch==2.13.0 + trl; TRL never enters yatt's
dependencies) on CPU with one thread (`use_cpu=True, bf16=False, use_vllm=False`). yatt
runs colocate on ONE single-thread device (rollout engine, trainer, reference all on it,
engines resident) so both sides get one compute thread.

Two configurations: the original (16 prompts x 8 samples, 8 new tokens; the top-level
numbers of the result) and a larger one where batching matters more (64 x 8, 32 new
tokens; under "large"), never instead of it.

Steady state is wall clock between step starts (steps 2..N for yatt, so it includes the
supervisor's per-step trainer snapshot; step ends 1..N for TRL), not the sum of phases.
"Including start-up" is the whole wall time of each side's process/run. The load average
is sampled before and after each side: the box is shared, so read the ratio with it.
Writes bench/results/vs_trl.json and prints one summary line.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _results import write_result  # noqa: E402  (bench/ holds the script: on sys.path)
SMALL = dict(prompts=16, group=8, max_new=8)        # the original job
LARGE = dict(prompts=64, group=8, max_new=32)       # more samples, longer responses

TRL_SCRIPT = r"""
import json, os, re, sys, time
t_start = time.perf_counter()
import torch
torch.set_num_threads(1)
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer
cfg = json.loads(sys.argv[1])
FIRST_INT = re.compile(r"-?\d+")
def exact(completions, answer, **kw):   # yatt.exec.task.exact_match, inlined
    out = []
    for c, a in zip(completions, answer):
        m = FIRST_INT.search(c)
        out.append(1.0 if m is not None and m.group(0) == a.strip() else 0.0)
    return out
ds = Dataset.from_list(cfg["rows"])
tok = AutoTokenizer.from_pretrained(cfg["model"])
model = AutoModelForCausalLM.from_pretrained(cfg["model"], dtype=torch.float32)
gen_s = []
_generate = model.generate
def timed_generate(*a, **k):            # TRL's rollout time (HF generate), per call
    t = time.perf_counter()
    try:
        return _generate(*a, **k)
    finally:
        gen_s.append(time.perf_counter() - t)
model.generate = timed_generate
class Clock(TrainerCallback):
    def __init__(self): self.t = []
    def on_step_end(self, args, state, control, **kw): self.t.append(time.perf_counter())
clock = Clock()
args = GRPOConfig(output_dir=cfg["out"], use_cpu=True, bf16=False, use_vllm=False,
                  gradient_checkpointing=False, per_device_train_batch_size=cfg["batch"],
                  num_generations=cfg["group"], generation_batch_size=cfg["batch"],
                  max_completion_length=cfg["max_new"], max_steps=cfg["steps"],
                  learning_rate=cfg["lr"], lr_scheduler_type="constant", warmup_steps=0,
                  beta=cfg["beta"], temperature=1.0,
                  logging_steps=1, report_to=[], save_strategy="no", seed=0,
                  dataloader_num_workers=0, shuffle_dataset=False)
tr = GRPOTrainer(model=model, reward_funcs=exact, args=args, train_dataset=ds,
                 processing_class=tok, callbacks=[clock])
t_train = time.perf_counter()
tr.train()
logs = [h for h in tr.state.log_history if "completions/mean_length" in h]
print("RESULT " + json.dumps({"step_end": [t - t_train for t in clock.t],
      "startup_s": t_train - t_start, "total_s": time.perf_counter() - t_start,
      "generate_s": gen_s,
      "mean_len": [h["completions/mean_length"] for h in logs],
      "reward": [h.get("reward", 0.0) for h in logs]}))
"""


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def ensure_trl_venv(venv: Path) -> Path:
    py = venv / "bin" / "python"
    if py.exists() and subprocess.run([str(py), "-c", "import trl"], capture_output=True).returncode == 0:
        return py
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "torch==2.13.0", "trl"], check=True)
    return py


def run_trl(py: Path, model: str, rows: list, steps: int, lr: float, beta: float,
            job: dict) -> dict:
    batch = job["prompts"] * job["group"]
    cfg = dict(model=model, rows=rows, steps=steps, batch=batch, group=job["group"],
               max_new=job["max_new"], lr=lr, beta=beta, out=tempfile.mkdtemp(prefix="trl-out-"))
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", CUDA_VISIBLE_DEVICES="")
    load = load_avg()
    t = time.perf_counter()
    p = subprocess.run([str(py), "-c", TRL_SCRIPT, json.dumps(cfg)], capture_output=True,
                       text=True, env=env)
    wall = time.perf_counter() - t
    line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    if p.returncode or not line:
        raise SystemExit(f"TRL run failed:\n{p.stderr[-3000:]}")
    r = json.loads(line[0][7:])
    ends = r["step_end"]
    steady = (ends[-1] - ends[0]) / (len(ends) - 1)
    toks = sum(r["mean_len"]) * batch
    gen = r["generate_s"][1:] or r["generate_s"]
    return {"wall_s": round(wall, 2), "startup_s": round(r["startup_s"], 2),
            "first_step_s": round(ends[0], 2),
            "steady_step_s": round(steady, 3),
            "samples_per_s": round(batch / steady, 2),
            "samples_per_s_incl_startup": round(batch * steps / wall, 2),
            "tokens_per_s": round(sum(r["mean_len"][1:]) * batch / (ends[-1] - ends[0]), 1),
            "tokens_per_s_incl_startup": round(toks / wall, 1),
            "phases_s": {"generate (HF)": round(sum(gen) / len(gen), 3),
                         "everything else (reference, loss, backward, Adam, reward)":
                             round(steady - sum(gen) / len(gen), 3)},
            "mean_response_tokens": round(sum(r["mean_len"]) / len(r["mean_len"]), 2),
            "reward_first_last": [r["reward"][0], r["reward"][-1]],
            "load_avg_before": load, "load_avg_after": load_avg()}


def _step_starts(trace: Path) -> dict[int, float]:
    starts: dict[int, float] = {}
    for line in trace.read_text().splitlines():
        r = json.loads(line)
        if r.get("kind") == "span":
            starts[r["step"]] = min(starts.get(r["step"], math.inf), r["start_s"])
    return starts


PHASES = ("rollout_s", "ref_logprob_s", "train_s", "weight_sync_s", "offload_s", "reload_s")


def yatt_experiment(job: dict, lr: float, beta: float):
    from yatt.core.config import load_experiment
    from yatt.core.roles import RewardSource
    from yatt.core.specs import LrSchedule

    exp = load_experiment(ROOT / "configs" / "demo-learn.yaml")
    return dataclasses.replace(
        exp, cluster=dataclasses.replace(exp.cluster, gpus_per_node=1),
        algo=dataclasses.replace(exp.algo, reward=RewardSource.RULE, lr=lr, kl_coef=beta,
                                 entropy_coef=0.0, lr_schedule=LrSchedule.CONSTANT,
                                 lr_warmup_steps=0),
        engine=dataclasses.replace(exp.engine, max_num_seqs=max(exp.engine.max_num_seqs,
                                                                job["prompts"] * job["group"])),
        checkpoint=dataclasses.replace(exp.checkpoint, every_steps=0, every_minutes=0.0,
                                       at_steps=(), async_save=False),
        workload=dataclasses.replace(exp.workload, prompts_per_step=job["prompts"],
                                     samples_per_prompt=job["group"],
                                     response_len=dataclasses.replace(exp.workload.response_len,
                                                                      value=job["max_new"])))


def run_yatt(steps: int, lr: float, beta: float, out: Path, job: dict) -> tuple[dict, str, list]:
    from yatt.core.roles import Mode, ReleasePolicy
    from yatt.core.layout import make_plan
    from yatt.exec.env import apply_local_env
    from yatt.exec.models import resolve_model
    from yatt.exec.runner import run_plan
    from yatt.exec.task import step_prompts

    apply_local_env(cpu=True)
    exp = yatt_experiment(job, lr, beta)
    model = str(resolve_model(exp.actor))
    # yatt prepends <bos> to each prompt (the SFT format); TRL tokenizes without special
    # tokens, so the same ids need the bos written into the text.
    rows = [{"prompt": "<bos>" + p.text, "answer": p.answer}
            for s in range(steps) for p in step_prompts(0, s, exp.workload)]
    plan = make_plan(exp, Mode.COLOCATE, release=ReleasePolicy.RESIDENT)
    load = load_avg()
    t = time.perf_counter()
    run_plan(plan, steps=steps, out_dir=out, seed=0, progress=False)
    wall = time.perf_counter() - t
    m = list(csv.DictReader(open(out / "metrics.csv")))
    meta = json.loads((out / "trace.jsonl").read_text().splitlines()[0])
    extra = meta.get("extra", {})
    batch = job["prompts"] * job["group"]
    starts = _step_starts(out / "trace.jsonl")
    # wall clock from the start of step 1 to the start of the last step: every phase, the
    # driver's bookkeeping and the supervisor's snapshot between steps
    steady = (starts[steps - 1] - starts[1]) / (steps - 2)
    phase_steps = sum(float(r["step_s"]) for r in m[1:-1]) / (steps - 2)
    toks = [float(r["response_tokens"]) for r in m]
    phases = {k[:-2]: round(sum(float(r[k]) for r in m[1:-1]) / (steps - 2), 3)
              for k in PHASES if any(float(r[k]) for r in m[1:-1])}
    phases["between steps (trainer snapshot, supervisor, driver)"] = round(steady - phase_steps, 3)
    return ({"wall_s": round(wall, 2), "startup_s": extra.get("startup_s"),
             "startup_parts_s": {k: extra[k] for k in ("trainer_setup_s", "engine_start_s")
                                 if k in extra},
             "first_step_s": round(float(m[0]["step_s"]), 2),
             "first_step_phases_s": {k[:-2]: round(float(m[0][k]), 3) for k in PHASES
                                     if float(m[0][k])},
             "steady_step_s": round(steady, 3), "samples_per_s": round(batch / steady, 2),
             "samples_per_s_incl_startup": round(batch * steps / wall, 2),
             "tokens_per_s": round(sum(toks[1:-1]) / (starts[steps - 1] - starts[1]), 1),
             "tokens_per_s_incl_startup": round(sum(toks) / wall, 1),
             "phases_s": phases,
             "mean_response_tokens": round(sum(toks) / len(toks) / batch, 2),
             "reward_first_last": [float(m[0]["reward_mean"]), float(m[-1]["reward_mean"])],
             "plan": plan.describe(), "release": plan.release.value,
             "load_avg_before": load, "load_avg_after": load_avg()}, model, rows)


def compare(py: Path, steps: int, lr: float, beta: float, job: dict) -> dict:
    y, model, rows = run_yatt(steps, lr, beta, Path(tempfile.mkdtemp(prefix="yatt-vs-trl-")), job)
    t = run_trl(py, model, rows, steps, lr, beta, job)
    return {"yatt_samples_per_s": y["samples_per_s"], "trl_samples_per_s": t["samples_per_s"],
            "ratio": round(y["samples_per_s"] / t["samples_per_s"], 2),
            "ratio_tokens": round(y["tokens_per_s"] / t["tokens_per_s"], 2),
            "ratio_incl_startup": round(y["samples_per_s_incl_startup"]
                                        / t["samples_per_s_incl_startup"], 2),
            "steps": steps, "samples_per_step": job["prompts"] * job["group"],
            "prompts_per_step": job["prompts"], "samples_per_prompt": job["group"],
            "max_new_tokens": job["max_new"], "yatt": y, "trl": t}


def statements(r: dict) -> list[str]:
    """Plain statements computed from one job's measurements (where yatt wins and loses)."""
    y, t = r["yatt"], r["trl"]
    yp, tp = y["phases_s"], t["phases_s"]
    rest = sum(v for k, v in yp.items() if k != "rollout")
    return [
        f"steady state: yatt {'wins' if r['ratio'] >= 1 else 'loses'} ({y['steady_step_s']} vs "
        f"{t['steady_step_s']} s/step, ratio {r['ratio']}x; target 2x "
        f"{'met' if r['ratio'] >= 2 else 'not met'})",
        f"rollout: yatt's vLLM engine {yp.get('rollout')} s/step vs TRL's HF generate "
        f"{tp['generate (HF)']} s/step",
        f"rest of the step: yatt {round(rest, 3)} s (" + ", ".join(
            f"{k} {v}" for k, v in yp.items() if k != "rollout") + ") vs TRL "
        f"{tp['everything else (reference, loss, backward, Adam, reward)']} s",
        f"start-up: yatt {y['startup_s']} s to launch + {y['first_step_s']} s first step "
        f"(its reference phase {y['first_step_phases_s'].get('ref_logprob')} s) vs TRL "
        f"{t['startup_s']} s + {t['first_step_s']} s; including start-up the ratio is "
        f"{r['ratio_incl_startup']}x",
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--venv", default="/tmp/yatt-trl-venv")
    ap.add_argument("--no-large", action="store_true", help="only the original configuration")
    ap.add_argument("--result", default=str(ROOT / "bench" / "results" / "vs_trl.json"))
    a = ap.parse_args()
    if a.steps < 4:
        raise SystemExit("--steps: allowed >= 4 (steady state needs steps 2..N)")
    lr, beta = 5e-4, 0.05
    py = ensure_trl_venv(Path(a.venv))
    res = compare(py, a.steps, lr, beta, SMALL)
    res["statements"] = statements(res)
    if not a.no_large:
        res["large"] = compare(py, a.steps, lr, beta, LARGE)
        res["large"]["statements"] = statements(res["large"])
    res["target_ratio"] = 2.0
    res["machine"] = (f"{os.cpu_count()} shared cores, CPU only, one compute thread per side "
                      "(TRL: one process; yatt: one device, its processes take turns)")
    write_result(a.result, res)
    big = (f"; large job {res['large']['ratio']}x" if "large" in res else "")
    print(f"vs_trl: yatt {res['yatt_samples_per_s']} samples/s vs TRL {res['trl_samples_per_s']} "
          f"(steady state, ratio {res['ratio']}x; incl. start-up {res['ratio_incl_startup']}x"
          f"{big}; target 2x) -> {a.result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
