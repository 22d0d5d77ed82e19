"""`run_plan`: execute a Plan for N RL steps on Ray and return the measured Trace.

Why: this is the executor's one entry point (`yatt run`, the Python API). It resolves
models, places actors per the plan (placement.py), starts engines/trainers/reference
workers, builds the controllers, walks the mode's step schedule (schedules.py) and writes
the run directory (recorder.py). It owns the Ray session only if it started it.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

from yatt.core.errors import InputError
from yatt.core.plan import Plan
from yatt.core.roles import Mode, ReleasePolicy, RewardSource, Role
from yatt.core.trace import Trace

from .controller import ControllerConfig, ControllerGroup
from .env import apply_local_env, ensure_ray, has_cuda, worker_env
from .recorder import Progress, Recorder
from .rollout import EngineConfig, Release
from .schedules import Actors, StepRunner


def effective_release(policy: ReleasePolicy, cpu: bool) -> Release:
    """The plan's release policy on this hardware (vLLM-CPU has no sleep mode)."""
    return {ReleasePolicy.RESIDENT: Release.KEEP, ReleasePolicy.TEARDOWN: Release.TEARDOWN,
            ReleasePolicy.OFFLOAD: Release.TEARDOWN if cpu else Release.SLEEP}[policy]


def check_runnable(plan: Plan, steps: int) -> None:
    if steps < 1:
        raise InputError(f"got {steps}; allowed: >= 1", field="steps")
    wl = plan.experiment.workload
    if wl.dynamic_sampling and wl.samples_per_prompt < 2:
        raise InputError("dynamic sampling drops groups whose rewards are all equal, which "
                         "every 1-sample group is; allowed: samples_per_prompt >= 2",
                         field="workload.samples_per_prompt")
    for p in plan.placements:
        if p.role in (Role.ROLLOUT, Role.GENRM, Role.REFERENCE) and p.tp * p.pp != 1:
            raise InputError(f"{p.role.value} TP*PP={p.tp * p.pp}: inference engines run one per "
                             "device here; allowed: tp 1, pp 1", field=f"{p.role.value}.tp")
        if p.role is Role.TRAINER and p.pp != 1:
            raise InputError("trainer PP>1 is not supported; allowed: pp 1", field="trainer.pp")
    wl = plan.experiment.workload
    if wl.samples_per_step < plan.placement(Role.TRAINER).dp:
        raise InputError(f"{wl.samples_per_step} samples cannot feed "
                         f"{plan.placement(Role.TRAINER).dp} DP ranks", field="workload")


def _launch(plan: Plan, placement, paths: dict[Role, str], seed: int, cpu: bool,
            release: Release, rec: Recorder) -> Actors:
    import ray

    from .genrm import GenRMServer, JudgeConfig
    from .rollout import EngineServer, engine_actor_class
    from .workers import ReferenceWorker, TrainerArgs, TrainerWorker

    exp = plan.experiment
    engines: dict[Role, list] = {}
    for role, cls in ((Role.ROLLOUT, EngineServer), (Role.GENRM, GenRMServer)):
        if not plan.has(role) or (role is Role.GENRM and exp.algo.reward is not RewardSource.GENRM):
            continue
        cfg = EngineConfig(paths[role], seed=seed, max_model_len=512,
                           max_num_seqs=(exp.engine.max_num_seqs if role is Role.ROLLOUT
                                         else exp.engine.genrm_max_num_seqs),
                           gpu_memory_utilization=exp.engine.gpu_memory_utilization,
                           cpu=cpu, release=release)
        args: tuple = (cfg,)
        if role is Role.GENRM:
            out_len = int(exp.workload.genrm_output_len.mean())
            args = (cfg, JudgeConfig(paths[Role.ROLLOUT], paths[Role.GENRM],
                                     max_tokens=max(4, min(64, out_len))))
        actor_cls = engine_actor_class(cls)
        engines[role] = [actor_cls.options(**placement.options(g[0])).remote(*args)
                         for g in plan.placement(role).groups()]
    tp = plan.placement(Role.TRAINER)
    a = exp.algo
    targs = TrainerArgs(exp.actor, paths[Role.ROLLOUT], tp=tp.tp, dp=tp.dp, lr=a.lr, seed=seed,
                        distributed_optimizer=a.distributed_optimizer, kl_coef=a.kl_coef,
                        entropy_coef=a.entropy_coef, clip_eps=a.clip_eps,
                        micro_batch_tokens=a.micro_batch_tokens,
                        device="cpu" if cpu else "cuda", kl_estimator=a.kl_estimator,
                        dual_clip=a.dual_clip, ppo_epochs=a.ppo_epochs,
                        seq_len_batching=a.seq_len_batching, adaptive_accept=a.adaptive_accept)
    tcls = ray.remote(num_cpus=0)(TrainerWorker)
    trainers = [tcls.options(**placement.options(d)).remote(targs, i)
                for i, d in enumerate(tp.devices)]
    addr, port = ray.get(trainers[0].address.remote())
    t = time.perf_counter()
    setup = [w.setup.remote(addr, port) for w in trainers]
    # Engines start while the trainers initialise (partial keeps both engine kinds up;
    # colocate starts with the rollout engines only, unless everything stays resident).
    first = [Role.ROLLOUT] + ([Role.GENRM] if Role.GENRM in engines and (
        plan.mode is Mode.PARTIAL or release is Release.KEEP) else [])
    starts = [e.acquire.remote() for r in first for e in engines[r]]
    ray.get(setup)
    rec.extra["trainer_setup_s"] = round(time.perf_counter() - t, 3)
    ray.get(starts)
    rec.extra["engine_start_s"] = round(time.perf_counter() - t, 3)
    groups = [trainers[i:i + tp.tp] for i in range(0, len(trainers), tp.tp)]
    refs = []
    if a.use_reference and plan.has(Role.REFERENCE):
        rcls = ray.remote(num_cpus=0)(ReferenceWorker)
        refs = [rcls.options(**placement.options(g[0])).remote(paths[Role.ROLLOUT],
                                                                "cpu" if cpu else "cuda")
                for g in plan.placement(Role.REFERENCE).groups()]
    return Actors(engines, trainers, groups, refs)


