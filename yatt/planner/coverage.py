"""Which of an experiment's cost terms a tables profile measured, and which it leaves to
the analytic model.

Why: a plan is only as measured as its profile. `yatt profile --quick` must measure every
term the full profile does for the experiment's models (so a user re-profiling a host
gets complete plans), and a reduced profile should say what it lacks. `missing_terms`
lists, for one experiment, each table the profiled cost model (`yatt.planner.profiled`)
would look up and not find; `yatt profile` prints it and the fidelity bench checks the
quick profile it makes with it.
"""
from __future__ import annotations

from typing import Optional

from yatt.core.plan import Experiment
from yatt.core.roles import Mode

from .profile_io import ModelTables, Profile

MAX_GROUP = 4   # the largest TP / DP group a profile times (yatt.profiling.points.MAX_TP_MEASURED)


def _engine_terms(name: str, m: ModelTables, contention: Optional[tuple]) -> list[str]:
    """The engine tables `m` lacks; `contention`: the engine contention points the model
    needs and has (None: not needed)."""
    e = m.engine
    if e is None:
        return [f"{name}: engine"]
    out = [f"{name}: engine.{k}" for k in ("decode", "prefill", "join", "call") if not getattr(e, k)]
    return out + ([f"{name}: engine.contention"] if contention == () else [])


def missing_terms(profile: Profile, exp: Experiment) -> tuple[str, ...]:
    """The tables `exp` needs that `profile` lacks, as 'model: table' or 'table' names; ()
    when every term is measured. A profile without tables lacks everything ('tables')."""
    t = profile.tables
    if t is None:
        return ("tables",)
    cpu = t.device == "cpu"
    n = exp.cluster.num_gpus
    out: list[str] = []
    a = exp.actor.name
    found = t.timing_for(exp.actor)          # its own tables, or those of its shape
    m = found[1] if found else None
    if m is None:
        out.append(f"{a}: every table")
    else:
        out += [f"{a}: {k}" for k in ("train", "logprob", "sync") if not getattr(m, k)]
        own = t.models.get(a)                # stop lengths follow the weights: its own only
        if exp.workload.stop_len is None and (own is None or not own.stop_len):
            out.append(f"{a}: stop_len")
        out += _engine_terms(a, m, None)    # an actor's engines use the shared decode ratio
        if any(2 <= tp <= min(MAX_GROUP, n) and exp.actor.check_tp(tp) is None
               for tp in exp.search.tp_choices) and not m.train_tp:
            out.append(f"{a}: train_tp")
        if n >= 2 and 1 in exp.search.tp_choices and not m.train_dp:
            out.append(f"{a}: train_dp")
    if exp.algo.reward.needs_genrm and exp.genrm is not None:
        gf = t.timing_for(exp.genrm)
        g = gf[1] if gf else None
        out += ([f"{exp.genrm.name}: every table"] if g is None
                else _engine_terms(exp.genrm.name, g, t.engine_contention_of(exp.genrm)
                                   if cpu and n >= 2 else None))
        if Mode.PARTIAL in exp.search.modes and t.handoff_s <= 0:
            out.append("handoff_s")
    if t.rpc_s <= 0:
        out.append("rpc_s")
    if cpu and n >= 2 and not t.contention:
        out.append("contention")
    return tuple(out)
