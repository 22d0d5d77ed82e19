"""`from yatt import Trainer, plan`: the Python quick start, as a thin layer over the planner
and the executor.

`yatt.plan(...)` is `yatt plan` for scripts: the same search, the same numbers, returned as
a `PlanResult` (docs/plan.md):

    import yatt
    result = yatt.plan("configs/default.yaml", placement="partial R8(tp1) G40(tp4) T48(tp1)")
    result.best.mean, result.ranking, result.gap(), result.emit("verl").text()


Why: WeChat-YATT documents a three-line Python entry point; this mirrors it without a
second code path. It builds an Experiment, lets the planner choose (or forces) the
placement, and hands the Plan to the same `run_plan` that `yatt run` uses.

    from yatt import Trainer
    trainer = Trainer(actor_model="path/to/hf_actor", reward_model="path/to/hf_genrm",
                      reward_fn=my_reward,         # or "pkg.module:fn" / "file.py:fn"
                      dataset="train.jsonl",       # or a list of dicts, or "arith"
                      answer_key="answer", strategy="auto")   # or colocate | partial_colocate
    trace = trainer.train(batch_size=8, steps=2)

A reward model and a reward function together train on their weighted sum
(reward.rule_weight / genrm_weight, 0.5 each). examples/own-job/api.py runs this.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union

from yatt.core import catalog
from yatt.core.bundled import DEMO_EXPERIMENT, bundled
from yatt.core.config import load_experiment, read_yaml
from yatt.core.errors import InputError
from yatt.core.hfspec import model_spec_from_hf
from yatt.core.jobspec import ARITH_DATA, DataSpec, RewardSpec
from yatt.core.limits import MAX_LIST, MAX_SEEDS, MAX_TOP, work_budget
from yatt.core.plan import Experiment, Plan, SearchSpec
from yatt.core.roles import AlgoName, Mode, RewardSource
from yatt.core.schema import from_dict
from yatt.core.specs import AlgoSpec, ClusterSpec, LengthDist, ModelSpec, Workload
from yatt.core.roles import DistKind
from yatt.core.safeio import check_out_dir, ensure_dir, write_text

if TYPE_CHECKING:
    from yatt.planner.advice import PlanResult


def __getattr__(name: str):
    if name == "PlanResult":  # loaded on first use: the planner imports the simulator
        from yatt.planner.advice import PlanResult

        return PlanResult
    raise AttributeError(f"module 'yatt.api' has no attribute {name!r}")


STRATEGIES = {"auto": None, "colocate": Mode.COLOCATE, "partial_colocate": Mode.PARTIAL}
Dataset = Union[None, str, Path, list]
RewardFn = Union[None, str, Callable[..., Any]]


def _model(ref: Union[str, Path, ModelSpec], what: str) -> ModelSpec:
    if isinstance(ref, ModelSpec):
        return ref
    p = Path(ref)
    if p.is_dir():
        return model_spec_from_hf(p)
    if p.suffix in (".yaml", ".yml"):
        return from_dict(ModelSpec, read_yaml(p))
    try:
        return catalog.model(str(ref))
    except InputError as e:
        raise InputError(e.message + " or a Hugging Face checkpoint directory", field=what) from None


def _cluster(ref: Union[None, str, Path, ClusterSpec]) -> ClusterSpec:
    if isinstance(ref, ClusterSpec):
        return ref
    if ref is None:  # the local CPU "cluster" of the demo
        return load_experiment(bundled(DEMO_EXPERIMENT)).cluster
    data = read_yaml(ref)
    if isinstance(data, dict) and isinstance(data.get("gpu"), str):
        data = {**data, "gpu": dataclasses.asdict(catalog.gpu(data["gpu"]))}
    return from_dict(ClusterSpec, data)


def _data(dataset: Dataset, prompt_key: str, answer_key: str, max_prompt_len: int) -> DataSpec:
    """The data section for `dataset` (a list of dicts is written out at `train`)."""
    if dataset is None or dataset == "arith":
        return ARITH_DATA
    if isinstance(dataset, list):
        return DataSpec(train="<list>", prompt_key=prompt_key, answer_key=answer_key,
                        max_prompt_len=max_prompt_len)
    p = Path(dataset)
    if not p.exists():
        raise InputError(f"got {str(dataset)!r}; allowed: arith, a .jsonl/.json/.parquet file "
                         "or save_to_disk directory, or a list of dicts", field="dataset")
    return DataSpec(train=str(p.resolve()), prompt_key=prompt_key, answer_key=answer_key,
                    max_prompt_len=max_prompt_len)


def _reward(fn: RewardFn) -> tuple[RewardSpec, Optional[Callable[..., Any]]]:
    """The reward section for `reward_fn`, and the callable itself when one was given."""
    if fn is None:
        return RewardSpec(), None
    if isinstance(fn, str):
        mod, sep, name = fn.rpartition(":")
        if sep and mod.endswith(".py"):
            fn = f"{Path(mod).resolve()}:{name}"
        return RewardSpec(function=fn), None
    if not callable(fn):
        raise InputError(f"got a {type(fn).__name__}; allowed: a callable or 'module:fn'",
                         field="reward_fn")
    mod, qual = getattr(fn, "__module__", ""), getattr(fn, "__qualname__", "")
    ok = bool(mod) and all(p.isidentifier() for p in qual.split("."))
    return RewardSpec(function=f"{mod}:{qual}" if ok else "python:callable"), fn


class Trainer:
    """Plan and run GRPO on your data with a rule reward, a generative reward model, or both."""

    def __init__(self, actor_model: Union[str, Path, ModelSpec],
                 reward_model: Union[None, str, Path, ModelSpec] = None, strategy: str = "auto",
                 cluster: Union[None, str, Path, ClusterSpec] = None, *,
                 reward_fn: RewardFn = None, dataset: Dataset = None, prompt_key: str = "prompt",
                 answer_key: str = "", max_prompt_len: int = 256, samples_per_prompt: int = 4,
                 max_new_tokens: int = 16, out_dir: Union[str, Path] = "out/trainer",
                 seed: int = 0) -> None:
        if strategy not in STRATEGIES:
            raise InputError(f"got {strategy!r}; allowed: {'|'.join(STRATEGIES)}", field="strategy")
        self.mode: Optional[Mode] = STRATEGIES[strategy]
        self.actor = _model(actor_model, "actor_model")
        self.genrm = _model(reward_model, "reward_model") if reward_model is not None else None
        self.cluster = _cluster(cluster)
        self.samples_per_prompt = samples_per_prompt
        self.max_new_tokens = max_new_tokens
        self.out_dir = Path(out_dir)
        self.seed = seed
        self.rows = dataset if isinstance(dataset, list) else None
        self.data = _data(dataset, prompt_key, answer_key, max_prompt_len)
        self.reward, self.reward_fn = _reward(reward_fn)

    def _source(self) -> RewardSource:
        if self.genrm is None:
            return RewardSource.RULE
        return RewardSource.WEIGHTED if self.reward.function else RewardSource.GENRM

    def experiment(self, batch_size: int, ppo_epochs: int = 1) -> Experiment:
        w = Workload(prompts_per_step=batch_size, samples_per_prompt=self.samples_per_prompt,
                     prompt_len=LengthDist(DistKind.CONST, 12),
                     response_len=LengthDist(DistKind.UNIFORM, min=1, max=self.max_new_tokens),
                     genrm_template_tokens=8, genrm_output_len=LengthDist(DistKind.CONST, 4))
        algo = AlgoSpec(name=AlgoName.GRPO, ppo_epochs=ppo_epochs, lr=1e-4, micro_batch_tokens=512,
                        recompute=False, distributed_optimizer=False, reward=self._source())
        search = SearchSpec(modes=(self.mode,) if self.mode else (Mode.COLOCATE, Mode.PARTIAL),
                            tp_choices=(1, 2), seeds=1)
        return Experiment("python-api", self.cluster, self.actor, w, genrm=self.genrm, algo=algo,
                          search=search, data=self.data, reward=self.reward)

    def plan(self, batch_size: int = 8, ppo_epochs: int = 1) -> Plan:
        """The placement `train` would use (the planner's best that this executor runs)."""
        from yatt.planner.costmodel import AnalyticCostModel
        from yatt.planner.runnable import plan_for_executor

        exp = self.experiment(batch_size, ppo_epochs)
        return plan_for_executor(exp, AnalyticCostModel.for_experiment(exp), self.mode).best.plan

    def train(self, dataset: Dataset = None, batch_size: int = 8, ppo_epochs: int = 1,
              steps: int = 2, progress: bool = True):
        """Run `steps` RL steps; returns the measured Trace (also written to out_dir).
        `dataset` here replaces the constructor's (same forms)."""
        if dataset is not None:
            self.rows = dataset if isinstance(dataset, list) else None
            self.data = _data(dataset, self.data.prompt_key, self.data.answer_key,
                              self.data.max_prompt_len)
        if ppo_epochs != 1:
            raise InputError(f"got {ppo_epochs}; allowed: 1 (the executor trains one on-policy "
                             "epoch per step)", field="ppo_epochs")
        from yatt.exec.runner import run_plan

        if self.rows is not None:   # a list of dicts becomes a file of the run, so it resumes
            path = self.out_dir / "data" / "train.jsonl"
            check_out_dir(self.out_dir, field="out_dir")
            ensure_dir(path.parent, root=self.out_dir)   # refuses a link planted at data/
            write_text(path, "".join(json.dumps(r) + "\n" for r in self.rows))
            self.data = dataclasses.replace(self.data, train=str(path.resolve()))
        plan = self.plan(batch_size, ppo_epochs)
        return run_plan(plan, steps=steps, out_dir=self.out_dir, seed=self.seed, progress=progress,
                        reward_fn=self.reward_fn)


@contextlib.contextmanager
def _argument_names():
    """Errors of the shared validation name command-line flags; here, the keyword arguments."""
    try:
        yield
    except InputError as e:
        name = e.field.removeprefix("--").replace("-", "_") if e.field.startswith("--") else e.field
        raise InputError(e.message, field=name, file=e.file) from None


def plan(experiment: Union[str, Path, Experiment, Plan], *, placement: Union[None, str, Plan] = None,
         profile: Union[None, str, Path] = None, top: int = 5, seeds: Optional[int] = None,
         gpus: Sequence[int] = (), steps: int = 1, price_per_gpu_hour: Optional[float] = None,
         progress: Optional[Callable[[int, str], None]] = None) -> "PlanResult":
    """Plan an experiment as `yatt plan` does and return a `PlanResult`.

    experiment  an experiment or plan YAML path, an Experiment, or a Plan (a plan is scored
                against the best, like `yatt plan PLAN.yaml`)
    placement   a placement to score against the best: text such as
                "partial R4(tp2) G44(tp4) T48(tp1)", or a Plan
    profile     a profile.yaml from `yatt profile` / `yatt calibrate` (default: the profile
                shipped for the cluster's device kind, else analytic), its times as measured
                (`yatt plan` first rescales them to this host)
    gpus        cluster sizes for the scaling sweep (`PlanResult.scaling`)
    steps, price_per_gpu_hour   how runs are priced in the summary and the ranking
    progress    called as progress(simulations_done, what) while searching
    """
    from yatt.core.config import is_plan_file, load_plan
    from yatt.planner.advice import plan_experiment, scaling, with_scaling
    from yatt.planner.budget import check_plan
    from yatt.planner.costs import Pricing
    from yatt.planner.placement_text import parse_placement
    from yatt.planner.profile_io import load_profile
    from yatt.planner.profiled import cost_model_for, experiment_for, given_or_shipped
    from yatt.planner.sizes import resize

    with _argument_names():
        pricing = Pricing(steps, price_per_gpu_hour)
    if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= MAX_TOP:
        raise InputError(f"got {top!r}; allowed: an integer >= 1 and <= {MAX_TOP}", field="top")
    if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, int)
                              or not 1 <= seeds <= MAX_SEEDS):
        raise InputError(f"got {seeds!r}; allowed: an integer >= 1 and <= {MAX_SEEDS}",
                         field="seeds")
    given: Optional[Plan] = None
    if isinstance(experiment, Plan):
        given, exp = experiment, experiment.experiment
    elif isinstance(experiment, Experiment):
        exp = experiment
    elif is_plan_file(experiment):
        given = load_plan(experiment)
        exp = given.experiment
    else:
        exp = load_experiment(experiment)
    if given is not None and placement is not None:
        raise InputError("a plan is already scored; pass placement= with an experiment only",
                         field="placement")
    prof = load_profile(profile) if profile is not None else None
    prof, profile = given_or_shipped(prof, profile, exp.cluster.gpu.name)
    exp = experiment_for(exp, prof)
    with _argument_names():
        if isinstance(placement, str):
            given = parse_placement(placement, exp)
        elif placement is not None:
            given = placement
        sizes = sorted(set(int(g) for g in gpus))
        if len(sizes) > MAX_LIST:
            raise InputError(f"got {len(sizes)} sizes; allowed: at most {MAX_LIST}", field="gpus")
        for g in sizes:
            resize(exp, g)  # refuse a bad size before searching
        # the same work estimate and meter as `yatt plan` (yatt.core.limits)
        check_plan(exp if seeds is None else dataclasses.replace(
                       exp, search=dataclasses.replace(exp.search, seeds=seeds)),
                   top, sizes, given=given is not None)
    label = f"profile {profile}" if profile is not None else "analytic defaults"
    with work_budget():
        result = plan_experiment(exp, cost_model_for(exp, prof), cost_label=label, given=given,
                                 top=top, seeds=seeds, pricing=pricing, progress=progress)
        if sizes:
            rows, problems = scaling(exp, sizes, lambda e: cost_model_for(e, prof))
            result = with_scaling(result, rows, problems)
    return result
