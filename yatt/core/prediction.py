"""What the simulator predicted for a plan: the optional `predicted:` section of plan.yaml.

Why: a script that reads `plan.yaml` should not have to re-run the planner to learn how fast
the plan is expected to be, how each phase adds up, and how full each role's devices get.
The section is informational: `load_plan` reads and checks it, `dump_yaml` writes it back
unchanged, and the executor runs the plan as if it were absent.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import InputError
from .roles import Phase, Role
from .schema import spec_field


@dataclass(frozen=True)
class PhaseSeconds:
    """Wall seconds per step during which one phase runs on some device."""

    phase: Phase = spec_field(help="the phase")
    seconds: float = spec_field(ge=0, help="the union of the phase's spans per step, averaged over "
                                          "the simulated steps (phases that overlap each count in full)")


@dataclass(frozen=True)
class RoleMemory:
    """The memory model's peak for one role on one of its devices."""

    role: Role = spec_field(help="the role")
    gb: float = spec_field(ge=0, help="peak GB per device while the role is resident")
    capacity_gb: float = spec_field(gt=0, help="device memory, GB")


@dataclass(frozen=True)
class Prediction:
    """The simulated step of a plan, as `yatt plan` predicted it."""

    step_s: float = spec_field(ge=0, help="predicted step time, mean over the seeds, seconds")
    step_s_std: float = spec_field(0.0, ge=0, help="spread of the step time over the seeds, seconds")
    seeds: int = spec_field(1, ge=1, help="seeded simulations behind step_s")
    samples_per_s: float = spec_field(0.0, ge=0, help="trained samples per second, all seeds pooled")
    tokens_per_s: float = spec_field(0.0, ge=0, help="trained tokens per second, all seeds pooled")
    gpu_hours_per_step: float = spec_field(0.0, ge=0, help="GPUs x step_s / 3600")
    phases: tuple[PhaseSeconds, ...] = spec_field((), help="per-phase wall seconds per step")
    memory: tuple[RoleMemory, ...] = spec_field((), help="per-role peak memory per device")
    cost_model: str = spec_field("", help="which cost model predicted it (analytic defaults or a "
                                          "profile path)")
    yatt_version: str = spec_field("", help="the yatt version that predicted it")

    def __post_init__(self) -> None:
        for name, key in (("phases", "phase"), ("memory", "role")):
            seen: list[object] = []
            for i, x in enumerate(getattr(self, name)):
                k = getattr(x, key)
                if k in seen:
                    raise InputError(f"{k.value} is listed twice", field=f"{name}[{i}].{key}")
                seen.append(k)

    def phase_seconds(self, phase: Phase) -> float:
        """Seconds of `phase` per step (0 when the phase does not occur)."""
        return next((p.seconds for p in self.phases if p.phase is phase), 0.0)

    def memory_gb(self, role: Role) -> float:
        return next((m.gb for m in self.memory if m.role is role), 0.0)
