"""Profile files: fitted or measured cost-model coefficients that `yatt plan --profile` uses.

Why: `yatt calibrate` (fit from traces) and `yatt profile` (micro-benchmarks) both end in
the same small YAML file, so every consumer reads one format:

    kind: yatt.profile/1
    hardware: "2 x cpu-local"
    source: "calibrate: runs/demo/trace.jsonl"
    efficiency: {train_mfu: 0.31, decode_bw_eff: 0.62, ...}   # any Efficiency field
    tables:                       # optional (`yatt profile`); absent in older files
      device: cpu
      rpc_s: 0.0012               # one Ray actor round trip
      load_avg: 1.9               # 1-min load average while measuring (shared boxes: noise)
      host_probe_s: 0.0146        # the host-speed probe then (`yatt.planner.hostscale`);
      host_probe_python_s: 0.005  # its interpreter and matmul parts (optional)
      host_probe_matmul_s: 0.009
      host_id: 3f2a9c0d41e7b2c8  # the machine and boot measured on (optional)
      transfer: [[bytes, seconds], ...]   # optional: a state dict through Ray's object store
      contention:                 # optional: several devices of one host busy at once
        - {busy: 2, reload: 1.3, offload: 1.1, decode: 1.4, logprob: 1.3, train: 1.4}
      models:
        tiny-actor:
          shape: "layers=2 hidden=128 ..."        # optional: ModelSpec.shape_key; a model of
                                                  # this shape under another name takes the
                                                  # timing tables (not stop_len)
          train: [[batch, seq, seconds], ...]     # one MegatronTrainer.train_step, TP=1
          logprob: [[batch, seq, seconds], ...]   # reference log-probs (ReferenceWorker)
          weight_sync_s: 0.03                     # hf_state_dict + engine update_weights
          sync: [[engines, seconds], ...]   # weight sync through Ray to n engines at once
          train_tp: [[2, batch, seq, seconds], ...]   # a TP=2 group's train_step (CPU: gloo)
          train_dp: [[2, batch, seq, seconds], ...]   # a DP=2 group's, batch per DP rank
          stop_len: [3, 5, 64, ...]               # where its responses end (EOS), <= stop_cap
          stop_cap: 64
          engine: {start_s: 2.5, stop_s: 1.6,     # re-create / teardown
                   restart: [[kv_bytes, start_s, stop_s], ...],   # optional (CPU): both
                                                    # at several KV cache sizes
                   decode: [[batch, mean_ctx, s_per_step], ...],
                   prefill: [[requests, tokens_each, s_for_the_step], ...],
                   join: [[running, new, tokens_each, extra_s], ...],   # optional
                   call: [[requests, extra_s], ...],   # optional: a call's overhead
                   contention: [[busy, ratio], ...]}   # optional: this engine's own

Files without `tables` keep meaning what they meant (an analytic model with these
efficiencies); `yatt.planner.profiled.cost_model_for` picks the model from the file.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from yatt.core.config import dump_yaml, read_yaml
from yatt.core.errors import InputError
from yatt.core.limits import MAX_SECONDS, MAX_TOKENS, MIN_RATE
from yatt.core.schema import from_dict, spec_field
from yatt.core.specs import ModelSpec

from .costmodel import Efficiency

PROFILE_KIND = "yatt.profile/1"
DEVICES = ("cpu", "cuda")
Point = tuple[float, float, float]


def _check_fit_table(rows: tuple[tuple[float, ...], ...], field: str) -> None:
    """A table of whole-phase times the profiled model fits a curve to: empty (the analytic
    model is used), or at least two distinct sizes with some time measured. One size cannot
    fix a slope, and all-zero times would make the phase free: both are refused, not guessed."""
    if not rows:
        return
    sizes = len({tuple(r[:-1]) for r in rows})
    if sizes < 2:
        raise InputError(f"{len(rows)} point(s) at {sizes} distinct size(s); allowed: at least 2 "
                         "distinct sizes (a fit needs them), or no table (the analytic model "
                         "prices it)", field=field)
    if not any(r[-1] > 0 for r in rows):
        raise InputError("every time is 0; allowed: measured times (a phase is never free), or "
                         "no table (the analytic model prices it)", field=field)


def _check_points(points: tuple[Point, ...], field: str) -> None:
    for i, p in enumerate(points):
        if not all(x >= 0 for x in p) or p[0] <= 0 or p[1] <= 0 or p[2] > MAX_SECONDS:
            raise InputError(f"got {list(p)}; allowed: [x > 0, y > 0, 0 <= seconds <= "
                             f"{MAX_SECONDS:g}]", field=f"{field}[{i}]")


@dataclass(frozen=True)
class EngineTable:
    """One model's inference engine on one device (TP=1)."""

    start_s: float = spec_field(ge=0, le=MAX_SECONDS, help="create the engine (imports warm): re-create cost")
    stop_s: float = spec_field(ge=0, le=MAX_SECONDS, help="tear the engine down")
    decode: tuple[Point, ...] = spec_field(default=(), help="(batch, mean context, s per step)")
    prefill: tuple[Point, ...] = spec_field(default=(), help="(requests, tokens each, s for the step)")
    join: tuple[tuple[float, float, float, float], ...] = spec_field(
        default=(), help="(running, new, tokens each, s): what a step that admits `new` requests "
                         "into `running` decoding ones costs beyond the plain step after it")
    call: tuple[tuple[float, float], ...] = spec_field(
        default=(), help="(requests, s): what one call handing the executor's engine actor "
                         "that many requests costs beyond the engine's steps (round trip, "
                         "building and adding requests, returning results)")
    contention: tuple[tuple[float, float], ...] = spec_field(
        default=(), help="(busy, ratio): this model's engine steps with `busy` devices of the "
                         "host generating at once over one (CPU; where measured, it replaces "
                         "the shared `contention` decode ratio for this model's engines)")
    restart: tuple[tuple[float, float, float], ...] = spec_field(
        default=(), help="(KV cache bytes, re-create s, teardown s) of engines whose KV cache "
                         "held that many bytes (CPU, where the executor sizes the cache to "
                         "the job); where present, a job's re-create and teardown are priced "
                         "at its own cache size instead of start_s / stop_s")

    def __post_init__(self) -> None:
        _check_points(self.decode, "decode")
        _check_points(self.prefill, "prefill")
        for i, p in enumerate(self.restart):
            if len(p) != 3 or p[0] < 0 or not all(0 <= x <= MAX_SECONDS for x in p[1:]):
                raise InputError(f"got {list(p)}; allowed: [kv bytes >= 0, 0 <= start seconds <= "
                                 f"{MAX_SECONDS:g}, 0 <= stop seconds <= {MAX_SECONDS:g}]",
                                 field=f"restart[{i}]")
        if self.restart and len({p[0] for p in self.restart}) < 2:
            raise InputError(f"{len(self.restart)} row(s) at one KV cache size; allowed: at least "
                             "2 distinct sizes (a slope needs them), or no table (start_s and "
                             "stop_s price every size)", field="restart")
        for i, p in enumerate(self.call):
            if len(p) != 2 or p[0] < 1 or p[1] < 0:
                raise InputError(f"got {list(p)}; allowed: [requests >= 1, seconds >= 0]",
                                 field=f"call[{i}]")
        for i, p in enumerate(self.contention):
            if len(p) != 2 or p[0] < 2 or p[1] <= 0:
                raise InputError(f"got {list(p)}; allowed: [busy >= 2, ratio > 0]",
                                 field=f"contention[{i}]")
        for i, p in enumerate(self.join):
            if len(p) != 4 or p[0] < 1 or p[1] < 1 or p[2] < 1 or p[3] < 0:
                raise InputError(f"got {list(p)}; allowed: [running >= 1, new >= 1, tokens >= 1, "
                                 f"seconds >= 0]", field=f"join[{i}]")
        # join and call hold extras over a plain step, where 0 is a measurement
        _check_fit_table(self.decode, "decode")
        _check_fit_table(self.prefill, "prefill")


