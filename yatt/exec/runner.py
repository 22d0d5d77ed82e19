"""`run_plan`: execute a Plan for N RL steps on Ray and return the measured Trace.

Why: this is the executor's one entry point (`yatt run`, the Python API). It resolves
models, places actors per the plan (placement.py), starts engines/trainers/reference
workers, builds the controllers, walks the mode's step schedule (schedules.py) under the
supervisor (supervisor.py: snapshots, asynchronous checkpoints, fault recovery, NaN
rollback) and writes the run directory (recorder.py). `resume=True` continues a run
directory from its newest valid checkpoint. It owns the Ray session only if it started it.
"""
from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from yatt.core.errors import InputError, clean
from yatt.core.plan import Plan
from yatt.core.release import ReleaseAction, resolve_release
from yatt.core.roles import Mode, Role
from yatt.core.limits import MAX_CONTROLLERS, MAX_STEPS
from yatt.core.runnable import check_runnable
from yatt.core.schema import from_dict, spec_field, to_dict
from yatt.core.safeio import write_text
from yatt.core.trace import Trace

from . import checkpoint as ckpt
from . import faults, localray, preempt
from .controller import ControllerConfig
from .controller_group import ControllerGroup
from .step_stats import Moments
from .data import check_resume_position
from .env import apply_local_env, ensure_ray, has_cuda, stop_ray, worker_env
from .job import Job, prepare_job
from .nodes import NodeWatch
from .rayutil import get_all
from .recorder import Progress, Recorder
from .rollout import EngineConfig
from .async_runner import AsyncRunner, runners_needed
from .schedules import Actors, StepRunner
from .supervisor import RunAborted, Supervisor
from .tracking import Tracker

RUN_FILE = "run.json"   # how the run was started (steps, seed, controllers): for --resume


def release_actions(plan: Plan, cpu: bool) -> dict[Role, ReleaseAction]:
    """What each role does at a phase end under the plan's release policy on this device."""
    return {r: resolve_release(plan.release, r, cpu=cpu) for r in Role}


def _launch(plan: Plan, placement, job: Job, seed: int, cpu: bool,
            release: dict[Role, ReleaseAction], rec: Recorder) -> Actors:
    import ray

    from .genrm import GenRMServer, JudgeConfig
    from .rollout import EngineServer, engine_actor_class
    from .workers import ReferenceWorker, TrainerArgs, TrainerWorker

    exp = plan.experiment
    # A dead actor is restarted by Ray (same placement); the supervisor restores its state.
    restarts = dict(max_restarts=exp.checkpoint.max_restarts, max_task_retries=0)
    engines: dict[Role, list] = {}
    for role, cls in ((Role.ROLLOUT, EngineServer), (Role.GENRM, GenRMServer)):
        if not plan.has(role) or (role is Role.GENRM and not exp.algo.reward.needs_genrm):
            continue
        rollout = role is Role.ROLLOUT
        cfg = EngineConfig(job.actor_path if rollout else job.genrm_path, seed=seed,
                           max_model_len=job.max_model_len if rollout else job.genrm_max_model_len,
                           max_num_seqs=(exp.engine.max_num_seqs if rollout
                                         else exp.engine.genrm_max_num_seqs),
                           gpu_memory_utilization=exp.engine.gpu_memory_utilization,
                           cpu=cpu, release=release[role],
                           stop_token_ids=job.actor_stop if rollout else job.genrm_stop,
                           dtype=job.dtype.value)
        args: tuple = (cfg,)
        if role is Role.GENRM:
            args = (cfg, JudgeConfig.from_spec(exp.genrm_judge, job.actor_path, job.genrm_path,
                                               job.judge_max_tokens, job.judge_prompt_cap))
        actor_cls = engine_actor_class(cls)
        engines[role] = []
        tp_size = plan.placement(role).tp       # one engine per TP group, vLLM TP inside
        for i, g in enumerate(plan.placement(role).groups()):
            mine = (dataclasses.replace(cfg, role=role.value, index=i, tp=tp_size),) + args[1:]
            engines[role].append(actor_cls.options(**placement.engine_options(g, cpu), **restarts)
                                 .remote(*mine))
    tp = plan.placement(Role.TRAINER)
    targs = TrainerArgs(exp.actor, job.actor_path, exp.algo, exp.checkpoint, tp=tp.tp,
                        dp=tp.dp, seed=seed, device="cpu" if cpu else "cuda", pp=tp.pp,
                        pad_id=job.pad_id, dtype=job.dtype)
    tcls = ray.remote(num_cpus=0)(TrainerWorker)
    trainers = [tcls.options(**placement.options(d), **restarts).remote(targs, i)
                for i, d in enumerate(tp.devices)]
    refs = []   # created here so they load while trainers and engines start
    if exp.algo.use_reference and plan.has(Role.REFERENCE):
        rcls = ray.remote(num_cpus=0)(ReferenceWorker)
        refs = [rcls.options(**placement.options(g[0]), **restarts).remote(
                    job.actor_path, "cpu" if cpu else "cuda", i)
                for i, g in enumerate(plan.placement(Role.REFERENCE).groups())]
    t = time.perf_counter()
    addr, port = ray.get(trainers[0].address.remote())
    rec.extra["actor_start_s"] = round(time.perf_counter() - t, 3)   # a worker process up
    t = time.perf_counter()
    setup = [w.setup.remote(addr, port) for w in trainers]
    # Engines start while the trainers initialise (partial keeps both engine kinds up;
    # colocate starts with the rollout engines only, unless everything stays resident).
    apart = plan.mode is Mode.PARTIAL or (plan.mode is Mode.ASYNC and not plan.genrm_shares_rollout)
    first = [Role.ROLLOUT] + ([Role.GENRM] if Role.GENRM in engines and (
        apart or release[Role.GENRM] is ReleaseAction.KEEP) else [])
    starts = [e.acquire.remote() for r in first for e in engines[r]]
    ray.get(setup)
    rec.extra["trainer_setup_s"] = round(time.perf_counter() - t, 3)
    ray.get(starts)
    rec.extra["engine_start_s"] = round(time.perf_counter() - t, 3)
    # one group per model replica: its tp*pp consecutive ranks (trainer.py's rank layout)
    k = tp.tp * tp.pp
    groups = [trainers[i:i + k] for i in range(0, len(trainers), k)]
    return Actors(engines, trainers, groups, refs)


