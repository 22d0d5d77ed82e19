"""ProfiledCostModel: the CostModel contract answered from `yatt profile` tables.

Why: on hardware whose behaviour a roofline does not capture (a single-thread CPU
"device", where per-step Python overhead and engine re-creation dominate), measured
tables are the honest source. Each table is fitted, at load time, by non-negative least
squares on the *analytic shape* of its term (table_fits.py), so the model interpolates
between measured points and extrapolates along the roofline's form:

  train step      t = c0 + c_mb*micro_batches + c_seq*sequences + c1*padded_tokens
                      + c2*sum(n*longest^2)   (c_seq: per-sequence packing/masking in Python)
                  (micro-batches packed exactly as `exec.train_batch.micro_batches` packs them),
                  times the measured TP- and DP-group ratios where the profile timed such
                  groups (`train_tp`, `train_dp`: collectives and waits between ranks; a
                  measured DP ratio replaces the analytic gradient all-reduce)
  reference pass  t = c_seq*sequences + c1*padded_tokens + c2*sum(n*longest^2)
                  (right-padded forwards, grouped as `exec.workers.ReferenceWorker` groups them;
                  also the trainer's old-log-prob forward), times the analytic TP/PP ratio
                  for a pipeline (PP > 1)
  mini-batches    the simulator asks `train_time` once per mini-batch: the fit's per-step
                  constant holds the optimizer step, so each mini-batch pays it
  decode step     t = a0 + a1*batch + a2*batch*mean_ctx
  prefill         t = p1*tokens + p2*tokens^2 per request, on top of the step it rides in
  join            t = j0 + j1*tokens + j2*tokens^2 per request admitted into a batch that is
                  already decoding (a mixed step; `CostModel.prefill_join_time`), from the
                  profile's join table; the idle-engine prefill fit where there is none
  switches        what each role does under the plan's release policy on the profile's
                  device (`yatt.core.release`): on CPU, engines are torn down and
                  re-created (measured) and the trainer and reference stay resident
  weight sync     measured on the executor's path to 1..n engines at once (`sync`: a trainer
                  actor's state dict through Ray to engine actors; linear in the engine
                  count); without that table, the in-process state-dict gather + engine
                  update plus the round trips and the state dict's trip through Ray's
                  object store (`tables.transfer`, linear in bytes; fp32 weights)
  engine calls    what one call handing an engine actor k requests costs beyond its steps
                  (`engine.call`: c0 + c1*k; the round trip, building and adding requests,
                  a GenRM's template and tokenizers, returning results), owed by the engine
                  per batch call and per streamed hand-off (`CostModel.engine_call_time`)
  streaming       the measured cost of one queue put to the rollout engine that makes it
                  (`tables.handoff_s`; `CostModel.stream_handoff_time`): the engine does not
                  wait for the put, but its serialisation runs on the engine's core
  contention      several devices of one host busy at once (CPU): each phase runs the
                  measured ratio slower (`tables.contention`, `CostModel.contention`);
                  linear in the busy count between measured counts, flat beyond the largest;
                  a GenRM engine with its own measured ratio (`engine.contention`) uses it

Every phase of the executor also pays Ray round trips (driver -> controller -> workers);
`rpc_s` times the number the executor makes per phase is added to that phase.
Terms without a table (a model the profile did not measure, TP>1 communication, KV
capacity, checkpoints, controller bytes) come from the wrapped AnalyticCostModel.
"""
from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from yatt.core.costmodel import CostModel
from yatt.core.kvcache import job_kv_bytes
from yatt.core.plan import Experiment, Parallel
from yatt.core.release import ReleaseAction, resolve_release
from yatt.core.roles import Phase, ReleasePolicy, Role
from yatt.core.specs import DistKind, LengthDist, ModelSpec

from .costmodel import AnalyticCostModel, Efficiency
from .profile_io import Contention, Profile, ProfileTables
from .table_fits import ModelFits, by_count, logprob_features, train_features

# Ray round trips the executor makes per phase (schedules.py / controller.py):
# train: costs + stage + train_step + records; reference: one call per worker batch;
# weight sync: state dict out + update in.
TRAIN_RPCS = 4
REF_RPCS = 2
SYNC_RPCS = 2


# which measured ratio slows which phase (engine steps share one ratio: rollout and GenRM
# engines run the same vLLM step loop)
_CONTENTION: dict[Phase, Callable[[Contention], float]] = {
    Phase.RELOAD: lambda c: c.reload, Phase.OFFLOAD: lambda c: c.offload,
    Phase.ROLLOUT: lambda c: c.decode, Phase.GENRM: lambda c: c.decode,
    Phase.REF_LOGPROB: lambda c: c.logprob, Phase.OLD_LOGPROB: lambda c: c.logprob,
    Phase.TRAIN: lambda c: c.train}


