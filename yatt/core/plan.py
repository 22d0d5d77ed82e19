"""Experiment (what to run) and Plan (where each role runs).

Why: `plan.yaml` is the contract between the planner and the executor, and the thing a
trace records. A Plan is self-contained: it embeds the Experiment it was made for, so
`yatt run plan.yaml` and `yatt replay trace.jsonl` need nothing else.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from .errors import InputError
from .limits import (MAX_CONTROLLERS, MAX_GPUS, MAX_GPUS_PER_NODE, MAX_LIST, MAX_SEEDS,
                     MAX_STALENESS)
from .prediction import Prediction
from .roles import BalanceCost, BalancePolicy, Mode, ReleasePolicy, RewardSource, Role
from .schema import spec_field
from .jobspec import (ARITH_DATA, BuiltinData, BuiltinReward, DataSpec, Dtype, JudgeSpec, LogSpec,
                      RewardSpec)
from .specs import AlgoSpec, CheckpointSpec, ClusterSpec, EngineSpec, ModelSpec, Workload


@dataclass(frozen=True)
class SearchSpec:
    """What the planner may choose from."""

    modes: tuple[Mode, ...] = spec_field((Mode.COLOCATE, Mode.PARTIAL),
                                         help="placement modes to search (async: list it, as "
                                              "the bundled default.yaml does)")
    tp_choices: tuple[int, ...] = spec_field((1, 2, 4, 8), help="TP sizes tried for each role")
    engine_tp_choices: tuple[int, ...] = spec_field((), help="TP sizes for rollout/GenRM engines "
                                                            "(empty: tp_choices)")
    pp_choices: tuple[int, ...] = spec_field((1, 2, 4, 8), help="trainer pipeline-parallel sizes tried "
                                                               "(1: no pipeline)")
    staleness_choices: tuple[int, ...] = spec_field((1, 2), help="async mode: max_staleness values "
                                                                 "tried (weight versions a sample "
                                                                 "may lag the trainer)")
    balance: BalancePolicy = spec_field(BalancePolicy.KK, help="how sequences are split over trainer DP "
                                                               "ranks: naive chunks, greedy LPT or "
                                                               "Karmarkar-Karp")
    balance_cost: BalanceCost = spec_field(BalanceCost.FLOPS, help="a sequence's weight when balancing: "
                                                                   "tokens, or tokens plus the attention term")
    controllers: int = spec_field(1, ge=1, le=MAX_CONTROLLERS,
                                  help="parallel step controllers (1: the driver itself)")
    release: ReleasePolicy = spec_field(ReleasePolicy.OFFLOAD, help="what a role does with its memory "
                                                                    "between full-colocate phases")
    seeds: int = spec_field(3, ge=1, le=MAX_SEEDS, help="seeded steps averaged per candidate")

    def __post_init__(self) -> None:
        if not self.modes:
            raise InputError("needs at least one mode; allowed: colocate|partial|async", field="modes")
        for name in ("modes", "tp_choices", "engine_tp_choices", "pp_choices", "staleness_choices"):
            if len(getattr(self, name)) > MAX_LIST:
                raise InputError(f"got {len(getattr(self, name))} entries; allowed: at most {MAX_LIST}",
                                 field=name)
        for name in ("tp_choices", "engine_tp_choices"):
            for i, tp in enumerate(getattr(self, name)):
                if not 1 <= tp <= MAX_GPUS_PER_NODE:
                    raise InputError(f"got {tp}; allowed: integers >= 1 and <= {MAX_GPUS_PER_NODE} "
                                     "(a TP group sits inside one node)", field=f"{name}[{i}]")
        for i, pp in enumerate(self.pp_choices):   # stages may span nodes
            if not 1 <= pp <= MAX_GPUS:
                raise InputError(f"got {pp}; allowed: integers >= 1 and <= {MAX_GPUS:,}",
                                 field=f"pp_choices[{i}]")
        for i, k in enumerate(self.staleness_choices):
            if not 1 <= k <= MAX_STALENESS:
                raise InputError(f"got {k}; allowed: integers >= 1 and <= {MAX_STALENESS}",
                                 field=f"staleness_choices[{i}]")
        if Mode.ASYNC in self.modes and not self.staleness_choices:
            raise InputError("async mode needs at least one max_staleness (1: one-step "
                             "off-policy)", field="staleness_choices")
        if not self.tp_choices:
            raise InputError("needs at least one TP size", field="tp_choices")
        if not self.pp_choices:
            raise InputError("needs at least one PP size (1: no pipeline)", field="pp_choices")

    @property
    def engine_tps(self) -> tuple[int, ...]:
        return self.engine_tp_choices or self.tp_choices


@dataclass(frozen=True)
class Experiment:
    name: str = spec_field(help="experiment name (shown in tables and traces)")
    cluster: ClusterSpec = spec_field(help="a path to a cluster .yaml (relative to this file) or inline")
    actor: ModelSpec = spec_field(help="the policy: a catalog name, a path to a model .yaml or inline")
    workload: Workload = spec_field(help="a path to a workload .yaml or inline")
    genrm: Optional[ModelSpec] = spec_field(None, help="the generative reward model, named like actor "
                                                       "(null: rule reward, algo.reward: rule)")
    algo: AlgoSpec = spec_field(AlgoSpec(), help="RL algorithm settings")
    engine: EngineSpec = spec_field(EngineSpec(), help="inference engine settings")
    search: SearchSpec = spec_field(SearchSpec(), help="what the planner may choose from")
    checkpoint: CheckpointSpec = spec_field(CheckpointSpec(), help="checkpoints and fault handling")
    # the user's own job (core/jobspec.py; docs/own-job.md)
    data: DataSpec = spec_field(ARITH_DATA, help="prompts to train on: a dataset file or the "
                                                 "built-in arith task")
    reward: RewardSpec = spec_field(RewardSpec(), help="the rule reward: a function or a built-in, "
                                                       "and how it mixes with the GenRM")
    genrm_judge: JudgeSpec = spec_field(JudgeSpec(), help="how the GenRM is asked and how its verdict is read")
    log: LogSpec = spec_field(LogSpec(), help="where metrics are logged besides metrics.csv")
    dtype: Dtype = spec_field(Dtype.FLOAT32, help="weights and engines: float32 | bfloat16 "
                                                  "(bfloat16 runs float32 on CPU)")

    def __post_init__(self) -> None:
        if self.algo.reward.needs_genrm and self.genrm is None:
            raise InputError(f"algo.reward is '{self.algo.reward.value}' but no genrm model is "
                             "given; allowed: set genrm, or algo.reward: rule", field="genrm")
        if self.algo.reward is not RewardSource.GENRM and self.rule_reward is None:
            raise InputError(f"algo.reward is '{self.algo.reward.value}' but there is no rule to "
                             "score with; allowed: reward.function, reward.builtin, or "
                             "data.answer_key (exact_match)", field="reward")

    @property
    def rule_reward(self) -> Union[str, BuiltinReward, None]:
        """The rule reward this experiment scores with: reward.function or reward.builtin,
        else first_integer for builtin arith data, exact_match when data has an answer_key,
        else None (then the reward is the GenRM's alone and there is no accuracy metric)."""
        if self.reward.function:
            return self.reward.function
        if self.reward.builtin is not None:
            return self.reward.builtin
        if self.data.builtin is BuiltinData.ARITH:
            return BuiltinReward.FIRST_INTEGER
        if self.data.answer_key:
            return BuiltinReward.EXACT_MATCH
        return None


@dataclass(frozen=True)
class Parallel:
    tp: int = 1
    pp: int = 1
    dp: int = 1

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp


@dataclass(frozen=True)
class RolePlacement:
    """One role's device set and parallel layout. DP = len(devices) / (TP * PP).

    For inference roles, each DP replica is one engine (one TP group) on a contiguous
    slice of `devices`.
    """

    role: Role = spec_field(help="the role this entry places")
    devices: tuple[int, ...] = spec_field(help="device ids (0..GPUs-1), one TP group after another")
    tp: int = spec_field(1, ge=1, le=MAX_GPUS_PER_NODE, help="tensor-parallel size")
    pp: int = spec_field(1, ge=1, le=MAX_GPUS, help="pipeline-parallel size (the executor runs 1)")

    def __post_init__(self) -> None:
        if not self.devices:
            raise InputError("needs at least one device", field="devices")
        if len(set(self.devices)) != len(self.devices):
            raise InputError("device ids must be unique", field="devices")
        if len(self.devices) % (self.tp * self.pp):
            raise InputError(f"{len(self.devices)} devices are not a multiple of TP*PP="
                             f"{self.tp * self.pp}", field="devices")

    @property
    def dp(self) -> int:
        return len(self.devices) // (self.tp * self.pp)

    @property
    def parallel(self) -> Parallel:
        return Parallel(self.tp, self.pp, self.dp)

    def groups(self) -> list[tuple[int, ...]]:
        """Device groups of one model replica (TP*PP devices each), in order."""
        k = self.tp * self.pp
        return [self.devices[i:i + k] for i in range(0, len(self.devices), k)]


@dataclass(frozen=True)
class Plan:
    mode: Mode = spec_field(help="colocate: phases in sequence on all devices; partial: rollout and "
                                 "GenRM on disjoint devices, streaming, then training on all; "
                                 "async: rollout (and GenRM) and trainer on disjoint devices, the "
                                 "next step generated while this one trains (planned only)")
    placements: tuple[RolePlacement, ...] = spec_field(help="one entry per role")
    experiment: Experiment = spec_field(help="the experiment this plan was made for, resolved and inline")
    balance: BalancePolicy = spec_field(BalancePolicy.KK, help="as search.balance")
    balance_cost: BalanceCost = spec_field(BalanceCost.FLOPS, help="as search.balance_cost")
    controllers: int = spec_field(1, ge=1, le=MAX_CONTROLLERS, help="as search.controllers")
    release: ReleasePolicy = spec_field(ReleasePolicy.OFFLOAD, help="as search.release")
    max_staleness: int = spec_field(1, ge=1, le=MAX_STALENESS,
                                    help="async mode: a trained sample was generated by weights at "
                                         "most this many versions older than the trainer's (1: "
                                         "one-step off-policy); rollout blocks when this far ahead")
    predicted: Optional[Prediction] = spec_field(None, omit_none=True,
                                                 help="what `yatt plan` predicted for this plan "
                                                      "(informational; the executor ignores it)")

    def __post_init__(self) -> None:
        cluster = self.experiment.cluster
        roles = [p.role for p in self.placements]
        for i, r in enumerate(roles):
            if r in roles[:i]:  # name the repeat, not the first
                raise InputError(f"role {r.value} is placed twice (first at placements"
                                 f"[{roles.index(r)}])", field=f"placements[{i}].role")
        needed = [Role.ROLLOUT, Role.TRAINER]
        if self.experiment.algo.reward.needs_genrm:
            needed.append(Role.GENRM)
        if self.experiment.algo.use_reference:
            needed.append(Role.REFERENCE)
        for r in needed:
            if r not in roles:
                raise InputError(f"no placement for role {r.value}; allowed roles: "
                                 + "|".join(x.value for x in needed), field="placements")
        if Role.GENRM in roles and self.experiment.genrm is None:
            raise InputError("a genrm placement but the experiment has no genrm model; allowed: "
                             "set experiment.genrm, or drop the genrm placement",
                             field=f"placements[{roles.index(Role.GENRM)}].role")
        for i, p in enumerate(self.placements):
            for d in p.devices:
                if not 0 <= d < cluster.num_gpus:
                    raise InputError(f"device {d} outside the cluster's 0..{cluster.num_gpus - 1}",
                                     field=f"placements[{i}].devices")
            model = self.model_for(p.role)
            why = model.check_tp(p.tp)
            if why:
                raise InputError(why, field=f"placements[{i}].tp")
            if p.pp > 1 and model.layers % p.pp:
                raise InputError(f"PP={p.pp} does not divide {model.layers} layers",
                                 field=f"placements[{i}].pp")
            for j in range(0, len(p.devices), p.tp):
                grp = p.devices[j:j + p.tp]
                if len({cluster.node_of(d) for d in grp}) > 1:
                    raise InputError(f"TP group {list(grp)} spans nodes ({cluster.gpus_per_node} "
                                     "devices per node); a TP group must sit inside one node",
                                     field=f"placements[{i}].devices")
        if self.mode is Mode.PARTIAL and Role.GENRM in roles:
            a = set(self.placement(Role.ROLLOUT).devices)
            b = set(self.placement(Role.GENRM).devices)
            if a & b:
                raise InputError("partial colocate needs disjoint rollout and genrm devices; "
                                 f"shared: {sorted(a & b)[:8]}", field="placements")
        if self.mode is Mode.ASYNC:
            self._check_async(roles)
        if self.predicted is not None:
            for i, m in enumerate(self.predicted.memory):
                if m.role not in roles:
                    raise InputError(f"memory for role {m.role.value}, which has no placement",
                                     field=f"predicted.memory[{i}].role")

    def _check_async(self, roles: list[Role]) -> None:
        """Async: the generators (rollout, GenRM on the rollout's devices or its own) and the
        trainer side (trainer, reference on the trainer's devices) never share a device."""
        gen = set(self.placement(Role.ROLLOUT).devices)
        if Role.GENRM in roles:
            g = set(self.placement(Role.GENRM).devices)
            if g != gen and g & gen:
                raise InputError("async mode: genrm shares the rollout devices or has its own; "
                                 f"shared in part: {sorted(g & gen)[:8]}", field="placements")
            gen |= g
        train = set(self.placement(Role.TRAINER).devices)
        if gen & train:
            raise InputError("async mode needs disjoint generator (rollout, genrm) and trainer "
                             f"devices; shared: {sorted(gen & train)[:8]}", field="placements")
        if Role.REFERENCE in roles and not set(self.placement(Role.REFERENCE).devices) <= train:
            raise InputError("async mode: the reference runs on the trainer's devices",
                             field=f"placements[{roles.index(Role.REFERENCE)}].devices")

    @property
    def genrm_shares_rollout(self) -> bool:
        """The GenRM engines sit on the rollout engines' devices (switching with them)."""
        return (self.has(Role.GENRM) and set(self.placement(Role.GENRM).devices)
                == set(self.placement(Role.ROLLOUT).devices))

    def placement(self, role: Role) -> RolePlacement:
        for p in self.placements:
            if p.role is role:
                return p
        raise KeyError(role)

    def has(self, role: Role) -> bool:
        return any(p.role is role for p in self.placements)

    def model_for(self, role: Role) -> ModelSpec:
        if role is Role.GENRM:
            assert self.experiment.genrm is not None
            return self.experiment.genrm
        return self.experiment.actor

    @property
    def cluster(self) -> ClusterSpec:
        return self.experiment.cluster

    def describe(self) -> str:
        """Short human label, e.g. 'partial R16(tp1) G32(tp8) T48(tp1,dp48)'."""
        bits = []
        for p in self.placements:
            if p.role is Role.REFERENCE:
                continue
            bits.append(f"{p.role.value[0].upper()}{len(p.devices)}(tp{p.tp}"
                        + (f",pp{p.pp}" if p.pp > 1 else "") + ")")
        k = f" k{self.max_staleness}" if self.mode is Mode.ASYNC else ""
        return f"{self.mode.value}{k} " + " ".join(bits)
