#!/usr/bin/env bash
# yatt --emit nemo-rl: 48 x A100-80G (6 nodes x 8), experiment wechat-yatt-1.5b-actor-72b-genrm
# option names checked against NeMo-RL 0.5 (nemo_rl/package_info.py): examples/configs/grpo_math_1B.yaml @00294d9, docs/cluster.md; the NeMo-Gym GenRM keys (env.nemo_gym.*) as the Nemotron 3 Super RLHF launch scripts set them
# yatt's placement: partial R4(tp2) G44(tp4) T48(tp1)
# nemo-rl cannot express it:
#  - a GenRM runs as a NeMo-Gym server on dedicated whole nodes (env.nemo_gym.num_gpu_nodes): it cannot share the policy's GPUs, and training cannot reuse its nodes
# nearest expressible: GenRM as a NeMo-Gym server on dedicated nodes; generation colocated with the policy on the rest: R8(tp2) G40(tp4) T8(tp1)
ACTOR_MODEL="path/to/Qwen2.5-1.5B"    # HF checkpoint of the actor
GENRM_MODEL="path/to/Qwen2.5-Math-72B"    # HF checkpoint of the GenRM
NEMO_GYM_GRPO_CONFIG="path/to/grpo_genrm_config.yaml"    # a NeMo-Gym GRPO config with a genrm_model server
# The GenRM's 5 nodes come on top of cluster.num_nodes; set its vLLM tensor parallel size to 4 in that server's config.
uv run examples/nemo_gym/run_grpo_nemo_gym.py --config "$NEMO_GYM_GRPO_CONFIG" \
  cluster.num_nodes=1 cluster.gpus_per_node=8 \
  policy.model_name="$ACTOR_MODEL" \
  policy.megatron_cfg.enabled=true policy.dtensor_cfg.enabled=false \
  policy.megatron_cfg.tensor_model_parallel_size=1 \
  policy.megatron_cfg.pipeline_model_parallel_size=1 \
  policy.generation.colocated.enabled=true \
  policy.generation.vllm_cfg.tensor_parallel_size=2 \
  policy.generation.vllm_cfg.gpu_memory_utilization=0.85 \
  grpo.num_prompts_per_step=1024 \
  grpo.num_generations_per_prompt=8 \
  policy.max_total_sequence_length=10240 \
  policy.train_global_batch_size=8192 \
  loss_fn.reference_policy_kl_penalty=0.2 \
  env.nemo_gym.num_gpu_nodes=5 \
  env.nemo_gym.genrm_model.responses_api_models.vllm_model.model="$GENRM_MODEL"
