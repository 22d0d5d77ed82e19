"""Ceilings on every size yatt reads, and the budget of simulation work, in one place.

Why: a value can be legal in type and sign yet make yatt hang or exhaust memory (a million
nodes, 10^8 prompts a step, a gzip bomb, a config of 200 MB). Every size a user controls
has a ceiling here, far above real use, used by the schema (`spec_field(le=...)`), the
readers and the planner; docs/config.md lists them (generated from `LIMITS` and `KNOBS`).
The few a real user might need to raise are environment variables (`Knob`); the rest are
constants, since nothing real comes near them.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import os
from dataclasses import dataclass
from typing import Iterator, Optional

from .errors import InputError

# ---- constant ceilings (schema bounds) ------------------------------------------------------
MAX_GPUS = 100_000            # devices in one cluster: the largest training clusters built
MAX_GPUS_PER_NODE = 1_024     # devices per node (8 on DGX-class nodes, 72 in an NVL72 rack)
MAX_SAMPLES_PER_STEP = 10_000_000   # prompts x samples per prompt (real steps: 10^3-10^5)
MAX_SAMPLES_PER_PROMPT = 65_536     # a GRPO group (real: 4-64)
MAX_TOKENS = 1 << 24          # tokens of one prompt or response (16.8M; longest contexts ~10^6)
MAX_RESAMPLE_ROUNDS = 100     # dynamic-sampling rounds per step (real: 1-10)
MAX_SEEDS = 100               # seeded simulations per candidate (real: 1-5)
MAX_STALENESS = 8             # async steps of weight lag (real: 1-2); each adds simulated steps
MAX_LIST = 64                 # entries of a choice list: tp/pp_choices, --gpus, at_steps, modes
MAX_TOP = 100                 # `yatt plan --top` rows (each is re-simulated over every seed)
MAX_STEPS = 10_000_000        # RL steps of a run or a trace
MAX_CONTROLLERS = 1_024       # step controllers
MAX_EPOCHS = 1_000            # PPO epochs, mini-batches per epoch (real: 1-8)
MAX_MODEL_DIM = 1 << 24       # any one dimension of a model shape (layers, hidden, vocab, ...)
MAX_PAYLOAD_BYTES = 1 << 40   # extra bytes per prompt (1 TiB)
MAX_SECONDS = 1e9             # any time or duration, in seconds (31 years)
MAX_STRING = 65_536           # characters of any one string (names, paths, labels)
MAX_DATASET_ROWS = 10_000_000  # rows of one dataset (`data.train`, `data.eval`; real: 10^3-10^6)
FLOAT_LIMIT = 1e15            # |x| of any other number: products of a few stay far below 1e308
MIN_RATE = 1e-6               # fractions and rates that divide work (MFU, GB/s, TFLOP/s)

LIMITS: tuple[tuple[str, str, str], ...] = (
    ("GPUs per cluster (`cluster.nodes` x `cluster.gpus_per_node`, `--gpus`)", f"{MAX_GPUS:,}",
     "the largest training clusters built"),
    ("`cluster.gpus_per_node`", f"{MAX_GPUS_PER_NODE:,}", "8 on DGX-class nodes, 72 in a rack"),
    ("samples per step (`workload.prompts_per_step` x `samples_per_prompt`)",
     f"{MAX_SAMPLES_PER_STEP:,}", "real steps: 10^3-10^5"),
    ("`workload.samples_per_prompt`, `data.eval_samples`", f"{MAX_SAMPLES_PER_PROMPT:,}",
     "real groups: 4-64"),
    ("tokens of one prompt, response or micro-batch (length `max`, `value`, `values[]`, "
     "`algo.micro_batch_tokens`, `data.max_prompt_len`, `genrm_judge.max_tokens`)",
     f"{MAX_TOKENS:,}", "longest contexts: ~10^6"),
    ("`workload.max_resample_rounds`", f"{MAX_RESAMPLE_ROUNDS}", "real: 1-10"),
    ("`search.seeds`, plan `predicted.seeds`", f"{MAX_SEEDS}", "real: 1-5"),
    ("`plan.max_staleness`, `search.staleness_choices`", f"{MAX_STALENESS}",
     "real: 1-2; each adds a simulated step per async candidate"),
    ("entries of a list that multiplies work (`search.modes`, `search.tp_choices`, "
     "`search.engine_tp_choices`, `search.pp_choices`, `--gpus`); `checkpoint.keep_last`",
     f"{MAX_LIST}", ""),
    ("`yatt plan --top`", f"{MAX_TOP}", "each row is re-simulated over every seed"),
    ("RL steps (`--steps`, trace `steps`, step ids, `data.epochs`, `data.eval_every`)",
     f"{MAX_STEPS:,}", ""),
    ("`search.controllers`, `plan.controllers`", f"{MAX_CONTROLLERS:,}", ""),
    ("`algo.ppo_epochs`, `algo.mini_batches`", f"{MAX_EPOCHS:,}", "real: 1-8"),
    ("any one model dimension (`layers`, `hidden`, `heads`, `vocab`, ...)", f"{MAX_MODEL_DIM:,}",
     "largest published: vocab ~256k, hidden ~16k"),
    ("`workload.sample_payload_bytes`", f"{MAX_PAYLOAD_BYTES:,}", "1 TiB"),
    ("any time or duration (trace `start_s`/`end_s`, profile and efficiency `*_s`, "
     "`reward.timeout_s`, plan `predicted.step_s` and phase `seconds`)",
     f"{MAX_SECONDS:g} s", "31 years"),
    ("characters of any one string (names, paths, labels, `genrm_judge.template`)",
     f"{MAX_STRING:,}", "names are shown in tables, cut to 200 characters"),
    ("rows of one dataset (`data.train`, `data.eval`)", f"{MAX_DATASET_ROWS:,}",
     "real prompt sets: 10^3-10^6"),
    ("magnitude of any other number", f"{FLOAT_LIMIT:g}",
     "keeps every product of a few numbers finite"),
    ("fractions and rates that divide work (efficiencies, GPU TFLOP/s and GB/s)",
     f">= {MIN_RATE:g}", "a smaller one makes times overflow"),
)


# ---- limits a user may raise ----------------------------------------------------------------
@dataclass(frozen=True)
class Knob:
    """A limit read from an environment variable (a positive integer; `1e9` is accepted)."""

    env: str
    default: int
    help: str

    def value(self) -> int:
        text = os.environ.get(self.env, "").strip()
        if not text:
            return self.default
        try:
            v = float(text)
        except ValueError:
            v = math.nan
        if not (1 <= v <= 2**62) or v != int(v):
            raise InputError(f"got {text[:40]!r}; allowed: a positive integer", field=self.env)
        return int(v)

    def raise_hint(self) -> str:
        return f"raise {self.env} (now {self.value():,})"


CONFIG_MAX_BYTES = Knob("YATT_CONFIG_MAX_BYTES", 16 << 20,
                        "bytes of one YAML file (config, plan, profile, cluster); a plan for "
                        "100k GPUs is ~4 MB")
TRACE_MAX_LINE_BYTES = Knob("YATT_TRACE_MAX_LINE_BYTES", 16 << 20,
                            "bytes of one trace line, decompressed (the meta line of a 100k-GPU "
                            "plan is ~4 MB)")
TRACE_MAX_BYTES = Knob("YATT_TRACE_MAX_BYTES", 512 << 20,
                       "bytes of one trace, decompressed (~2M records; what it holds must fit "
                       "in memory)")
DEVICE_REQUESTS = 12   # a simulated device costs about as much as 12 requests a step
SIM_WORK = Knob("YATT_MAX_SIM_WORK", 50_000_000,
                "simulated requests one command may run, all simulations together (a request "
                f"is one sample in one simulated step; a device counts as {DEVICE_REQUESTS} a "
                "step): ~15 minutes on the project's 2-core VM, ~50x the bundled default plan")
DATA_MAX_BYTES = Knob("YATT_DATA_MAX_BYTES", 1 << 30,
                      "bytes of one dataset (`data.train`, `data.eval`: the file, or every file "
                      "of a save_to_disk directory; a parquet file's decoded table): its rows "
                      "are tokenized in memory")
KNOBS: tuple[Knob, ...] = (CONFIG_MAX_BYTES, TRACE_MAX_LINE_BYTES, TRACE_MAX_BYTES, DATA_MAX_BYTES,
                           SIM_WORK)


# ---- the simulation work meter --------------------------------------------------------------
def sim_requests(requests_per_step: float, gpus: int, steps: int) -> float:
    """Work units of one simulation: requests plus devices, over its steps."""
    return steps * (requests_per_step + DEVICE_REQUESTS * gpus)


@dataclass
class _Meter:
    budget: int
    used: float = 0.0
    field: str = "workload"
    file: str = ""


_METER: contextvars.ContextVar[Optional[_Meter]] = contextvars.ContextVar("yatt_sim_meter",
                                                                          default=None)


@contextlib.contextmanager
def work_budget(field: str = "workload", file: str = "") -> Iterator[None]:
    """Meter every simulation run inside this block against `SIM_WORK`."""
    token = _METER.set(_Meter(SIM_WORK.value(), field=field, file=file))
    try:
        yield
    finally:
        _METER.reset(token)


@contextlib.contextmanager
def unmetered() -> Iterator[None]:
    """Run simulations the caller has already charged (e.g. in a worker process)."""
    token = _METER.set(None)
    try:
        yield
    finally:
        _METER.reset(token)


def charge(units: float) -> None:
    """Count `units` of simulation work; past the budget, an InputError that says how to
    raise it. A no-op outside `work_budget`."""
    m = _METER.get()
    if m is None:
        return
    m.used += units
    if m.used > m.budget:
        raise InputError(f"the simulations need more than the work budget of {m.budget:,} "
                         f"simulated requests; allowed: a smaller workload or search, or "
                         f"{SIM_WORK.raise_hint()}", field=m.field, file=m.file)


def check_work(estimate: float, field: str, what: str, file: str = "",
               allowed: str = "a smaller value") -> None:
    """Refuse, before starting, work estimated past the budget; `field` is what drives it
    and `allowed` says what to change."""
    budget = SIM_WORK.value()
    if estimate > budget:
        raise InputError(f"{what} come to ~{estimate:.2g} simulated requests, past the budget "
                         f"of {budget:,}; allowed: {allowed}, or {SIM_WORK.raise_hint()}",
                         field=field, file=file)
