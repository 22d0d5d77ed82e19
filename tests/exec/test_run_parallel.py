"""End-to-end `yatt run` (run_plan) of plans with TP=2 engines and a PP=2 trainer, on CPU.

Four runs, shared by every assertion here (each costs a minute or more on 2 cores):

* colocate on the 2-device cluster (configs/demo-cpu.yaml): rollout and GenRM engines at
  TP=2 (one engine each over both devices, resident: a TP=2 engine takes 15-30 s to
  re-create here, so teardown and re-creation are tested once, in test_engine_tp.py), a
  PP=2 trainer (one stage per device) taking 2 mini-batches per step with the
  old-log-prob pass, a TP=2 reference. Two faults (YATT_FAULTS) hit step 1: the rollout
  engine dies in its second `generate` (Ray restarts it, a new TP=2 engine, which the
  supervisor re-arms), then, in the redone step, pipeline stage 0 dies after its backward
  pass while stage 1 waits on it (every rank restarts, the process group is re-formed, the
  stages are restored from the in-memory snapshot); the step is redone each time.
* colocate on the same 4 devices, 2 nodes x 2: one TP=2 rollout engine and one TP=2
  GenRM per node, a TP=2 reference per node, a DP=4 trainer across the nodes, so the
  gradient all-reduce, the weight sync and the checkpoint all cross the node boundary.
* partial colocate on 4 emulated devices (configs/demo-cpu-4dev.yaml, 2 nodes x 2): two
  TP=1 rollout engines on node 0, a TP=2 GenRM on node 1 judging while rollout streams,
  a PP=2 x DP=2 trainer (one replica per node, its stages on the node's two devices).
* the same partial plan losing a node twice (`cluster.remove_node` by
  yatt.exec.node_drill, once a stalled actor's marker file names its node): in step 0 (the GenRM stalls in its
  first `generate`) a new node joins a few seconds later, the lost actors restart on it
  and the step is redone from the driver's copy of the snapshot; in step 1 (trainer rank
  2 stalls in its second `train_step`) no node comes back, so the run checkpoints the last
  good step from that copy and stops with the `--resume` line; a node then joins and
  `--resume` finishes the run. Its metrics must equal the uninterrupted partial run's.
"""
from __future__ import annotations

import csv
import dataclasses
import math
from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytest.importorskip("megatron.core")

from yatt.core.roles import Mode, Phase, ReleasePolicy, Role  # noqa: E402
from yatt.core.specs import OldLogprobs  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
STEPS = 2
EXACT = ("loss", "kl", "entropy", "grad_norm", "reward_mean", "reward_std", "accuracy",
         "response_tokens", "samples", "genrm_parse_fail")
NODE_WAIT_S = 20.0     # checkpoint.node_wait_s of the node-loss run
REJOIN_S = 3.0         # the first lost node's replacement joins this long after the loss


def _with_trainer_pp(plan, pp: int):
    """The plan with its trainer pipelined `pp` ways (make_plan places TP only)."""
    t = dataclasses.replace(plan.placement(Role.TRAINER), pp=pp)
    return dataclasses.replace(plan, placements=tuple(
        t if p.role is Role.TRAINER else p for p in plan.placements))


@pytest.fixture(scope="module")
def colocate(ray_cluster, demo_experiment, tmp_path_factory):
    from yatt.core.layout import make_plan
    from yatt.exec.runner import run_plan

    root = tmp_path_factory.mktemp("colo-tp2")
    algo = dataclasses.replace(demo_experiment.algo, mini_batches=2,
                               old_logprobs=OldLogprobs.RECOMPUTE)
    exp = dataclasses.replace(demo_experiment, algo=algo)
    plan = _with_trainer_pp(make_plan(exp, Mode.COLOCATE, rollout_tp=2, genrm_tp=2,
                                      reference_tp=2, release=ReleasePolicy.RESIDENT), 2)
    logs: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("YATT_FAULTS", "rollout.exit@2,trainer.exit@2")
        mp.setenv("YATT_FAULT_DIR", str(root))
        trace = run_plan(plan, steps=STEPS, out_dir=root / "run", seed=0, progress=False,
                         log=logs.append)
    return root, plan, trace, logs, _rows(root / "run")


@pytest.fixture(scope="module")
def partial(ray_cluster, tmp_path_factory):
    from yatt.core.config import load_experiment
    from yatt.exec.runner import run_plan

    plan = _partial_plan(load_experiment(ROOT / "configs" / "demo-cpu-4dev.yaml"))
    out = tmp_path_factory.mktemp("part-4dev") / "run"
    return plan, run_plan(plan, steps=STEPS, out_dir=out, seed=0, progress=False), _rows(out)


