"""Analytic cost model: roofline properties that must hold for any input."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from yatt.core import ClusterSpec, Parallel, ReleasePolicy, Role, catalog
from yatt.planner.costmodel import AnalyticCostModel, Efficiency, _sum_max_linear

MODELS = ["Qwen2.5-0.5B", "Qwen2.5-1.5B", "Qwen2.5-7B", "Qwen2.5-72B", "Llama-3.1-8B"]
GPUS = ["A100-80G", "H100-SXM", "H200", "H20", "L40S"]


def cm(gpu="H100-SXM", nodes=4):
    return AnalyticCostModel(ClusterSpec(catalog.gpu(gpu), nodes=nodes, gpus_per_node=8))


models = st.sampled_from(MODELS).map(catalog.model)
gpus = st.sampled_from(GPUS)
tps = st.sampled_from([1, 2, 4, 8])


@settings(max_examples=100, deadline=None)
@given(models, gpus, st.integers(1, 32768), st.integers(1, 32768), tps)
def test_longer_sequence_never_costs_less(m, g, a, b, tp):
    c = cm(g)
    lo, hi = sorted((a, b))
    par = Parallel(tp, 1, 1)
    assert c.train_time(m, [lo], par) <= c.train_time(m, [hi], par)
    assert c.prefill_time(m, tp, lo) <= c.prefill_time(m, tp, hi)
    assert c.decode_step_time(m, tp, 8, lo) <= c.decode_step_time(m, tp, 8, hi)
    assert c.logprob_time(m, [lo], par) <= c.logprob_time(m, [hi], par)


@settings(max_examples=100, deadline=None)
@given(models, gpus, tps, st.floats(0.1, 1.0), st.floats(0.1, 1.0))
def test_more_kv_memory_never_lowers_capacity(m, g, tp, u1, u2):
    c = cm(g)
    lo, hi = sorted((u1, u2))
    assert c.kv_capacity_tokens(m, tp, lo) <= c.kv_capacity_tokens(m, tp, hi)


def test_7b_training_flops_per_token_is_about_6n():
    m = catalog.model("Qwen2.5-7B")
    f = cm().train_flops_per_token(m, seq_len=1)
    assert abs(f / (6 * 7e9) - 1) < 0.10


@settings(max_examples=60, deadline=None)
@given(models, tps, st.integers(1, 256), st.floats(0, 1e6), st.integers(1, 300))
def test_decode_time_is_sum_of_steps(m, tp, batch, ctx_sum, steps):
    c = cm()
    ref = sum(c.decode_step_time(m, tp, batch, (ctx_sum + i * batch) / batch) for i in range(steps))
    got = c.decode_time(m, tp, batch, ctx_sum, steps)
    assert abs(got - ref) <= 1e-9 + 1e-9 * ref


@settings(max_examples=300, deadline=None)
@given(*[st.floats(-1e3, 1e3)] * 4, st.integers(0, 50))
def test_sum_max_linear_exact(a1, b1, a2, b2, k):
    ref = sum(max(a1 + b1 * i, a2 + b2 * i) for i in range(k))
    assert abs(_sum_max_linear(a1, b1, a2, b2, k) - ref) <= 1e-6 * max(1.0, abs(ref))


def test_sum_max_linear_nearly_parallel_lines():
    """Slopes differing by a subnormal amount put the crossover at infinity (CI found it)."""
    assert _sum_max_linear(1.0, 5e-324, 0.0, 0.0, 3) == 3.0
    assert _sum_max_linear(0.0, 5e-324, 1.0, 0.0, 3) == 3.0


def test_decode_is_memory_bound_at_small_batch_and_compute_bound_at_large():
    c = cm()
    m = catalog.model("Qwen2.5-7B")
    ac, bc, am, bm, _ = c._decode_coeffs(m, 1, 1)
    assert am > ac  # batch 1: reading the weights dominates
    ac, bc, am, bm, _ = c._decode_coeffs(m, 1, 4096)
    assert ac > am  # a huge batch: compute dominates


def test_more_tp_is_faster_per_token_for_big_model():
    c = cm()
    m = catalog.model("Qwen2.5-72B")
    assert c.decode_step_time(m, 8, 64, 2000) < c.decode_step_time(m, 4, 64, 2000)


def test_release_policies_order():
    c = cm()
    m = catalog.model("Qwen2.5-7B")
    par = Parallel(1, 1, 1)
    res = c.reload_time(m, Role.ROLLOUT, par, ReleasePolicy.RESIDENT)
    off = c.reload_time(m, Role.ROLLOUT, par, ReleasePolicy.OFFLOAD)
    tear = c.reload_time(m, Role.ROLLOUT, par, ReleasePolicy.TEARDOWN)
    assert res == 0 < off < tear
    # trainer offload moves optimizer state too: more bytes than the weights alone
    assert c.offload_time(m, Role.TRAINER, par, ReleasePolicy.OFFLOAD) > c.offload_time(
        m, Role.REFERENCE, par, ReleasePolicy.OFFLOAD)


def test_default_decode_coefficients_reproduce_the_h200_kernels():
    """The defaults were fitted on bench/results/gpu_h200.json's CUDA-graph decode steps
    (1.5B and 7B shapes, batch 1-256, context 512/2048); they must keep matching them."""
    import json
    import statistics
    from pathlib import Path

    res = json.loads((Path(__file__).resolve().parents[2] / "bench" / "results" /
                      "gpu_h200.json").read_text())
    c = AnalyticCostModel(ClusterSpec(catalog.gpu("H200"), 1, 1),
                          Efficiency(decode_step_overhead_s=0.0))
    errs = []
    for name, pts in res["kernels"].items():
        m = catalog.model(name.split()[0])
        errs += [abs(c.decode_step_time(m, 1, p["batch"], p["context"]) / p["step_s"] - 1)
                 for p in pts]
    assert len(errs) == 24
    assert statistics.median(errs) < 0.08 and max(errs) < 0.15
    # without the per-layer term the small model cannot be matched with the same bandwidth
    flat = AnalyticCostModel(ClusterSpec(catalog.gpu("H200"), 1, 1),
                             Efficiency(decode_step_overhead_s=0.0, decode_layer_s=0.0))
    small = catalog.model("Qwen2.5-1.5B")
    one = res["kernels"]["Qwen2.5-1.5B ctx512"][0]
    assert flat.decode_step_time(small, 1, 1, 512) < 0.7 * one["step_s"]


def test_decode_layer_term_adds_per_layer_per_step():
    m = catalog.model("Qwen2.5-7B")
    g = ClusterSpec(catalog.gpu("H200"), 1, 8)
    a = AnalyticCostModel(g, Efficiency(decode_layer_s=0.0))
    b = AnalyticCostModel(g, Efficiency(decode_layer_s=1e-4))
    for tp in (1, 4):
        assert b.decode_step_time(m, tp, 16, 300) - a.decode_step_time(m, tp, 16, 300) == \
            pytest.approx(m.layers * 1e-4)
        assert b.decode_time(m, tp, 16, 4800, 10) - a.decode_time(m, tp, 16, 4800, 10) == \
            pytest.approx(10 * m.layers * 1e-4)
