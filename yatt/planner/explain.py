"""Why the winner wins, in numbers, and the per-candidate facts of the ranked table.

Why: a ranking alone does not earn trust. The user should read what the winning mode
avoids (model switches), what it overlaps (judging with the rollout tail) and what the
loser leaves idle, measured on the simulated timelines themselves.
"""
from __future__ import annotations

from dataclasses import dataclass

from yatt.core.plan import Plan
from yatt.core.roles import Mode, Phase, ReleasePolicy, Role
from yatt.core.trace import Trace

from . import memory


@dataclass(frozen=True)
class TimelineFacts:
    switch_s: float          # offload/reload time on the critical path (device 0), per step
    overlap_s: float         # GenRM running while rollout still runs, per step
    generate_s: float        # first rollout start to last GenRM end, per step


def timeline_facts(trace: Trace) -> TimelineFacts:
    steps = max(1, len(trace.step_times()))
    switch = 0.0
    roll: dict[int, list[float]] = {}
    judge: dict[int, list[float]] = {}
    for s in trace.spans:
        if s.phase in (Phase.OFFLOAD, Phase.RELOAD) and 0 in s.devices:
            switch += s.duration
        if s.phase is Phase.ROLLOUT:
            lo, hi = roll.get(s.step, [s.start_s, s.end_s])
            roll[s.step] = [min(lo, s.start_s), max(hi, s.end_s)]
        if s.phase is Phase.GENRM:
            lo, hi = judge.get(s.step, [s.start_s, s.end_s])
            judge[s.step] = [min(lo, s.start_s), max(hi, s.end_s)]
    overlap = gen = 0.0
    for k, (rlo, rhi) in roll.items():
        jlo, jhi = judge.get(k, [rhi, rhi])
        overlap += max(0.0, min(rhi, jhi) - jlo)
        gen += max(rhi, jhi) - rlo
    return TimelineFacts(switch / steps, overlap / steps, gen / steps)


def peak_memory(plan: Plan) -> tuple[float, float]:
    """(peak bytes needed on any device, device capacity) for a plan.

    Engines count weights + the KV that a full running batch of mean-length sequences
    uses (capped by the pool); the trainer counts weights, grads, optimizer shard and
    activations. With offload/teardown only one role is resident at a time; with
    `resident` the roles sharing a device add up. Async plans keep the trainer and the
    reference resident together.
    """
    need = role_memory(plan)
    gpu = plan.experiment.cluster.gpu
    if plan.mode is Mode.ASYNC:
        # the trainer and the reference stay resident together on their own devices; the
        # GenRM on the rollout's devices switches with it (one resident at a time)
        held: dict[int, float] = {}
        for p in plan.placements:
            for d in p.devices:
                if p.role in (Role.TRAINER, Role.REFERENCE):
                    held[d] = held.get(d, 0.0) + need[p.role]
                else:
                    held[d] = max(held.get(d, 0.0), need[p.role])
        return max(held.values()), gpu.hbm_bytes
    if plan.release is ReleasePolicy.RESIDENT:
        per_dev: dict[int, float] = {}
        for p in plan.placements:
            for d in p.devices:
                per_dev[d] = per_dev.get(d, 0.0) + need[p.role]
        return max(per_dev.values()), gpu.hbm_bytes
    return max(need.values()), gpu.hbm_bytes


def role_memory(plan: Plan) -> dict[Role, float]:
    """Bytes each role needs per device while it is resident (see `peak_memory`)."""
    exp = plan.experiment
    gpu = exp.cluster.gpu
    w = exp.workload
    mean_seq = w.prompt_len.mean() + w.response_len.mean()
    need: dict[Role, float] = {}
    for p in plan.placements:
        model = plan.model_for(p.role)
        if p.role in (Role.ROLLOUT, Role.GENRM):
            seqs = exp.engine.max_num_seqs if p.role is Role.ROLLOUT else exp.engine.genrm_max_num_seqs
            seq = mean_seq + (w.genrm_template_tokens if p.role is Role.GENRM else 0)
            kv = min(memory.engine_kv_bytes(model, p.tp, gpu, exp.engine.gpu_memory_utilization),
                     seqs * seq * memory.kv_bytes_per_token_per_device(model, p.tp))
            need[p.role] = memory.engine_weight_bytes(model, p.tp) + kv + memory.RUNTIME_RESERVE_GB * 1e9
        elif p.role is Role.TRAINER:
            need[p.role] = memory.trainer_memory(model, p.parallel, exp.algo, gpu).total
        else:
            need[p.role] = memory.reference_memory(model, p.parallel, exp.algo, gpu).total
    return need


