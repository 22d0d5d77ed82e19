"""The KV cache a CPU inference engine allocates, in bytes: one rule for the executor and
the cost model.

Why: on CPU the executor sizes each vLLM engine's KV cache to its job (`max_num_seqs`
sequences of `max_model_len` tokens, in whole blocks), and allocating that cache is the
part of an engine re-create that grows with the job: a profile timed at one size and a
job run at another differ by ~0.4 s per GiB here. The executor passes the size to vLLM;
the profiled cost model prices a re-create at the same size. Pure arithmetic on specs.
"""
from __future__ import annotations

import dataclasses

from .plan import Experiment
from .specs import ModelSpec

CPU_BLOCK_TOKENS = 128          # vLLM-CPU's KV block size for these attention backends
CPU_KV_CAP_BYTES = 1 << 30      # at most 1 GiB for one CPU engine
CPU_DTYPE_BYTES = 4             # CPU engines run float32 whatever the model asks


def cpu_kv_bytes(model: ModelSpec, max_num_seqs: int, max_model_len: int) -> int:
    """KV cache bytes a CPU engine needs to hold `max_num_seqs` sequences of
    `max_model_len` tokens at once (so it never preempts), plus one spare block, at most
    CPU_KV_CAP_BYTES. `model.dtype_bytes` is the element size the engine runs."""
    blocks = -(-max_model_len // CPU_BLOCK_TOKENS) * max_num_seqs + 1
    return min(blocks * CPU_BLOCK_TOKENS * model.kv_bytes_per_token, CPU_KV_CAP_BYTES)


def job_kv_bytes(exp: Experiment) -> tuple[int, int]:
    """(rollout engine, GenRM engine) KV bytes of `exp`'s CPU engines, from the workload's
    longest prompt and response, and for the GenRM its template and verdict budget (the
    executor measures its prompts and template; whole 128-token blocks make the two agree
    unless they straddle a block edge). GenRM 0 without a GenRM."""
    w = exp.workload
    rollout_len = w.prompt_len.upper() + w.response_len.upper()
    fp32 = dataclasses.replace(exp.actor, dtype_bytes=CPU_DTYPE_BYTES)
    rollout = cpu_kv_bytes(fp32, exp.engine.max_num_seqs, rollout_len)
    if exp.genrm is None:
        return rollout, 0
    judge_len = rollout_len + w.genrm_template_tokens + w.judge_max_tokens
    genrm = cpu_kv_bytes(dataclasses.replace(exp.genrm, dtype_bytes=CPU_DTYPE_BYTES),
                         exp.engine.genrm_max_num_seqs, judge_len)
    return rollout, genrm
