"""Memory model: the numbers a planner's feasibility verdict rests on."""
from __future__ import annotations

from yatt.core import AlgoSpec, EngineSpec, Parallel, Role, catalog
from yatt.planner import memory

A100 = catalog.gpu("A100-80G")


def test_72b_weights_do_not_fit_one_80gb_gpu_but_fit_tp4_for_inference():
    m = catalog.model("Qwen2.5-Math-72B")
    eng = EngineSpec(gpu_memory_utilization=0.9)
    assert m.weight_bytes > 80e9
    assert not memory.engine_memory(m, 1, Role.GENRM, eng, A100).fits()
    assert not memory.engine_memory(m, 2, Role.GENRM, eng, A100, min_kv_tokens=8192).fits()
    assert memory.engine_memory(m, 4, Role.GENRM, eng, A100, min_kv_tokens=8192).fits()
    assert memory.min_engine_tp(m, A100, eng, 8192) == 4


def test_adam_states_7b_with_and_without_distributed_optimizer():
    m = catalog.model("Qwen2.5-7B")
    par = Parallel(tp=1, pp=1, dp=8)
    plain = memory.trainer_memory(m, par, AlgoSpec(distributed_optimizer=False), A100)
    dist = memory.trainer_memory(m, par, AlgoSpec(distributed_optimizer=True), A100)
    assert plain.optimizer == m.params * 12  # fp32 master + m + v
    assert dist.optimizer == m.params * 12 / 8
    assert plain.weights == dist.weights == m.params * 2
    assert plain.grads == m.params * 4
    # 7B full Adam state on one device does not fit 80 GB; sharded over DP=8 with TP=2 it does
    assert not plain.fits()
    small = memory.trainer_memory(m, Parallel(2, 1, 8), AlgoSpec(distributed_optimizer=True,
                                                                  micro_batch_tokens=8192), A100)
    assert small.fits(), small


def test_recompute_saves_activation_memory():
    m = catalog.model("Qwen2.5-7B")
    par = Parallel(1, 1, 1)
    a = memory.trainer_memory(m, par, AlgoSpec(recompute=True), A100).activations
    b = memory.trainer_memory(m, par, AlgoSpec(recompute=False), A100).activations
    assert a < b


def test_kv_capacity_grows_with_tp():
    m = catalog.model("Qwen2.5-72B")
    assert memory.engine_kv_bytes(m, 8, A100, 0.9) > memory.engine_kv_bytes(m, 4, A100, 0.9) > 0
