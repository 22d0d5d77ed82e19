"""The placement space: which TP sizes and partial-colocate splits are legal and fit.

Why: the search should simulate only placements that can run. This module enumerates
them from the experiment, prunes with the memory model, and says in plain words why a
role fits nowhere ("Qwen2.5-Math-72B GenRM needs TP >= 4 on A100-80G (weights 145 GB)").
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from yatt.core.plan import Experiment, Parallel
from yatt.core.roles import ReleasePolicy, Role
from yatt.core.specs import ModelSpec

from . import memory


@dataclass(frozen=True)
class Space:
    rollout_tps: tuple[int, ...]
    genrm_tps: tuple[int, ...]      # empty when the reward is rule-based
    trainer_tps: tuple[int, ...]
    problems: tuple[str, ...]       # why some role fits nowhere (empty = feasible)
    notes: tuple[str, ...]          # pruned options worth telling the user about
    problem_field: str = ""         # the config field the first problem is about


def _max_seq(exp: Experiment) -> int:
    w = exp.workload
    return w.prompt_len.upper() + w.response_len.upper()


def _genrm_seq(exp: Experiment) -> int:
    w = exp.workload
    return _max_seq(exp) + w.genrm_template_tokens + w.genrm_output_len.upper()


def _legal_tp(model: ModelSpec, tp: int, exp: Experiment) -> bool:
    c = exp.cluster
    return (model.check_tp(tp) is None and tp <= c.gpus_per_node and c.gpus_per_node % tp == 0
            and c.num_gpus % tp == 0)


def _engine_tps(exp: Experiment, model: ModelSpec, role: Role, min_kv: int,
                choices: tuple[int, ...]) -> tuple[tuple[int, ...], list[str]]:
    gpu = exp.cluster.gpu
    ok, notes = [], []
    for tp in choices:
        if not _legal_tp(model, tp, exp):
            continue
        mb = memory.engine_memory(model, tp, role, exp.engine, gpu, min_kv)
        if mb.fits():
            ok.append(tp)
        else:
            notes.append(f"{model.name} {role.value} at TP={tp}: needs {mb.total / 1e9:.0f} GB of "
                         f"{mb.capacity / 1e9:.0f} GB usable")
    return tuple(ok), notes


def _trainer_fits(exp: Experiment, tp: int) -> memory.MemoryBreakdown:
    g = exp.cluster.num_gpus
    return memory.trainer_memory(exp.actor, Parallel(tp, 1, g // tp), exp.algo, exp.cluster.gpu)


def placement_space(exp: Experiment) -> Space:
    choices = tuple(sorted(set(exp.search.tp_choices)))
    gpu = exp.cluster.gpu
    problems: list[str] = []
    fields: list[str] = []
    notes: list[str] = []
    engine_choices = tuple(sorted(set(exp.search.engine_tps)))
    r_tps, n = _engine_tps(exp, exp.actor, Role.ROLLOUT, _max_seq(exp), engine_choices)
    notes += n
    if not r_tps:
        text, field = _no_fit(exp.actor, "rollout", gpu.name, gpu.hbm_gb, engine_choices, exp)
        problems.append(text)
        fields.append(field)
    g_tps: tuple[int, ...] = ()
    if exp.genrm is not None:
        g_tps, n = _engine_tps(exp, exp.genrm, Role.GENRM, _genrm_seq(exp), engine_choices)
        notes += n
        if not g_tps:
            text, field = _no_fit(exp.genrm, "GenRM", gpu.name, gpu.hbm_gb, engine_choices, exp)
            problems.append(text)
            fields.append(field)
    t_tps = []
    for tp in choices:
        if not _legal_tp(exp.actor, tp, exp):
            continue
        mb = _trainer_fits(exp, tp)
        if mb.fits():
            t_tps.append(tp)
        else:
            notes.append(f"{exp.actor.name} trainer at TP={tp}: needs {mb.total / 1e9:.0f} GB of "
                         f"{mb.capacity / 1e9:.0f} GB")
    if not t_tps:
        problems.append(f"{exp.actor.name} training state does not fit at any TP in "
                        f"{list(choices)} on {exp.cluster.num_gpus} x {gpu.name}")
        fields.append("search.tp_choices")
    if r_tps and t_tps and (exp.genrm is None or g_tps):
        notes += _release_notes(exp, r_tps[0], g_tps[0] if g_tps else None, t_tps[0])
    return Space(r_tps, g_tps, tuple(t_tps), tuple(problems), tuple(notes),
                 fields[0] if fields else "")


def resident_colocate_memory(exp: Experiment, rollout_tp: int, genrm_tp: int | None,
                             trainer_tp: int) -> tuple[float, float]:
    """(bytes per device, capacity) when every role of a full-colocate plan stays resident:
    each engine keeps its whole `gpu_memory_utilization` share (vLLM preallocates it), the
    trainer its full state, the reference its weights and one forward (reserve counted once)."""
    gpu, g = exp.cluster.gpu, exp.cluster.num_gpus
    par = Parallel(trainer_tp, 1, g // trainer_tp)
    engines = 1 + (genrm_tp is not None)
    need = engines * gpu.hbm_bytes * exp.engine.gpu_memory_utilization
    t = memory.trainer_memory(exp.actor, par, exp.algo, gpu)
    need += t.total - t.reserve
    if exp.algo.use_reference and exp.algo.kl_coef > 0:
        r = memory.reference_memory(exp.actor, par, exp.algo, gpu)
        need += r.total - r.reserve
    return need, gpu.hbm_bytes


def _release_notes(exp: Experiment, rollout_tp: int, genrm_tp: int | None,
                   trainer_tp: int) -> list[str]:
    """What the memory model says about the configured release policy (full colocate, at the
    smallest TPs that fit): resident skips the per-step offload/reload (on CPU: engine
    teardown and re-create, seconds per step), so say when it fits and was not chosen, and
    warn when it was chosen and does not fit. The policy itself stays the user's choice."""
    need, cap = resident_colocate_memory(exp, rollout_tp, genrm_tp, trainer_tp)
    fits = need <= cap
    amount = f"{need / 1e9:.2f} GB of {cap / 1e9:.2f} GB per device"
    if exp.search.release is ReleasePolicy.RESIDENT:
        if fits:
            return [f"release: resident keeps every role in memory at once ({amount} in full colocate)"]
        return [f"release: resident needs {amount} in full colocate (engines keep their "
                f"gpu_memory_utilization={exp.engine.gpu_memory_utilization:g} share); lower "
                "engine.gpu_memory_utilization or use release: offload/teardown"]
    if fits:
        return [f"release: resident would fit in full colocate ({amount}) and skips the "
                f"per-step {exp.search.release.value}/reload; set search.release: resident"]
    return []