def run_plan(plan: Plan, *, steps: int, out_dir: Path, seed: int = 0, progress: bool = True,
             ray_address: Optional[str] = None, controllers: Optional[int] = None,
             resume: bool = False, log: Optional[Callable[[str], None]] = None,
             job: Optional[Job] = None,
             reward_fn: Optional[Callable[..., Any]] = None,
             host_probe: Optional[Mapping[str, Any]] = None) -> Trace:
    """Run `steps` RL steps of `plan`; write the run directory; return the measured Trace.

    out_dir gets trace.jsonl, timeline.json, metrics.csv, plan.yaml, run.json and
    checkpoints/ (plan.experiment.checkpoint). `ray_address` joins an existing cluster
    (else a local one is started and shut down at the end). `controllers` overrides
    `plan.controllers` (benchmarks). `resume`: continue `out_dir` from its newest valid
    checkpoint (corrupt ones are refused through `log`, naming the file) up to `steps`.
    `job`: the checked job (`job.prepare_job`; made here when not given); `reward_fn`: a
    Python callable that replaces the experiment's rule (the Python API). `host_probe`: the
    host probe timed before the run (`yatt.planner.hostscale.HostProbe.record`), kept in
    the trace's meta so that fits to the trace can tell this host's speed from contention.
    Raises InputError before anything starts when the job is bad, RewardError (an
    InputError) when the reward function fails a call under reward.on_error: fail, and
    RunAborted when the run cannot go on; the last two after writing the run directory.
    """
    import ray

    from .placement import Placement

    # every line the run prints may hold user text (paths, a verdict, a reward error): one
    # line of plain text, control bytes escaped, bounded (yatt.core.errors.clean)
    log = log or (lambda m: print(clean(m, 2000), file=sys.stderr))
    check_runnable(plan, steps)
    faults.check_env()   # a bad YATT_FAULTS is refused here, not inside an actor
    out_dir = Path(out_dir)
    state, ck_dir = None, None
    if resume:
        from . import safe_load
        # the newest checkpoint whose files verify and load as tensors and plain data only
        _, ck_dir = ckpt.latest_valid(out_dir, log, check=safe_load.scan)
        state = ckpt.read_state(ck_dir)
        seed = int(state["seed"])
        if state["next_step"] >= steps:
            raise InputError(f"the checkpoint {ck_dir.name} is already at step {state['next_step']}; "
                             f"allowed: --steps > {state['next_step']}", field="--steps")
    cpu = not has_cuda()
    apply_local_env(cpu)
    if job is None:
        job = prepare_job(plan.experiment, seed, steps, cpu, reward_fn)
    for note in job.notes:
        log(note)
    if state is not None:
        check_resume_position(state.get("data_position", {}), job.source, int(state["next_step"]))
    rec = Recorder(plan, seed)
    release = release_actions(plan, cpu)
    k = controllers or plan.controllers
    rec.extra.update(release_policy=plan.release.value,
                     release_effective=release[Role.ROLLOUT].value,   # the engines' action
                     controllers=k, device="cpu" if cpu else "cuda", dtype=job.dtype.value,
                     max_model_len=job.max_model_len, **dict(host_probe or {}))
    if state is not None:
        rec.restore(Trace.read_jsonl(ck_dir / ckpt.TRACE), state["metrics"], state["extra"],
                    float(state["trace_end_s"]))
        rec.extra["resumed_from"] = ck_dir.name
    else:
        _write_run_files(plan, out_dir, steps, seed, k)
    start = int(state["next_step"]) if state else 0
    bar = Progress(steps - start, f"yatt run {plan.describe()}", progress)
    # SIGTERM/SIGINT: from here a signal stops start-up at once, or checkpoints the last good
    # step once the loop runs (preempt.py)
    guard = preempt.Guard(plan.experiment.checkpoint.preempt_grace_s, out_dir,
                          lambda: _newest(out_dir))
    started = False
    joined = ray.is_initialized()   # a session the caller owns (tests, benchmarks): left as is
    placement = actors = arun = sup = None
    groups: list[ControllerGroup] = []
    out_dir.mkdir(parents=True, exist_ok=True)
    tracker = Tracker(plan.experiment.log, plan.experiment.name, str(out_dir))
    step = start
    guard.install()   # restored in the `finally` below, whatever happens in between
    try:
        t_ray = time.perf_counter()
        started = ensure_ray(plan.cluster.num_gpus, ray_address, cpu)
        rec.extra["ray_init_s"] = round(time.perf_counter() - t_ray, 3)
        guard.install()   # ray.init sets its own SIGTERM handler
        exp = plan.experiment
        genrm = exp.algo.reward.needs_genrm
        placement = Placement(plan, {**worker_env(cpu), **faults.env_passthrough()})
        actors = _launch(plan, placement, job, seed, cpu, release, rec)
        rec.extra["startup_s" if state is None else "resume_startup_s"] = round(time.time() - rec.t0, 3)

        asynchronous = plan.mode is Mode.ASYNC

        def make_cfg(i: int, n: int) -> ControllerConfig:
            return ControllerConfig(i, n, seed, exp.workload, exp.algo, job.actor_path,
                                    rec.t0, queue_capacity=min(exp.engine.queue_capacity, 1024),
                                    behaviour_logprobs=asynchronous,
                                    data=exp.data, reward=exp.reward, rule=exp.rule_reward,
                                    source=job.source, reward_fn=job.reward_fn)
        ctl_args = (actors.engines.get(Role.ROLLOUT, []), actors.engines.get(Role.GENRM, []),
                    actors.refs, actors.trainer_groups)
        groups = [ControllerGroup(make_cfg, k, ctl_args, {**worker_env(cpu), **faults.env_passthrough()},
                                  max_restarts=exp.checkpoint.max_restarts)
                  for _ in range(runners_needed(plan.max_staleness) if asynchronous else 1)]
        ctl = groups[0]
        if asynchronous:
            arun = AsyncRunner(plan, actors, groups, rec, release, genrm, steps)
            sup = Supervisor(plan, actors, ctl, rec, release, exp.checkpoint, out_dir,
                             arun.republish, steps, log, data_position=job.source.position)
            sup.extra_files = arun.engine_weights_for
            sup.ctls = groups
            sup.watch = NodeWatch(placement)
            _run_async(arun, sup, actors, ck_dir, state, start, steps, tracker, bar, log,
                       exp, guard)
            return rec.write(out_dir, steps)
        runner = StepRunner(plan, actors, ctl, rec, release, genrm, total_steps=steps)
        sup = Supervisor(plan, actors, ctl, rec, release, exp.checkpoint, out_dir,
                         runner.push_weights, steps, log, data_position=job.source.position)
        sup.watch = NodeWatch(placement)
        if ck_dir is not None:
            get_all([w.load_checkpoint.remote(str(ck_dir / ckpt.TRAINER)) for w in actors.trainers])
            runner.push_weights()
            sup.resumed(state)
        sup.snapshot()

        attempt = _recovering(runner.run_step,
                              lambda e, step: sup.recover(e, step, runner.round), sup, guard)
        _drive(start, steps, attempt, lambda s: None, lambda s: runner.last_moments,
               sup, tracker, bar, log, exp, guard)
        return rec.write(out_dir, steps)
    except (RunAborted, InputError):
        rec.write(out_dir, step if sup is None else sup.next_step)   # what was measured so far
        raise
    finally:
        guard.running()   # a first signal from here on lets the clean-up finish
        try:
            bar.close()
            tracker.close()
            if arun is not None:
                arun.stop()
            for g in groups:
                g.shutdown()
            if actors is not None:
                for w in actors.trainers:
                    try:
                        ray.get(w.shutdown.remote(), timeout=30)
                    except Exception:
                        pass
                for h in [*actors.trainers, *actors.refs,
                          *[e for es in actors.engines.values() for e in es]]:
                    ray.kill(h)
            if sup is not None:
                sup.close()   # the trainers are gone: their snapshot files with them
            if placement is not None:
                placement.remove()
            if started:
                stop_ray()
            elif not joined:
                localray.stop()   # a start-up cut short after the cluster came up
        finally:
            guard.restore()   # the process's own handlers, even if the clean-up fails