@dataclass(frozen=True)
class ModelTables:
    """Measured times of one model (by ModelSpec name)."""

    train: tuple[Point, ...] = spec_field(default=(), help="(batch, seq, s per train_step)")
    logprob: tuple[Point, ...] = spec_field(default=(), help="(batch, seq, s) reference log-probs")
    engine: Optional[EngineTable] = None
    weight_sync_s: float = spec_field(0.0, ge=0, le=MAX_SECONDS, help="trainer state dict + engine weight update")
    micro_batch_tokens: int = spec_field(512, ge=1, le=MAX_TOKENS, help="trainer micro-batch budget when measured")
    stop_len: tuple[int, ...] = spec_field(
        default=(), help="response lengths the model produced with EOS allowed (the task's "
                         "prompts, temperature 1); a length equal to stop_cap was cut by the cap")
    stop_cap: int = spec_field(0, ge=0, le=MAX_TOKENS, help="the token budget those responses had")
    shape: str = spec_field(
        "", help="the measured model's shape (`ModelSpec.shape_key`): a model of another name "
                 "with this shape takes these timing tables, not the stop lengths (those follow "
                 "the weights); empty: matched by name only")
    train_tp: tuple[tuple[float, float, float, float], ...] = spec_field(
        default=(), help="(tp, batch, seq, s): a TP group's train_step on one host, its ranks "
                         "running at once (TP=1 is `train`)")
    sync: tuple[tuple[float, float], ...] = spec_field(
        default=(), help="(engines, s): one weight sync on the executor's path (a trainer "
                         "actor's state dict through Ray to that many engine actors updating "
                         "at once); replaces weight_sync_s + round trips + transfer")
    train_dp: tuple[tuple[float, float, float, float], ...] = spec_field(
        default=(), help="(dp, batch per rank, seq, s): a DP group's train_step on one host, "
                         "its ranks running at once with their gradient all-reduce "
                         "(DP=1 is `train`)")

    def __post_init__(self) -> None:
        _check_points(self.train, "train")
        _check_points(self.logprob, "logprob")
        for name, rows in (("train_tp", self.train_tp), ("train_dp", self.train_dp)):
            for i, p in enumerate(rows):
                if len(p) != 4 or p[0] < 2 or p[1] <= 0 or p[2] <= 0 or p[3] < 0:
                    raise InputError(f"got {list(p)}; allowed: [{name[-2:]} >= 2, batch > 0, "
                                     f"seq > 0, seconds >= 0]", field=f"{name}[{i}]")
        for i, p in enumerate(self.sync):
            if len(p) != 2 or p[0] < 1 or p[1] < 0:
                raise InputError(f"got {list(p)}; allowed: [engines >= 1, seconds >= 0]",
                                 field=f"sync[{i}]")
        for i, n in enumerate(self.stop_len):
            if not 0 <= n <= self.stop_cap or self.stop_cap == 0:
                raise InputError(f"got {n}; allowed: 0 <= length <= stop_cap ({self.stop_cap}), "
                                 f"stop_cap > 0", field=f"stop_len[{i}]")
        _check_fit_table(self.train, "train")
        _check_fit_table(self.logprob, "logprob")


