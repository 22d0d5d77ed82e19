"""The placement space: which TP sizes, trainer TP x PP layouts and partial-colocate splits
are legal and fit.

Why: the search should simulate only placements that can run. This module enumerates
them from the experiment, prunes with the memory model, and says in plain words why a
role fits nowhere ("Qwen2.5-Math-72B GenRM needs TP >= 4 on A100-80G (weights 145 GB)").
A trainer layout is (TP, PP): TP groups sit inside a node, a model replica's TP x PP
devices may span nodes (pipeline stages then hop between nodes), DP fills the cluster.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from yatt.core.plan import Experiment, Parallel
from yatt.core.roles import ReleasePolicy, Role
from yatt.core.specs import AdamMoments, ModelSpec

from . import memory


Layout = tuple[int, int]  # a trainer's (TP, PP)


@dataclass(frozen=True)
class Space:
    rollout_tps: tuple[int, ...]
    genrm_tps: tuple[int, ...]      # empty when the reward is rule-based
    trainer_layouts: tuple[Layout, ...]  # (TP, PP) that fit, by PP then TP
    problems: tuple[str, ...]       # why some role fits nowhere (empty = feasible)
    notes: tuple[str, ...]          # pruned options worth telling the user about
    problem_field: str = ""         # the config field the first problem is about

    @property
    def trainer_tps(self) -> tuple[int, ...]:
        """The trainer TP sizes of some fitting layout."""
        return tuple(sorted({tp for tp, _ in self.trainer_layouts}))


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


def trainer_parallel(exp: Experiment, layout: Layout) -> Parallel:
    """The trainer's Parallel for a (TP, PP) layout on the whole cluster."""
    tp, pp = layout
    return Parallel(tp, pp, exp.cluster.num_gpus // (tp * pp))


def trainer_layout_memory(exp: Experiment, layout: Layout) -> memory.MemoryBreakdown:
    """The fullest pipeline stage's bytes per device for a (TP, PP) layout."""
    return memory.trainer_memory(exp.actor, trainer_parallel(exp, layout), exp.algo, exp.cluster.gpu)


def legal_layouts(exp: Experiment) -> list[Layout]:
    """Trainer (TP, PP) layouts the cluster and model allow, by PP then TP: TP legal for the
    actor inside a node, PP dividing the layers, TP x PP dividing the cluster, and a replica
    either inside a node or made of whole nodes (so stage hops are node-aligned)."""
    c, m = exp.cluster, exp.actor
    out = []
    for pp in sorted(set(exp.search.pp_choices)):
        for tp in sorted(set(exp.search.tp_choices)):
            k = tp * pp
            if not _legal_tp(m, tp, exp) or m.layers % pp or c.num_gpus % k:
                continue
            if pp > 1 and k % c.gpus_per_node and c.gpus_per_node % k:
                continue
            out.append((tp, pp))
    return out


def layout_text(layout: Layout) -> str:
    tp, pp = layout
    return f"tp{tp}" + (f"·pp{pp}" if pp > 1 else "")


def _state_gb(mb: memory.MemoryBreakdown) -> float:
    return (mb.weights + mb.grads + mb.optimizer) / 1e9


def _trainer_no_fit(exp: Experiment, legal: list[Layout]) -> str:
    """Why no trainer layout fits: the closest one, in bytes, and what would help."""
    gpu = exp.cluster.gpu
    head = (f"{exp.actor.name} training state does not fit at any TP×PP (TP in "
            f"{sorted(set(exp.search.tp_choices))}, PP in {sorted(set(exp.search.pp_choices))}) "
            f"on {exp.cluster.num_gpus} x {gpu.name}")
    if not legal:
        return head + ": no legal layout"
    best = min(legal, key=lambda lay: (trainer_layout_memory(exp, lay).total, lay[1], lay[0]))
    mb = trainer_layout_memory(exp, best)
    par = trainer_parallel(exp, best)
    stage = f"stage {mb.stage} of {mb.stages}: " if mb.stages > 1 else ""
    why = (f": the least is {mb.total / 1e9:.1f} GB of {mb.capacity / 1e9:.0f} GB per device, at "
           f"{layout_text(best)}·dp{par.dp} ({stage}weights+grads+optimizer {_state_gb(mb):.1f} GB, "
           f"activations {mb.activations / 1e9:.1f} GB)")
    hint = ""
    if exp.algo.adam_moments is AdamMoments.FP32:
        bf16 = dataclasses.replace(exp, algo=dataclasses.replace(exp.algo, adam_moments=AdamMoments.BF16))
        fit = [lay for lay in legal if trainer_layout_memory(bf16, lay).fits()]
        if fit:
            hint = (f"; with algo.adam_moments: bf16 (8 B/param of Adam state, not 12) "
                    f"{layout_text(fit[0])} fits")
    return head + why + hint


def placement_space(exp: Experiment) -> Space:
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
    legal = legal_layouts(exp)
    layouts = []
    for lay in legal:
        mb = trainer_layout_memory(exp, lay)
        if mb.fits():
            layouts.append(lay)
        else:
            notes.append(f"{exp.actor.name} trainer at {layout_text(lay)}: needs "
                         f"{mb.total / 1e9:.0f} GB of {mb.capacity / 1e9:.0f} GB")
    if not layouts:
        problems.append(_trainer_no_fit(exp, legal))
        fields.append("search.tp_choices")
    if r_tps and layouts and (exp.genrm is None or g_tps):
        notes += _release_notes(exp, r_tps[0], g_tps[0] if g_tps else None, layouts[0])
    return Space(r_tps, g_tps, tuple(layouts), tuple(problems), tuple(notes),
                 fields[0] if fields else "")


def resident_colocate_memory(exp: Experiment, rollout_tp: int, genrm_tp: int | None,
                             trainer_tp: int, trainer_pp: int = 1) -> tuple[float, float]:
    """(bytes per device, capacity) when every role of a full-colocate plan stays resident:
    each engine keeps its whole `gpu_memory_utilization` share (vLLM preallocates it), the
    trainer its full state (fullest stage), the reference its weights and one forward
    (reserve counted once)."""
    gpu = exp.cluster.gpu
    par = trainer_parallel(exp, (trainer_tp, trainer_pp))
    engines = 1 + (genrm_tp is not None)
    need = engines * gpu.hbm_bytes * exp.engine.gpu_memory_utilization
    t = memory.trainer_memory(exp.actor, par, exp.algo, gpu)
    need += t.total - t.reserve
    if exp.algo.use_reference and exp.algo.kl_coef > 0:
        r = memory.reference_memory(exp.actor, par, exp.algo, gpu)
        need += r.total - r.reserve
    return need, gpu.hbm_bytes


def _release_notes(exp: Experiment, rollout_tp: int, genrm_tp: int | None,
                   trainer: Layout) -> list[str]:
    """What the memory model says about the configured release policy (full colocate, at the
    smallest TPs that fit): resident skips the per-step offload/reload (on CPU: engine
    teardown and re-create, seconds per step), so say when it fits and was not chosen, and
    warn when it was chosen and does not fit. The policy itself stays the user's choice."""
    need, cap = resident_colocate_memory(exp, rollout_tp, genrm_tp, *trainer)
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


def async_trainer_fits(exp: Experiment, layout: Layout, devices: int) -> bool:
    """Whether the trainer at `layout` on `devices` devices (async: its own share of the
    cluster, DP = devices / (TP x PP)) fits with the reference resident beside it (no
    engine shares these devices, so nothing is offloaded between steps)."""
    tp, pp = layout
    if devices < tp * pp or devices % (tp * pp):
        return False
    par = Parallel(tp, pp, devices // (tp * pp))
    gpu = exp.cluster.gpu
    t = memory.trainer_memory(exp.actor, par, exp.algo, gpu)
    need = t.total
    if exp.algo.use_reference and exp.algo.kl_coef > 0:
        r = memory.reference_memory(exp.actor, par, exp.algo, gpu)
        need += r.total - r.reserve
    return need <= gpu.hbm_bytes


def async_splits(exp: Experiment, rollout_tp: int, genrm_tp: int, layout: Layout,
                 reference_tp: int, rollout_share: float | None = None) -> list[tuple[int, int]]:
    """Legal (rollout devices, GenRM devices) for async mode, by generator devices; the
    trainer and reference take the rest of the cluster.

    rollout_share: with a GenRM on its own devices, the rollout's share of the generator
    devices (rounded to whole engines); None: the GenRM (if any) shares the rollout's
    devices. Every TP group starts on a multiple of its TP (so it sits inside a node), a
    trainer replica of whole nodes starts on a node, and the trainer must fit on its share.
    """
    n, gpn = exp.cluster.num_gpus, exp.cluster.gpus_per_node
    tp, pp = layout
    k = tp * pp
    has_genrm = exp.genrm is not None and exp.algo.reward.needs_genrm
    own = has_genrm and rollout_share is not None
    fits: dict[int, bool] = {}
    out = []
    for d in range(1, n):
        t = n - d
        if t % k or d % tp or t % reference_tp or d % reference_tp:
            continue
        if k > gpn and d % gpn:
            continue
        if own:
            assert rollout_share is not None
            unit = math.lcm(rollout_tp, genrm_tp)  # whole engines; the GenRM's groups aligned
            r = max(unit, int(round(d * rollout_share / unit)) * unit)
            g = d - r
            if g < genrm_tp or g % genrm_tp:
                continue
        else:
            r, g = d, 0
            if d % rollout_tp or (has_genrm and d % genrm_tp):
                continue
        if t not in fits:
            fits[t] = async_trainer_fits(exp, layout, t)
        if fits[t]:
            out.append((r, g))
    return out
