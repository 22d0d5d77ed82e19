"""The demo task: arithmetic questions, their prompts per step, and the rule-based reward.

Why: the executor needs a task that is deterministic in (seed, step, round) — so both
placement modes train on exactly the same prompts — and that has an exact checker:
the reward for `algo.reward: rule`, and the `accuracy` metric for every reward source
(the learning demo trains against a GenRM and measures with this checker). Response lengths follow the
workload's distribution (they become the per-sample `max_tokens`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import numpy as np

from yatt.core.specs import Workload


@dataclass(frozen=True)
class Prompt:
    prompt_id: int
    text: str
    answer: str
    payload: bytes = b""   # opaque per-prompt data (e.g. an image); carried, not used
    ids: tuple[int, ...] = ()            # the rendered, tokenized prompt (data.py)
    raw: Any = None                      # the prompt as the dataset holds it (reward fn)
    row: Optional[Mapping[str, Any]] = None   # the row's other columns (reward fn keywords)
    where: str = ""                      # "FILE row N", for error lines


@dataclass(frozen=True)
class SampleSpec:
    """One sample to generate: which prompt, its id, its seed and token budget."""

    sample_id: int
    prompt_id: int
    seed: int
    max_tokens: int


def id_block(step: int, round: int, workload: Workload) -> int:
    """Which block of ids (prompt and sample) a (step, dynamic-sampling round) uses.

    Without dynamic sampling it is the step (one block per step); with it each step owns
    `max_resample_rounds + 1` consecutive blocks, so replacement ids never collide."""
    rounds = workload.max_resample_rounds + 1 if workload.dynamic_sampling else 1
    return step * rounds + round


def step_prompts(seed: int, step: int, workload: Workload, round: int = 0) -> list[Prompt]:
    """The prompts of (step, round): 'Q: a+b= A:' with a, b in [10, 99), deterministic.

    Round r > 0 holds the replacement candidates of dynamic sampling: the replacement for
    a dropped group with prompt index i (in round r-1) is index i of round r."""
    rng = np.random.default_rng([seed, step, 7] + ([round] if round else []))
    block = id_block(step, round, workload)
    out = []
    for i in range(workload.prompts_per_step):
        a, b = (int(x) for x in rng.integers(10, 99, size=2))
        payload = (rng.bytes(workload.sample_payload_bytes)
                   if workload.sample_payload_bytes else b"")
        out.append(Prompt(block * workload.prompts_per_step + i, f"Q: {a}+{b}= A:",
                          str(a + b), payload))
    return out


def step_samples(seed: int, step: int, workload: Workload, round: int = 0) -> list[SampleSpec]:
    """All samples of (step, round), n per prompt, with per-sample seeds and length budgets."""
    rng = np.random.default_rng([seed, step, 11] + ([round] if round else []))
    n = workload.samples_per_prompt
    lens = workload.response_len.sample(rng, workload.samples_per_step)
    block = id_block(step, round, workload)
    base = block * workload.samples_per_step
    out = []
    for j in range(workload.samples_per_step):
        pid = block * workload.prompts_per_step + j // n
        out.append(SampleSpec(base + j, pid, seed * 1_000_003 + base + j,
                              max(1, int(lens[j]))))
    return out


def prompt_index(prompt_id: int, workload: Workload) -> int:
    """A prompt's index within its (step, round) block."""
    return prompt_id % workload.prompts_per_step


_FIRST_INT = re.compile(r"-?\d+")


def first_integer(response: str) -> str | None:
    """The integer the checker reads in a response: its first one (with a leading '-')."""
    m = _FIRST_INT.search(response)
    return m.group(0) if m is not None else None


def exact_match(answer: str, response: str) -> float:
    """1.0 when the first integer in the response equals the answer, else 0.0."""
    got = first_integer(response)
    return 1.0 if got is not None and got == answer.strip() else 0.0
