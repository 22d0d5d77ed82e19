#!/usr/bin/env bash
# yatt --emit verl: 32 x H20 (4 nodes x 8), experiment verl-dapo-qwen2.5-math-7b-32xh20
# option names checked against verl main as of 2026 (the reward.* config layout of PR #5255, after the 0.7 release): verl/trainer/config/{rollout/rollout.yaml, engine/megatron.yaml, reward/reward.yaml}, docs/advance/reward_loop.rst (2026-02-10)
# yatt's placement: colocate R32(tp2) T32(tp1)
# verl expresses it as is: hybrid engine (actor and rollout on every GPU).
ACTOR_MODEL="path/to/Qwen2.5-7B"    # HF checkpoint of the actor
python3 -m verl.trainer.main_ppo --config-name=ppo_megatron_trainer \
  algorithm.adv_estimator=grpo \
  data.train_batch_size=512 \
  data.max_prompt_length=2048 \
  data.max_response_length=28672 \
  actor_rollout_ref.rollout.n=16 \
  actor_rollout_ref.actor.ppo_mini_batch_size=32 \
  actor_rollout_ref.actor.ppo_epochs=1 \
  actor_rollout_ref.model.path="$ACTOR_MODEL" \
  actor_rollout_ref.hybrid_engine=True \
  actor_rollout_ref.actor.megatron.tensor_model_parallel_size=1 \
  actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=1 \
  actor_rollout_ref.rollout.name=vllm \
  actor_rollout_ref.rollout.tensor_model_parallel_size=2 \
  actor_rollout_ref.rollout.gpu_memory_utilization=0.8 \
  actor_rollout_ref.rollout.max_num_seqs=1024 \
  trainer.nnodes=4 \
  trainer.n_gpus_per_node=8
