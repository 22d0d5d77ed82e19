"""Settings text of a plan a framework expresses: verl's Hydra overrides, OpenRLHF's
`train_ppo_ray` flags, NeMo-RL's config overrides, each as a shell script body.

Why apart from `emit`: rendering is per framework and long; `emit` decides which plan to
render.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

from yatt.core.plan import Experiment, Plan
from yatt.core.roles import Mode, Role

from .frameworks import Framework, has_genrm, node_pool, trainer_of

def _w(plan: Plan):
    return plan.experiment.workload


def _mini_batch(exp: Experiment) -> int:
    """Prompts per optimizer step (verl's ppo_mini_batch_size)."""
    return max(1, exp.workload.prompts_per_step // exp.algo.mini_batches)


def _models(plan: Plan) -> list[str]:
    exp = plan.experiment
    lines = [f'ACTOR_MODEL="path/to/{exp.actor.name}"    # HF checkpoint of the actor']
    if has_genrm(plan):
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
    ro, t = plan.placement(Role.ROLLOUT), trainer_of(plan)
    hybrid = len(t.devices)
    nodes, gpn = node_pool(hybrid, per, math.lcm(ro.tp, t.tp * t.pp)) or (0, 0)
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
    if has_genrm(plan):
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
            gn, gg = node_pool(len(g.devices), per, g.tp) or (0, 0)
            a += [f"reward.reward_model.nnodes={gn}", f"reward.reward_model.n_gpus_per_node={gg}"]
    a += [f"trainer.nnodes={nodes}", f"trainer.n_gpus_per_node={gpn}"]
    pre = _models(plan)
    if has_genrm(plan):
        pre.append('GENRM_SCORE_FN="path/to/genrm_score.py"    # builds the judging prompt, '
                   "calls the GenRM, parses its verdict")
    return pre + _cmd("python3 -m verl.trainer.main_ppo --config-name=ppo_megatron_trainer", a)


def _render_openrlhf(plan: Plan) -> list[str]:
    exp, w = plan.experiment, _w(plan)
    per = plan.cluster.gpus_per_node
    ro, t = plan.placement(Role.ROLLOUT), trainer_of(plan)
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
    if has_genrm(plan):
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
    ro, t = plan.placement(Role.ROLLOUT), trainer_of(plan)
    k = len(t.devices)
    nodes, gpn = (k // per, per) if k % per == 0 else (1, k)
    genrm = has_genrm(plan)
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
