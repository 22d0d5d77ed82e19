#!/usr/bin/env bash
# yatt --emit nemo-rl: 32 x H20 (4 nodes x 8), experiment verl-dapo-qwen2.5-math-7b-32xh20
# option names checked against NeMo-RL 0.5 (nemo_rl/package_info.py): examples/configs/grpo_math_1B.yaml @00294d9, docs/cluster.md; the NeMo-Gym GenRM keys (env.nemo_gym.*) as the Nemotron 3 Super RLHF launch scripts set them
# yatt's placement: colocate R32(tp2) T32(tp1)
# nemo-rl expresses it as is: colocated generation (policy.generation.colocated.enabled=true).
ACTOR_MODEL="path/to/Qwen2.5-7B"    # HF checkpoint of the actor
uv run examples/run_grpo.py --config examples/configs/grpo_math_1B.yaml \
  cluster.num_nodes=4 cluster.gpus_per_node=8 \
  policy.model_name="$ACTOR_MODEL" \
  policy.megatron_cfg.enabled=true policy.dtensor_cfg.enabled=false \
  policy.megatron_cfg.tensor_model_parallel_size=1 \
  policy.megatron_cfg.pipeline_model_parallel_size=1 \
  policy.generation.colocated.enabled=true \
  policy.generation.vllm_cfg.tensor_parallel_size=2 \
  policy.generation.vllm_cfg.gpu_memory_utilization=0.8 \
  grpo.num_prompts_per_step=512 \
  grpo.num_generations_per_prompt=16 \
  policy.max_total_sequence_length=30720 \
  policy.train_global_batch_size=512 \
  loss_fn.reference_policy_kl_penalty=0
