"""A quick profile's Ray-path terms carried from a base profile (`yatt.profiling.carry`):
the shipped profile covers the demo and fidelity experiments, a base without a term says
which one, and the carried terms are the base's times the ratio this host ran the tables
both profiles measured, by kind. Pure: the "measured" tables here are the shipped ones
scaled by known factors, so every expected number follows from the arithmetic."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from yatt.core.config import load_experiment
from yatt.planner.coverage import missing_terms
from yatt.planner.hostscale import HostProbe
from yatt.planner.profile_io import load_profile
from yatt.profiling.carry import carried, lacks, measured_ratios
from yatt.profiling.points import Points
from yatt.profiling.ray_tables import ray_needs

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = [ROOT / "configs" / "demo-cpu.yaml"] + sorted((ROOT / "configs" / "fidelity").glob("*.yaml"))
SHIPPED = ROOT / "configs" / "profiles" / "cpu-local.yaml"
COMPUTE, INTERP = 1.3, 1.2   # how much slower the made-up host runs each kind
TEARDOWN = 3.0               # and its engine teardowns (kernel work: in no ratio)


@pytest.fixture(scope="module")
def exps():
    return [load_experiment(c) for c in CONFIGS]


@pytest.fixture(scope="module")
def base():
    return load_profile(SHIPPED)


def _rows(rows, k):
    return tuple(tuple(r[:-1]) + (r[-1] * k,) for r in rows)


def _here(base):
    """The in-process tables a quick profile would measure on a host COMPUTE / INTERP times
    slower, with no Ray-path table (the quick profile measures none of them)."""
    out = {}
    for name, m in base.tables.models.items():
        e = m.engine and dataclasses.replace(
            m.engine, decode=_rows(m.engine.decode, COMPUTE), prefill=_rows(m.engine.prefill, COMPUTE),
            join=_rows(m.engine.join, COMPUTE), start_s=m.engine.start_s * INTERP,
            stop_s=m.engine.stop_s * TEARDOWN, call=(), contention=())
        out[name] = dataclasses.replace(
            m, train=_rows(m.train, COMPUTE), logprob=_rows(m.logprob, COMPUTE), engine=e,
            weight_sync_s=m.weight_sync_s * INTERP, train_tp=(), train_dp=(), sync=())
    return out


def test_the_shipped_profile_covers_the_quick_set_of_every_shipped_cpu_config(exps, base):
    need = ray_needs(exps, Points.quick(), "cpu")
    assert need.ray and need.streams and need.busy and need.actors and need.genrms
    assert lacks(base, need, "cpu") == ()
    for e in exps:
        assert lacks(base, ray_needs([e], Points.quick(), "cpu"), "cpu") == (), e.name


def test_a_base_without_a_term_names_it(exps, base):
    need = ray_needs(exps, Points.quick(), "cpu")
    t = base.tables
    stripped = dataclasses.replace(base, tables=dataclasses.replace(
        t, handoff_s=0.0, contention=(),
        models={k: dataclasses.replace(m, sync=m.sync[:1]) for k, m in t.models.items()}))
    got = set(lacks(stripped, need, "cpu"))
    assert {"handoff_s", "contention", "tiny-actor: sync"} <= got
    assert lacks(base, need, "cuda") == ("cuda tables",)
    assert lacks(dataclasses.replace(base, tables=None), need, "cpu") == ("cpu tables",)
    # a model the base never measured
    other = dataclasses.replace(t, models={k: m for k, m in t.models.items() if k != "tiny-genrm"})
    assert "tiny-genrm: engine.contention" in lacks(dataclasses.replace(base, tables=other), need, "cpu")
    full = ray_needs(exps, Points(), "cpu")
    assert "tiny-genrm: engine.call" in lacks(dataclasses.replace(base, tables=other), full, "cpu")
    # without Ray (the smoke set) nothing is taken from a base
    assert lacks(stripped, ray_needs(exps, Points.smoke(), "cpu"), "cpu") == ()


def test_ratios_come_from_the_tables_both_profiles_measured(base):
    r = measured_ratios(base, _here(base))
    assert r.compute == pytest.approx(COMPUTE, rel=1e-9)
    # the teardowns ran TEARDOWN times slower and move no ratio
    assert r.interpreter == pytest.approx(INTERP, rel=1e-9)
    # nothing in common (another name and another shape): no ratio (the caller falls back
    # to the probe)
    other = dataclasses.replace(base.tables.models["tiny-actor"], shape="layers=99")
    assert measured_ratios(base, {"someone-else": other}) is None


def test_carried_terms_are_the_base_rescaled_by_kind(exps, base):
    here = _here(base)
    now = HostProbe(python_s=1.0, matmul_s=1.0)
    models, fields, note = carried(base, "cpu-local.yaml", here, now)
    t = base.tables
    a, b = models["tiny-actor"], t.models["tiny-actor"]
    # measured here: kept as measured
    assert a.train == here["tiny-actor"].train and a.engine.start_s == here["tiny-actor"].engine.start_s
    # interpreter-bound Ray-path terms follow the interpreter ratio (rounded to 1e-6 s)
    tol = 1e-6
    assert fields["rpc_s"] == pytest.approx(t.rpc_s * INTERP, abs=tol)
    assert fields["handoff_s"] == pytest.approx(t.handoff_s * INTERP, abs=tol)
    assert [s for _, s in a.sync] == pytest.approx([s * INTERP for _, s in b.sync], abs=tol)
    assert [r[-1] for r in a.engine.call] == pytest.approx([r[-1] * INTERP for r in b.engine.call], abs=tol)
    # trainer groups are compute tables
    assert [r[-1] for r in a.train_tp] == pytest.approx([r[-1] * COMPUTE for r in b.train_tp], abs=tol)
    assert [r[-1] for r in a.train_dp] == pytest.approx([r[-1] * COMPUTE for r in b.train_dp], abs=tol)
    # contention is a ratio: unchanged
    assert fields["contention"] == t.contention
    g = models["tiny-genrm"]
    assert g.engine.contention == t.models["tiny-genrm"].engine.contention
    assert "cpu-local.yaml" in note and f"x{INTERP:.2f} interpreter-bound" in note
    # every term an experiment needs is there again
    prof = dataclasses.replace(base, tables=dataclasses.replace(t, models=models, **fields))
    for e in exps:
        assert missing_terms(prof, e) == (), e.name


def test_without_shared_tables_the_probe_rescales(base):
    t = base.tables
    # both parts of the probe twice as slow (a profile without parts: the whole probe twice)
    now = (HostProbe(python_s=2 * t.host_probe_python_s, matmul_s=2 * t.host_probe_matmul_s)
           if t.host_probe_python_s > 0 else HostProbe(t.host_probe_s, t.host_probe_s))
    models, fields, note = carried(base, "b.yaml", {}, now)
    assert models == {}
    assert fields["rpc_s"] == pytest.approx(t.rpc_s * 2, abs=1e-6)
    assert f"probe x{now.total_s / t.host_probe_s:.2f}" in note


def test_a_model_of_a_measured_shape_under_another_name_takes_that_entrys_terms(exps, base):
    """A user's checkpoint named otherwise but shaped like a base model: the base covers it
    (no full profile needed) and its Ray-path terms are that entry's, rescaled."""
    demo = next(e for e in exps if e.name == "demo-cpu")
    renamed = dataclasses.replace(demo, actor=dataclasses.replace(demo.actor, name="my-actor"),
                                  genrm=dataclasses.replace(demo.genrm, name="my-judge"))
    need = ray_needs([renamed], Points.quick(), "cpu")
    assert {n for n, _ in need.shapes} == {"my-actor", "my-judge"}
    assert lacks(base, need, "cpu") == ()
    here = _here(base)
    mine = {"my-actor": here[demo.actor.name], "my-judge": here[demo.genrm.name]}
    assert measured_ratios(base, mine).interpreter == pytest.approx(INTERP, rel=1e-9)
    models, _, _ = carried(base, "cpu-local.yaml", mine, HostProbe(python_s=1.0, matmul_s=1.0))
    b = base.tables.models[demo.actor.name]
    assert [s for _, s in models["my-actor"].sync] == pytest.approx(
        [s * INTERP for _, s in b.sync], abs=1e-6)
    assert models["my-judge"].engine.call   # the base's engine calls, carried
    # a shape the base never measured is still lacking
    odd = dataclasses.replace(renamed, actor=dataclasses.replace(renamed.actor, layers=renamed.actor.layers + 1))
    assert "my-actor: sync" in lacks(base, ray_needs([odd], Points.quick(), "cpu"), "cpu")
    assert "my-actor: every table" in lacks(base, ray_needs([odd], Points(), "cpu"), "cpu")


