#!/usr/bin/env bash
# yatt --emit openrlhf: 96 x H100-SXM (12 nodes x 8), experiment nemo-aligner-ppo-llama3-70b-8+4-nodes
# option names checked against OpenRLHF 0.8.x: openrlhf/cli/train_ppo_ray.py @021d1b0, docs/source/hybrid_engine.rst, docs/source/remote_rm.rst
# yatt's placement: colocate R96(tp8) G96(tp8) T96(tp8,pp2)
# openrlhf cannot express it:
#  - a GenRM cannot run inside OpenRLHF's scheduler: it is a server you run and reach through --remote_rm_url, so it cannot sleep and wake on the training GPUs
#  - DeepSpeed training has no pipeline parallelism (trainer pp must be 1)
# nearest expressible: GenRM as your own vLLM servers behind --remote_rm_url; actor, reference and vLLM colocated on the rest: R88(tp8) G8(tp8) T88(tp8)
ACTOR_MODEL="path/to/Llama-3.1-70B"    # HF checkpoint of the actor
GENRM_MODEL="path/to/Llama-3.1-70B"    # HF checkpoint of the GenRM
REWARD_FN="path/to/reward_func.py"    # posts each sample to the GenRM servers, returns its verdict
# The GenRM runs outside OpenRLHF on the other 8 GPUs: 1 server of
#   vllm serve "$GENRM_MODEL" --tensor-parallel-size 8 --gpu-memory-utilization 0.85
# behind one router that REWARD_FN calls.
ray job submit --address="http://127.0.0.1:8265" -- python3 -m openrlhf.cli.train_ppo_ray \
  --pretrain "$ACTOR_MODEL" \
  --actor_num_nodes 11 --actor_num_gpus_per_node 8 \
  --ref_num_nodes 11 --ref_num_gpus_per_node 8 \
  --vllm_num_engines 11 --vllm_tensor_parallel_size 8 \
  --vllm_gpu_memory_utilization 0.85 \
  --colocate_all_models --vllm_enable_sleep --deepspeed_enable_sleep \
  --ds_tensor_parallel_size 8 \
  --advantage_estimator reinforce \
  --rollout_batch_size 1024 --n_samples_per_prompt 1 \
  --train_batch_size 128 \
  --max_epochs 2 \
  --prompt_max_len 2048 --generate_max_len 2048 \
  --init_kl_coef 0.1 \
  --remote_rm_url "$REWARD_FN"