def _no_fit(model: ModelSpec, what: str, gpu: str, hbm: float, choices: tuple[int, ...],
            exp: Experiment) -> tuple[str, str]:
    """Why an engine fits at no legal TP: its weights, or, when the weights would fit, the
    KV cache of one longest sequence (then the workload's length fields are to blame)."""
    wgb = model.weight_bytes / 1e9
    legal = [t for t in choices if _legal_tp(model, t, exp)]
    role = Role.GENRM if what == "GenRM" else Role.ROLLOUT
    seq = _genrm_seq(exp) if role is Role.GENRM else _max_seq(exp)
    for tp in sorted(legal, reverse=True):
        mb = memory.engine_memory(model, tp, role, exp.engine, exp.cluster.gpu, 0)
        if mb.fits():  # the weights fit: the longest sequence's KV cache does not
            kv = seq * memory.kv_bytes_per_token_per_device(model, tp) / 1e9
            lens = ("prompt_len, response_len, genrm_template_tokens and genrm_output_len"
                    if role is Role.GENRM else "prompt_len and response_len")
            return (f"{model.name} {what}: one sequence of up to {seq:,} tokens (workload {lens} "
                    f"at their max) needs {kv:.3g} GB of KV cache per device at TP={tp}, more "
                    f"than the {mb.margin / 1e9:.3g} GB an engine has left on {gpu}; allowed: "
                    "shorter workload lengths (their `max`)"), "workload.response_len.max"
    need = math.ceil(wgb / (hbm * exp.engine.gpu_memory_utilization))
    tp = 1
    while tp < need:
        tp *= 2
    return (f"{model.name} {what} needs TP >= {tp} on {gpu} (weights {wgb:.0f} GB, "
            f"{hbm:.0f} GB per device); legal TP here: {legal or 'none'}"), "search.tp_choices"


def partial_splits(exp: Experiment, rollout_tp: int, genrm_tp: int) -> list[int]:
    """Legal rollout device counts r for partial colocate (GenRM gets the other G - r).

    r is a multiple of both TPs (whole engines, and every TP group inside a node since
    TP sizes divide the node size), with at least one engine on each side.
    """
    g = exp.cluster.num_gpus
    step = math.lcm(rollout_tp, genrm_tp)
    return [r for r in range(step, g, step) if (g - r) % genrm_tp == 0]
