"""Spec builders for simulator tests (small clusters, tiny fake-costed models)."""
from yatt.core import (AlgoSpec, ClusterSpec, DistKind, EngineSpec, Experiment, GpuSpec,
                       LengthDist, ModelSpec, Workload)

GPU = GpuSpec("fake-gpu", bf16_tflops=100, hbm_gb=80, hbm_gbps=2000, intra_node_gbps=300,
              inter_node_gbps=25, host_link_gbps=32)
ACTOR = ModelSpec("actor-1b", layers=16, hidden=2048, intermediate=5632, heads=16, kv_heads=4,
                  vocab=32000)
GENRM_BIG = ModelSpec("genrm-big", layers=48, hidden=6144, intermediate=16384, heads=48,
                      kv_heads=8, vocab=32000)
GENRM_TINY = ModelSpec("genrm-tiny", layers=2, hidden=256, intermediate=512, heads=4,
                       kv_heads=2, vocab=32000)


def workload(prompts=16, k=4, ds=False, p_equal=0.0, rounds=3, resp=200, sigma=0.6):
    return Workload(prompts_per_step=prompts, samples_per_prompt=k,
                    prompt_len=LengthDist(DistKind.CONST, 64),
                    response_len=LengthDist(DistKind.LOGNORMAL, resp, sigma=sigma, min=1, max=4000),
                    genrm_output_len=LengthDist(DistKind.CONST, 16), dynamic_sampling=ds,
                    all_equal_prob=p_equal, max_resample_rounds=rounds)


def experiment(w, genrm=GENRM_BIG, nodes=1, gpn=8, engine=EngineSpec(), algo=AlgoSpec()):
    return Experiment("t", ClusterSpec(GPU, nodes=nodes, gpus_per_node=gpn), ACTOR, w,
                      genrm=genrm, algo=algo, engine=engine)


def partial_pair(cost_a, cost_b, seed: int = 3):
    """The same partial-colocate step (8 prompts x 4, rollout on 4 of 8 devices) simulated
    under two cost models: for tests of optional cost-model extensions."""
    from yatt.core import Mode
    from yatt.sim import make_plan, simulate

    w = workload(8, 4, resp=100)
    part = make_plan(experiment(w), Mode.PARTIAL, rollout_devices=4)
    return simulate(part, w, cost_a, seed), simulate(part, w, cost_b, seed)


def phase_busy(trace, phase) -> float:
    """Summed span seconds of one phase (engines: their busy intervals)."""
    return sum(s.duration for s in trace.spans if s.phase is phase)


def extension_pair(free, priced, term: str):
    """`partial_pair` of a cost model that keeps the contract's default for the optional
    `term` and one that overrides it; both must generate the same samples."""
    from yatt.core import CostModel

    default = getattr(CostModel, term)
    assert getattr(type(free), term) is default and getattr(type(priced), term) is not default
    a, b = partial_pair(free, priced)
    assert sorted(s.sample_id for s in b.samples) == sorted(s.sample_id for s in a.samples)
    return a, b
