#!/usr/bin/env bash
# yatt --emit nemo-rl: 2 x cpu-local (1 nodes x 2), experiment demo-cpu
# option names checked against NeMo-RL 0.5 (nemo_rl/package_info.py): examples/configs/grpo_math_1B.yaml @00294d9, docs/cluster.md; the NeMo-Gym GenRM keys (env.nemo_gym.*) as the Nemotron 3 Super RLHF launch scripts set them
# yatt's placement: colocate R2(tp1) G2(tp1) T2(tp1)
# nemo-rl cannot express it:
#  - a GenRM runs as a NeMo-Gym server on dedicated whole nodes (env.nemo_gym.num_gpu_nodes): it cannot share the policy's GPUs
# and no nemo-rl layout of these roles fits this cluster; nothing to emit.
exit 1