def _partial_plan(exp):
    from yatt.core.layout import make_plan

    return _with_trainer_pp(make_plan(exp, Mode.PARTIAL, rollout_devices=2, rollout_tp=1,
                                      genrm_tp=2, reference_tp=2,
                                      release=ReleasePolicy.RESIDENT), 2)


@pytest.fixture(scope="module")
def node_loss(ray_cluster, partial, tmp_path_factory):
    """The partial plan of `partial`, losing a node twice (module doc); then resumed."""
    from yatt.core.config import load_experiment
    from yatt.exec.node_drill import NodeDrill
    from yatt.exec.runner import run_plan
    from yatt.exec.supervisor import RunAborted

    exp = load_experiment(ROOT / "configs" / "demo-cpu-4dev.yaml")
    exp = dataclasses.replace(exp, checkpoint=dataclasses.replace(
        exp.checkpoint, every_steps=1, node_wait_s=NODE_WAIT_S))
    plan = _partial_plan(exp)
    root = tmp_path_factory.mktemp("node-loss")
    out, logs = root / "run", []
    aborted = None
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("YATT_FAULTS", "genrm.stall@1,trainer[2].stall@2")
        mp.setenv("YATT_FAULT_DIR", str(root))
        drill = NodeDrill(ray_cluster, root, [REJOIN_S, None]).start()
        try:
            run_plan(plan, steps=STEPS, out_dir=out, seed=0, progress=False, log=logs.append)
        except RunAborted as e:
            aborted = str(e)
        finally:
            drill.stop()
    ray_cluster.add_node(num_cpus=0, num_gpus=2)     # capacity is back (and the fixture's shape)
    ray_cluster.wait_for_nodes()
    trace = run_plan(plan, steps=STEPS, out_dir=out, seed=0, progress=False,
                     resume=True, log=logs.append)
    return out, trace, logs, drill.events, aborted, _rows(out)


@pytest.fixture(scope="module")
def colocate_nodes(ray_cluster, tmp_path_factory):
    from yatt.core.config import load_experiment
    from yatt.core.layout import make_plan
    from yatt.exec.runner import run_plan

    plan = make_plan(load_experiment(ROOT / "configs" / "demo-cpu-4dev.yaml"), Mode.COLOCATE,
                     rollout_tp=2, genrm_tp=2, reference_tp=2, release=ReleasePolicy.RESIDENT)
    out = tmp_path_factory.mktemp("colo-4dev") / "run"
    return plan, run_plan(plan, steps=STEPS, out_dir=out, seed=0, progress=False), out


def _rows(run_dir: Path) -> list[dict[str, float]]:
    """metrics.csv's rows, numbers only (eval columns are empty on steps without eval)."""
    return [{k: float(v) for k, v in r.items() if v != ""}
            for r in csv.DictReader(open(run_dir / "metrics.csv"))]


def _spans(trace, phase, step=None):
    return [s for s in trace.spans if s.phase is phase and (step is None or s.step == step)]


@pytest.mark.slow
def test_colocate_tp2_engines_and_pp2_trainer_run(colocate):
    _, plan, trace, _, rows = colocate
    assert plan.describe() == "colocate R2(tp2) T2(tp1,pp2) G2(tp2)"
    assert [m["step"] for m in rows] == list(range(STEPS))
    for m in rows:
        assert math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"]) and m["skipped"] == 0
        assert m["samples"] == plan.experiment.workload.samples_per_step
    for step in range(STEPS):
        (ro,), (ge,) = _spans(trace, Phase.ROLLOUT, step), _spans(trace, Phase.GENRM, step)
        assert ro.devices == ge.devices == (0, 1) and ro.end_s <= ge.start_s
    assert not _spans(trace, Phase.OFFLOAD)            # resident


@pytest.mark.slow
def test_old_logprob_pass_is_its_own_phase_before_training(colocate):
    _, plan, trace, _, rows = colocate
    for step in range(STEPS):
        (old,), (train,) = _spans(trace, Phase.OLD_LOGPROB, step), _spans(trace, Phase.TRAIN, step)
        assert old.role is Role.TRAINER and old.devices == plan.placement(Role.TRAINER).devices
        assert old.end_s <= train.start_s and old.duration > 0
        assert old.tokens == train.tokens > 0
    assert all(m["old_logprob_s"] > 0 for m in rows)