class ProfiledCostModel(CostModel):
    """CostModel from profile tables; AnalyticCostModel for terms without a table."""

    def __init__(self, analytic: AnalyticCostModel, tables: ProfileTables,
                 engine_kv: Optional[Mapping[Role, int]] = None) -> None:
        self.analytic = analytic
        self.tables = tables
        self.engine_kv = dict(engine_kv or {})   # role -> the job's KV cache bytes (CPU)
        self.cluster = analytic.cluster
        self.cpu = tables.device == "cpu"
        self._fits = {name: ModelFits(t) for name, t in tables.models.items()}
        self._group_scales: dict[tuple[str, int, bool], Optional[float]] = {}

    @classmethod
    def for_experiment(cls, exp: Experiment, profile: Profile) -> "ProfiledCostModel":
        if profile.tables is None:
            raise ValueError("profile has no tables")
        rollout, genrm = job_kv_bytes(exp)
        return cls(AnalyticCostModel.for_experiment(exp, profile.efficiency), profile.tables,
                   {Role.ROLLOUT: rollout, Role.GENRM: genrm})

    def _fit(self, model: ModelSpec) -> Optional[ModelFits]:
        found = self.tables.timing_for(model)   # by name, else a measured model of its shape
        return None if found is None else self._fits[found[0]]

    def _tp_scale(self, model: ModelSpec, lens: Sequence[int], par: Parallel) -> float:
        """Time at this TP/PP over the time at TP=PP=1 (1.0 for TP=PP=1): measured when the
        profile timed a TP group of this size (`train_tp`), else the analytic ratio."""
        if par.tp * par.pp == 1:
            return 1.0
        measured = self._measured_scale(model, par.tp, dp=False) if par.pp == 1 else None
        if measured is not None:
            return measured
        one = Parallel(tp=1, pp=1, dp=par.dp)
        base = self.analytic.pass_time(model, lens, one, False)
        return self.analytic.pass_time(model, lens, par, False) / base if base > 0 else 1.0

    def _dp_scale(self, model: ModelSpec, par: Parallel) -> Optional[float]:
        """A DP rank's step time in a DP group over its time alone (the gradient all-reduce
        and the waits between ranks included), where the profile timed a DP group of this
        size (`train_dp`); None otherwise (then `grad_sync_time` adds the analytic
        all-reduce). 1.0 at DP=1."""
        return 1.0 if par.dp == 1 else self._measured_scale(model, par.dp, dp=True)

    def _measured_scale(self, model: ModelSpec, size: int, dp: bool) -> Optional[float]:
        """Median over the profile's points of a TP (or DP) group of `size` ranks of
        measured / fitted TP=DP=1 time (batch per DP rank), with the host contention of
        `size` busy ranks divided out (the simulator applies it to the train phase itself)."""
        key = (model.name, size, dp)
        if key in self._group_scales:
            return self._group_scales[key]
        f = self._fit(model)
        out = None
        if f is not None and f.train is not None:
            pts = [(b, s, t) for k, b, s, t in (f.train_dp if dp else f.train_tp) if int(k) == size]
            c = self.contention(Phase.TRAIN, size)
            ratios = [t / (c * base) for b, s, t in pts
                      if (base := float(train_features([int(s)] * int(b), f.mbt) @ f.train)) > 0]
            out = float(np.median(ratios)) if ratios else None
        self._group_scales[key] = out
        return out

    # ---- training ----------------------------------------------------------------------
    def train_time(self, model: ModelSpec, seq_lens: Sequence[int], par: Parallel) -> float:
        f = self._fit(model)
        if f is None or f.train is None or not len(seq_lens):
            return self.analytic.train_time(model, seq_lens, par)
        lens = [int(s) for s in seq_lens]
        t = float(train_features(lens, self.analytic.micro_batch_tokens) @ f.train)
        dp = self._dp_scale(model, par)
        t *= self._tp_scale(model, lens, par) * (1.0 if dp is None else dp)
        return t + TRAIN_RPCS * self.tables.rpc_s

    def grad_sync_time(self, model: ModelSpec, par: Parallel) -> float:
        f = self._fit(model)
        if f is None or f.train is None:
            return self.analytic.grad_sync_time(model, par)
        # the optimizer step is inside the measured train step; add the DP all-reduce only,
        # unless a measured DP group's step (`_dp_scale`) already holds it
        if self._dp_scale(model, par) is not None:
            return 0.0
        grad_bytes = model.params / (par.tp * par.pp) * 4  # fp32 grads (grad_reduce_in_fp32)
        return self.analytic.allreduce_time(grad_bytes, par.dp)

    def logprob_time(self, model: ModelSpec, seq_lens: Sequence[int], par: Parallel) -> float:
        f = self._fit(model)
        if f is None or f.logprob is None or not len(seq_lens):
            return self.analytic.logprob_time(model, seq_lens, par)
        lens = [int(s) for s in seq_lens]
        t = float(logprob_features(lens) @ f.logprob)
        if par.pp > 1:  # the measured forward is one device's; a pipeline's from the roofline
            t *= self._tp_scale(model, lens, par)
        return t + REF_RPCS * self.tables.rpc_s

    # ---- inference ---------------------------------------------------------------------
    def _engine_fit(self, model: ModelSpec, tp: int) -> Optional[ModelFits]:
        f = self._fit(model)
        return f if f is not None and f.decode is not None and tp == 1 else None

    def prefill_time(self, model: ModelSpec, tp: int, tokens: int) -> float:
        f = self._engine_fit(model, tp)
        if f is None or f.prefill is None:
            return self.analytic.prefill_time(model, tp, tokens)
        if tokens <= 0:
            return 0.0
        p1, p2 = f.prefill
        return p1 * tokens + p2 * tokens * tokens

    def prefill_join_time(self, model: ModelSpec, tp: int, tokens: int) -> float:
        """A request's prefill when it joins a batch that is already decoding."""
        f = self._engine_fit(model, tp)
        if f is None or f.join is None:
            return self.prefill_time(model, tp, tokens)
        if tokens <= 0:
            return 0.0
        j0, j1, j2 = f.join
        return j0 + j1 * tokens + j2 * tokens * tokens

    def decode_step_time(self, model: ModelSpec, tp: int, batch: int, mean_ctx: float) -> float:
        f = self._engine_fit(model, tp)
        if f is None:
            return self.analytic.decode_step_time(model, tp, batch, mean_ctx)
        return f._step(batch, mean_ctx) if batch > 0 else 0.0

    def decode_time(self, model: ModelSpec, tp: int, batch: int, ctx_sum: float, steps: int) -> float:
        f = self._engine_fit(model, tp)
        if f is None:
            return self.analytic.decode_time(model, tp, batch, ctx_sum, steps)
        if batch <= 0 or steps <= 0:
            return 0.0
        a0, a1, a2 = f.decode
        # step i has total context ctx_sum + i*batch (linear: the sum is closed form)
        return steps * (a0 + a1 * batch) + a2 * (steps * ctx_sum + batch * steps * (steps - 1) / 2.0)

    def kv_capacity_tokens(self, model: ModelSpec, tp: int, mem_util: float) -> int:
        return self.analytic.kv_capacity_tokens(model, tp, mem_util)

    # ---- phase switches ----------------------------------------------------------------
    def release_action(self, role: Role, release: ReleasePolicy) -> ReleaseAction:
        """What `role` does under `release` on the profile's device."""
        return resolve_release(release, role, cpu=self.cpu)

    def _measured_teardown(self, model: ModelSpec, action: ReleaseAction) -> Optional[ModelFits]:
        """The fits of the engine table timing this teardown / re-create (CPU profiles),
        else None."""
        f = self._fit(model)
        if action is ReleaseAction.TEARDOWN and self.cpu and f is not None and f.engine is not None:
            return f
        return None

    def offload_time(self, model: ModelSpec, role: Role, par: Parallel, release: ReleasePolicy) -> float:
        action = self.release_action(role, release)
        if action is ReleaseAction.KEEP:
            return 0.0
        f = self._measured_teardown(model, action)
        if f is not None:
            return f.restart_at(self.engine_kv.get(role))[1] + self.tables.rpc_s
        # not measured: the roofline's price of the policy
        return self.analytic.offload_time(model, role, par, release)

    def reload_time(self, model: ModelSpec, role: Role, par: Parallel, release: ReleasePolicy) -> float:
        action = self.release_action(role, release)
        if action is ReleaseAction.KEEP:
            return 0.0
        f = self._measured_teardown(model, action)
        if f is not None:
            return f.restart_at(self.engine_kv.get(role))[0] + self.tables.rpc_s
        return self.analytic.reload_time(model, role, par, release)

    def engine_call_time(self, model: ModelSpec, requests: int) -> float:
        """What one call handing this model's engine actor `requests` requests costs beyond
        its steps: c0 + c1*requests fitted to the profile's `engine.call` points; 0
        without them."""
        f = self._fit(model)
        if f is None or f.call is None or requests <= 0:
            return 0.0
        return float(f.call[0] + f.call[1] * requests)

    def stream_handoff_time(self, items: int) -> float:
        """What one streamed batch costs the rollout engine (measured)."""
        return self.tables.handoff_s

    def weight_sync_time(self, model: ModelSpec, trainer: Parallel, rollout_tp: int,
                         rollout_engines: int, cross_node: bool) -> float:
        f = self._fit(model)
        if f is not None and f.sync and rollout_tp == 1 and not cross_node:
            return by_count(f.sync, rollout_engines)
        if f is None or f.weight_sync_s <= 0:
            return self.analytic.weight_sync_time(model, trainer, rollout_tp, rollout_engines,
                                                  cross_node)
        return (f.weight_sync_s + SYNC_RPCS * self.tables.rpc_s
                + self.transfer_time(model.params * model.dtype_bytes))

    def transfer_time(self, nbytes: float) -> float:
        """Seconds to pass `nbytes` of tensors through the object store to an actor, beyond
        the round trip: linear through the measured points (0 without any)."""
        pts = sorted(self.tables.transfer)
        if not pts or nbytes <= 0:
            return 0.0
        if len(pts) == 1:
            return pts[0][1] * nbytes / pts[0][0]
        return float(max(0.0, np.polyval(np.polyfit([b for b, _ in pts], [t for _, t in pts], 1),
                                          nbytes)))

    def contention(self, phase: Phase, busy: int) -> float:
        """Slow-down of `phase` with `busy` devices of the host busy at once: the measured
        ratio, linear in `busy` between measured counts (1.0 at one busy device), the
        largest count's beyond it; 1.0 for phases and profiles without a measurement."""
        get = _CONTENTION.get(phase)
        pts = sorted((c.busy, get(c)) for c in self.tables.contention) if get else []
        if busy <= 1 or not pts:
            return 1.0
        xs = [1.0] + [float(b) for b, _ in pts]
        ys = [1.0] + [r for _, r in pts]
        return float(np.interp(float(busy), xs, ys))

    def engine_contention(self, model: ModelSpec, busy: int) -> Optional[float]:
        """This model's own engine slow-down with `busy` devices generating at once: its
        measured ratio, linear in `busy` between counts (1.0 at one), the largest count's
        beyond; None without one."""
        pts = sorted(self.tables.engine_contention_of(model))
        if not pts:
            return None
        if busy <= 1:
            return 1.0
        return float(np.interp(float(busy), [1.0] + [b for b, _ in pts],
                               [1.0] + [r for _, r in pts]))

    def checkpoint_time(self, model: ModelSpec, par: Parallel) -> float:
        return self.analytic.checkpoint_time(model, par)

    def controller_time(self, samples: int, bytes_per_sample: float, controllers: int) -> float:
        return self.analytic.controller_time(samples, bytes_per_sample, controllers)


