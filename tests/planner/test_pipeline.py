"""Pipeline parallelism in the memory and analytic cost models: per-stage bytes, the 1F1B
bubble and stage-to-stage sends, and pp=1 reproducing the model without a pipeline."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from yatt.core import AlgoSpec, ClusterSpec, Parallel, catalog
from yatt.core.specs import AdamMoments
from yatt.planner import memory
from yatt.planner.costmodel import AnalyticCostModel

H100 = catalog.gpu("H100-SXM")
MODELS = ["Qwen2.5-0.5B", "Qwen2.5-1.5B", "Qwen2.5-7B", "Llama-3.1-70B", "Qwen2.5-72B"]


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(MODELS), st.integers(0, 20))
def test_stages_hold_the_whole_model(name, i):
    m = catalog.model(name)
    pp = _divisors(m.layers)[i % len(_divisors(m.layers))]
    stages = memory.stage_params(m, pp)
    assert len(stages) == pp
    extra = m.vocab * m.hidden if (m.tied_embeddings and pp > 1) else 0  # the last stage's copy
    assert sum(stages) == pytest.approx(m.params + extra, rel=1e-12)
    layer_share = (m.non_embedding_params - m.hidden) / pp  # layers only (no final norm)
    assert max(stages) == stages[-1]
    assert all(s == pytest.approx(layer_share, rel=1e-12) for s in stages[1:-1])  # middle stages


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(MODELS), st.sampled_from([1, 2, 4, 8]), st.booleans(), st.booleans(),
       st.sampled_from(list(AdamMoments)))
def test_first_stage_holds_pp_micro_batches(name, tp, recompute, dist, moments):
    m = catalog.model(name)
    algo = AlgoSpec(recompute=recompute, distributed_optimizer=dist, adam_moments=moments)
    one = memory.trainer_stage_memory(m, Parallel(tp, 1, 4), algo, H100)[0]
    logits = algo.micro_batch_tokens * m.vocab * memory.LOGIT_BYTES / tp
    for pp in [p for p in (2, 4, 8) if m.layers % p == 0]:
        stages = memory.trainer_stage_memory(m, Parallel(tp, pp, 4), algo, H100)
        assert [s.stage for s in stages] == list(range(pp)) and stages[0].stages == pp
        # 1F1B: stage 0 keeps pp micro-batches of 1/pp of the layers = one micro-batch of all
        assert stages[0].activations == pytest.approx(one.activations - logits, rel=1e-9)
        acts = [s.activations for s in stages[:-1]]
        assert acts == sorted(acts, reverse=True)
        state = [s.weights + s.grads + s.optimizer for s in stages]
        assert max(state) < one.weights + one.grads + one.optimizer
        peak = memory.trainer_memory(m, Parallel(tp, pp, 4), algo, H100)
        assert peak.total == max(s.total for s in stages)


def test_bf16_moments_save_four_bytes_per_parameter():
    assert memory.optimizer_bytes(AdamMoments.FP32) == memory.ADAM_BYTES == 12
    assert memory.optimizer_bytes(AdamMoments.BF16) == 8
    assert memory.adam_step_bytes(AdamMoments.FP32) == 36
    m = catalog.model("Qwen2.5-7B")
    a = memory.trainer_memory(m, Parallel(2, 1, 1), AlgoSpec(), H100)
    b = memory.trainer_memory(m, Parallel(2, 1, 1), AlgoSpec(adam_moments=AdamMoments.BF16), H100)
    assert a.optimizer - b.optimizer == pytest.approx(m.params / 2 * 4)


def _old_pass_time(c: AnalyticCostModel, model, seq_lens, par, recompute) -> float:
    """The analytic pass before pipeline stages were priced (kept for pp=1 only)."""
    flops = sum(c._train_flops(model, float(s)) for s in seq_lens)
    if recompute:
        flops *= 4.0 / 3.0
    tokens = float(sum(seq_lens))
    micro = max(1.0, -(-tokens // c.micro_batch_tokens))
    compute = flops / (par.tp * par.pp * c._peak() * c.eff.train_mfu) * 1.0
    tp_comm = c.allreduce_time(4 * tokens * model.hidden * 2 * model.layers / par.pp, par.tp,
                               calls=int(4 * model.layers / par.pp * micro))
    return compute + tp_comm + 0.0 + micro * c.eff.micro_batch_overhead_s


LENS = st.lists(st.integers(1, 20000), min_size=1, max_size=30)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(MODELS), LENS, st.sampled_from([1, 2, 4, 8]), st.integers(1, 64),
       st.booleans(), st.sampled_from([1024, 8192, 16384]))
def test_pp1_reproduces_the_cost_without_a_pipeline(name, lens, tp, dp, recompute, mbt):
    m = catalog.model(name)
    c = AnalyticCostModel(ClusterSpec(H100, nodes=4, gpus_per_node=8), recompute=recompute,
                          micro_batch_tokens=mbt)
    par = Parallel(tp, 1, dp)
    assert c.pass_time(m, lens, par, recompute) == _old_pass_time(c, m, lens, par, recompute)
    assert c.pp_p2p_time(m, float(sum(lens)), 1.0, par) == 0.0


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(MODELS), LENS, st.sampled_from([1, 2, 4, 8]), st.booleans())
def test_more_pp_never_lowers_the_pipelines_device_seconds(name, lens, tp, recompute):
    """pp times the pass time (device-seconds per replica) grows with pp: the bubble
    (pp-1)/micro, the last stage's head and the stage-to-stage sends all grow."""
    m = catalog.model(name)
    c = AnalyticCostModel(ClusterSpec(H100, nodes=8, gpus_per_node=8), recompute=recompute)
    pps = [p for p in (1, 2, 4, 8) if m.layers % p == 0]
    dev_s = [pp * c.pass_time(m, lens, Parallel(tp, pp, 1), recompute) for pp in pps]
    assert all(b >= a * (1 - 1e-12) for a, b in zip(dev_s, dev_s[1:])), dev_s


