"""`yatt profile --quick` is complete: it measures every table the full profile measures
for the demo and fidelity experiments (the same switches: Ray round trips, weight sync,
engine calls, the hand-off, contention, TP / DP groups, stop lengths), with enough distinct
sizes per table to determine each fit, and the full (shipped) profile leaves no term of
those experiments to the analytic model. Pure: no measuring here (the quick profile's
end-to-end test is tests/profiling/test_profile.py, carrying the Ray-path terms
tests/profiling/test_carry.py; its comparison with the full set is bench/quick_profile.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from yatt.core.config import load_experiment
from yatt.planner.coverage import missing_terms
from yatt.planner.profile_io import load_profile
from yatt.profiling.points import Points, models_to_measure
from yatt.profiling.profile import _joins
from yatt.profiling.ray_tables import sync_counts

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = [ROOT / "configs" / "demo-cpu.yaml"] + sorted((ROOT / "configs" / "fidelity").glob("*.yaml"))
SHIPPED = ROOT / "configs" / "profiles" / "cpu-local.yaml"


@pytest.fixture(scope="module")
def exps():
    return [load_experiment(c) for c in CONFIGS]


def test_quick_measures_what_the_full_set_measures(exps):
    full, quick = Points(), Points.quick()
    assert quick.ray and quick.ray == full.ray
    assert quick.busy_counts(exps, "cpu") == full.busy_counts(exps, "cpu") != ()
    actors, genrms = models_to_measure(exps)
    assert genrms   # the fidelity GenRMs are measured as engines
    for e in actors:
        name = e.actor.name
        assert quick.tp_sizes(exps, name) == full.tp_sizes(exps, name) != ()
        assert quick.dp_sizes(exps, name) == full.dp_sizes(exps, name) != ()
        assert sync_counts(exps, name)
    assert quick.stop_samples >= 1 and quick.restarts >= 1 and quick.reps >= 1
    assert quick.contention_rounds >= 1 and quick.rpc_reps >= 1 and quick.handoff_reps >= 1
    assert quick.host_probe_s > 0     # the profile records the host probe (host check)


def _distinct(rows) -> int:
    return len(set(rows))


def test_each_quick_table_determines_its_fit(exps):
    """At least as many distinct sizes as the fit has coefficients (yatt.planner.profiled):
    train 5, logprob 3, decode 3 (two batch sizes and two contexts), prefill 2, join 3 on
    every engine's batch limit; TP / DP groups at least 1 (a ratio)."""
    q = Points.quick()
    assert _distinct(q.train) >= 5 and _distinct(q.logprob) >= 3 and _distinct(q.prefill) >= 2
    for e in exps:
        for limit in (e.engine.max_num_seqs, e.engine.genrm_max_num_seqs):
            dec = {(min(b, limit), c) for b, c in q.decode}
            assert len(dec) >= 3 and len({b for b, _ in dec}) >= 2 and len({c for _, c in dec}) >= 2
            assert len(_joins(q.join, limit)) >= 3
    assert len(q.tp_points) >= 1
    # the full set's points (fewer bend the fits), measured fewer times: that makes it quick
    full = Points()
    assert (q.train, q.logprob, q.decode, q.prefill, q.join) == (
        full.train, full.logprob, full.decode, full.prefill, full.join)
    assert q.passes * q.reps < full.passes * full.reps
    # the stop lengths are the a-priori response lengths: a sample as large as the full one's
    assert q.stop_samples == full.stop_samples
    assert q.contention_rounds < full.contention_rounds
    # re-creates: three, as many as the full set, since one slow re-create of a large KV
    # cache is half of a median of two (the re-create dominates a colocate step on CPU)
    assert q.restarts >= 3


def test_the_full_profile_covers_every_term_and_smoke_says_what_it_lacks(exps):
    prof = load_profile(SHIPPED)
    for e in exps:
        assert missing_terms(prof, e) == (), e.name
    # the same profile without its Ray-measured terms: each one is named
    import dataclasses

    t = prof.tables
    stripped = dataclasses.replace(prof, tables=dataclasses.replace(
        t, rpc_s=0.0, handoff_s=0.0, contention=(),
        models={k: dataclasses.replace(m, sync=(), train_dp=(), train_tp=())
                for k, m in t.models.items()}))
    short = next(e for e in exps if e.name == "fidelity-short")
    lack = set(missing_terms(stripped, short))
    assert {"rpc_s", "handoff_s", "contention", "tiny-actor: sync", "tiny-actor: train_tp",
            "tiny-actor: train_dp"} <= lack
    assert missing_terms(dataclasses.replace(prof, tables=None), short) == ("tables",)


def test_quick_and_smoke_together_is_one_line_exit_2(tmp_path, capsys):
    from yatt.cli.main import main

    out = tmp_path / "p.yaml"
    assert main(["profile", str(CONFIGS[0]), "--quick", "--smoke", "-o", str(out),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--smoke" in err[0] and "one of them" in err[0]
    assert not out.exists()


def test_base_without_quick_is_one_line_exit_2(tmp_path, capsys):
    from yatt.cli.main import main

    out = tmp_path / "p.yaml"
    assert main(["profile", str(CONFIGS[0]), "--base", str(SHIPPED), "-o", str(out),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--base" in err[0] and "--quick" in err[0]
    assert not out.exists()
