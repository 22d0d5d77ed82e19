#!/usr/bin/env bash
# yatt --emit openrlhf: 2 x cpu-local (1 nodes x 2), experiment demo-cpu
# option names checked against OpenRLHF 0.8.x: openrlhf/cli/train_ppo_ray.py @021d1b0, docs/source/hybrid_engine.rst, docs/source/remote_rm.rst
# yatt's placement: partial R1(tp1) G1(tp1) T2(tp1)
# openrlhf cannot express it:
#  - a GenRM cannot run inside OpenRLHF's scheduler: it is a server you run and reach through --remote_rm_url, so it cannot sleep and wake on the training GPUs, and training cannot reuse its GPUs
# nearest expressible: GenRM as your own vLLM servers behind --remote_rm_url; actor, reference and vLLM colocated on the rest: R1(tp1) G1(tp1) T1(tp1)
ACTOR_MODEL="path/to/tiny-actor"    # HF checkpoint of the actor
GENRM_MODEL="path/to/tiny-genrm"    # HF checkpoint of the GenRM
REWARD_FN="path/to/reward_func.py"    # posts each sample to the GenRM servers, returns its verdict
# The GenRM runs outside OpenRLHF on the other 1 GPUs: 1 server of
#   vllm serve "$GENRM_MODEL" --tensor-parallel-size 1 --gpu-memory-utilization 0.5
# behind one router that REWARD_FN calls.
ray job submit --address="http://127.0.0.1:8265" -- python3 -m openrlhf.cli.train_ppo_ray \
  --pretrain "$ACTOR_MODEL" \
  --actor_num_nodes 1 --actor_num_gpus_per_node 1 \
  --ref_num_nodes 1 --ref_num_gpus_per_node 1 \
  --vllm_num_engines 1 --vllm_tensor_parallel_size 1 \
  --vllm_gpu_memory_utilization 0.5 \
  --colocate_all_models --vllm_enable_sleep --deepspeed_enable_sleep \
  --ds_tensor_parallel_size 1 \
  --advantage_estimator group_norm \
  --rollout_batch_size 8 --n_samples_per_prompt 4 \
  --train_batch_size 32 \
  --max_epochs 1 \
  --prompt_max_len 12 --generate_max_len 16 \
  --init_kl_coef 0.2 \
  --remote_rm_url "$REWARD_FN"
