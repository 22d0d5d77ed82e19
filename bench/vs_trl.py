"""Side-by-side speed: yatt's executor vs TRL's GRPOTrainer on the same tiny GRPO job.

    .venv/bin/python bench/vs_trl.py [--steps 10] [--venv /tmp/yatt-trl-venv]

Same actor checkpoint (the prepared demo actor), same prompts (the demo task), 16 prompts
x 8 samples per step, 8 max new tokens, temperature 1, a reference model (KL 0.05), the
same reward function (the exact checker, `yatt.exec.task.exact_match`), the same number
of steps. TRL runs in its own venv (made here if missing: torch==2.13.0 + trl; TRL never
enters yatt's dependencies) on CPU with one thread (`use_cpu=True, bf16=False,
use_vllm=False`). yatt runs colocate on ONE single-thread device (rollout engine, trainer,
reference all on it) so both sides get one compute thread.
Writes bench/results/vs_trl.json: samples/s and tokens/s, steady state (steps after the
first) and including start-up, and their ratios.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PROMPTS, GROUP, MAX_NEW = 16, 8, 8

TRL_SCRIPT = r'''
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
class Clock(TrainerCallback):
    def __init__(self): self.t = []
    def on_step_end(self, args, state, control, **kw): self.t.append(time.perf_counter())
clock = Clock()
args = GRPOConfig(output_dir=cfg["out"], use_cpu=True, bf16=False, use_vllm=False,
                  gradient_checkpointing=False, per_device_train_batch_size=cfg["batch"],
                  num_generations=cfg["group"], generation_batch_size=cfg["batch"],
                  max_completion_length=cfg["max_new"], max_steps=cfg["steps"],
                  learning_rate=cfg["lr"], beta=cfg["beta"], temperature=1.0,
                  logging_steps=1, report_to=[], save_strategy="no", seed=0,
                  dataloader_num_workers=0, shuffle_dataset=False)
tr = GRPOTrainer(model=model, reward_funcs=exact, args=args, train_dataset=ds,
                 processing_class=tok, callbacks=[clock])
t_train = time.perf_counter()
tr.train()
logs = [h for h in tr.state.log_history if "completions/mean_length" in h]
print("RESULT " + json.dumps({"step_end": [t - t_train for t in clock.t],
      "startup_s": t_train - t_start, "total_s": time.perf_counter() - t_start,
      "mean_len": [h["completions/mean_length"] for h in logs],
      "reward": [h.get("reward", 0.0) for h in logs]}))
'''


def ensure_trl_venv(venv: Path) -> Path:
    py = venv / "bin" / "python"
    if py.exists() and subprocess.run([str(py), "-c", "import trl"], capture_output=True).returncode == 0:
        return py
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "torch==2.13.0", "trl"], check=True)
    return py


def run_trl(py: Path, model: str, rows: list, steps: int, lr: float, beta: float) -> dict:
    cfg = dict(model=model, rows=rows, steps=steps, batch=PROMPTS * GROUP, group=GROUP,
               max_new=MAX_NEW, lr=lr, beta=beta, out=tempfile.mkdtemp(prefix="trl-out-"))
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", CUDA_VISIBLE_DEVICES="")
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
    batch = PROMPTS * GROUP
    toks = sum(r["mean_len"]) * batch
    return {"wall_s": round(wall, 2), "startup_s": round(r["startup_s"], 2),
            "steady_step_s": round(steady, 3),
            "samples_per_s": round(batch / steady, 2),
            "samples_per_s_incl_startup": round(batch * steps / wall, 2),
            "tokens_per_s": round(sum(r["mean_len"][1:]) * batch / (ends[-1] - ends[0]), 1),
            "tokens_per_s_incl_startup": round(toks / wall, 1),
            "reward_first_last": [r["reward"][0], r["reward"][-1]]}


def run_yatt(steps: int, lr: float, beta: float, out: Path) -> tuple[dict, str, list]:
    from yatt.core.config import load_experiment
    from yatt.core.roles import Mode, ReleasePolicy, RewardSource
    from yatt.exec.demo_plans import demo_plan
    from yatt.exec.env import apply_local_env
    from yatt.exec.models import resolve_model
    from yatt.exec.runner import run_plan
    from yatt.exec.task import step_prompts

    apply_local_env(cpu=True)
    exp = load_experiment(ROOT / "configs" / "demo-learn.yaml")
    exp = dataclasses.replace(
        exp, cluster=dataclasses.replace(exp.cluster, gpus_per_node=1),
        algo=dataclasses.replace(exp.algo, reward=RewardSource.RULE, lr=lr, kl_coef=beta,
                                 entropy_coef=0.0),
        workload=dataclasses.replace(exp.workload, prompts_per_step=PROMPTS,
                                     samples_per_prompt=GROUP,
                                     response_len=dataclasses.replace(exp.workload.response_len,
                                                                      value=MAX_NEW)))
    model = str(resolve_model(exp.actor))
    # yatt prepends <bos> to each prompt (the SFT format); TRL tokenizes without special
    # tokens, so the same ids need the bos written into the text.
    rows = [{"prompt": "<bos>" + p.text, "answer": p.answer}
            for s in range(steps) for p in step_prompts(0, s, exp.workload)]
    plan = demo_plan(exp, Mode.COLOCATE, release=ReleasePolicy.RESIDENT)
    t = time.perf_counter()
    run_plan(plan, steps=steps, out_dir=out, seed=0, progress=False)
    wall = time.perf_counter() - t
    m = list(csv.DictReader(open(out / "metrics.csv")))
    st = [float(r["step_s"]) for r in m[1:]]
    batch = PROMPTS * GROUP
    steady = sum(st) / len(st)
    toks = [float(r["response_tokens"]) for r in m]
    return ({"wall_s": round(wall, 2), "startup_s": round(wall - sum(float(r["step_s"]) for r in m), 2),
             "steady_step_s": round(steady, 3), "samples_per_s": round(batch / steady, 2),
             "samples_per_s_incl_startup": round(batch * steps / wall, 2),
             "tokens_per_s": round(sum(toks[1:]) / sum(st), 1),
             "tokens_per_s_incl_startup": round(sum(toks) / wall, 1),
             "reward_first_last": [float(m[0]["reward_mean"]), float(m[-1]["reward_mean"])],
             "plan": plan.describe()}, model, rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--venv", default="/tmp/yatt-trl-venv")
    ap.add_argument("--result", default=str(ROOT / "bench" / "results" / "vs_trl.json"))
    a = ap.parse_args()
    lr, beta = 5e-4, 0.05
    py = ensure_trl_venv(Path(a.venv))
    y, model, rows = run_yatt(a.steps, lr, beta, Path(tempfile.mkdtemp(prefix="yatt-vs-trl-")))
    t = run_trl(py, model, rows, a.steps, lr, beta)
    res = {"yatt_samples_per_s": y["samples_per_s"], "trl_samples_per_s": t["samples_per_s"],
           "ratio": round(y["samples_per_s"] / t["samples_per_s"], 2),
           "ratio_tokens": round(y["tokens_per_s"] / t["tokens_per_s"], 2),
           "ratio_incl_startup": round(y["samples_per_s_incl_startup"] / t["samples_per_s_incl_startup"], 2),
           "steps": a.steps, "samples_per_step": PROMPTS * GROUP, "max_new_tokens": MAX_NEW,
           "yatt": y, "trl": t, "machine": "2 shared cores, CPU only, one thread per worker"}
    Path(a.result).parent.mkdir(parents=True, exist_ok=True)
    Path(a.result).write_text(json.dumps(res, indent=1))
    print(f"vs_trl: yatt {y['samples_per_s']} samples/s vs TRL {t['samples_per_s']} (steady state, "
          f"ratio {res['ratio']}x; incl. start-up {res['ratio_incl_startup']}x) -> {a.result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
