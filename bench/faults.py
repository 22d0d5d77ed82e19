"""Faults survived, time to recover and steps redone, against an uninterrupted reference.

    .venv/bin/python bench/faults.py [--steps 4]

Why: a recovery path is only as good as what it loses and what it costs. This runs the
reliability tests' plan (configs/demo-cpu.yaml, colocate, engines resident, 2 devices,
DP=2 trainer with the distributed optimizer, a checkpoint after every step, keep 2) once
without faults and once per fault group, all injected through `YATT_FAULTS`
(`yatt.exec.faults`):

* actors: two controllers; controller 0 dies in step 1 (after its engines answered),
  trainer rank 0 in step 2 (after its backward pass, rank 1 left in a collective), rollout
  engine 0 in step 3, and step 1's checkpoint write fails as on a full disk;
* judges: the GenRM engine 0 dies in its second judging call, the reference worker 0 in
  its third `logprobs` call;
* preemption: SIGTERM to a `yatt run` process group once step 0's checkpoint is being
  written, then `yatt run --resume`;
* driver crash: the `yatt run` process dies (`os._exit`) after its last step, then
  `yatt run --resume`;
* node loss, on an emulated cluster (`ray.cluster_utils.Cluster`: a head node without
  devices, 2 nodes x 2 devices) with the multi-node tests' plan (configs/demo-cpu-4dev.yaml,
  partial colocate: rollout on one node, a TP=2 GenRM on the other, a PP=2 x DP=2 trainer
  with a replica per node, a checkpoint every step), against its own uninterrupted
  reference: the GenRM's node is removed in step 0 and a replacement joins 3 s later; a
  trainer rank's node is removed in step 2 and none joins, so the run checkpoints step 1
  from the driver's copy and stops; a node joins and `run_plan(resume=True)` finishes.

A fault is survived when the run (with its resume) ends with metrics.csv equal to the
reference's on every column the trainer and sampler compute, and every sample in the trace
exactly once. Time to recover is the supervisor's own measure for an actor fault (trace
`faults[].recovery_s`: from the failure to the restarted, restored actors), and for a
process that stopped, the signal-to-exit time and the resume's wall clock. Steps redone
count the steps run twice: an actor fault's step once per fault recorded in it, a driver
crash's every step after the newest sealed checkpoint. Writes bench/results/faults.json and prints one summary line.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _results import write_result  # noqa: E402  (bench/ holds the script: on sys.path)
EXACT = ("loss", "kl", "entropy", "grad_norm", "reward_mean", "accuracy", "response_tokens",
         "samples")


def _rows(run: Path) -> list[dict]:
    return list(csv.DictReader(open(run / "metrics.csv")))


def _equal(a: Path, b: Path) -> bool:
    ra, rb = _rows(a), _rows(b)
    return (len(ra) == len(rb)
            and all(x[c] == y[c] for x, y in zip(ra, rb) for c in EXACT))


def _once(run: Path, expected: int) -> bool:
    from yatt.core.trace import Trace
    keys = [(s.step, s.sample_id) for s in Trace.read_jsonl(run / "trace.jsonl").samples]
    return len(keys) == len(set(keys)) == expected


def make_plan_file(tmp: Path, **checkpoint) -> tuple:
    """The reliability tests' plan with `checkpoint` changes, and its plan.yaml in `tmp`."""
    from yatt.core.config import dump_yaml, load_experiment
    from yatt.core.layout import make_plan
    from yatt.core.roles import Mode, ReleasePolicy

    exp = load_experiment(ROOT / "configs" / "demo-cpu.yaml")
    ck = dataclasses.replace(exp.checkpoint, **{"every_steps": 1, "keep_last": 2, **checkpoint})
    exp = dataclasses.replace(exp, checkpoint=ck, algo=dataclasses.replace(
        exp.algo, distributed_optimizer=True))
    plan = make_plan(exp, Mode.COLOCATE, release=ReleasePolicy.RESIDENT)
    path = tmp / f"plan-{len(list(tmp.glob('plan-*')))}.yaml"
    dump_yaml(plan, path)
    return plan, path


def in_process(plan, out: Path, steps: int, faults: str, fault_dir: Path, **kw) -> dict:
    """One run in this process with `faults` injected; the trace's fault records."""
    from yatt.exec.runner import run_plan

    fault_dir.mkdir(parents=True, exist_ok=True)
    os.environ["YATT_FAULT_DIR"] = str(fault_dir)
    if faults:
        os.environ["YATT_FAULTS"] = faults
    try:
        tr = run_plan(plan, steps=steps, out_dir=out, seed=0, progress=False, log=lambda m: None,
                      **kw)
    finally:
        os.environ.pop("YATT_FAULTS", None)
    return tr.meta.extra