def _newest(out_dir: Path) -> Optional[str]:
    """The newest sealed checkpoint's name, for a line (never raises: a signal handler)."""
    try:
        done = ckpt.complete(out_dir)
    except OSError:
        return None
    return done[-1][1].name if done else None


def _run_async(arun: AsyncRunner, sup: Supervisor, actors: Actors, ck_dir: Optional[Path],
               state: Optional[dict], start: int, steps: int, tracker: Tracker, bar: Progress,
               log: Callable[[str], None], exp, guard: "preempt.Guard") -> int:
    """The async step loop (async_runner.py): the generator runs ahead on its own thread;
    this thread trains, runs the supervisor's boundary and commits each version. An actor
    fault is recovered as in the synchronous loop, the generator restarted from the failed
    step; a signal checkpoints the last good step. Returns the last step."""
    engine_weights = None
    if ck_dir is not None:
        get_all([w.load_checkpoint.remote(str(ck_dir / ckpt.TRAINER)) for w in actors.trainers])
        engine_weights = arun.load_engine_weights(ck_dir, start)
        sup.resumed(state or {})
    sup.snapshot()
    arun.start(start, steps, engine_weights)

    def recover(e: BaseException, step: int) -> None:
        arun.stop()
        sup.recover(e, step, arun.runner(step).round, push=False)
        arun.restart(step, steps)

    attempt = _recovering(arun.train_step, recover, sup, guard)
    return _drive(start, steps, attempt, arun.commit, lambda s: arun.runner(s).last_moments,
                  sup, tracker, bar, log, exp, guard,
                  before_exit=lambda: arun.stop(guard.grace_s / 4 if guard.requested else 600.0))


