"""yatt.profiling.gpu_probe: the GPU catalog's probes, run here on CPU with tiny sizes (they are
device-generic), their byte/FLOP accounting, and on a GPU machine the CUDA-graph path."""
from __future__ import annotations

import pytest

from yatt.core.specs import ModelSpec
from yatt.profiling import gpu_probe as gp

TINY = ModelSpec(name="probe-tiny", layers=2, hidden=128, intermediate=256, heads=4,
                 kv_heads=2, vocab=256, qkv_bias=True, dtype_bytes=4)


def test_rates_are_positive_and_consistent_with_their_seconds():
    for r in gp.matmul("cpu", [(64, 32, 16)], "float32", reps=2, warmup=1):
        assert r.unit == "TFLOP/s" and r.value == pytest.approx(2 * 64 * 32 * 16 / r.seconds / 1e12)
    mem = {r.what: r for r in gp.memory("cpu", 1 << 20, reps=2, warmup=1)}
    assert set(mem) == {"copy (read+write bytes)", "read (sum)", "write (fill)"}
    copy = mem["copy (read+write bytes)"]
    assert copy.value == pytest.approx(2 * (1 << 20) / copy.seconds / 1e9)
    host = gp.host_link("cpu", 1 << 20, reps=2, warmup=1)
    assert [r.what for r in host] == ["h2d pageable", "d2h pageable"]  # no pinning without CUDA
    assert all(r.value > 0 for r in host)


def test_decode_kernels_count_weights_kv_and_flops():
    pts = gp.decode_kernels(TINY, "cpu", [1, 3], context=8, reps=2, warmup=1, dtype="float32")
    assert [p.batch for p in pts] == [1, 3] and not any(p.graph for p in pts)
    h, d = TINY.hidden, TINY.dim_head
    weights = TINY.layers * (h * (TINY.heads + 2 * TINY.kv_heads) * d + TINY.heads * d * h
                             + 3 * h * TINY.intermediate) + h * TINY.vocab
    for p in pts:
        kv = 2 * TINY.layers * p.batch * TINY.kv_heads * 8 * d
        assert p.bytes == 4 * (weights + kv)
        assert p.flops == 2 * weights * p.batch + 4 * TINY.layers * p.batch * TINY.heads * d * 8
        assert p.step_s > 0


def test_hf_decode_and_line_fit():
    pts = gp.hf_decode(TINY, "cpu", [1, 2], context=8, steps=2, warmup=1, dtype="float32")
    assert [(p.batch, p.context) for p in pts] == [(1, 8), (2, 8)]
    assert all(p.step_s > 0 and p.prefill_s > 0 for p in pts)
    assert gp.fit_line([1, 2, 3], [3, 5, 7]) == pytest.approx((1.0, 2.0))
    assert gp.fit_line([2, 2], [1, 3]) == (2.0, 0.0)   # no spread in x: the mean, flat


def test_train_flops_is_six_per_param_token_plus_attention():
    one = gp.train_flops(TINY, 1, 1)
    assert gp.train_flops(TINY, 4, 1) == pytest.approx(4 * one)
    dense = 6 * (TINY.non_embedding_params + TINY.vocab * TINY.hidden)
    assert gp.train_flops(TINY, 1, 64) > 64 * dense       # attention grows with seq


@pytest.mark.slow
def test_megatron_train_probe_runs_both_precisions(tmp_path):
    from yatt.exec.hf_model import build_hf_model

    path = build_hf_model(TINY, tmp_path / "m", seed=0)
    pts = gp.megatron_train(TINY, str(path), "cpu", [(2, 16)], gp.device_precisions("cpu"), reps=1)
    assert [p.precision for p in pts] == [gp.Precision.FP32, gp.Precision.BF16_AUTOCAST]
    with pytest.raises(ValueError, match="bf16 needs a CUDA device"):   # as the executor
        gp.megatron_train(TINY, str(path), "cpu", [(2, 16)], [gp.Precision.BF16], reps=1)
    assert all(p.step_s > 0 and p.tflops == pytest.approx(gp.train_flops(TINY, 2, 16) / p.step_s / 1e12)
               for p in pts)


@pytest.mark.gpu
def test_cuda_decode_kernels_replay_a_graph():
    pts = gp.decode_kernels(TINY, "cuda", [1, 8], context=64, reps=3, warmup=1)
    assert all(p.graph and p.step_s > 0 for p in pts)
    assert all(r.value > 0 for r in gp.host_link("cuda", 1 << 20, reps=2, warmup=1))