def why_winner(best, other, best_trace: Trace, other_trace: Trace,
               best_bubble: float, other_bubble: float) -> str:
    """One or two sentences comparing the winner with the best of the other mode."""
    b, o = timeline_facts(best_trace), timeline_facts(other_trace)
    gain = (other.mean - best.mean) / other.mean * 100 if other.mean > 0 else 0.0
    head = (f"{_mode(best.plan)} wins by {gain:.1f}% ({best.mean:.1f} s vs {other.mean:.1f} s "
            f"per step for the best {_mode(other.plan)}, {other.plan.describe().split(' ', 1)[1]})")
    bits = []
    if best.plan.mode is Mode.PARTIAL:
        if o.switch_s > b.switch_s:
            bits.append(f"it avoids {o.switch_s - b.switch_s:.1f} s of model switching per step")
        if b.overlap_s >= 0.05:
            bits.append(f"overlaps judging with the rollout tail ({b.overlap_s:.1f} s of GenRM "
                        "work while rollouts still run)")
        bits.append(f"colocate would idle {other_bubble * 100:.0f}% of device time "
                    f"(partial: {best_bubble * 100:.0f}%)")
    else:
        bits.append(f"every phase gets all {best.plan.cluster.num_gpus} devices, for "
                    f"{b.switch_s:.1f} s of switching per step")
        bits.append(f"the best split leaves {other_bubble * 100:.0f}% of device time idle "
                    f"(colocate: {best_bubble * 100:.0f}%)")
        if o.overlap_s >= 0.05:
            bits.append(f"streaming would overlap only {o.overlap_s:.1f} s of judging")
    return head + ": " + "; ".join(bits) + "."


# The a-priori error the cost model is held to (docs/fidelity.md: median end-to-end error
# with the host rescale); modes closer than this are not told apart by a prediction.
CLOSE_CALL = 0.10

# Steps a measured run needs for its step time to be a steady one: on the CPU executor the
# steps right after step 0 still warm up (in full colocate step 1 ran 1.03-1.40x the mean of
# steps 2-3 in every case of the fidelity benches, docs/fidelity.md), so a comparison over
# fewer steps reads that warm-up as model error.
STEADY_STEPS = 8


def close_call(bests: list) -> str:
    """One line when the best plans of the two leading modes (candidates with `.plan` and
    `.mean`, one per mode) are within CLOSE_CALL of each other, else ""."""
    ranked = sorted((c for c in bests if c is not None), key=lambda c: c.mean)
    if len(ranked) < 2 or ranked[1].mean <= 0:
        return ""
    a, b = ranked[:2]
    gap = (b.mean - a.mean) / b.mean
    if gap >= CLOSE_CALL:
        return ""
    return (f"close call: {a.plan.mode.value} and {b.plan.mode.value} are {gap * 100:.1f}% apart, "
            f"inside the {CLOSE_CALL * 100:.0f}% the cost model is held to before a run "
            f"(docs/fidelity.md); measure both, e.g. `yatt run CONFIG --mode {b.plan.mode.value} "
            f"--steps {STEADY_STEPS}`, whose predicted-vs-measured line shows which holds here.")


def _mode(plan: Plan) -> str:
    return "partial colocate" if plan.mode is Mode.PARTIAL else "full colocate"


def dp_text(plan: Plan, role: Role) -> str:
    if not plan.has(role):
        return "-"
    p = plan.placement(role)
    pp = f"·pp{p.pp}" if p.pp > 1 else ""
    return f"{len(p.devices)}: {p.dp}×tp{p.tp}{pp}"