def _recovering(run: Callable[[int], dict], recover: Callable[[BaseException, int], None],
                sup: Supervisor, guard: "preempt.Guard") -> Callable[[int], dict]:
    """`run(step)` inside the guard's step window, redone after `recover(error, step)` when
    an actor died (anything else propagates; a cut-short step raises `preempt.Abort`)."""
    def attempt(step: int) -> dict:
        while True:
            guard.enter_step()
            try:
                return run(step)
            except Exception as e:   # noqa: BLE001 - only actor deaths are recovered
                if preempt.is_abort(e):
                    raise preempt.Abort() from e
                if not sup.is_fault(e):
                    raise
                recover(e, step)
            finally:
                guard.leave_step()
    return attempt


def _drive(start: int, steps: int, attempt: Callable[[int], dict], commit: Callable[[int], None],
           moments: Callable[[int], Moments], sup: Supervisor, tracker: Tracker, bar: Progress,
           log: Callable[[str], None], exp, guard: "preempt.Guard",
           before_exit: Callable[[], None] = lambda: None) -> int:
    """The step loop both schedules share: `attempt(step)` runs one step (recovering what it
    can), the supervisor's boundary seals it, `commit(step)` follows, and the row is logged.
    A signal stops it before the next step (or cuts the current one short, `preempt.Abort`);
    the last good step is then checkpointed and `preempt.Preempted` raised. Returns the
    last step."""
    warned: set[str] = set()
    crash = faults.hook("driver")      # tests: the driver dies after a step
    guard.running()
    step, last_good, aborted = start, start - 1, None
    sup.next_step = start
    try:
        for step in range(start, steps):
            if guard.requested:
                break
            row = sup.after_step(step, attempt(step))
            commit(step)
            last_good = step
            tracker.log(row)
            _warn(log, step, moments(step), exp, warned)
            bar.step(row)
            if crash is not None:
                crash.tick()
                crash.maybe_exit(before=sup.checkpoints.wait_io)   # the sealed checkpoints are then known
    except preempt.Abort:   # the step overran its share of the grace period
        aborted = step
    before_exit()
    if guard.requested and (aborted is not None or last_good < steps - 1):
        ck = sup.checkpoint_now(last_good, aborted)
        sup.rec.write(sup.out, last_good + 1)
        how = (f"in step {aborted} (cut short {guard.grace_s / 2:g} s after the signal; "
               f"trainers back at step {last_good})" if aborted is not None
               else f"after step {last_good}")
        fresh = ck is not None and int(ck.name.removeprefix("step-")) >= start
        raise preempt.Preempted(guard.signame, how, ck, guard.elapsed_s() if fresh else None,
                                sup.out)
    sup.checkpoints.finish(last_step=steps - 1)
    return step


