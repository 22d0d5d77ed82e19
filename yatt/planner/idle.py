"""Why one side of a partial-colocate step waits: one sentence with numbers.

Why: in partial colocate the rollout and GenRM devices are disjoint; the GenRM judges
last, so the rollout side idles from its last response until the last verdict, and the
trainer starts after both. A timeline that shows rollout GPUs idle for a fifth of the step
looks like a bad split; it may instead be a latency the split cannot buy back (the longest
responses stop at the token cap together, and their verdicts decode one token at a time).
Likewise a generation that ends on a handful of requests (dynamic-sampling replacements,
the longest responses) leaves most devices of both sides idle. This module measures both on
the chosen plan's trace and names the cause: the request on the critical path, its
lengths, and whether its judging was queueing (more GenRM devices would help) or its own
decode (they would not).
"""
from __future__ import annotations

from typing import Optional

from yatt.core.costmodel import CostModel
from yatt.core.roles import Mode, Phase, RewardSource, Role
from yatt.core.trace import Trace

SHOW = 0.03   # a side's wait is explained when it exceeds this share of the step


def _ends(trace: Trace, role: Role, phase: Phase) -> float:
    return max((s.end_s for s in trace.spans if s.role is role and s.phase is phase), default=0.0)


def idle_note(trace: Trace, cost: CostModel) -> str:
    """The generation side that waits at the end of a partial step, and why ("" when no
    side waits more than `SHOW` of the step, or the plan is not partial with a GenRM)."""
    plan = trace.meta.plan
    if plan.mode is not Mode.PARTIAL or not plan.has(Role.GENRM) or not trace.samples \
            or plan.experiment.algo.reward is not RewardSource.GENRM:
        return ""
    steps = trace.step_times()
    step = steps.get(0, next(iter(steps.values()), 0.0))
    if step <= 0:
        return ""
    mine = [s for s in trace.samples if s.step == 0 and s.genrm_end_s is not None
            and s.rollout_end_s is not None]
    if not mine:
        return ""
    r_end = _ends(trace, Role.ROLLOUT, Phase.ROLLOUT)
    g_end = _ends(trace, Role.GENRM, Phase.GENRM)
    notes = []
    if (g_end - r_end) / step > SHOW:   # (the GenRM side cannot end first: it judges last)
        notes.append(_rollout_waits(trace, cost, mine, r_end, g_end, step))
    thin = _thin_tail(trace)
    crit = max(mine, key=lambda s: s.genrm_end_s)
    if thin is not None and (max(r_end, g_end) - thin) / step > TAIL and (not notes or crit.round):
        notes.append(_chain(trace, cost, crit, thin, max(r_end, g_end), step))
    return " ".join(notes)


TAIL = 0.10   # a thin end of generation is explained when it exceeds this share of the step


def _thin_tail(trace: Trace) -> Optional[float]:
    """The last time at least half of the generating devices are busy."""
    ev = []
    total = 0
    for role in (Role.ROLLOUT, Role.GENRM):
        total += len(trace.meta.plan.placement(role).devices)
    for s in trace.spans:
        if s.step == 0 and s.phase in (Phase.ROLLOUT, Phase.GENRM):
            ev.append((s.start_s, len(s.devices)))
            ev.append((s.end_s, -len(s.devices)))
    if not ev or total == 0:
        return None
    ev.sort()
    busy, last = 0, None
    for t, d in ev:
        busy += d
        if busy * 2 >= total:
            last = t
    return last


def _chain(trace: Trace, cost: CostModel, crit, thin: float, end: float, step: float) -> str:
    """Why generation ends on a few requests: the last verdict's response and its round."""
    plan = trace.meta.plan
    ro = plan.placement(Role.ROLLOUT)
    actor = plan.experiment.actor
    alone = crit.response_tokens * cost.decode_step_time(
        actor, ro.tp, 1, crit.prompt_tokens + crit.response_tokens / 2)
    text = (f"From {thin:.1f} s to {end:.1f} s ({(end - thin) / step * 100:.0f}% of the step) fewer "
            f"than half of the generating devices are busy: the step waits on its slowest "
            f"requests, which more devices do not speed up; the last verdict is for a response "
            f"of {crit.response_tokens:,} tokens (at least {alone:.1f} s of decode on an engine "
            f"of its own)")
    if crit.round > 0:
        text += (f" of dynamic-sampling round {crit.round + 1}, whose prompts start only once an "
                 f"earlier group is judged all-equal")
    return text + "."


def _round_text(s) -> str:
    return (f", a replacement of dynamic-sampling round {s.round + 1} that could only start "
            "once an earlier group was judged all-equal") if s.round > 0 else ""


def _rollout_waits(trace: Trace, cost: CostModel, mine: list, r_end: float, g_end: float,
                   step: float) -> str:
    plan = trace.meta.plan
    w = plan.experiment.workload
    crit = max(mine, key=lambda s: s.genrm_end_s)
    last = max(mine, key=lambda s: s.rollout_end_s)
    capped = sum(1 for s in mine if s.response_tokens >= w.response_len.upper())
    gr = plan.placement(Role.GENRM)
    model = plan.model_for(Role.GENRM)
    ctx = crit.genrm_input_tokens + crit.genrm_output_tokens / 2
    own = (cost.prefill_time(model, gr.tp, crit.genrm_input_tokens)
           + max(1, crit.genrm_output_tokens) * cost.decode_step_time(model, gr.tp, 1, ctx))
    took = crit.genrm_end_s - crit.rollout_end_s
    head = (f"rollout devices idle {g_end - r_end:.1f} s at the end of generation "
            f"({(g_end - r_end) / step * 100:.0f}% of the step): no rollout work is left after "
            f"{r_end:.1f} s")
    if capped and last.response_tokens >= w.response_len.upper():
        head += (f", when the last responses stop at the {w.response_len.upper():,}-token cap "
                 f"({capped:,} of {len(mine):,} do)")
    head += (f"; the last verdict ({crit.genrm_output_tokens:,} tokens, for a response done at "
             f"{crit.rollout_end_s:.1f} s{_round_text(crit)}) ends at {crit.genrm_end_s:.1f} s")
    if took <= 1.25 * own:
        why = (f", {took:.1f} s after its response: its own prefill and decode alone take "
               f"{own:.1f} s, so more GenRM devices would not shorten the wait")
    else:
        why = (f", {took:.1f} s after its response, of which its own prefill and decode are "
               f"{own:.1f} s: the rest is queueing behind other verdicts, which more GenRM "
               "devices would cut at the cost of rollout speed (the split search weighs both)")
    return head + why + "."


def side_waits(trace: Trace) -> Optional[tuple[float, float]]:
    """(rollout, GenRM) wait at the end of generation as shares of the step, or None when
    the plan has no two sides (for reports)."""
    plan = trace.meta.plan
    if plan.mode is not Mode.PARTIAL or not plan.has(Role.GENRM):
        return None
    steps = trace.step_times()
    step = next(iter(steps.values()), 0.0)
    if step <= 0:
        return None
    r_end = _ends(trace, Role.ROLLOUT, Phase.ROLLOUT)
    g_end = _ends(trace, Role.GENRM, Phase.GENRM)
    return max(0.0, g_end - r_end) / step, max(0.0, r_end - g_end) / step
