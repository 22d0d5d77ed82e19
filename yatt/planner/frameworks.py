"""The frameworks `--emit` writes settings for, and the facts about a plan that both
deciding what a framework expresses and rendering its settings read.

Why apart: `emit` (what is expressible, nearest layouts) and `emit_render` (the settings
text) share them without importing each other.
"""
from __future__ import annotations

from enum import Enum
from typing import Optional

from yatt.core.errors import InputError
from yatt.core.plan import Plan, RolePlacement
from yatt.core.roles import RewardSource, Role


class Framework(str, Enum):
    VERL = "verl"
    OPENRLHF = "openrlhf"
    NEMO_RL = "nemo-rl"


# Which release and files the option names below were checked against.
OPTIONS_FOR: dict[Framework, str] = {
    Framework.VERL: "verl main as of 2026 (the reward.* config layout of PR #5255, after the 0.7 "
                    "release): verl/trainer/config/{rollout/rollout.yaml, engine/megatron.yaml, "
                    "reward/reward.yaml}, docs/advance/reward_loop.rst (2026-02-10)",
    Framework.OPENRLHF: "OpenRLHF 0.8.x: openrlhf/cli/train_ppo_ray.py @021d1b0, "
                        "docs/source/hybrid_engine.rst, docs/source/remote_rm.rst",
    Framework.NEMO_RL: "NeMo-RL 0.5 (nemo_rl/package_info.py): examples/configs/grpo_math_1B.yaml "
                       "@00294d9, docs/cluster.md; the NeMo-Gym GenRM keys (env.nemo_gym.*) as the "
                       "Nemotron 3 Super RLHF launch scripts set them",
}


def parse_framework(text: str) -> Framework:
    try:
        return Framework(text.strip())
    except ValueError:
        raise InputError(f"got {text.strip()[:30]!r}; allowed: "
                         + "|".join(f.value for f in Framework), field="--emit") from None


def has_genrm(plan: Plan) -> bool:
    return plan.experiment.algo.reward is RewardSource.GENRM and plan.has(Role.GENRM)


def trainer_of(plan: Plan) -> RolePlacement:
    return plan.placement(Role.TRAINER)


def node_pool(count: int, per_node: int, tp: int) -> Optional[tuple[int, int]]:
    """(nodes, GPUs per node) of a resource pool of `count` GPUs whose TP groups stay
    inside a node: whole nodes, one partial node, or equal slices of nodes."""
    if count <= per_node:
        return (1, count) if count % tp == 0 else None
    if count % per_node == 0:
        return count // per_node, per_node
    for d in range(per_node, 0, -1):
        if count % d == 0 and d % tp == 0:
            return count // d, d
    return None
