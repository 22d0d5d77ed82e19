"""Why the chosen trainer layout uses pipeline parallelism, in one sentence with numbers.

Why: PP costs a pipeline bubble and stage-to-stage sends, so a plan that uses it owes the
user a reason. Either no layout without it fits in device memory (the memory model's
bytes say by how much), or it simulated faster than the best layout without it.
"""
from __future__ import annotations

from typing import Mapping

from yatt.core.plan import Experiment, Plan
from yatt.core.roles import Mode, Role

from .space import Layout, Space, layout_text, legal_layouts, trainer_layout_memory, trainer_parallel


def _gb(x: float) -> str:
    return f"{x / 1e9:.1f} GB"


def trainer_note(exp: Experiment, space: Space, chosen: Plan,
                 simulated: Mapping[Layout, float]) -> str:
    """Why `chosen`'s trainer runs a pipeline ("" when it does not, and for an async plan,
    whose trainer holds only part of the cluster). `simulated`: seed-0 step times of the
    layouts tried with the rest of the chosen placement fixed."""
    tr = chosen.placement(Role.TRAINER)
    if tr.pp == 1 or chosen.mode is Mode.ASYNC:  # the memory figures are for the whole cluster
        return ""
    lay = (tr.tp, tr.pp)
    mb = trainer_layout_memory(exp, lay)
    here = (f"at {layout_text(lay)}·dp{tr.dp} its fullest stage (stage {mb.stage} of {mb.stages}) "
            f"holds {_gb(mb.weights + mb.grads + mb.optimizer)} of weights+grads+optimizer and "
            f"{_gb(mb.activations)} of activations per device, {_gb(mb.total)} of "
            f"{mb.capacity / 1e9:.0f} GB")
    flat = [x for x in space.trainer_layouts if x[1] == 1]
    if not flat:
        need = min(tp * pp for tp, pp in space.trainer_layouts)
        legal_flat = [x for x in legal_layouts(exp) if x[1] == 1]
        why = ""
        if legal_flat:
            ref = max(legal_flat)
            r = trainer_layout_memory(exp, ref)
            why = (f" (at {layout_text(ref)}·dp{trainer_parallel(exp, ref).dp} weights+grads+"
                   f"optimizer alone need {_gb(r.weights + r.grads + r.optimizer)} of "
                   f"{r.capacity / 1e9:.0f} GB per device)")
        return (f"trainer {layout_text(lay)}: {exp.actor.name} needs TP×PP ≥ {need} to fit"
                f"{why}; {here}.")
    tried = [(simulated[x], x) for x in flat if x in simulated]
    if lay in simulated and tried:
        t_flat, best_flat = min(tried)
        return (f"trainer {layout_text(lay)}: simulated faster than without a pipeline "
                f"({simulated[lay]:.1f} s vs {t_flat:.1f} s per step at {layout_text(best_flat)}, "
                f"seed 0); {here}.")
    return f"trainer {layout_text(lay)}: {here}."