def run_plan(plan: Plan, *, steps: int, out_dir: Path, seed: int = 0, progress: bool = True,
             ray_address: Optional[str] = None, controllers: Optional[int] = None) -> Trace:
    """Run `steps` RL steps of `plan`; write the run directory; return the measured Trace.

    out_dir gets trace.jsonl, timeline.json, metrics.csv and plan.yaml. `ray_address`
    joins an existing cluster (else a local one is started and shut down at the end).
    `controllers` overrides `plan.controllers` (benchmarks).
    """
    import ray

    from .models import resolve_model
    from .placement import Placement

    check_runnable(plan, steps)
    out_dir = Path(out_dir)
    cpu = not has_cuda()
    apply_local_env(cpu)
    rec = Recorder(plan, seed)
    release = effective_release(plan.release, cpu)
    k = controllers or plan.controllers
    rec.extra.update(release_policy=plan.release.value, release_effective=release.value,
                     controllers=k, device="cpu" if cpu else "cuda")
    bar = Progress(steps, f"yatt run {plan.describe()}", progress)
    started = ensure_ray(plan.cluster.num_gpus, ray_address, cpu)
    placement = actors = ctl = None
    try:
        exp = plan.experiment
        paths = {Role.ROLLOUT: str(resolve_model(exp.actor, seed))}
        genrm = exp.algo.reward is RewardSource.GENRM
        if genrm:
            paths[Role.GENRM] = str(resolve_model(exp.genrm, seed))
        placement = Placement(plan, worker_env(cpu))
        actors = _launch(plan, placement, paths, seed, cpu, release, rec)
        rec.extra["startup_s"] = round(time.time() - rec.t0, 3)

        def make_cfg(i: int, n: int) -> ControllerConfig:
            return ControllerConfig(i, n, seed, exp.workload, exp.algo.reward, paths[Role.ROLLOUT],
                                    exp.algo.temperature, rec.t0,
                                    queue_capacity=min(exp.engine.queue_capacity, 1024),
                                    adv_std=exp.algo.adv_std, reward_norm=exp.algo.reward_norm)
        ctl = ControllerGroup(make_cfg, k, (actors.engines.get(Role.ROLLOUT, []),
                                            actors.engines.get(Role.GENRM, []), actors.refs,
                                            actors.trainer_groups), worker_env(cpu))
        runner = StepRunner(plan, actors, ctl, rec, release, genrm, total_steps=steps)
        for step in range(steps):
            row = runner.run_step(step)
            bar.step(row)
        return rec.write(out_dir, steps)
    finally:
        bar.close()
        if ctl is not None:
            ctl.shutdown()
        if actors is not None:
            for w in actors.trainers:
                try:
                    ray.get(w.shutdown.remote(), timeout=30)
                except Exception:
                    pass
            for h in [*actors.trainers, *actors.refs,
                      *[e for es in actors.engines.values() for e in es]]:
                ray.kill(h)
        if placement is not None:
            placement.remove()
        if started:
            ray.shutdown()