@pytest.mark.slow
def test_killed_tp2_engine_and_pp_stage_are_restarted_and_the_step_redone(colocate):
    root, plan, trace, logs, rows = colocate
    assert (root / "yatt-fault-rollout.exit@2").exists()          # the faults really fired
    assert (root / "yatt-fault-trainer.exit@2").exists()
    assert [(f["step"], f["role"]) for f in trace.meta.extra["faults"]] == [
        (1, "rollout"), (1, "trainer")]
    assert any("rollout actor died" in m for m in logs)
    assert rows[-1]["restarts"] == 2
    keys = [(s.step, s.sample_id) for s in trace.samples]           # exactly once
    assert len(keys) == len(set(keys)) == STEPS * plan.experiment.workload.samples_per_step


@pytest.mark.slow
def test_colocate_on_two_nodes_trains_syncs_and_checkpoints_across_them(colocate_nodes):
    plan, trace, out = colocate_nodes
    assert plan.describe() == "colocate R4(tp2) T4(tp1) G4(tp2)"
    assert plan.cluster.nodes == 2 and plan.cluster.gpus_per_node == 2
    for step in range(STEPS):
        for phase in (Phase.ROLLOUT, Phase.GENRM, Phase.REF_LOGPROB, Phase.TRAIN,
                      Phase.WEIGHT_SYNC):
            (span,) = _spans(trace, phase, step)
            assert span.devices == (0, 1, 2, 3), (step, phase)
    assert {s.dp_rank for s in trace.samples} == {0, 1, 2, 3}       # DP=4 over both nodes
    keys = [(s.step, s.sample_id) for s in trace.samples]
    assert len(keys) == len(set(keys)) == STEPS * plan.experiment.workload.samples_per_step
    for m in _rows(out):
        assert math.isfinite(m["loss"]) and m["skipped"] == 0 and m["restarts"] == 0
    assert (out / "checkpoints" / f"step-{STEPS - 1:06d}" / "manifest.json").is_file()


@pytest.mark.slow
def test_partial_tp2_genrm_on_four_devices(partial):
    plan, trace, rows = partial
    assert plan.describe() == "partial R2(tp1) T4(tp1,pp2) G2(tp2)"
    for step in range(STEPS):
        (ro,), (ge,) = _spans(trace, Phase.ROLLOUT, step), _spans(trace, Phase.GENRM, step)
        assert ro.devices == (0, 1) and ge.devices == (2, 3)
        assert ge.start_s < ro.end_s                   # judged while rollout still streamed
    assert not _spans(trace, Phase.OFFLOAD)            # resident
    assert not _spans(trace, Phase.OLD_LOGPROB)        # reuse: no extra pass
    for m in rows:
        assert math.isfinite(m["loss"]) and m["skipped"] == 0 and m["genrm_parse_fail"] >= 0
        assert m["samples"] == plan.experiment.workload.samples_per_step
    assert {s.dp_rank for s in trace.samples} == {0, 1}            # PP=2 x DP=2 trainer


@pytest.mark.slow
def test_a_lost_node_is_waited_for_replaced_and_its_step_redone(node_loss):
    _, trace, logs, harness, _, _ = node_loss
    assert harness[:2] == ["removed a node at stall 1", "a node joined"]
    assert any("step 0: lost node" in m and "devices 2,3" in m and "node_wait_s" in m
               for m in logs)
    assert any(m.startswith("capacity is back") and "redoing step 0" in m for m in logs)
    assert [(f["step"], f["role"]) for f in trace.meta.extra["faults"]] == [(0, "node"), (1, "node")]


@pytest.mark.slow
def test_no_capacity_checkpoints_the_last_good_step_and_stops_with_the_resume_line(node_loss):
    out, trace, logs, harness, aborted, _ = node_loss
    assert harness[2] == "removed a node at stall 2"
    assert aborted is not None and "step 1" in aborted and f"within {NODE_WAIT_S:.0f} s" in aborted
    assert "step-000000" in aborted and f"yatt run --resume {out}" in aborted
    assert any("the driver's copy of the last good state" in m for m in logs)
    assert trace.meta.extra["resumed_from"] == "step-000000"


@pytest.mark.slow
def test_a_run_with_lost_nodes_equals_the_uninterrupted_one(node_loss, partial):
    _, trace, _, _, _, rows = node_loss
    plan, _, ref = partial
    assert [r["step"] for r in rows] == [r["step"] for r in ref] == list(range(STEPS))
    for got, want in zip(rows, ref):
        assert {k: got[k] for k in EXACT} == {k: want[k] for k in EXACT}
    assert rows[-1]["restarts"] == 2
    keys = [(s.step, s.sample_id) for s in trace.samples]           # exactly once
    assert len(keys) == len(set(keys)) == STEPS * plan.experiment.workload.samples_per_step
