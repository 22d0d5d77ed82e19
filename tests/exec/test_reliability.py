"""Reliability with the real executor (Ray + vLLM + Megatron on CPU): dead controller,
trainer and rollout actors restarted and their steps redone, a checkpoint write failing on
a full disk, driver crash + resume from a corrupt-checkpoint fallback, NaN rollback and
the repeated-NaN stop, preemption signals. The reference is one uninterrupted run;
recovered runs must match it step by step.

Plan: colocate, everything resident, 2 devices: 2 rollout engines, 2 GenRM engines and
2 trainer ranks (DP=2, so killing rank 0 leaves rank 1 inside a collective) with the
default distributed optimizer (each rank holds half of the Adam state, which snapshots and
checkpoints must carry). Sampling is seeded per request (temperature 1), so a redone step
sees the same samples.
"""
from __future__ import annotations

import csv
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytest.importorskip("megatron.core")

from tests.exec._subproc import run_yatt  # noqa: E402
from yatt.core.roles import Mode, ReleasePolicy  # noqa: E402

STEPS = 4
# Compared exactly: anything the trainer or the sampler computes.
EXACT = ("loss", "kl", "entropy", "grad_norm", "reward_mean", "accuracy", "response_tokens",
         "samples")
ROOT = Path(__file__).resolve().parents[2]


def _rows(run_dir: Path) -> list[dict]:
    return list(csv.DictReader(open(run_dir / "metrics.csv")))


def _same(a: list[dict], b: list[dict]) -> None:
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for ra, rb in zip(a, b):
        for c in EXACT:
            assert ra[c] == rb[c], (ra["step"], c, ra[c], rb[c])


@pytest.fixture(scope="module")
def plan(demo_experiment):
    from yatt.core.layout import make_plan
    ck = dataclasses.replace(demo_experiment.checkpoint, every_steps=1, keep_last=2,
                             max_nonfinite_steps=2)
    algo = dataclasses.replace(demo_experiment.algo, distributed_optimizer=True)
    exp = dataclasses.replace(demo_experiment, checkpoint=ck, algo=algo)
    return make_plan(exp, Mode.COLOCATE, release=ReleasePolicy.RESIDENT)


def _run(plan, out, steps=STEPS, **kw):
    from yatt.exec.runner import run_plan
    return run_plan(plan, steps=steps, out_dir=out, seed=0, progress=False, **kw)


@pytest.fixture(scope="module")
def plan_file(plan, tmp_path_factory):
    from yatt.core.config import dump_yaml
    p = tmp_path_factory.mktemp("rel-plan") / "plan.yaml"
    dump_yaml(plan, p)
    return p


def _cli_run(plan_file: Path, out: Path) -> int:
    """`yatt run PLAN` in this process (it joins the session's Ray cluster)."""
    from yatt.cli.main import main
    return main(["run", str(plan_file), "--steps", str(STEPS), "--out", str(out),
                 "--no-progress"])


