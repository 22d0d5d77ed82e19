"""`--emit verl|openrlhf|nemo-rl`: a yatt placement as another framework's settings.

Why: a verl, OpenRLHF or NeMo-RL user should be able to apply yatt's advice without
switching executors. Each framework can express only some placements, so this module
says which, in plain words, and when the chosen placement is not expressible it builds
the framework's nearest layouts as yatt Plans, simulates them, and emits the fastest,
with its own predicted step time.

What each framework expresses (option names: `frameworks.OPTIONS_FOR`; the reasoning, with sources:
docs/plan.md):
- verl: full colocate, GenRM included (the hybrid engine with a colocate-mode reward
  model), and a GenRM on its own resource pool that scores each sample as its rollout
  ends, with actor, rollout and reference sharing the other GPUs. Training never uses
  the GenRM pool's GPUs, so yatt's partial colocate is not expressible.
- OpenRLHF: no GenRM inside its scheduler; a GenRM is a user-run server reached through
  `--remote_rm_url`. Rule reward: full colocate (`--colocate_all_models`). With a GenRM:
  actor, reference and vLLM colocated on some GPUs, the GenRM server on the rest.
  DeepSpeed training has no pipeline parallelism.
- NeMo-RL: rule reward: colocated generation. A GenRM runs as a NeMo-Gym server on
  dedicated whole nodes (`env.nemo_gym.num_gpu_nodes`), never on the policy's GPUs.

The framework layouts are simulated with yatt's own model: a GenRM that scores samples as
they finish (verl's standalone reward pool; OpenRLHF calls `--remote_rm_url` from the
vLLM engines per micro-batch; NeMo-Gym judges each rollout when its agent finishes it).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from yatt.core.costmodel import CostModel
from yatt.core.errors import InputError
from yatt.core.plan import Parallel, Plan
from yatt.core.roles import Mode, Role

from . import memory
from .assess import same_placement, score_plan
from .placement_text import placement_text
from .candidate import Candidate, Progress
from .emit_render import render
from .frameworks import OPTIONS_FOR, Framework, has_genrm, node_pool, trainer_of
from .splitsearch import search_split


# ---- what a framework can express ---------------------------------------------------------

# Why an async placement is not emitted, per framework.
ASYNC_NOTE: dict[Framework, str] = {
    Framework.VERL: ("async placements are not emitted: verl's one-step off-policy recipe "
                     "(recipe/one_step_off_policy: rollout and actor on separate resource pools, "
                     "max_staleness 1) is set up by hand; the best synchronous placement follows"),
    Framework.OPENRLHF: ("async placements are not emitted (OpenRLHF's --async_train is set up "
                         "by hand); the best synchronous placement follows"),
    Framework.NEMO_RL: ("async placements are not emitted (NeMo-RL's async GRPO is set up by "
                        "hand); the best synchronous placement follows"),
}


def cannot_express(fw: Framework, plan: Plan) -> tuple[str, ...]:
    """Why `fw` cannot run `plan` as it is (empty: it can)."""
    out: list[str] = []
    genrm = has_genrm(plan)
    if fw is Framework.VERL:
        if plan.mode is Mode.PARTIAL and genrm:
            out.append("training cannot reuse the GenRM's GPUs: a GenRM on its own resource pool "
                       "(reward.reward_model.enable_resource_pool) is independent of the actor/"
                       "rollout/reference pool, and without one the GenRM waits for all rollouts")
    elif fw is Framework.OPENRLHF:
        if genrm:
            out.append("a GenRM cannot run inside OpenRLHF's scheduler: it is a server you run and "
                       "reach through --remote_rm_url, so it cannot sleep and wake on the training "
                       "GPUs" + (", and training cannot reuse its GPUs" if plan.mode is Mode.PARTIAL
                                 else ""))
        if trainer_of(plan).pp > 1:
            out.append("DeepSpeed training has no pipeline parallelism (trainer pp must be 1)")
        if plan.has(Role.REFERENCE) and plan.placement(Role.REFERENCE).tp != trainer_of(plan).tp:
            out.append("the reference runs at the actor's --ds_tensor_parallel_size")
    elif fw is Framework.NEMO_RL:
        if genrm:
            out.append("a GenRM runs as a NeMo-Gym server on dedicated whole nodes "
                       "(env.nemo_gym.num_gpu_nodes): it cannot share the policy's GPUs"
                       + (", and training cannot reuse its nodes" if plan.mode is Mode.PARTIAL
                          else ""))
    return tuple(out)


@dataclass(frozen=True)
class Family:
    """Layouts a framework expresses, one per rollout-side device count `r` in `splits`."""

    label: str
    splits: tuple[int, ...]
    build: Callable[[int], Plan]

    def nearest(self, r: int) -> int:
        return min(self.splits, key=lambda s: (abs(s - r), s))


def _split_plan(plan: Plan, r: int) -> Plan:
    """GenRM on devices r..N-1; rollout, trainer and reference on 0..r-1 (the trainer at PP 1
    when the plan's PP does not divide the remaining devices)."""
    n = plan.cluster.num_gpus
    left, right = tuple(range(r)), tuple(range(r, n))
    places = []
    for p in plan.placements:
        devs = right if p.role is Role.GENRM else left
        places.append(dataclasses.replace(p, devices=devs))
    return dataclasses.replace(plan, mode=Mode.PARTIAL, placements=tuple(places), predicted=None)


def _colocate_plan(plan: Plan) -> Plan:
    everything = tuple(range(plan.cluster.num_gpus))
    places = tuple(dataclasses.replace(p, devices=everything) for p in plan.placements)
    return dataclasses.replace(plan, mode=Mode.COLOCATE, placements=places, predicted=None)


def _no_pp(plan: Plan) -> Plan:
    """DeepSpeed has no pipeline parallelism: neither the actor nor the reference (which the
    search lays out like the trainer, PP included) keeps a PP."""
    places = tuple(dataclasses.replace(p, pp=1) if p.role in (Role.TRAINER, Role.REFERENCE)
                   else p for p in plan.placements)
    return dataclasses.replace(plan, placements=places)


def _same_ref_tp(plan: Plan) -> Plan:
    if not plan.has(Role.REFERENCE):
        return plan
    ttp = trainer_of(plan).tp
    places = tuple(dataclasses.replace(p, tp=ttp) if p.role is Role.REFERENCE else p
                   for p in plan.placements)
    return dataclasses.replace(plan, placements=places)


def _trainer_fits(plan: Plan, devices: int) -> bool:
    exp = plan.experiment
    t = trainer_of(plan)
    if devices % (t.tp * t.pp):
        return False
    par = Parallel(t.tp, t.pp, devices // (t.tp * t.pp))
    return memory.trainer_memory(exp.actor, par, exp.algo, exp.cluster.gpu).fits()


def _valid(build: Callable[[int], Plan], r: int) -> bool:
    try:
        build(r)
    except InputError:
        return False
    return True


def _split_family(fw: Framework, plan: Plan, label: str, whole_nodes: bool) -> Optional[Family]:
    c = plan.cluster
    n, per = c.num_gpus, c.gpus_per_node
    base = plan
    if fw is Framework.OPENRLHF:
        base = _same_ref_tp(_no_pp(base))
    rp, gp = base.placement(Role.ROLLOUT), base.placement(Role.GENRM)
    t = trainer_of(base)
    ref_tp = base.placement(Role.REFERENCE).tp if base.has(Role.REFERENCE) else 1
    step = math.lcm(rp.tp, t.tp * t.pp, ref_tp)
    splits = []
    for r in range(step, n, step):
        g = n - r
        if g % gp.tp or not _trainer_fits(base, r):
            continue
        if whole_nodes and (g % per or (r % per and c.nodes > 1)):
            continue
        if fw is Framework.VERL and (node_pool(r, per, step) is None or node_pool(g, per, gp.tp) is None):
            continue
        if _valid(lambda x: _split_plan(base, x), r):
            splits.append(r)
    if not splits:
        return None
    return Family(label, tuple(splits), lambda r: _split_plan(base, r))


def families(fw: Framework, plan: Plan, colocate: Optional[Plan] = None) -> list[Family]:
    """The framework's layouts nearest to `plan` (empty when it expresses `plan` itself or
    nothing with this experiment's roles fits the cluster). `colocate`: the best full-
    colocate plan the search found, used where the framework expresses full colocate
    (else the plan's own TPs on every device)."""
    if not cannot_express(fw, plan):
        return []
    genrm = has_genrm(plan)
    out: list[Optional[Family]] = []
    if fw is Framework.VERL:
        out.append(_split_family(fw, plan, "GenRM on its own resource pool, scoring each sample "
                                 "as its rollout ends; actor, rollout and reference share the rest",
                                 whole_nodes=False))
        colo = colocate if colocate is not None else _colocate_plan(plan)
        out.append(Family("full colocate (hybrid engine, colocate-mode GenRM)", (0,), lambda _r: colo))
    elif fw is Framework.OPENRLHF:
        if genrm:
            out.append(_split_family(fw, plan, "GenRM as your own vLLM servers behind "
                                     "--remote_rm_url; actor, reference and vLLM colocated on the "
                                     "rest", whole_nodes=False))
        else:
            fixed = _same_ref_tp(_no_pp(plan))
            out.append(Family("full colocate (--colocate_all_models)", (0,), lambda _r: fixed))
    elif fw is Framework.NEMO_RL:
        out.append(_split_family(fw, plan, "GenRM as a NeMo-Gym server on dedicated nodes; "
                                 "generation colocated with the policy on the rest",
                                 whole_nodes=True))
    return [f for f in out if f is not None]


# ---- emitting -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Emission:
    """What `--emit` produced for one framework."""

    framework: Framework
    chosen: Candidate                 # yatt's placement
    reasons: tuple[str, ...]          # why the framework cannot run `chosen` (empty: it can)
    target: Optional[Candidate]       # what is emitted: `chosen`, the nearest layout, or None
    label: str                        # how the target is laid out in the framework's terms

    @property
    def exact(self) -> bool:
        return not self.reasons

    def text(self) -> str:
        return emission_text(self.framework, self.chosen.plan, self.reasons,
                             None if self.target is None else self.target.plan, self.label,
                             self.chosen.mean, None if self.target is None else self.target.mean)

    def as_dict(self) -> dict[str, Any]:
        t = self.target
        return {"framework": self.framework.value, "options_for": OPTIONS_FOR[self.framework],
                "chosen": placement_text(self.chosen.plan), "chosen_step_s": round(self.chosen.mean, 4),
                "exact": self.exact, "cannot": list(self.reasons), "layout": self.label,
                "emitted": None if t is None else placement_text(t.plan),
                "emitted_devices": None if t is None else {
                    p.role.value: len(p.devices) for p in t.plan.placements},
                "emitted_step_s": None if t is None else round(t.mean, 4),
                "text": self.text()}

    def __repr__(self) -> str:
        what = "exact" if self.exact else ("nothing expressible" if self.target is None
                                           else f"nearest {self.target.mean:.1f} s/step")
        return f"Emission({self.framework.value}, {what})"


def layout_text(plan: Plan) -> str:
    """Where each role runs, by device counts (the framework layouts are not always
    parseable placements: the trainer may run on fewer devices than the cluster)."""
    bits = []
    for role, letter in ((Role.ROLLOUT, "R"), (Role.GENRM, "G"), (Role.TRAINER, "T")):
        if plan.has(role):
            p = plan.placement(role)
            bits.append(f"{letter}{len(p.devices)}(tp{p.tp}" + (f",pp{p.pp}" if p.pp > 1 else "") + ")")
    return " ".join(bits)


def emission_text(fw: Framework, chosen: Plan, reasons: Sequence[str], target: Optional[Plan],
                  label: str, chosen_s: Optional[float] = None,
                  target_s: Optional[float] = None) -> str:
    """The emitted file: a header that says what is expressed and how fast yatt predicts it,
    then the settings. Without the times (None) the text depends on the plans alone."""
    c = chosen.cluster
    head = ["#!/usr/bin/env bash", f"# yatt --emit {fw.value}: {c.num_gpus} x {c.gpu.name} ({c.nodes} nodes x "
            f"{c.gpus_per_node}), experiment {chosen.experiment.name}",
            f"# option names checked against {OPTIONS_FOR[fw]}",
            f"# yatt's placement: {placement_text(chosen)}"
            + (f" (predicted {chosen_s:.1f} s/step)" if chosen_s is not None else "")]
    if not reasons:
        head.append(f"# {fw.value} expresses it as is: {label}.")
    else:
        head.append(f"# {fw.value} cannot express it:")
        head += [f"#  - {r}" for r in reasons]
        if target is None:
            head += [f"# and no {fw.value} layout of these roles fits this cluster; nothing to emit.",
                     "exit 1"]
            return "\n".join(head) + "\n"
        head.append(f"# nearest expressible: {label}: {layout_text(target)}"
                    + (f" (predicted {target_s:.1f} s/step, "
                       f"{(target_s - chosen_s) / chosen_s * 100:+.1f}%)"
                       if target_s is not None and chosen_s else ""))
    assert target is not None
    return "\n".join(head) + "\n" + render(fw, target)


def static_target(fw: Framework, plan: Plan) -> tuple[tuple[str, ...], Optional[Plan], str]:
    """Without simulating: (reasons, the layout nearest in devices, its label). The CLI
    simulates every family instead (`emit`); tests pin this deterministic choice."""
    reasons = cannot_express(fw, plan)
    if not reasons:
        return reasons, plan, _exact_label(fw, plan)
    fams = families(fw, plan)
    if not fams:
        return reasons, None, ""
    f = fams[0]
    r = len(plan.placement(Role.ROLLOUT).devices)
    return reasons, f.build(f.nearest(r)), f.label


def _exact_label(fw: Framework, plan: Plan) -> str:
    if fw is Framework.VERL:
        roles = "actor, rollout, reference" if plan.has(Role.REFERENCE) else "actor and rollout"
        return ("hybrid engine with a colocate-mode GenRM" if has_genrm(plan)
                else f"hybrid engine ({roles} on every GPU)")
    if fw is Framework.OPENRLHF:
        return "hybrid engine (--colocate_all_models)"
    return "colocated generation (policy.generation.colocated.enabled=true)"


def emit(fw: Framework, chosen: Candidate, cost: CostModel, seeds: int,
         progress: Optional[Progress] = None, colocate: Optional[Candidate] = None,
         sync: Optional[Candidate] = None) -> Emission:
    """Translate `chosen`; when the framework cannot express it, simulate its nearest
    layouts (the best split of each family) and emit the fastest. `colocate`: the search's
    best full-colocate candidate (reused, not re-simulated). An async `chosen` is not
    translated (`ASYNC_NOTE`): `sync`, the best synchronous candidate, is emitted instead."""
    if chosen.plan.mode is Mode.ASYNC:
        if sync is None:
            return Emission(fw, chosen, (ASYNC_NOTE[fw],), None, "")
        inner = emit(fw, sync, cost, seeds, progress, colocate)
        return Emission(fw, chosen, (ASYNC_NOTE[fw],) + inner.reasons, inner.target or sync,
                        inner.label or _exact_label(fw, sync.plan))
    reasons = cannot_express(fw, chosen.plan)
    if not reasons:
        return Emission(fw, chosen, reasons, chosen, _exact_label(fw, chosen.plan))
    best: Optional[tuple[Candidate, str]] = None
    r0 = len(chosen.plan.placement(Role.ROLLOUT).devices)
    for fam in families(fw, chosen.plan, None if colocate is None else colocate.plan):
        memo: dict[int, Candidate] = {}

        def f(r: int, fam: Family = fam, memo: dict[int, Candidate] = memo) -> float:
            if r not in memo:
                memo[r] = score_plan(fam.build(r), cost, 1, progress)
            return memo[r].mean

        splits = list(fam.splits)
        if len(splits) == 1:
            r = splits[0]
        else:
            r, *_ = search_split(f, splits)
            f(fam.nearest(r0))  # the layout nearest the chosen split is always considered
            r = min(memo, key=lambda x: (memo[x].mean, x))
        target = fam.build(r)
        if colocate is not None and same_placement(target, colocate.plan):
            cand = colocate
        else:
            cand = score_plan(target, cost, seeds, progress)
        if best is None or cand.mean < best[0].mean:
            best = (cand, fam.label)
    if best is None:
        return Emission(fw, chosen, reasons, None, "")
    return Emission(fw, chosen, reasons, best[0], best[1])
