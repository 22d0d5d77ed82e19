"""Step controllers: each owns a shard of the step's prompts and drives its samples.

Why: with one controller, every prompt, payload and sample passes through one process —
the single-controller bottleneck. K controller actors each own a contiguous shard of the
step's prompts and drive them rollout → reward → advantage → reference → trainer; the
driver only sends small commands and gets back small summaries (reward moments, token
costs for DP balancing). Controllers meet only at phase barriers the placement mode
requires. `plan.controllers == 1` runs the same class in the driver process itself.
Group-relative advantages need no cross-controller data because a prompt's samples all
live in one shard; global reward mean/std are combined from moments.

Dynamic sampling (DAPO): after each generation round, `resample` drops this shard's
groups whose rewards are all equal and queues one replacement group (a new prompt) per
dropped group for the next round; groups dropped in the last allowed round are not
replaced, so the trained batch can be smaller. Dropped samples are recorded with
kept=False, dp_rank=-1 and their round, as in the simulator (yatt/sim/pool.py).

Prompts come from the experiment's data source (data.py: the user's dataset or the
built-in arith task). Every rollout is also scored by the rule reward when the
experiment has one (reward.py; `accuracy` = share of rule scores >= reward.correct_at),
whatever the reward source; `weighted` combines it with the GenRM's verdict. On eval
steps (data.eval_every) the eval prompts ride along in round 0 with negative ids: they are
generated and judged with the step's samples, reported as eval_reward / eval_accuracy,
and never trained on or recorded as samples.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

from yatt.core.jobspec import ARITH_DATA, BuiltinReward, DataSpec, RewardSpec
from yatt.core.roles import RewardSource
from yatt.core.specs import AlgoSpec, Workload
from yatt.core.trace import SampleRecord

from . import faults
from .algo import all_equal_groups, step_advantages
from .data import ArithSource, PromptEncoder, PromptSource, eval_due
from .genrm import JudgeInput, Judgment
from .rayutil import get_all
from .reward import RuleReward
from .rollout import GenRequest, GenResult
from .step_stats import Moments, PhaseReport, shard
from .task import Prompt, SampleSpec, prompt_index, step_samples
from .workers import TrainItem


@dataclass(frozen=True)
class ControllerConfig:
    index: int
    count: int
    seed: int
    workload: Workload
    algo: AlgoSpec                 # reward source, temperature, advantage normalisation
    actor_tokenizer: str
    t0: float                      # run start, time.time()
    queue_capacity: int = 64
    # Ask the rollout engines for each generated token's log-prob. Off: the trainer computes
    # the behaviour log-probs itself (its first epoch's; `TrainItem` carries none), so
    # engine log-probs would be computed, shipped and dropped (~10-20% of the rollout phase
    # measured on the vs-TRL job). Sampled tokens are the same either way (per-request
    # seeds).
    behaviour_logprobs: bool = False
    data: DataSpec = ARITH_DATA
    reward: RewardSpec = RewardSpec()
    rule: Union[str, BuiltinReward, None] = BuiltinReward.FIRST_INTEGER   # Experiment.rule_reward
    source: Optional[PromptSource] = None    # None: built from `data` (arith only)
    reward_fn: Optional[Callable[..., Any]] = None   # a Python API callable, instead of `rule`


class StepController:
    def __init__(self, cfg: ControllerConfig, rollout: list, genrm: list, refs: list,
                 trainer_groups: list[list]):
        from transformers import AutoTokenizer

        self.cfg = cfg
        self.rollout_engines, self.genrm_engines = rollout, genrm
        self.refs, self.trainer_groups = refs, trainer_groups
        self.tok = AutoTokenizer.from_pretrained(cfg.actor_tokenizer)
        self.source = cfg.source or ArithSource(PromptEncoder(self.tok, cfg.data))
        self.rule = (RuleReward(cfg.reward, cfg.rule or "", cfg.reward_fn)
                     if cfg.rule is not None or cfg.reward_fn is not None else None)
        self._queues: list = []
        self.step = -1
        # tests: a controller actor dies mid-step (K > 1 only: with K = 1 it is the driver)
        self._fault = faults.hook("controller", cfg.index) if cfg.count > 1 else None

    def ping(self) -> bool:
        """Liveness probe (fault recovery waits on it while Ray restarts the actor)."""
        return True

    def _maybe_die(self) -> None:
        if self._fault is not None:
            self._fault.tick()
            self._fault.maybe_exit()

    # ---- step data -------------------------------------------------------------------
    def begin(self, step: int) -> int:
        self.step = step
        self.prompts: dict[int, Prompt] = {}
        self.specs: list[SampleSpec] = []         # every sample of the step, all rounds
        self.round_of: dict[int, int] = {}        # sample id -> dynamic-sampling round
        self.dropped: set[int] = set()            # sample ids of dropped groups
        self.prompt_ids: dict[int, tuple[int, ...]] = {}
        self.results: dict[int, GenResult] = {}
        self.judged: dict[int, Judgment] = {}
        self.correct: dict[int, float] = {}
        self.rule_scores: dict[int, Any] = {}     # sample id -> reward.RuleScore
        self.ref_lp: dict[int, tuple[float, ...]] = {}
        self.eval_specs: list[SampleSpec] = []
        self._round_prompts: dict[int, list[Prompt]] = {}
        wl = self.cfg.workload
        mine = {p.prompt_id for p in shard(self._prompts_of(0), self.cfg.index, self.cfg.count)}
        n = self._add_round(0, {prompt_index(p, wl) for p in mine})
        if eval_due(self.cfg.data, step):
            n += self._add_eval()
        return n

    def _prompts_of(self, rnd: int) -> list[Prompt]:
        if rnd not in self._round_prompts:
            self._round_prompts[rnd] = self.source.prompts(self.cfg.seed, self.step,
                                                           self.cfg.workload, rnd)
        return self._round_prompts[rnd]

    def _add_round(self, rnd: int, indices: set[int]) -> int:
        """Queue the groups with these prompt indices of round `rnd` as the pending work."""
        wl = self.cfg.workload
        prompts = [p for p in self._prompts_of(rnd) if prompt_index(p.prompt_id, wl) in indices]
        ids = {p.prompt_id for p in prompts}
        for p in prompts:
            self.prompts[p.prompt_id] = p
            self.prompt_ids[p.prompt_id] = p.ids
        self.pending = [s for s in step_samples(self.cfg.seed, self.step, wl, rnd)
                        if s.prompt_id in ids]
        self.specs.extend(self.pending)
        self.round_of.update({s.sample_id: rnd for s in self.pending})
        self._pm_step = None
        return len(self.pending)

    def _add_eval(self) -> int:
        """This controller's share of the eval prompts, `data.eval_samples` each, queued with
        round 0 (ids < 0; greedy for one sample, else at algo.temperature)."""
        k = self.cfg.data.eval_samples
        budget = self.cfg.workload.response_len.upper()
        for p in shard(self.source.eval_prompts(), self.cfg.index, self.cfg.count):
            self.prompts[p.prompt_id] = p
            self.prompt_ids[p.prompt_id] = p.ids
            for j in range(k):
                sid = p.prompt_id * k - j          # prompt -i: ids -k*i .. -k*i-k+1
                self.eval_specs.append(SampleSpec(sid, p.prompt_id,
                                                  self.cfg.seed * 1_000_003 + 7919 * self.step - sid,
                                                  budget))
        self.pending = self.pending + self.eval_specs
        self._pm_step = None
        return len(self.eval_specs)

    def resample(self, rnd: int, last: bool) -> int:
        """After round `rnd` is judged: drop all-equal groups (dynamic sampling only) and
        queue replacements unless `last`. Returns the number of samples queued."""
        wl = self.cfg.workload
        if not wl.dynamic_sampling or wl.samples_per_prompt < 2:
            self.pending = []
            return 0
        groups: dict[int, list[float]] = {}
        members: dict[int, list[int]] = {}
        for s in self.pending:
            if s.sample_id < 0:       # eval samples are not groups of the batch
                continue
            groups.setdefault(s.prompt_id, []).append(self.judged[s.sample_id].reward)
            members.setdefault(s.prompt_id, []).append(s.sample_id)
        drop = all_equal_groups(groups)
        for pid in drop:
            self.dropped.update(members[pid])
        self.pending = []
        if last or not drop:
            return 0
        return self._add_round(rnd + 1, {prompt_index(p, wl) for p in drop})

    def kept_specs(self) -> list[SampleSpec]:
        return [s for s in self.specs if s.sample_id not in self.dropped]

    def _requests(self) -> list[GenRequest]:
        out, first = [], set()
        for s in self.pending:
            payload = None
            if s.prompt_id not in first:   # ship the prompt's payload once, with its 1st sample
                first.add(s.prompt_id)
                payload = self.prompts[s.prompt_id].payload or None
            temp = self.cfg.algo.temperature
            if s.sample_id < 0 and self.cfg.data.eval_samples == 1:
                temp = 0.0
            out.append(GenRequest(s.sample_id, self.prompt_ids[s.prompt_id], s.max_tokens,
                                  temp, s.seed, self.cfg.behaviour_logprobs, payload))
        return out

    def _judge_inputs(self) -> dict[int, JudgeInput]:
        """The judging template's {prompt} and {answer} for the pending samples."""
        out = {}
        for s in self.pending:
            p = self.prompts[s.prompt_id]
            out[s.sample_id] = JudgeInput(_prompt_text(p), p.answer or "")
        return out

    def _by_engine(self, items: list, key: Callable[[Any], int], k: int) -> list[list]:
        parts: list[list] = [[] for _ in range(k)]
        for x in items:
            parts[key(x) % k].append(x)
        return parts

    def _check(self, sids: list[int]) -> None:
        """Rule score of each new rollout (the accuracy metric; the rule reward)."""
        if self.rule is None:
            return
        for sid in sids:
            r = self.results[sid]
            text = self.tok.decode(list(r.token_ids), skip_special_tokens=True)
            p = self.prompts[self._pid(sid)]
            where = f"sample {sid} of step {self.step}" if sid >= 0 else f"eval sample {-sid}"
            where += f" ({p.where})" if p.where else ""
            rs = self.rule(p.raw if p.raw is not None else p.text, text, p.row, where)
            self.rule_scores[sid] = rs
            self.correct[sid] = 1.0 if rs.score >= self.cfg.reward.correct_at else 0.0
            if self.cfg.algo.reward is RewardSource.RULE:
                self.judged[sid] = Judgment(sid, rs.score, True, 0, 0, r.end_s)

    def _combine(self, sids: list[int]) -> None:
        """weighted: the GenRM's verdict and the rule score, by reward.*_weight."""
        if self.cfg.algo.reward is not RewardSource.WEIGHTED:
            return
        w = self.cfg.reward
        for sid in sids:
            j = self.judged[sid]
            self.judged[sid] = dataclasses.replace(
                j, reward=w.genrm_weight * j.reward + w.rule_weight * self.rule_scores[sid].score)

    def _pid(self, sample_id: int) -> int:
        return self._pid_map()[sample_id]

    def _pid_map(self) -> dict[int, int]:
        if getattr(self, "_pm_step", None) != self.step:
            self._pm = {s.sample_id: s.prompt_id for s in self.specs + self.eval_specs}
            self._pm_step = self.step
        return self._pm

    # ---- phases ----------------------------------------------------------------------
    def rollout(self) -> PhaseReport:
        """Colocate: generate all samples (rule rewards are computed right here)."""
        import ray

        t = time.time()
        parts = self._by_engine(self._requests(), lambda r: r.key, len(self.rollout_engines))
        refs = [e.generate.remote(p) for e, p in zip(self.rollout_engines, parts) if p]
        for res in ray.get(refs):
            self.results.update({r.key: r for r in res})
        self._maybe_die()    # after the engines' work, which the redone step repeats
        self._check([s.sample_id for s in self.pending])
        return self._report(t)

    def judge(self) -> PhaseReport:
        """Colocate: judge all results on the GenRM engines."""
        import ray

        t = time.time()
        parts = self._by_engine([self.results[s.sample_id] for s in self.pending],
                                lambda r: r.key, len(self.genrm_engines))
        ctx = self._judge_inputs()
        for js in ray.get([g.judge.remote(p, {r.key: ctx[r.key] for r in p})
                           for g, p in zip(self.genrm_engines, parts) if p]):
            self.judged.update({j.key: j for j in js})
        self._combine([s.sample_id for s in self.pending])
        return self._report(t)

    def rollout_and_judge(self) -> PhaseReport:
        """Partial: rollout engine r streams each finished batch into bounded queue r % G;
        GenRM engine g judges from queue g as items arrive, what piled up while it
        stepped as one call (`StreamQueue.get_all`)."""
        import ray

        from .stream_queue import StreamQueue

        t = time.time()
        R, G = len(self.rollout_engines), len(self.genrm_engines)
        while len(self._queues) < G:
            self._queues.append(StreamQueue(maxsize=self.cfg.queue_capacity,
                                            actor_options={"num_cpus": 0}))
        parts = self._by_engine(self._requests(), lambda r: r.key, R)
        expected = [0] * G
        ctx: list[dict[int, JudgeInput]] = [{} for _ in range(G)]
        everything = self._judge_inputs()
        for r, p in enumerate(parts):
            expected[r % G] += len(p)
            ctx[r % G].update({q.key: everything[q.key] for q in p})
        judge_refs = [g.judge_stream.remote(q, n, c) for g, q, n, c in
                      zip(self.genrm_engines, self._queues, expected, ctx) if n]
        gen_refs = [e.generate.remote(p, sink=self._queues[r % G])
                    for r, (e, p) in enumerate(zip(self.rollout_engines, parts)) if p]
        get_all(gen_refs + judge_refs)    # fail fast if an engine dies mid-stream
        for res in ray.get(gen_refs):
            self.results.update({r.key: r for r in res})
        for js in ray.get(judge_refs):
            self.judged.update({j.key: j for j in js})
        self._maybe_die()
        self._check([s.sample_id for s in self.pending])
        self._combine([s.sample_id for s in self.pending])
        return self._report(t)

    def _report(self, t: float) -> PhaseReport:
        res = [self.results[s.sample_id] for s in self.pending]      # this round only
        js = [j for s in self.pending if (j := self.judged.get(s.sample_id)) and j.input_tokens]
        return PhaseReport(sum(len(r.token_ids) for r in res), t,
                           max((r.end_s for r in res), default=t),
                           max((j.end_s for j in js), default=0.0),
                           sum(j.input_tokens + j.output_tokens for j in js))

    def moments(self) -> Moments:
        """Reward, accuracy and token statistics over every rollout of the step (all rounds)."""
        return self._moments(lambda sid: sid >= 0, len(self.dropped))

    def eval_moments(self) -> Moments:
        """The same over this step's eval samples (n = 0 when the step does not evaluate)."""
        return self._moments(lambda sid: sid < 0, 0)

    def _moments(self, mine: Callable[[int], bool], dropped: int) -> Moments:
        js = [j for sid, j in self.judged.items() if mine(sid)]
        rs = [j.reward for j in js]
        engine = [j for j in js if j.input_tokens]
        fails = [j for j in engine if not j.parsed]
        scores = [v for sid, v in self.rule_scores.items() if mine(sid)]
        errors = [v for v in scores if v.error]
        ex: dict[str, list] = {}
        for v in scores:
            for name, x in v.extras:
                acc = ex.setdefault(name, [0.0, 0])
                acc[0] += x
                acc[1] += 1
        example = (f"reward error: {errors[0].error}" if errors else
                   f"unparsed verdict: {fails[0].text[:80]!r}" if fails else "")
        return Moments(len(rs), float(sum(rs)), float(sum(r * r for r in rs)), len(fails),
                       sum(len(r.token_ids) for sid, r in self.results.items() if mine(sid)),
                       sum(len(p.payload) for pid, p in self.prompts.items() if mine(pid)),
                       int(sum(v for sid, v in self.correct.items() if mine(sid))), dropped,
                       len(engine), len(errors), len(scores),
                       tuple((k, v[0], v[1]) for k, v in sorted(ex.items())), example)

    def kept_moments(self) -> Moments:
        """Reward moments of the samples that will be trained on (batch normalisation)."""
        rs = [self.judged[s.sample_id].reward for s in self.kept_specs()]
        return Moments(len(rs), float(sum(rs)), float(sum(r * r for r in rs)))

    def _sequence(self, sid: int) -> tuple[tuple[int, ...], int]:
        r = self.results[sid]
        ids = r.prompt_ids + r.token_ids
        if not r.token_ids:   # an immediate EOS still trains on that one token
            ids = r.prompt_ids + (self.tok.eos_token_id,)
        return ids, len(r.prompt_ids)

    def costs(self) -> list[tuple[int, int]]:
        """(sample_id, sequence tokens) for DP balancing, in sample order."""
        return [(s.sample_id, len(self._sequence(s.sample_id)[0])) for s in self.kept_specs()]

    def ref_logprobs(self) -> PhaseReport:
        import ray

        t = time.time()
        sids = [s.sample_id for s in self.kept_specs()]
        parts = self._by_engine(sids, lambda x: x, len(self.refs))
        calls = []
        for w, p in zip(self.refs, parts):
            if p:
                seqs = [self._sequence(s) for s in p]
                calls.append((p, w.logprobs.remote([x[0] for x in seqs], [x[1] for x in seqs])))
        for p, ref in calls:
            self.ref_lp.update({s: tuple(lp) for s, lp in zip(p, ray.get(ref))})
        return PhaseReport(sum(len(self._sequence(s)[0]) for s in sids), t, time.time())

    def advantages(self, batch_mean: float = 0.0, batch_std: float = 1.0) -> dict[int, float]:
        """GRPO advantages of the kept samples (`algo.step_advantages`): group mean, the
        group std if `adv_std`, after batch normalisation with the global moments if
        `reward_norm`."""
        import torch

        kept = self.kept_specs()
        if not kept:
            return {}
        r = torch.tensor([self.judged[s.sample_id].reward for s in kept], dtype=torch.float64)
        g = torch.tensor([s.prompt_id for s in kept])
        adv = step_advantages(r, g, use_std=self.cfg.algo.adv_std,
                              reward_norm=self.cfg.algo.reward_norm,
                              batch_mean=batch_mean, batch_std=batch_std)
        return {s.sample_id: float(a) for s, a in zip(kept, adv.tolist())}

    def stage(self, assign: dict[int, int], batch_mean: float = 0.0,
              batch_std: float = 1.0) -> int:
        """Send each kept sample to every rank (TP and PP) of its DP replica (controller ->
        trainer)."""
        import ray

        adv = self.advantages(batch_mean, batch_std)
        kept = self.kept_specs()
        per_rank: dict[int, list[TrainItem]] = {}
        for s in kept:
            ids, p = self._sequence(s.sample_id)
            per_rank.setdefault(assign[s.sample_id], []).append(
                TrainItem(s.sample_id, ids, p, adv[s.sample_id], self.ref_lp.get(s.sample_id),
                          self.results[s.sample_id].logprobs if self.cfg.behaviour_logprobs else None))
        calls = [w.stage.remote(items) for dp, items in per_rank.items()
                 for w in self.trainer_groups[dp]]
        ray.get(calls)
        return len(kept)

    def records(self, assign: dict[int, int]) -> list[SampleRecord]:
        t0, out = self.cfg.t0, []
        for s in self.specs:
            r, j = self.results[s.sample_id], self.judged.get(s.sample_id)
            out.append(SampleRecord(
                step=self.step, sample_id=s.sample_id, prompt_id=s.prompt_id,
                prompt_tokens=len(r.prompt_ids), response_tokens=len(r.token_ids),
                genrm_input_tokens=j.input_tokens if j else 0,
                genrm_output_tokens=j.output_tokens if j else 0,
                reward=j.reward if j else None, kept=s.sample_id not in self.dropped,
                dp_rank=-1 if s.sample_id in self.dropped else assign.get(s.sample_id, -1),
                round=self.round_of.get(s.sample_id, 0),
                rollout_end_s=max(0.0, r.end_s - t0),
                genrm_end_s=max(0.0, j.end_s - t0) if j and j.input_tokens else None))
        return out

    def shutdown(self) -> None:
        import ray
        for q in self._queues:
            ray.kill(q.actor)
        self._queues = []


def _prompt_text(p: Prompt) -> str:
    """The prompt as the judge's {prompt} shows it: the text, or a chat prompt's last user
    message."""
    if p.text:
        return p.text
    if isinstance(p.raw, str):
        return p.raw
    if isinstance(p.raw, list):
        users = [m.get("content", "") for m in p.raw if isinstance(m, dict) and m.get("role") == "user"]
        return str(users[-1]) if users else ""
    return ""
