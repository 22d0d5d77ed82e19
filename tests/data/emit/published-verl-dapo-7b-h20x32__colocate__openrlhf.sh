#!/usr/bin/env bash
# yatt --emit openrlhf: 32 x H20 (4 nodes x 8), experiment verl-dapo-qwen2.5-math-7b-32xh20
# option names checked against OpenRLHF 0.8.x: openrlhf/cli/train_ppo_ray.py @021d1b0, docs/source/hybrid_engine.rst, docs/source/remote_rm.rst
# yatt's placement: colocate R32(tp2) T32(tp1)
# openrlhf expresses it as is: hybrid engine (--colocate_all_models).
ACTOR_MODEL="path/to/Qwen2.5-7B"    # HF checkpoint of the actor
REWARD_FN="path/to/reward_func.py"    # the task's rule reward
ray job submit --address="http://127.0.0.1:8265" -- python3 -m openrlhf.cli.train_ppo_ray \
  --pretrain "$ACTOR_MODEL" \
  --actor_num_nodes 4 --actor_num_gpus_per_node 8 \
  --vllm_num_engines 16 --vllm_tensor_parallel_size 2 \
  --vllm_gpu_memory_utilization 0.8 \
  --colocate_all_models --vllm_enable_sleep --deepspeed_enable_sleep \
  --ds_tensor_parallel_size 1 \
  --advantage_estimator group_norm \
  --rollout_batch_size 512 --n_samples_per_prompt 16 \
  --train_batch_size 512 \
  --max_epochs 1 \
  --prompt_max_len 2048 --generate_max_len 28672 \
  --init_kl_coef 0 \
  --remote_rm_url "$REWARD_FN"