def test_the_quick_set_needs_no_trainer_groups_or_engine_calls_from_its_base(exps, base):
    """It measures those itself (`Points.own_ray`): a base without them still serves it,
    and a set that would carry them (own_ray off) names them."""
    t = base.tables
    bare = dataclasses.replace(base, tables=dataclasses.replace(t, models={
        k: dataclasses.replace(m, train_tp=(), train_dp=(),
                               engine=m.engine and dataclasses.replace(m.engine, call=()))
        for k, m in t.models.items()}))
    quick = ray_needs(exps, Points.quick(), "cpu")
    assert quick.own and lacks(bare, quick, "cpu") == ()
    carrying = dataclasses.replace(quick, own=False)
    got = set(lacks(bare, carrying, "cpu"))
    assert {"tiny-actor: train_tp", "tiny-actor: train_dp", "tiny-actor: engine.call",
            "tiny-genrm: engine.call"} <= got
    # what a base must still have: weight sync to engines and each GenRM's own contention
    no_sync = dataclasses.replace(bare, tables=dataclasses.replace(bare.tables, models={
        k: dataclasses.replace(m, sync=(), engine=m.engine and dataclasses.replace(m.engine, contention=()))
        for k, m in bare.tables.models.items()}))
    got = set(lacks(no_sync, quick, "cpu"))
    assert {"tiny-actor: sync", "tiny-genrm: engine.contention"} <= got
