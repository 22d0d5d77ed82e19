"""`yatt run`: plan (if given an experiment), execute on Ray, then say how well the
simulator predicted what happened.

Why: the executor (yatt.exec) imports only core; choosing a placement (planner) and
comparing prediction with measurement (sim) happen here, on top.
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Optional

from rich.console import Console

from yatt.core.bundled import DEMO_EXPERIMENT
from yatt.core.config import is_plan_file, load_experiment, load_plan
from yatt.core.errors import InputError, clean
from yatt.core.limits import MAX_STEPS
from yatt.core.plan import Experiment, Plan
from yatt.core.roles import Mode
from yatt.core.runnable import EXECUTED_MODES, check_runnable

from .common import (add_host_check_flag, check_fault_env, check_out_dir, config_or_bundled,
                     cost_model_line, host_check_on, host_checked, needs_exec, phase_table,
                     print_profile_gaps, profile_arg, profile_or_shipped, shown)


def _mode(text: Optional[str]) -> Optional[Mode]:
    if text is None:
        return None
    mode = next((m for m in EXECUTED_MODES if m.value == text), None)
    if mode is None:
        raise InputError(f"got {text!r}; allowed: " + "|".join(m.value for m in EXECUTED_MODES),
                         field="--mode")
    return mode


def fidelity_report(console: Console, trace, cost, note: str = "") -> None:
    """Predicted (simulator, replaying the measured lengths) vs measured, per phase.
    `note`: how the host check rescaled the profile behind `cost` (said with the numbers)."""
    from yatt.core.trace import Trace
    from yatt.planner.explain import STEADY_STEPS
    from yatt.planner.replay import replay

    # Step 0 pays one-off process warm-up the simulator does not model (docs/fidelity.md);
    # it is left out whenever a later step exists.
    steps = len({s.step for s in trace.samples})
    skip = 1 if steps > 1 else 0
    if skip:
        trace = Trace(trace.meta, tuple(s for s in trace.samples if s.step >= skip),
                      tuple(s for s in trace.spans if s.step >= skip))
    rep = replay(trace, cost)
    console.print(phase_table(rep, note))
    few = (f"; {steps} steps: the first ones still warm up, --steps {STEADY_STEPS} or more "
           "compares steady steps" if steps < STEADY_STEPS else "")
    measured, predicted = rep.median_steps()
    console.print(f"fidelity: predicted {rep.predicted_stats.step_time_mean:.2f} s/step vs measured "
                  f"{rep.recorded_stats.step_time_mean:.2f} s/step ({rep.step_error * 100:+.1f}%)"
                  + (" over steps >= 1 (step 0: warm-up, excluded)" if skip else "")
                  + (f"; median step {predicted:.2f} vs {measured:.2f} s "
                     f"({(predicted - measured) / measured * 100:+.1f}%)" if measured > 0 else "")
                  + (f"; profile {note}" if note else "") + few, markup=False, highlight=False)


def _check_flags(args: argparse.Namespace) -> None:
    """Refuse bad checkpoint flags before any planning or start-up."""
    for flag, v, lo in (("--ckpt-every", args.ckpt_every, 0), ("--ckpt-minutes", args.ckpt_minutes, 0),
                        ("--keep", args.keep, 1)):
        if v is not None and not v >= lo:   # also refuses NaN
            raise InputError(f"got {v}; allowed: {'>= 1' if lo else '>= 0 (0: off)'}", field=flag)


def _check_checkpoint_dir(run_dir: Path) -> None:
    """RUN_DIR/checkpoints/ can be written (or made), before anything starts."""
    from yatt.exec.checkpoint import check_dir
    check_dir(run_dir)


def _with_checkpointing(plan: Plan, args: argparse.Namespace) -> Plan:
    """The plan with --ckpt-every / --ckpt-minutes / --keep applied."""
    c = plan.experiment.checkpoint
    over = {k: v for k, v in (("every_steps", args.ckpt_every), ("every_minutes", args.ckpt_minutes),
                              ("keep_last", args.keep)) if v is not None}
    if not over:
        return plan
    exp = dataclasses.replace(plan.experiment, checkpoint=dataclasses.replace(c, **over))
    return dataclasses.replace(plan, experiment=exp)


def _prepare(exp: Experiment, seed: int, steps: int):
    """The executor's check of the job (models, data, reward, judge) before anything starts."""
    try:
        from yatt.exec.env import has_cuda
        from yatt.exec.job import prepare_job
    except ImportError as e:
        raise needs_exec("run", e) from None
    return prepare_job(exp, seed, steps, cpu=not has_cuda())