def measured_stop_len(exp: Experiment, profile: Optional[Profile]) -> Optional[LengthDist]:
    """The profile's measured stop lengths of this experiment's actor, as a distribution
    (None without a measurement)."""
    tables = profile.tables if profile is not None else None
    m = tables.models.get(exp.actor.name) if tables is not None else None
    if m is None or not m.stop_len:
        return None
    return LengthDist(DistKind.EMPIRICAL, min=0, max=m.stop_cap, values=tuple(m.stop_len))


def experiment_for(exp: Experiment, profile: Optional[Profile] = None) -> Experiment:
    """The experiment as the simulator should see it with this profile: a workload without
    `stop_len` gets the actor's measured stop lengths, so responses end where the model ends
    them (EOS) rather than always at their budget. An explicit `stop_len` wins."""
    stop = measured_stop_len(exp, profile) if exp.workload.stop_len is None else None
    if stop is None:
        return exp
    return dataclasses.replace(exp, workload=dataclasses.replace(exp.workload, stop_len=stop))


def cost_model_for(exp: Experiment, profile: Optional[Profile] = None):
    """The cost model a profile calls for: profiled when it has tables, else analytic with
    its efficiencies (or the defaults without a profile)."""
    if profile is not None and profile.tables is not None:
        return ProfiledCostModel.for_experiment(exp, profile)
    return AnalyticCostModel.for_experiment(exp, profile.efficiency if profile else Efficiency())


@lru_cache(maxsize=8)
def _cached_profile(path: str) -> Profile:
    from .profile_io import load_profile

    return load_profile(path)


def load_cached(path: str) -> Profile:
    """load_profile, memoised per path (searches build many cost models from one file)."""
    return _cached_profile(str(path))


def shipped_profile(gpu_name: str):
    """(Profile, path) of the profile shipped for a device kind (`yatt.core.bundled`), or None."""
    from yatt.core.bundled import shipped_profile_path

    p = shipped_profile_path(gpu_name)
    return None if p is None else (load_cached(str(p)), str(p))


def given_or_shipped(profile: Optional[Profile], path, gpu_name: str):
    """(profile, path): the given profile, else the one shipped for the device kind, else
    (None, path): `yatt plan`, `yatt run` and `yatt.plan()` predict with the same model."""
    if profile is None and (found := shipped_profile(gpu_name)) is not None:
        return found
    return profile, path