@pytest.fixture(scope="module")
def reference(ray_cluster, plan_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("rel") / "reference"
    assert _cli_run(plan_file, out) == 0          # a completed `yatt run` exits 0
    return out


@pytest.mark.slow
def test_reference_run_checkpoints(reference):
    from yatt.exec import checkpoint as ckpt
    done = ckpt.complete(reference)
    assert [s for s, _ in done] == [STEPS - 2, STEPS - 1]          # keep_last=2, all sealed
    for _, d in done:
        assert ckpt.verify(d) is None
        assert (d / "trainer" / "common.pt").is_file() and (d / ckpt.TRACE).is_file()
    state = ckpt.read_state(done[-1][1])
    assert state["next_step"] == STEPS and len(state["metrics"]) == STEPS
    from yatt.exec import safe_load
    counters = safe_load.torch_load(done[-1][1] / "trainer" / safe_load.COMMON)["counters"]
    assert counters["distributed_optimizer"] is True and counters["world"] == 2
    assert not list((reference / "checkpoints").glob("*.partial"))
    rows = _rows(reference)
    assert all(float(r["ckpt_stall_s"]) >= 0 for r in rows)
    assert all(r["restarts"] == "0" and r["rollbacks"] == "0" for r in rows)


@pytest.mark.slow
def test_driver_crash_then_resume_matches_and_skips_a_corrupt_checkpoint(reference, plan, tmp_path):
    from yatt.core.config import dump_yaml
    from yatt.exec import checkpoint as ckpt
    plan_file = tmp_path / "plan.yaml"
    dump_yaml(plan, plan_file)
    out = tmp_path / "crashed"
    env = {**os.environ, "YATT_FAULTS": f"driver.exit@{STEPS}", "YATT_FAULT_DIR": str(tmp_path),
           "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    p = run_yatt(["run", str(plan_file), "--steps", str(STEPS), "--out", str(out),
                  "--no-progress"], env)
    last = STEPS - 1
    assert p.returncode == 1, p.stderr[-2000:]            # died after the last step (os._exit)
    assert not (out / "metrics.csv").exists()              # a crash, not a clean stop
    # with a checkpoint every step, the trainers finalise checkpoint s in the save call of
    # boundary s + 1 and the driver seals it at boundary s + 2 (the crash waits for the
    # driver's I/O thread): the last two writes are never sealed
    sealed = [s for s, _ in ckpt.complete(out)]
    assert sealed == [last - 3, last - 2], sealed
    assert ckpt.partial_dir(out, last).is_dir() and ckpt.partial_dir(out, last - 1).is_dir()
    newest, older = ckpt.final_dir(out, sealed[1]), ckpt.final_dir(out, sealed[0])
    victim = sorted((newest / "trainer").glob("*.distcp"))[0]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])   # truncate newest
    env.pop("YATT_FAULTS")
    p = run_yatt(["run", "--resume", str(out), "--no-progress"], env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert f"refusing checkpoint {newest.name}" in p.stderr
    assert victim.name in p.stderr and "truncated or corrupt" in p.stderr
    assert f"falling back to {older.name}" in p.stderr
    _same(_rows(reference), _rows(out))
    from yatt.core.trace import Trace
    assert Trace.read_jsonl(out / "trace.jsonl").meta.extra["resumed_from"] == older.name


@pytest.mark.slow
def test_nan_step_is_rolled_back_and_repeated_nans_stop_the_run(reference, plan_file, tmp_path,
                                                                 monkeypatch, capsys):
    monkeypatch.setenv("YATT_FAULTS", "trainer.nan@2+")
    out = tmp_path / "nan"
    capsys.readouterr()
    assert _cli_run(plan_file, out) == 1    # RunAborted: `yatt run` exits 1
    said = capsys.readouterr()
    stopped = " ".join(said.out.split())
    assert "run stopped: stopping: 2 consecutive steps (through step 2)" in stopped
    logs = said.err.splitlines()
    rows = _rows(out)                       # the run dir is still written
    ref = _rows(reference)
    assert [r["step"] for r in rows] == ["0", "1", "2"]
    _same(ref[:1], rows[:1])
    assert rows[1]["skipped"] == "1.0" and rows[1]["rollbacks"] == "1"
    assert rows[2]["rollbacks"] == "2"
    assert sum("non-finite loss or gradients" in m for m in logs) == 2
    # rolled back: step 1's samples were generated from the same (step-0) weights as in the
    # reference, and after the rollback step 2's samples come from those weights again
    assert rows[1]["reward_mean"] == ref[1]["reward_mean"]


def _preemptible(plan, tmp_path: Path, grace_s: float) -> Path:
    """The reference plan checkpointing after step 0 only: a preemption after a later step
    writes that step's checkpoint itself."""
    from yatt.core.config import dump_yaml
    ck = dataclasses.replace(plan.experiment.checkpoint, every_steps=0, at_steps=(0,),
                             preempt_grace_s=grace_s)
    p = tmp_path / "plan.yaml"
    dump_yaml(dataclasses.replace(plan, experiment=dataclasses.replace(plan.experiment,
                                                                       checkpoint=ck)), p)
    return p


def _signal_after_first_checkpoint(cmd: list[str], out: Path, env: dict, send) -> tuple:
    """Start `yatt run` in a session of its own; once step 0's checkpoint is being written
    (step 0 is done), `send(pid)`; return (returncode, stdout, stderr, seconds
    from the signal to the exit)."""
    import time
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=ROOT, start_new_session=True)
    try:
        while not (out / "checkpoints" / "step-000000.partial").is_dir():
            assert p.poll() is None, p.communicate()[1][-2000:]
            time.sleep(0.02)
        t = time.monotonic()
        send(p.pid)
        o, e = p.communicate(timeout=600)
        return p.returncode, o, e, time.monotonic() - t
    finally:
        if p.poll() is None:
            p.kill()