def _with_data_lengths(exp: Experiment, job) -> Experiment:
    """The experiment with its workload's prompt lengths measured on the train data (the
    simulator then plans the user's real prompts)."""
    from yatt.exec.job import prompt_len_dist
    cap = exp.data.max_prompt_len or exp.workload.prompt_len.upper()
    dist = prompt_len_dist(job, cap)
    if dist is None:
        return exp
    # the cap is pinned: it must not move with the measured lengths (a resumed run reads it)
    return dataclasses.replace(exp, workload=dataclasses.replace(exp.workload, prompt_len=dist),
                               data=dataclasses.replace(exp.data, max_prompt_len=cap))


def _worker_failed(e: Exception) -> int:
    """One line for a worker that died or raised (its last error and its full log), exit 1;
    anything else is re-raised."""
    import sys

    from yatt.exec.worker_errors import describe
    line = describe(e)
    if line is None:
        raise e
    print(f"yatt run: error: {clean(line, 1000)}", file=sys.stderr)   # a worker's text: one line
    return 1


def _preempted(console: Console, e) -> int:
    """A run stopped by SIGTERM/SIGINT with its last good step checkpointed: its one line
    (with the `--resume` command), exit 0 (the scheduler requeues the job)."""
    console.print(str(e), markup=False, highlight=False, soft_wrap=True)
    return 0


def resume_command(args: argparse.Namespace, console: Console) -> int:
    """`yatt run --resume RUN_DIR`: continue a run from its newest valid checkpoint."""
    try:
        from yatt.exec.preempt import Preempted
        from yatt.exec.runner import read_run_file, run_plan
        from yatt.exec.supervisor import RunAborted
    except ImportError as e:
        raise needs_exec("run", e) from None
    run_dir = Path(args.resume)
    if args.target:
        raise InputError("give either a target or --resume RUN_DIR, not both", field="--resume")
    info = read_run_file(run_dir)
    plan = _with_checkpointing(load_plan(run_dir / "plan.yaml"), args)
    steps = args.steps if args.steps_given else info["steps"]
    check_out_dir(run_dir, field="--resume")   # it is written to: writable, before start-up
    _check_checkpoint_dir(run_dir)
    from yatt.exec import checkpoint as ckpt
    from yatt.exec import safe_load
    # no checkpoint that verifies and loads safely, or a bad state.json in it: say so before
    # preparing the job (which may build models); run_plan picks the checkpoint again and
    # logs any it skips
    _, newest = ckpt.latest_valid(run_dir, lambda m: None, check=safe_load.scan)
    ckpt.read_state(newest)
    job = _prepare(plan.experiment, info["seed"], steps)
    console.print(f"resuming {shown(run_dir)} ({plan.describe()}) up to {steps} steps")
    try:
        run_plan(plan, steps=steps, out_dir=run_dir, seed=info["seed"],
                 progress=not args.no_progress, ray_address=args.address,
                 controllers=info["controllers"], resume=True, job=job)
    except RunAborted as e:
        console.print(f"[red]run stopped[/red]: {shown(e, 2000)}", highlight=False)
        return 1
    except Preempted as e:
        return _preempted(console, e)
    except Exception as e:   # noqa: BLE001 - a worker's error: one line, then its log
        return _worker_failed(e)
    console.print(f"run dir: {shown(run_dir)}")
    return 0


