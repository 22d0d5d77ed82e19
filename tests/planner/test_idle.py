"""Why a side of a partial-colocate step waits: the note names the cause with numbers."""
import dataclasses

from yatt.core import (ClusterSpec, DistKind, EngineSpec, Experiment, LengthDist, Mode, SearchSpec,
                       Workload, catalog)
from yatt.planner.costmodel import AnalyticCostModel
from yatt.planner.idle import idle_note
from yatt.sim import make_plan, simulate


def _exp(resp: LengthDist, verdict: LengthDist, ds: bool = False) -> Experiment:
    w = Workload(prompts_per_step=32, samples_per_prompt=8, prompt_len=LengthDist(DistKind.CONST, 200),
                 response_len=resp, genrm_output_len=verdict, dynamic_sampling=ds,
                 all_equal_prob=0.3 if ds else 0.0, max_resample_rounds=2)
    return Experiment("idle", ClusterSpec(catalog.gpu("H100-SXM"), nodes=2, gpus_per_node=8),
                      catalog.model("Qwen2.5-0.5B"), w, genrm=catalog.model("Qwen2.5-7B"),
                      engine=EngineSpec(), search=SearchSpec(seeds=1))


def _note(exp: Experiment, rollout: int) -> str:
    cost = AnalyticCostModel.for_experiment(exp)
    plan = make_plan(exp, Mode.PARTIAL, rollout_devices=rollout)
    return idle_note(simulate(plan, exp.workload, cost, 0), cost)


def test_rollout_waiting_on_long_verdicts_is_explained_as_latency():
    # every response stops at the same cap; each verdict decodes 2,048 tokens on its own
    exp = _exp(LengthDist(DistKind.CONST, 256), LengthDist(DistKind.CONST, 2048))
    note = _note(exp, 8)
    assert note.startswith("rollout devices idle") and "256-token cap" in note, note
    assert "more GenRM devices would not shorten the wait" in note, note


def test_a_starved_judge_is_explained_as_queueing():
    exp = _exp(LengthDist(DistKind.CONST, 64), LengthDist(DistKind.CONST, 512))
    exp = dataclasses.replace(exp, workload=dataclasses.replace(exp.workload, prompts_per_step=256))
    note = _note(exp, 15)      # one GenRM device for 2,048 verdicts
    assert "queueing behind other verdicts" in note, note


def test_a_thin_end_of_generation_names_its_slowest_request():
    exp = _exp(LengthDist(DistKind.LOGNORMAL, 800, sigma=1.0, min=16, max=16384),
               LengthDist(DistKind.CONST, 64), ds=True)
    note = _note(exp, 8)
    assert "fewer than half of the generating devices are busy" in note, note


def test_colocate_has_no_sides():
    exp = _exp(LengthDist(DistKind.CONST, 256), LengthDist(DistKind.CONST, 2048))
    cost = AnalyticCostModel.for_experiment(exp)
    tr = simulate(make_plan(exp, Mode.COLOCATE), exp.workload, cost, 0)
    assert idle_note(tr, cost) == ""