def _warn(log: Callable[[str], None], step: int, mom: Moments, exp, warned: set[str]) -> None:
    """One line, once per run, when every verdict of a step fell back (a judge regex or
    parser that never matches) or a rule call was scored 0 under on_error: zero."""
    if mom.judged and mom.parse_fail == mom.judged and "parse" not in warned:
        warned.add("parse")
        log(f"genrm_judge.parser: none of step {step}'s {mom.judged} verdicts parsed with "
            f"parser {exp.genrm_judge.parser.value}; each scored the fallback "
            f"{exp.genrm_judge.fallback:g} (counted in genrm_parse_fail); {mom.example}")
    if mom.reward_errors and "reward" not in warned:
        warned.add("reward")
        log(f"reward.on_error: zero: step {step} scored {mom.reward_errors} failed rule calls 0 "
            f"(counted in reward_errors); first: {mom.example.removeprefix('reward error: ')}")


def _write_run_files(plan: Plan, out_dir: Path, steps: int, seed: int, controllers: int) -> None:
    """plan.yaml and run.json at the start, so a crashed run can be resumed."""
    from yatt.core.config import dump_yaml

    out_dir.mkdir(parents=True, exist_ok=True)
    dump_yaml(plan, out_dir / "plan.yaml")
    write_text(out_dir / RUN_FILE, json.dumps(
        {"steps": steps, "seed": seed, "controllers": controllers}, indent=1))


@dataclasses.dataclass(frozen=True)
class RunFile:
    """run.json: how a run was started, validated as strictly as a config on --resume."""

    steps: int = spec_field(ge=1, le=MAX_STEPS, help="RL steps the run was started for")
    seed: int = spec_field(help="the run's seed")
    controllers: int = spec_field(1, ge=1, le=MAX_CONTROLLERS, help="step controllers")


def read_run_file(run_dir: Path) -> dict:
    """run.json of a run directory; InputError naming the file and field when it is
    missing, not JSON, or not a valid `RunFile`."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError("not a yatt run directory (not a directory); allowed: the --out of "
                         "an earlier `yatt run`", field="--resume", file=str(run_dir))
    p = run_dir / RUN_FILE
    if not p.exists():
        raise InputError("not found: not a yatt run directory", field="--resume", file=str(p))
    try:
        return to_dict(from_dict(RunFile, ckpt.read_json(p)))
    except InputError as e:
        raise e.within(file=str(p)) from None