def run_command(args: argparse.Namespace) -> int:
    from yatt.planner.profiled import cost_model_for, experiment_for
    from yatt.planner.runnable import describe_choice, plan_for_executor

    args.steps_given = args.steps is not None
    args.steps = 2 if args.steps is None else args.steps
    if not 1 <= args.steps <= MAX_STEPS:
        raise InputError(f"got {args.steps}; allowed: an integer >= 1 and <= {MAX_STEPS}",
                         field="--steps")
    _check_flags(args)
    check_fault_env()   # YATT_FAULTS, before anything starts
    probe_host = host_check_on(args)
    if args.resume:
        return resume_command(args, Console())
    src = config_or_bundled(args.target, DEMO_EXPERIMENT)
    mode = _mode(args.mode)
    profile = profile_arg(args.profile)
    console = Console()
    exp = load_plan(src).experiment if is_plan_file(src) else load_experiment(src)
    job = None
    if not is_plan_file(src):
        check_out_dir(args.out)   # writable, before the job's check, planning and start-up
        _check_checkpoint_dir(Path(args.out))
        # the job first: bad data or code fails before planning, and the plan sees the data
        try:
            job = _prepare(exp, args.seed, args.steps)
        except InputError as e:
            raise (e.within(file=str(src)) if not e.file else e) from None
        exp = _with_data_lengths(exp, job)
    if profile is None:
        profile = profile_or_shipped(args, exp)   # the shipped one for this device kind
    # before any prediction; `yatt profile` takes experiment configs, not plans
    host = host_checked(console, profile, "EXPERIMENT.yaml" if is_plan_file(src) else src,
                        probe_host)
    profile = host.profile
    console.print(cost_model_line(args.profile, profile, host.note), markup=False, soft_wrap=True)
    print_profile_gaps(console, profile, exp, "EXPERIMENT.yaml" if is_plan_file(src) else src)
    if not is_plan_file(src):
        exp = experiment_for(exp, profile)   # plan with the actor's measured stop lengths
    cost = cost_model_for(exp, profile)
    if is_plan_file(src):
        plan = load_plan(src)
        if mode is not None and mode is not plan.mode:
            raise InputError(f"{src} is a {plan.mode.value} plan; --mode applies to experiment "
                             "configs (re-plan with `yatt plan`)", field="--mode")
    else:
        from yatt.planner.budget import check_plan

        check_plan(exp, 1, (), file=str(src))   # placeable, and the work within budget
        try:
            result = plan_for_executor(exp, cost, mode)
        except InputError as e:
            raise e.within(file=str(src)) from None
        console.print(describe_choice(result))
        plan = result.best.plan
    check_runnable(plan, args.steps)   # before the executor's imports: the light install too
    try:
        from yatt.exec.preempt import Preempted
        from yatt.exec.runner import run_plan
        from yatt.exec.supervisor import RunAborted
    except ImportError as e:  # the light install has no executor
        raise needs_exec("run", e) from None
    plan = _with_checkpointing(plan, args)
    check_runnable(plan, args.steps)
    out = check_out_dir(args.out)
    _check_checkpoint_dir(out)
    if job is None:
        job = _prepare(plan.experiment, args.seed, args.steps)
    try:
        trace = run_plan(plan, steps=args.steps, out_dir=out, seed=args.seed,
                         progress=not args.no_progress, ray_address=args.address, job=job,
                         host_probe=host.probe.record() if host.probe is not None else None)
    except RunAborted as e:
        console.print(f"[red]run stopped[/red]: {shown(e, 2000)} (run dir: {shown(out)})", highlight=False)
        return 1
    except Preempted as e:
        return _preempted(console, e)
    except InputError:
        raise
    except Exception as e:   # noqa: BLE001 - a worker's error: one line, then its log
        return _worker_failed(e)
    from yatt.sim.gantt import plot_gantt

    plot_gantt(trace, out / "timeline.png", title=f"measured: {plan.describe()}")
    fidelity_report(console, trace, cost, host.note)
    console.print(f"run dir: {shown(out)} (trace.jsonl, timeline.json, timeline.png, metrics.csv, plan.yaml)")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="execute a plan on Ray (Megatron + vLLM) and record a trace",
                       description="Run a plan.yaml, or plan an experiment and run the winner. "
                                   f"With no argument: the bundled CPU demo ({DEMO_EXPERIMENT}).")
    p.add_argument("target", nargs="?", default=None, help="plan.yaml or experiment YAML")
    p.add_argument("--steps", type=int, default=None,
                   help="RL steps to run (default: 2; with --resume: the original run's)")
    p.add_argument("--out", default="out/run", help="run directory (default: out/run)")
    p.add_argument("--mode", default=None, help="force colocate|partial|async (experiment configs only)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--address", default=None, help="join an existing Ray cluster (ray://... or host:port)")
    p.add_argument("--profile", default=None, help="profile.yaml for the predictions")
    add_host_check_flag(p)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--resume", metavar="RUN_DIR", default=None,
                   help="continue RUN_DIR from its newest valid checkpoint")
    p.add_argument("--ckpt-every", type=int, default=None, metavar="N",
                   help="checkpoint every N steps (0: off; default: the plan's checkpoint.every_steps)")
    p.add_argument("--ckpt-minutes", type=float, default=None, metavar="M",
                   help="also checkpoint when M minutes passed since the last one (0: off)")
    p.add_argument("--keep", type=int, default=None, metavar="K",
                   help="keep the newest K checkpoints (default: checkpoint.keep_last)")
    p.set_defaults(func=run_command)