def _env(tmp_path: Path) -> dict:
    env = {**os.environ, "YATT_FAULT_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    env.pop("YATT_FAULTS", None)
    return env


@pytest.mark.slow
def test_sigterm_to_the_process_group_checkpoints_and_resume_matches(reference, plan, tmp_path):
    import signal
    import time

    from yatt.exec import checkpoint as ckpt
    out = tmp_path / "preempted"
    env = _env(tmp_path)
    cmd = [sys.executable, "-m", "yatt.cli", "run", str(_preemptible(plan, tmp_path, 30.0)),
           "--steps", str(STEPS), "--out", str(out), "--no-progress"]
    rc, said, err, took = _signal_after_first_checkpoint(
        cmd, out, env, lambda pid: os.killpg(pid, signal.SIGTERM))   # pid leads its group
    assert rc == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    lines = [ln for ln in said.splitlines() if ln.startswith("preempted by SIGTERM")]
    assert len(lines) == 1, said[-2000:]
    assert lines[0].endswith(f"resume with: yatt run --resume {out}"), lines[0]
    # the step in progress finished (30 s grace) and was checkpointed on the signal (the
    # schedule saves step 0 only: a later checkpoint is the preemption's own write; a
    # signal still between steps 0 and 1 stops after step 0 with its checkpoint finalised)
    done = [s for s, _ in ckpt.complete(out)]
    last = done[-1]
    assert f"after step {last}: checkpoint step-{last:06d} sealed " in lines[0], lines[0]
    assert done == sorted({0, last}) and last < STEPS - 1, (done, lines[0])
    assert ckpt.verify(ckpt.final_dir(out, last)) is None
    assert not list((out / "checkpoints").glob("*.partial"))
    assert ckpt.read_state(ckpt.final_dir(out, last))["next_step"] == last + 1
    assert took < 30, took                 # within the grace period
    assert [r["step"] for r in _rows(out)] == [str(s) for s in range(last + 1)]
    t = time.monotonic()
    p = run_yatt(["run", "--resume", str(out), "--no-progress"], env)
    assert p.returncode == 0, p.stderr[-2000:]
    _same(_rows(reference), _rows(out))
    from yatt.core.trace import Trace
    tr = Trace.read_jsonl(out / "trace.jsonl")
    assert tr.meta.extra["resumed_from"] == f"step-{last:06d}"
    keys = [(s.step, s.sample_id) for s in tr.samples]   # each sample exactly once
    assert len(keys) == len(set(keys)) == STEPS * plan.experiment.workload.samples_per_step
    print(f"preemption: signal -> exit {took:.1f} s; resume {time.monotonic() - t:.1f} s")


@pytest.mark.slow
def test_sigint_to_the_driver_alone_cuts_the_step_short_and_checkpoints(plan, tmp_path):
    import signal

    from yatt.exec import checkpoint as ckpt
    out = tmp_path / "interrupted"
    # 0.2 s of grace: the step in progress gets 0.1 s, so it is cut short unless the signal
    # came between two steps; either way the last good step is checkpointed
    cmd = [sys.executable, "-m", "yatt.cli", "run", str(_preemptible(plan, tmp_path, 0.2)),
           "--steps", str(STEPS), "--out", str(out), "--no-progress"]
    rc, said, err, took = _signal_after_first_checkpoint(
        cmd, out, _env(tmp_path), lambda pid: os.kill(pid, signal.SIGINT))
    assert rc == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    lines = [ln for ln in said.splitlines() if ln.startswith("preempted by SIGINT")]
    assert len(lines) == 1, said[-2000:]
    last = ckpt.complete(out)[-1][0]
    cut = f"in step {last + 1} (cut short 0.1 s after the signal; trainers back at step {last})"
    assert cut in lines[0] or f"after step {last}:" in lines[0], lines[0]
    d = ckpt.final_dir(out, last)
    assert ckpt.verify(d) is None and ckpt.read_state(d)["next_step"] == last + 1
    assert len(ckpt.read_state(d)["metrics"]) == last + 1     # no row of a cut-short step
    assert [r["step"] for r in _rows(out)] == [str(s) for s in range(last + 1)]
    assert not list((out / "checkpoints").glob("*.partial"))
    print(f"preemption (driver only, {'cut short' if cut in lines[0] else 'between steps'}): "
          f"signal -> exit {took:.1f} s")


def _with_checkpoint(plan, tmp_path: Path, **changes) -> Path:
    from yatt.core.config import dump_yaml
    ck = dataclasses.replace(plan.experiment.checkpoint, **changes)
    p = tmp_path / "plan.yaml"
    dump_yaml(dataclasses.replace(plan, experiment=dataclasses.replace(plan.experiment,
                                                                       checkpoint=ck)), p)
    return p


@pytest.mark.slow
def test_a_required_checkpoint_that_cannot_be_written_stops_the_run(plan, tmp_path, monkeypatch,
                                                                     capsys):
    """Synchronous saves: the one after step 1 fails on trainer rank 0's shard write (the
    thread writer's save waited for, finalised on every rank), and `required` stops the run
    with one line, step 0's checkpoint intact."""
    from yatt.exec import checkpoint as ckpt
    monkeypatch.setenv("YATT_FAULTS", "trainer.enospc@2")
    monkeypatch.setenv("YATT_FAULT_DIR", str(tmp_path))
    out = tmp_path / "required"
    capsys.readouterr()
    assert _cli_run(_with_checkpoint(plan, tmp_path, required=True, async_save=False), out) == 1
    said = " ".join(capsys.readouterr().out.split())
    assert ("run stopped: stopping: checkpoint step-000001 could not be written (No space left "
            "on device (YATT_FAULTS): __0_0.distcp, trainer rank 0); dropped, its partial files "
            "removed; newest valid checkpoint: step-000000 (checkpoint.required: true)") in said, said
    done = ckpt.complete(out)
    assert [s for s, _ in done] == [0] and ckpt.verify(done[0][1]) is None
    assert not list((out / "checkpoints").glob("*.partial"))
    assert len(_rows(out)) < STEPS          # stopped at the next step boundary


@pytest.mark.slow
def test_dead_controller_trainer_and_rollout_actors_and_a_full_disk_lose_nothing(
        reference, plan, tmp_path, monkeypatch):
    """Two controllers. Controller 0 dies in step 1 after its engines answered: it is
    restarted and its shard of the prompts redone once. Trainer rank 0 dies in step 2 after
    its backward pass (rank 1 is left inside a collective): every rank is restarted and
    restored. Rollout engine 0 dies in step 3 (its 11th `generate`: each of the two
    controllers calls it once a step, and steps 1 and 2 are each redone whole). Each failed
    step is redone. In the same run two checkpoint writes fail as on a full disk, each
    dropped with one warning while the run goes on: step 0's on the trainers' side (rank 0's
    shard writer), step 1's on the driver's (its trace file)."""
    from yatt.core.trace import Trace
    from yatt.exec import checkpoint as ckpt
    monkeypatch.setenv("YATT_FAULTS",
                       "controller.exit@2,trainer.exit@3,rollout.exit@11,checkpoint.enospc@2,"
                       "trainer.enospc@1")
    monkeypatch.setenv("YATT_FAULT_DIR", str(tmp_path))
    out = tmp_path / "faulty"
    logs: list[str] = []
    tr = _run(plan, out, controllers=2, log=logs.append)
    for f in ("controller.exit@2", "trainer.exit@3", "rollout.exit@11", "trainer.enospc@1"):
        assert (tmp_path / f"yatt-fault-{f}").exists(), f       # each really fired
    assert [(f["step"], f["round"], f["role"]) for f in tr.meta.extra["faults"]] == [
        (1, 0, "controller"), (2, 0, "trainer"), (3, 0, "rollout")]
    for who in ("controller", "trainer", "rollout"):
        assert any(f"{who} actor died" in m for m in logs), (who, logs)
    rows = _rows(out)
    assert rows[-1]["restarts"] == "3"
    # two controllers, each a shard of every step's prompts: the same samples, rewards and
    # updates as the one-controller reference (the trainer orders its batch by sample id)
    _same(_rows(reference), rows)                           # nothing lost, nothing doubled
    t = Trace.read_jsonl(out / "trace.jsonl")
    keys = [(s.step, s.sample_id) for s in t.samples]   # exactly once: none from failed attempts
    assert len(keys) == len(set(keys)) == STEPS * plan.experiment.workload.samples_per_step
    print("recovered in", [f["recovery_s"] for f in tr.meta.extra["faults"]], "s")
    warned = [m for m in logs if m.startswith("warning: checkpoint")]
    # step 0's failure is seen when the trainers finalise it (in step 1's save call), in the
    # same boundary as step 1's driver-side one
    assert warned == [f"warning: checkpoint step-00000{s} could not be written (No space left "
                      f"on device (YATT_FAULTS): {what}); dropped, its partial files removed; "
                      "newest valid checkpoint: none; the run goes on (checkpoint.required: false)"
                      for s, what in ((0, "__0_0.distcp, trainer rank 0"), (1, "trace.jsonl"))], warned
    assert [s for s, _ in ckpt.complete(out)] == [STEPS - 2, STEPS - 1]
    assert not list((out / "checkpoints").glob("*.partial"))
    assert [f["step"] for f in t.meta.extra["checkpoint_failures"]] == [0, 1]