def _cli(args: list[str], env: dict, **kw):
    return subprocess.Popen([sys.executable, "-m", "yatt.cli", "run", *args, "--no-progress"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, **kw)


def _env(fault_dir: Path, faults: str = "") -> dict:
    env = {**os.environ, "YATT_FAULT_DIR": str(fault_dir), "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    env.pop("YATT_FAULTS", None)
    if faults:
        env["YATT_FAULTS"] = faults
    return env


def _resume(out: Path, env: dict) -> float:
    t = time.monotonic()
    p = _cli(["--resume", str(out)], env)
    _, err = p.communicate(timeout=900)
    if p.returncode:
        raise SystemExit(f"resume of {out} failed:\n{err[-3000:]}")
    return round(time.monotonic() - t, 2)


def preemption(plan_file: Path, out: Path, steps: int, fault_dir: Path) -> dict:
    from yatt.exec import checkpoint as ckpt

    env = _env(fault_dir)
    p = _cli([str(plan_file), "--steps", str(steps), "--out", str(out)], env,
             start_new_session=True)
    while not (out / "checkpoints" / "step-000000.partial").is_dir():
        if p.poll() is not None:
            raise SystemExit(f"preemption run ended early:\n{p.communicate()[1][-3000:]}")
        time.sleep(0.02)
    t = time.monotonic()
    os.killpg(p.pid, signal.SIGTERM)
    _, err = p.communicate(timeout=900)
    took = round(time.monotonic() - t, 2)
    if p.returncode:
        raise SystemExit(f"preempted run exited {p.returncode}:\n{err[-3000:]}")
    last = max(s for s, _ in ckpt.complete(out))
    return {"signal_to_exit_s": took, "exit_status": p.returncode,
            "checkpoint_at_exit": f"step-{last:06d}", "resume_s": _resume(out, env),
            "steps_redone": 0}


def driver_crash(plan_file: Path, out: Path, steps: int, fault_dir: Path) -> dict:
    from yatt.exec import checkpoint as ckpt

    p = _cli([str(plan_file), "--steps", str(steps), "--out", str(out)],
             _env(fault_dir, f"driver.exit@{steps}"))
    _, err = p.communicate(timeout=900)
    if p.returncode != 1:
        raise SystemExit(f"crash run exited {p.returncode}, expected 1:\n{err[-3000:]}")
    sealed = max(s for s, _ in ckpt.complete(out))
    return {"exit_status": p.returncode, "resumed_from": f"step-{sealed:06d}",
            "resume_s": _resume(out, _env(fault_dir)), "steps_redone": steps - 1 - sealed}


NODE_WAIT_S = 20.0
NODE_STEPS = 3


def node_loss(tmp: Path) -> dict[str, dict]:
    """The node-loss drill (module doc) in this process on its own emulated cluster."""
    import ray

    from yatt.core.config import load_experiment
    from yatt.core.layout import make_plan
    from yatt.core.roles import Mode, ReleasePolicy, Role
    from yatt.exec.env import job_runtime_env
    from yatt.exec.node_drill import NodeDrill, emulated_cluster
    from yatt.exec.runner import run_plan
    from yatt.exec.supervisor import RunAborted

    exp = load_experiment(ROOT / "configs" / "demo-cpu-4dev.yaml")
    exp = dataclasses.replace(exp, checkpoint=dataclasses.replace(
        exp.checkpoint, every_steps=1, node_wait_s=NODE_WAIT_S))
    plan = make_plan(exp, Mode.PARTIAL, rollout_devices=2, genrm_tp=2, reference_tp=2,
                     release=ReleasePolicy.RESIDENT)
    trainer = dataclasses.replace(plan.placement(Role.TRAINER), pp=2)
    plan = dataclasses.replace(plan, placements=tuple(
        trainer if p.role is Role.TRAINER else p for p in plan.placements))
    cluster = emulated_cluster(nodes=2, gpus_per_node=2)
    ray.init(address=cluster.address, runtime_env=job_runtime_env(True), log_to_driver=False)
    try:
        ref, out = tmp / "nodes-reference", tmp / "nodes"
        run_plan(plan, steps=NODE_STEPS, out_dir=ref, seed=0, progress=False, log=lambda m: None)
        marks = tmp / "markers-nodes"
        marks.mkdir()
        os.environ.update(YATT_FAULT_DIR=str(marks),
                          YATT_FAULTS=f"genrm.stall@1,trainer[2].stall@{NODE_STEPS}")
        drill = NodeDrill(cluster, marks, [3.0, None]).start()
        stopped = ""
        try:
            run_plan(plan, steps=NODE_STEPS, out_dir=out, seed=0, progress=False,
                     log=lambda m: None)
        except RunAborted as e:
            stopped = str(e)
        finally:
            exit_s = round(time.monotonic() - drill.times[-1], 2) if drill.times else None
            drill.stop()
            os.environ.pop("YATT_FAULTS", None)
        cluster.add_node(num_cpus=0, num_gpus=2)
        cluster.wait_for_nodes()
        t = time.monotonic()
        tr = run_plan(plan, steps=NODE_STEPS, out_dir=out, seed=0, progress=False,
                      resume=True, log=lambda m: None)
        resume_s = round(time.monotonic() - t, 2)
    finally:
        ray.shutdown()
        cluster.shutdown()
    ok = (_equal(ref, out) and _once(out, NODE_STEPS * plan.experiment.workload.samples_per_step)
          and "resume with: yatt run --resume" in stopped)
    records = tr.meta.extra.get("faults", [])
    first = records[0] if records else {}
    return {
        "node lost, a node joined 3 s later": {
            "survived": ok and len(records) == 2, "step": first.get("step"),
            "recovery_s": first.get("recovery_s"), "steps_redone": 1, "run": "nodes",
            "note": f"{plan.describe()} on 2 emulated nodes; redone from the driver's snapshot copy"},
        "node lost, no capacity": {
            "survived": ok, "step": records[1]["step"] if len(records) > 1 else None,
            "signal_to_exit_s": exit_s, "resume_s": resume_s, "steps_redone": 1, "run": "nodes",
            "note": f"waited checkpoint.node_wait_s={NODE_WAIT_S:.0f} s, checkpointed the last "
                    "good step, stopped with the --resume line"}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=4)
    a = ap.parse_args()
    if a.steps < 4:
        raise SystemExit("--steps: allowed >= 4 (the actor faults land in steps 1-3)")
    from yatt.exec.env import apply_local_env

    apply_local_env(cpu=True)
    tmp = Path(tempfile.mkdtemp(prefix="yatt-faults-"))
    plan, plan_file = make_plan_file(tmp)
    _, preempt_file = make_plan_file(tmp, every_steps=0, at_steps=(0,),
                                     preempt_grace_s=30.0)
    samples = a.steps * plan.experiment.workload.samples_per_step
    t = time.monotonic()
    in_process(plan, tmp / "reference", a.steps, "", tmp)
    reference_s = round(time.monotonic() - t, 2)
    kinds: dict[str, dict] = {}
    groups = {"actors": ("controller.exit@2,trainer.exit@3,rollout.exit@11,checkpoint.enospc@2",
                         dict(controllers=2)),
              "judges": ("genrm.exit@2,reference.exit@3", {})}
    for name, (faults, kw) in groups.items():
        out = tmp / name
        try:
            extra = in_process(plan, out, a.steps, faults, tmp / f"markers-{name}", **kw)
        except Exception as e:  # noqa: BLE001 - a fault not survived is a result
            kinds[name] = {"survived": False, "faults": faults, "error": str(e)[:400]}
            continue
        ok = _equal(tmp / "reference", out) and _once(out, samples)
        records = extra.get("faults", [])
        for f in records:   # the supervisor redoes a failed step once per fault in it
            kinds[f"{f['role']} actor died"] = {
                "survived": ok, "step": f["step"], "recovery_s": f["recovery_s"],
                "steps_redone": sum(g["step"] == f["step"] for g in records), "run": name}
        for f in extra.get("checkpoint_failures", []):
            kinds["checkpoint write on a full disk"] = {
                "survived": ok, "step": f["step"], "recovery_s": 0.0, "steps_redone": 0,
                "run": name, "note": "dropped with a warning; the previous checkpoint stays valid"}
    out = tmp / "preempted"
    r = preemption(preempt_file, out, a.steps, tmp)
    kinds["preemption (SIGTERM)"] = dict(r, survived=_equal(tmp / "reference", out)
                                         and _once(out, samples))
    out = tmp / "crashed"
    r = driver_crash(plan_file, out, a.steps, tmp)
    kinds["driver crash"] = dict(r, survived=_equal(tmp / "reference", out)
                                 and _once(out, samples))
    kinds.update(node_loss(tmp))
    res = {"plan": plan.describe(), "config": "configs/demo-cpu.yaml", "steps": a.steps,
           "samples_per_run": samples, "reference_wall_s": reference_s,
           "checkpoint_every_steps": 1, "distributed_optimizer": True,
           "survived": sum(k["survived"] for k in kinds.values()), "kinds": kinds,
           "machine": f"{os.cpu_count()} shared cores, CPU only, one thread per device"}
    write_result(ROOT / "bench" / "results" / "faults.json", res)
    print(f"faults: {res['survived']}/{len(kinds)} survived with metrics equal to the reference; "
          + ", ".join(f"{k} {v.get('recovery_s', v.get('resume_s'))} s" for k, v in kinds.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