@dataclass(frozen=True)
class Contention:
    """How much slower each op runs when `busy` devices of one host run it at once, as a
    ratio to the same harness with one device busy (`microbench.contention_bench`).

    Why: on a CPU box the "devices" are single threads of one host; they share cores, the
    memory bus and the Ray/OS daemons, so the executor's concurrent engines and DP ranks run
    slower than the one-process micro-benchmarks behind the other tables. On GPUs this is
    ~1 (each device has its own compute and memory), so GPU profiles carry no entries."""

    busy: int = spec_field(ge=2, help="devices busy at once")
    reload: float = spec_field(1.0, ge=MIN_RATE, help="engine re-create")
    offload: float = spec_field(1.0, ge=MIN_RATE, help="engine teardown")
    decode: float = spec_field(1.0, ge=MIN_RATE, help="engine steps (decode and prefill)")
    logprob: float = spec_field(1.0, ge=MIN_RATE, help="reference log-prob pass")
    train: float = spec_field(1.0, ge=MIN_RATE, help="train step")


@dataclass(frozen=True)
class ProfileTables:
    """Micro-benchmark tables from `yatt profile`."""

    device: str = "cpu"
    rpc_s: float = spec_field(0.0, ge=0, le=MAX_SECONDS, help="one Ray actor round trip")
    load_avg: float = spec_field(0.0, ge=0, help="machine 1-min load average while measuring")
    models: dict[str, ModelTables] = spec_field(default_factory=dict)
    contention: tuple[Contention, ...] = spec_field(
        default=(), help="slow-down with several devices busy at once (absent: none)")
    contention_load_avg: float = spec_field(0.0, ge=0, help="load average while measuring contention")
    transfer: tuple[tuple[float, float], ...] = spec_field(
        default=(), help="(bytes, s): a state dict through the Ray object store, beyond the round trip")
    handoff_s: float = spec_field(
        0.0, ge=0, le=MAX_SECONDS, help="what one streamed batch (a queue put) costs the rollout engine that "
                        "hands it to the GenRM (0 = not measured)")
    host_probe_s: float = spec_field(
        0.0, ge=0, le=MAX_SECONDS, help="median of `microbench.host_probe_once` while profiling (the host's "
                        "speed then; 0 = not measured)")
    host_probe_python_s: float = spec_field(
        0.0, ge=0, le=MAX_SECONDS, help="the probe's pure-Python part alone, median (the host's "
                        "interpreter speed; 0 = not measured: host_probe_s stands for both parts)")
    host_probe_matmul_s: float = spec_field(
        0.0, ge=0, le=MAX_SECONDS, help="the probe's matmul part alone, median (the host's compute "
                        "speed; 0 = not measured)")
    host_id: str = spec_field(
        "", help="the machine and boot the profile was measured on (a hash: "
                 "`yatt.profiling.hostcheck.machine_id`); the host check keeps a profile "
                 "made on this machine as measured while the probe stays inside its band "
                 "('' = not recorded)")

    def timing_for(self, model: ModelSpec) -> Optional[tuple[str, ModelTables]]:
        """(name, tables) whose timings price `model`: its own entry, else the entry of a model
        measured with the same shape (`entry_for`); None when neither exists."""
        return self.entry_for(model.name, model.shape_key)

    def entry_for(self, name: str, shape: str) -> Optional[tuple[str, ModelTables]]:
        """(name, tables) of the model called `name`, else of a model measured with `shape`
        (the one with the most tables: an actor's train and log-prob tables before a GenRM's
        engine-only entry); None when neither exists (an empty shape matches nothing)."""
        own = self.models.get(name)
        if own is not None:
            return name, own
        same = [(n, m) for n, m in self.models.items() if shape and m.shape == shape]
        if not same:
            return None
        return max(same, key=lambda nm: (bool(nm[1].train), bool(nm[1].logprob),
                                         nm[1].engine is not None))

    def engine_contention_of(self, model: ModelSpec) -> tuple[tuple[float, float], ...]:
        """`model`'s own engine contention points (a GenRM's), else those measured for a
        model of its shape under another name; () when neither was measured."""
        own = self.models.get(model.name)
        if own is not None:
            return own.engine.contention if own.engine is not None else ()
        return next((m.engine.contention for m in self.models.values()
                     if m.shape == model.shape_key and m.engine is not None
                     and m.engine.contention), ())

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise InputError(f"got {self.device!r}; allowed: {'|'.join(DEVICES)}", field="device")
        if not (self.models or self.transfer or self.contention or self.rpc_s or self.handoff_s):
            raise InputError("holds no measurement; allowed: the tables `yatt profile` writes, "
                             "or no `tables` key (the analytic model with these efficiencies)",
                             field="models")
        for i, (b, t) in enumerate(self.transfer):
            if b <= 0 or t < 0:
                raise InputError(f"got {[b, t]}; allowed: [bytes > 0, seconds >= 0]",
                                 field=f"transfer[{i}]")
        seen = set()
        for i, c in enumerate(self.contention):
            if c.busy in seen:
                raise InputError(f"busy={c.busy} given twice; allowed: one entry per count",
                                 field=f"contention[{i}].busy")
            seen.add(c.busy)


@dataclass(frozen=True)
class Profile:
    efficiency: Efficiency = spec_field(default_factory=Efficiency)
    kind: str = PROFILE_KIND
    hardware: str = ""
    source: str = ""
    fit_error: dict[str, float] = spec_field(default_factory=dict, help="relative error per phase")
    tables: Optional[ProfileTables] = None

    def __post_init__(self) -> None:
        if self.kind != PROFILE_KIND:
            raise InputError(f"got {self.kind!r}; allowed: {PROFILE_KIND}", field="kind")


def load_profile(path: str | Path) -> Profile:
    data = read_yaml(path)
    try:
        return from_dict(Profile, data)
    except InputError as e:
        raise e.within(file=str(path)) from None


def save_profile(profile: Profile, path: str | Path) -> None:
    dump_yaml(profile, path)
