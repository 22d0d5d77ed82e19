"""`--emit verl|openrlhf|nemo-rl`: a yatt placement as another framework's settings.

Why: a verl, OpenRLHF or NeMo-RL user should be able to apply yatt's advice without
switching executors. Each framework can express only some placements, so this module
says which, in plain words, and when the chosen placement is not expressible it builds
the framework's nearest layouts as yatt Plans, simulates them, and emits the fastest,
with its own predicted step time.

What each framework expresses (option names: `OPTIONS_FOR`; the reasoning, with sources:
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
from enum import Enum
from typing import Any, Callable, Optional, Sequence

from yatt.core.costmodel import CostModel
from yatt.core.errors import InputError
from yatt.core.plan import Experiment, Parallel, Plan, RolePlacement
from yatt.core.roles import Mode, RewardSource, Role

from . import memory
from .assess import same_placement, score_plan
from .placement_text import placement_text
from .candidate import Candidate, Progress
from .splitsearch import search_split


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


# ---- what a framework can express ---------------------------------------------------------

def _has_genrm(plan: Plan) -> bool:
    return plan.experiment.algo.reward is RewardSource.GENRM and plan.has(Role.GENRM)


def _trainer(plan: Plan) -> RolePlacement:
    return plan.placement(Role.TRAINER)


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
    genrm = _has_genrm(plan)
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
        if _trainer(plan).pp > 1:
            out.append("DeepSpeed training has no pipeline parallelism (trainer pp must be 1)")
        if plan.has(Role.REFERENCE) and plan.placement(Role.REFERENCE).tp != _trainer(plan).tp:
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


def _pool(count: int, per_node: int, tp: int) -> Optional[tuple[int, int]]:
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
    ttp = _trainer(plan).tp
    places = tuple(dataclasses.replace(p, tp=ttp) if p.role is Role.REFERENCE else p
                   for p in plan.placements)
    return dataclasses.replace(plan, placements=places)


def _trainer_fits(plan: Plan, devices: int) -> bool:
    exp = plan.experiment
    t = _trainer(plan)
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
    t = _trainer(base)
    ref_tp = base.placement(Role.REFERENCE).tp if base.has(Role.REFERENCE) else 1
    step = math.lcm(rp.tp, t.tp * t.pp, ref_tp)
    splits = []
    for r in range(step, n, step):
        g = n - r
        if g % gp.tp or not _trainer_fits(base, r):
            continue
        if whole_nodes and (g % per or (r % per and c.nodes > 1)):
            continue
        if fw is Framework.VERL and (_pool(r, per, step) is None or _pool(g, per, gp.tp) is None):
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
    genrm = _has_genrm(plan)
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


# ---- rendering ----------------------------------------------------------------------------

def _w(plan: Plan):
    return plan.experiment.workload


def _mini_batch(exp: Experiment) -> int:
    """Prompts per optimizer step (verl's ppo_mini_batch_size)."""
    return max(1, exp.workload.prompts_per_step // exp.algo.mini_batches)


def _models(plan: Plan) -> list[str]:
    exp = plan.experiment
    lines = [f'ACTOR_MODEL="path/to/{exp.actor.name}"    # HF checkpoint of the actor']
    if _has_genrm(plan):
        assert exp.genrm is not None
        lines.append(f'GENRM_MODEL="path/to/{exp.genrm.name}"    # HF checkpoint of the GenRM')
    return lines


def _n(k: int, noun: str) -> str:
    return f"{k} {noun}" + ("" if k == 1 else "s")


def _cmd(head: str, args: Sequence[str]) -> list[str]:
    return [head + " \\"] + [f"  {a} \\" for a in args[:-1]] + [f"  {args[-1]}"]


def _render_verl(plan: Plan) -> list[str]:
    exp, w = plan.experiment, _w(plan)
    per = plan.cluster.gpus_per_node
    ro, t = plan.placement(Role.ROLLOUT), _trainer(plan)
    hybrid = len(t.devices)
    nodes, gpn = _pool(hybrid, per, math.lcm(ro.tp, t.tp * t.pp)) or (0, 0)
    a = [f"algorithm.adv_estimator={'grpo' if w.samples_per_prompt > 1 else 'reinforce_plus_plus'}",
         f"data.train_batch_size={w.prompts_per_step}",
         f"data.max_prompt_length={w.prompt_len.upper()}",
         f"data.max_response_length={w.response_len.upper()}",
         f"actor_rollout_ref.rollout.n={w.samples_per_prompt}",
         f"actor_rollout_ref.actor.ppo_mini_batch_size={_mini_batch(exp)}",
         f"actor_rollout_ref.actor.ppo_epochs={exp.algo.ppo_epochs}",
         'actor_rollout_ref.model.path="$ACTOR_MODEL"',
         "actor_rollout_ref.hybrid_engine=True",
         f"actor_rollout_ref.actor.megatron.tensor_model_parallel_size={t.tp}",
         f"actor_rollout_ref.actor.megatron.pipeline_model_parallel_size={t.pp}"]
    if plan.has(Role.REFERENCE):
        rf = plan.placement(Role.REFERENCE)
        a += [f"actor_rollout_ref.ref.megatron.tensor_model_parallel_size={rf.tp}",
              f"actor_rollout_ref.actor.use_kl_loss=True actor_rollout_ref.actor.kl_loss_coef={exp.algo.kl_coef:g}"]
    a += ["actor_rollout_ref.rollout.name=vllm",
          f"actor_rollout_ref.rollout.tensor_model_parallel_size={ro.tp}",
          f"actor_rollout_ref.rollout.gpu_memory_utilization={exp.engine.gpu_memory_utilization:g}",
          f"actor_rollout_ref.rollout.max_num_seqs={exp.engine.max_num_seqs}"]
    if _has_genrm(plan):
        g = plan.placement(Role.GENRM)
        standalone = plan.mode is Mode.PARTIAL
        a += ["reward.reward_model.enable=True",
              'reward.reward_model.model_path="$GENRM_MODEL"',
              "reward.reward_model.rollout.name=vllm",
              f"reward.reward_model.rollout.tensor_model_parallel_size={g.tp}",
              f"reward.reward_model.rollout.gpu_memory_utilization={exp.engine.gpu_memory_utilization:g}",
              'reward.custom_reward_function.path="$GENRM_SCORE_FN"',
              f"reward.reward_model.enable_resource_pool={standalone}"]
        if standalone:
            gn, gg = _pool(len(g.devices), per, g.tp) or (0, 0)
            a += [f"reward.reward_model.nnodes={gn}", f"reward.reward_model.n_gpus_per_node={gg}"]
    a += [f"trainer.nnodes={nodes}", f"trainer.n_gpus_per_node={gpn}"]
    pre = _models(plan)
    if _has_genrm(plan):
        pre.append('GENRM_SCORE_FN="path/to/genrm_score.py"    # builds the judging prompt, '
                   "calls the GenRM, parses its verdict")
    return pre + _cmd("python3 -m verl.trainer.main_ppo --config-name=ppo_megatron_trainer", a)


def _render_openrlhf(plan: Plan) -> list[str]:
    exp, w = plan.experiment, _w(plan)
    per = plan.cluster.gpus_per_node
    ro, t = plan.placement(Role.ROLLOUT), _trainer(plan)
    k = len(t.devices)
    nodes, gpn = (k // per, per) if k % per == 0 else (1, k)
    a = ["--pretrain \"$ACTOR_MODEL\"",
         f"--actor_num_nodes {nodes} --actor_num_gpus_per_node {gpn}"]
    if plan.has(Role.REFERENCE):
        a.append(f"--ref_num_nodes {nodes} --ref_num_gpus_per_node {gpn}")
    a += [f"--vllm_num_engines {len(ro.devices) // ro.tp} --vllm_tensor_parallel_size {ro.tp}",
          f"--vllm_gpu_memory_utilization {exp.engine.gpu_memory_utilization:g}",
          "--colocate_all_models --vllm_enable_sleep --deepspeed_enable_sleep",
          f"--ds_tensor_parallel_size {t.tp}",
          f"--advantage_estimator {'group_norm' if w.samples_per_prompt > 1 else 'reinforce'}",
          f"--rollout_batch_size {w.prompts_per_step} --n_samples_per_prompt {w.samples_per_prompt}",
          f"--train_batch_size {_mini_batch(exp) * w.samples_per_prompt}",
          f"--max_epochs {exp.algo.ppo_epochs}",
          f"--prompt_max_len {w.prompt_len.upper()} --generate_max_len {w.response_len.upper()}",
          f"--init_kl_coef {exp.algo.kl_coef if plan.has(Role.REFERENCE) else 0:g}",
          "--remote_rm_url \"$REWARD_FN\""]
    pre = _models(plan)
    if _has_genrm(plan):
        g = plan.placement(Role.GENRM)
        pre += ["REWARD_FN=\"path/to/reward_func.py\"    # posts each sample to the GenRM servers, "
                "returns its verdict",
                f"# The GenRM runs outside OpenRLHF on the other {len(g.devices)} GPUs: "
                f"{_n(len(g.devices) // g.tp, 'server')} of",
                f"#   vllm serve \"$GENRM_MODEL\" --tensor-parallel-size {g.tp} "
                f"--gpu-memory-utilization {exp.engine.gpu_memory_utilization:g}",
                "# behind one router that REWARD_FN calls."]
    else:
        pre.append("REWARD_FN=\"path/to/reward_func.py\"    # the task's rule reward")
    return pre + _cmd("ray job submit --address=\"http://127.0.0.1:8265\" -- "
                      "python3 -m openrlhf.cli.train_ppo_ray", a)


def _render_nemo_rl(plan: Plan) -> list[str]:
    exp, w = plan.experiment, _w(plan)
    per = plan.cluster.gpus_per_node
    ro, t = plan.placement(Role.ROLLOUT), _trainer(plan)
    k = len(t.devices)
    nodes, gpn = (k // per, per) if k % per == 0 else (1, k)
    genrm = _has_genrm(plan)
    a = [f"cluster.num_nodes={nodes} cluster.gpus_per_node={gpn}",
         'policy.model_name="$ACTOR_MODEL"',
         "policy.megatron_cfg.enabled=true policy.dtensor_cfg.enabled=false",
         f"policy.megatron_cfg.tensor_model_parallel_size={t.tp}",
         f"policy.megatron_cfg.pipeline_model_parallel_size={t.pp}",
         "policy.generation.colocated.enabled=true",
         f"policy.generation.vllm_cfg.tensor_parallel_size={ro.tp}",
         f"policy.generation.vllm_cfg.gpu_memory_utilization={exp.engine.gpu_memory_utilization:g}",
         f"grpo.num_prompts_per_step={w.prompts_per_step}",
         f"grpo.num_generations_per_prompt={w.samples_per_prompt}",
         f"policy.max_total_sequence_length={w.prompt_len.upper() + w.response_len.upper()}",
         f"policy.train_global_batch_size={_mini_batch(exp) * w.samples_per_prompt}",
         f"loss_fn.reference_policy_kl_penalty={exp.algo.kl_coef if plan.has(Role.REFERENCE) else 0:g}"]
    head = "uv run examples/run_grpo.py --config examples/configs/grpo_math_1B.yaml"
    pre = _models(plan)
    if genrm:
        g = plan.placement(Role.GENRM)
        a += [f"env.nemo_gym.num_gpu_nodes={len(g.devices) // per}",
              'env.nemo_gym.genrm_model.responses_api_models.vllm_model.model="$GENRM_MODEL"']
        head = ("uv run examples/nemo_gym/run_grpo_nemo_gym.py --config "
                "\"$NEMO_GYM_GRPO_CONFIG\"")
        pre += ["NEMO_GYM_GRPO_CONFIG=\"path/to/grpo_genrm_config.yaml\"    # a NeMo-Gym GRPO "
                "config with a genrm_model server",
                f"# The GenRM's {_n(len(g.devices) // per, 'node')} come on top of cluster.num_nodes; "
                f"set its vLLM tensor parallel size to {g.tp} in that server's config."]
    return pre + _cmd(head, a)


_RENDER: dict[Framework, Callable[[Plan], list[str]]] = {
    Framework.VERL: _render_verl, Framework.OPENRLHF: _render_openrlhf,
    Framework.NEMO_RL: _render_nemo_rl}


def render(fw: Framework, plan: Plan) -> str:
    """The framework's settings for a plan it expresses (as a shell script body)."""
    return "\n".join(_RENDER[fw](plan)) + "\n"


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
        return ("hybrid engine with a colocate-mode GenRM" if _has_genrm(plan)
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
