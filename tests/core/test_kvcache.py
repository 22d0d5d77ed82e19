"""The KV cache rule the executor sizes CPU engines by and the cost model prices their
re-create at (`yatt.core.kvcache`)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from yatt.core.config import load_experiment
from yatt.core.kvcache import CPU_BLOCK_TOKENS, CPU_KV_CAP_BYTES, cpu_kv_bytes, job_kv_bytes
from yatt.core.roles import RewardSource

ROOT = Path(__file__).resolve().parents[2]


def test_whole_blocks_for_every_sequence_plus_one_and_the_cap():
    exp = load_experiment(ROOT / "configs" / "demo-cpu.yaml")
    m = dataclasses.replace(exp.actor, dtype_bytes=4)
    per = 2 * m.layers * m.kv_heads * m.dim_head * 4
    assert cpu_kv_bytes(m, 3, 200) == (2 * 3 + 1) * CPU_BLOCK_TOKENS * per
    assert cpu_kv_bytes(m, 3, 128) == (3 + 1) * CPU_BLOCK_TOKENS * per
    assert cpu_kv_bytes(m, 10**6, 4096) == CPU_KV_CAP_BYTES


def test_job_sizes_follow_the_workload_and_the_batch_limits():
    exp = load_experiment(ROOT / "configs" / "fidelity" / "longtail.yaml")
    w = exp.workload
    rollout, genrm = job_kv_bytes(exp)
    fp32 = dataclasses.replace(exp.actor, dtype_bytes=4)
    assert rollout == cpu_kv_bytes(fp32, exp.engine.max_num_seqs,
                                   w.prompt_len.upper() + w.response_len.upper())
    more = dataclasses.replace(exp, engine=dataclasses.replace(
        exp.engine, genrm_max_num_seqs=2 * exp.engine.genrm_max_num_seqs))
    assert job_kv_bytes(more) == (rollout, pytest.approx(2 * genrm, rel=0.01))
    longer = dataclasses.replace(exp, workload=dataclasses.replace(
        w, response_len=dataclasses.replace(w.response_len, max=4 * w.response_len.max)))
    assert job_kv_bytes(longer)[0] > rollout and job_kv_bytes(longer)[1] > genrm
    no_judge = dataclasses.replace(exp, genrm=None, algo=dataclasses.replace(
        exp.algo, reward=RewardSource.RULE))
    assert job_kv_bytes(no_judge) == (rollout, 0)
