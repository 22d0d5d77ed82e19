"""yatt.core: frozen specs, Plan, Trace, the CostModel contract and shared pure policies.

Imports nothing else from yatt, and nothing heavy (stdlib, numpy, pyyaml only).
"""
from .errors import InputError
from .plan import Experiment, Parallel, Plan, RolePlacement, SearchSpec
from .roles import (AlgoName, BalanceCost, BalancePolicy, DistKind, Mode, Phase, ReleasePolicy,
                    RewardSource, Role, TraceSource)
from .release import ENGINE_ROLES, ReleaseAction, resolve_release
from .specs import AlgoSpec, ClusterSpec, EngineSpec, GpuSpec, LengthDist, ModelSpec, Workload
from .trace import SCHEMA_VERSION, SampleRecord, SpanRecord, Trace, TraceMeta
from .costmodel import CostModel

__all__ = [
    "InputError", "Experiment", "Parallel", "Plan", "RolePlacement", "SearchSpec",
    "AlgoName", "BalanceCost", "BalancePolicy", "DistKind", "Mode", "Phase", "ReleasePolicy",
    "RewardSource", "Role", "TraceSource", "AlgoSpec", "ClusterSpec", "EngineSpec", "GpuSpec",
    "LengthDist", "ModelSpec", "Workload", "SCHEMA_VERSION", "SampleRecord", "SpanRecord",
    "Trace", "TraceMeta", "CostModel", "ENGINE_ROLES", "ReleaseAction", "resolve_release",
]
