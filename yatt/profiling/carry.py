"""The Ray-path terms of a quick profile, carried from a base profile rescaled to this host.

Why: most of `yatt profile --quick`'s minutes on CPU go to starting Ray actors (each one
imports torch, vLLM and Megatron) for the terms measured through Ray: the round trip,
object-store transfers, the stream hand-off, engine call overheads, weight sync to engine
actors, TP / DP trainer groups and host contention. The host check already carries those
terms to another host by the probe (`yatt.planner.hostscale`: interpreter-bound seconds
follow its Python part, group tables its whole, contention is a ratio). The model-bound
tables (train, log-prob, decode, prefill, join, engine re-create and teardown, in-process
weight sync, stop lengths) are measured in-process in well under two minutes. So with a
base profile that has every Ray-path term for the same models, the quick profile measures
the model-bound tables here and takes the Ray-path terms from the base, rescaled by how
much slower or faster this host ran the tables both profiles measured (the same models'
real work, a closer match for those terms than the probe's loop); a base that lacks any
of them is not used (`lacks` says what), and every term is measured. The quick set then
measures the trainer groups and engine calls itself (`Points.own_ray`, replacing the
carried ones: they did not move with the tables between two hosts), so a base without
them still serves it (`RayNeeds.own`). A model the base
measured under another name but with the same shape (`ModelSpec.shape_key`) takes that
entry's Ray-path terms: the same work, whatever the checkpoint is called.
"""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Optional

from yatt.planner.hostscale import HostProbe, HostRatios, host_ratios, ratio_text, rescale_profile
from yatt.planner.profile_io import ModelTables, Profile, ProfileTables


@dataclass(frozen=True)
class RayNeeds:
    """The Ray-path terms a profile of some experiments measures (`ray_tables.ray_needs`)."""

    ray: bool                           # any Ray-path term at all
    streams: bool                       # the stream hand-off
    busy: tuple[int, ...]               # contention: busy-device counts
    # per actor: (name, trainer TP sizes, DP sizes, engine counts of weight sync)
    actors: tuple[tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...]
    genrms: tuple[str, ...]             # GenRM engines measured on their own
    shapes: tuple[tuple[str, str], ...] = ()   # (name, ModelSpec.shape_key) of each model
    # the trainer groups and engine calls are measured here (`Points.own_ray`), so a base
    # need not have them
    own: bool = False


def _entry(t: ProfileTables, name: str, shape: str) -> Optional[ModelTables]:
    """The base's tables for the model `name` measured here: its own, else a same-shape one."""
    hit = t.entry_for(name, shape)
    return None if hit is None else hit[1]


def lacks(base: Profile, need: RayNeeds, device: str) -> tuple[str, ...]:
    """The Ray-path terms in `need` that `base` does not have, as 'model: table' or
    'table' names; () when the base covers them all."""
    t = base.tables
    if t is None or t.device != device:
        return (f"{device} tables",)
    if not need.ray:
        return ()
    out = [] if t.host_probe_s > 0 else ["host_probe_s"]
    out += [k for k in ("rpc_s", "transfer") if not getattr(t, k)]
    if need.streams and t.handoff_s <= 0:
        out.append("handoff_s")
    busy = set(need.busy)
    if busy - {c.busy for c in t.contention}:
        out.append("contention")
    shape = dict(need.shapes)
    for name, tp, dp, sync in need.actors:
        m = _entry(t, name, shape.get(name, ""))
        if m is None:
            out.append(f"{name}: sync" if need.own else f"{name}: every table")
            continue
        groups = () if need.own else (("train_tp", tp), ("train_dp", dp))
        out += [f"{name}: {k}" for k, sizes in groups + (("sync", sync),)
                if set(sizes) - {int(row[0]) for row in getattr(m, k)}]
        if not need.own and (m.engine is None or not m.engine.call):
            out.append(f"{name}: engine.call")
    for name in need.genrms:
        g = _entry(t, name, shape.get(name, ""))
        if not need.own and (g is None or g.engine is None or not g.engine.call):
            out.append(f"{name}: engine.call")
        elif busy - ({int(b) for b, _ in g.engine.contention} if g and g.engine else set()):
            out.append(f"{name}: engine.contention")
    return tuple(out)


def _paired(now: tuple, then: tuple) -> list[float]:
    """now / then of the rows both tables have (matched on every column but the seconds)."""
    old = {tuple(r[:-1]): r[-1] for r in then}
    return [r[-1] / old[tuple(r[:-1])] for r in now if old.get(tuple(r[:-1]), 0) > 0 and r[-1] > 0]


def measured_ratios(base: Profile, models: dict[str, ModelTables]) -> Optional[HostRatios]:
    """How much slower (> 1) this host ran what both profiles measured in-process, by kind:
    interpreter-bound (engine re-create, the in-process weight sync) and compute-bound
    (train, log-prob, decode and prefill rows at the same sizes). Medians of the paired
    ratios: real work of the same models, which the Ray-path terms resemble more than the
    probe's loop does. An engine's teardown is left out: it is kernel work that does not
    follow the interpreter (`yatt.planner.hostscale`). None where the two share no
    measurement."""
    interp: list[float] = []
    compute: list[float] = []
    for name, m in models.items():
        b = _entry(base.tables, name, m.shape)
        if b is None:
            continue
        compute += _paired(m.train, b.train) + _paired(m.logprob, b.logprob)
        pairs = [(m.weight_sync_s, b.weight_sync_s)]
        if m.engine is not None and b.engine is not None:
            compute += _paired(m.engine.decode, b.engine.decode)
            compute += _paired(m.engine.prefill, b.engine.prefill)
            pairs.append((m.engine.start_s, b.engine.start_s))
        interp += [a / c for a, c in pairs if a > 0 and c > 0]
    if not interp or not compute:
        return None
    c = statistics.median(compute)
    return HostRatios(whole=c, interpreter=statistics.median(interp), compute=c)


def _ray_fields(measured: ModelTables, base: ModelTables) -> ModelTables:
    """`measured` with the base's Ray-path tables: groups, sync, engine calls, contention."""
    out = dataclasses.replace(measured, train_tp=base.train_tp, train_dp=base.train_dp,
                              sync=base.sync)
    if measured.engine is None or base.engine is None:
        return out
    return dataclasses.replace(out, engine=dataclasses.replace(
        measured.engine, call=base.engine.call, contention=base.engine.contention))


def carried(base: Profile, name: str, models: dict[str, ModelTables], now: HostProbe
            ) -> tuple[dict, dict, str]:
    """(models, ProfileTables fields, a note for the profile's source): `models` (measured
    here) with the Ray-path tables of `base` (the file `name`), and the base's host-wide
    Ray-path fields, rescaled to this host by `measured_ratios` (by the probe `now` where
    the two profiles share no measurement). The caller has checked `lacks`."""
    r = measured_ratios(base, models)
    how = (f"x{r.interpreter:.2f} interpreter-bound, x{r.compute:.2f} compute-bound, from "
           f"the tables both measured" if r is not None else "")
    if r is None and (r := host_ratios(base.tables, now)) is not None:
        how = ratio_text(r)
    scaled = rescale_profile(base, r, now).tables if r is not None else base.tables
    out = {n: _ray_fields(m, b) if (b := _entry(scaled, n, m.shape)) is not None else m
           for n, m in models.items()}
    fields = dict(rpc_s=scaled.rpc_s, transfer=scaled.transfer, handoff_s=scaled.handoff_s,
                  contention=scaled.contention, contention_load_avg=scaled.contention_load_avg)
    return out, fields, f"Ray-path terms from {name} ({how or 'as measured'})"
