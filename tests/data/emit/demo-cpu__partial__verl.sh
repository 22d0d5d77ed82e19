#!/usr/bin/env bash
# yatt --emit verl: 2 x cpu-local (1 nodes x 2), experiment demo-cpu
# option names checked against verl main as of 2026 (the reward.* config layout of PR #5255, after the 0.7 release): verl/trainer/config/{rollout/rollout.yaml, engine/megatron.yaml, reward/reward.yaml}, docs/advance/reward_loop.rst (2026-02-10)
# yatt's placement: partial R1(tp1) G1(tp1) T2(tp1)
# verl cannot express it:
#  - training cannot reuse the GenRM's GPUs: a GenRM on its own resource pool (reward.reward_model.enable_resource_pool) is independent of the actor/rollout/reference pool, and without one the GenRM waits for all rollouts
# nearest expressible: GenRM on its own resource pool, scoring each sample as its rollout ends; actor, rollout and reference share the rest: R1(tp1) G1(tp1) T1(tp1)
ACTOR_MODEL="path/to/tiny-actor"    # HF checkpoint of the actor
GENRM_MODEL="path/to/tiny-genrm"    # HF checkpoint of the GenRM
GENRM_SCORE_FN="path/to/genrm_score.py"    # builds the judging prompt, calls the GenRM, parses its verdict
python3 -m verl.trainer.main_ppo --config-name=ppo_megatron_trainer \
  algorithm.adv_estimator=grpo \
  data.train_batch_size=8 \
  data.max_prompt_length=12 \
  data.max_response_length=16 \
  actor_rollout_ref.rollout.n=4 \
  actor_rollout_ref.actor.ppo_mini_batch_size=8 \
  actor_rollout_ref.actor.ppo_epochs=1 \
  actor_rollout_ref.model.path="$ACTOR_MODEL" \
  actor_rollout_ref.hybrid_engine=True \
  actor_rollout_ref.actor.megatron.tensor_model_parallel_size=1 \
  actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=1 \
  actor_rollout_ref.ref.megatron.tensor_model_parallel_size=1 \
  actor_rollout_ref.actor.use_kl_loss=True actor_rollout_ref.actor.kl_loss_coef=0.2 \
  actor_rollout_ref.rollout.name=vllm \
  actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
  actor_rollout_ref.rollout.gpu_memory_utilization=0.5 \
  actor_rollout_ref.rollout.max_num_seqs=64 \
  reward.reward_model.enable=True \
  reward.reward_model.model_path="$GENRM_MODEL" \
  reward.reward_model.rollout.name=vllm \
  reward.reward_model.rollout.tensor_model_parallel_size=1 \
  reward.reward_model.rollout.gpu_memory_utilization=0.5 \
  reward.custom_reward_function.path="$GENRM_SCORE_FN" \
  reward.reward_model.enable_resource_pool=True \
  reward.reward_model.nnodes=1 \
  reward.reward_model.n_gpus_per_node=1 \
  trainer.nnodes=1 \
  trainer.n_gpus_per_node=1
