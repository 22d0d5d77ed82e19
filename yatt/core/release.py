"""What a role does with its devices when its phase ends, from the plan's release policy.

Why: a plan names a policy (`ReleasePolicy`: offload / teardown / resident), but what a
role actually does depends on the role and the device: vLLM-CPU has no sleep mode, and
training state cannot be re-created from weights. The cost models price that action and
the executor performs it, so the mapping is decided here, once, for both.

  policy      engines (rollout, GenRM)        trainer, reference
  RESIDENT    KEEP                            KEEP
  TEARDOWN    TEARDOWN                        KEEP (never torn down)
  OFFLOAD     GPU: OFFLOAD (sleep mode)       GPU: OFFLOAD (state to host memory)
              CPU: TEARDOWN (no sleep mode)   CPU: KEEP (host memory is device memory)
"""
from __future__ import annotations

from enum import Enum

from .roles import ReleasePolicy, Role

# roles served by an inference engine: the only ones that can be torn down and re-created
ENGINE_ROLES = frozenset({Role.ROLLOUT, Role.GENRM})


class ReleaseAction(str, Enum):
    """What one role does at the end of its phase (and undoes before its next one)."""

    KEEP = "keep"          # stays on its devices: nothing to do
    OFFLOAD = "offload"    # state to host memory and back (engines: vLLM sleep / wake)
    TEARDOWN = "teardown"  # destroy, then re-create from weights (engines only)


def resolve_release(policy: ReleasePolicy, role: Role, *, cpu: bool) -> ReleaseAction:
    """The action `role` takes under `policy` on CPU (`cpu`) or GPU devices (table above)."""
    if policy is ReleasePolicy.RESIDENT:
        return ReleaseAction.KEEP
    engine = role in ENGINE_ROLES
    if policy is ReleasePolicy.OFFLOAD and not cpu:
        return ReleaseAction.OFFLOAD
    # TEARDOWN anywhere, or OFFLOAD on CPU: engines are re-created, training state stays
    return ReleaseAction.TEARDOWN if engine else ReleaseAction.KEEP