def test_bubble_is_pp_minus_one_over_micro_batches():
    m = catalog.model("Llama-3.1-70B")
    c = AnalyticCostModel(ClusterSpec(H100, nodes=2, gpus_per_node=8), micro_batch_tokens=4096)
    lens = [4096] * 16  # 16 micro-batches of one sequence each
    free = AnalyticCostModel(c.cluster, c.eff.with_(micro_batch_overhead_s=0.0, comm_latency_s=0.0),
                             micro_batch_tokens=4096)
    base = free.pass_time(m, lens, Parallel(8, 1, 1), False)
    two = free.pass_time(m, lens, Parallel(8, 2, 1), False) - free.pp_p2p_time(m, 4096 * 16, 16, Parallel(8, 2, 1))
    two_tp = two - free.allreduce_time(4 * 4096 * 16 * m.hidden * 2 * m.layers / 2, 8,
                                       calls=int(4 * m.layers / 2 * 16))
    base_tp = base - free.allreduce_time(4 * 4096 * 16 * m.hidden * 2 * m.layers, 8,
                                         calls=int(4 * m.layers * 16))
    head = 6.0 * m.vocab * m.hidden * 4096 * 16
    flops = sum(free._train_flops(m, 4096.0) for _ in lens)
    stage_share = ((flops - head) / 2 + head) / flops
    assert two_tp == pytest.approx(base_tp * stage_share * (1 + 1 / 16), rel=1e-9)


def test_stage_hops_cross_nodes_where_a_stage_starts_a_node():
    c = AnalyticCostModel(ClusterSpec(H100, nodes=4, gpus_per_node=8))
    assert c.pp_link_gbps(Parallel(2, 4, 1)) == H100.intra_node_gbps   # 8 devices: one node
    assert c.pp_link_gbps(Parallel(8, 2, 1)) == H100.inter_node_gbps   # a stage per node
    assert c.pp_link_gbps(Parallel(4, 4, 1)) == H100.inter_node_gbps   # two stages per node
    m = catalog.model("Llama-3.1-70B")
    near = c.pp_p2p_time(m, 65536.0, 4.0, Parallel(2, 4, 1))
    far = AnalyticCostModel(ClusterSpec(H100, nodes=8, gpus_per_node=4)).pp_p2p_time(
        m, 65536.0, 4.0, Parallel(2, 4, 1))  # stage 2 starts the second node
    assert far > near > 0
    slots = 4 + 4 - 1
    one = 65536 / 4 * m.hidden * 2 / 2 / (H100.intra_node_gbps * 1e9 * c.eff.comm_eff) + c.eff.comm_latency_s
    assert near == pytest.approx(2 * slots * one)


def test_grad_sync_and_offload_use_the_fullest_stage():
    m = catalog.model("Llama-3.1-70B")
    c = AnalyticCostModel(ClusterSpec(H100, nodes=2, gpus_per_node=8))
    big = memory.largest_stage_params(m, 4)
    assert big > m.params / 4
    assert c._shard_params(m, Parallel(4, 4, 1)) == pytest.approx(big / 4)
    assert c._shard_params(m, Parallel(4, 1, 4)) == m.params / 4
    assert math.isfinite(c.grad_sync_time(m, Parallel(4, 4, 1)))
