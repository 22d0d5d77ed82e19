"""The demo task: arithmetic questions, their prompts per step, and the rule-based reward.

Why: until the RL-algorithm issue lands, the executor needs a task that is deterministic
in (seed, step) — so both placement modes train on exactly the same prompts — and that
has an exact-match checker for `algo.reward: rule`. Response lengths follow the
workload's distribution (they become the per-sample `max_tokens`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from yatt.core.specs import Workload


@dataclass(frozen=True)
class Prompt:
    prompt_id: int
    text: str
    answer: str
    payload: bytes = b""   # opaque per-prompt data (e.g. an image); carried, not used


@dataclass(frozen=True)
class SampleSpec:
    """One sample to generate: which prompt, its id, its seed and token budget."""

    sample_id: int
    prompt_id: int
    seed: int
    max_tokens: int


def step_prompts(seed: int, step: int, workload: Workload) -> list[Prompt]:
    """The step's prompts: 'Q: a+b= A:' with a, b in [10, 99), deterministic."""
    rng = np.random.default_rng([seed, step, 7])
    out = []
    for i in range(workload.prompts_per_step):
        a, b = (int(x) for x in rng.integers(10, 99, size=2))
        payload = (rng.bytes(workload.sample_payload_bytes)
                   if workload.sample_payload_bytes else b"")
        out.append(Prompt(step * workload.prompts_per_step + i, f"Q: {a}+{b}= A:",
                          str(a + b), payload))
    return out


def step_samples(seed: int, step: int, workload: Workload) -> list[SampleSpec]:
    """All samples of the step, n per prompt, with per-sample seeds and length budgets."""
    rng = np.random.default_rng([seed, step, 11])
    n = workload.samples_per_prompt
    lens = workload.response_len.sample(rng, workload.samples_per_step)
    base = step * workload.samples_per_step
    out = []
    for j in range(workload.samples_per_step):
        pid = step * workload.prompts_per_step + j // n
        out.append(SampleSpec(base + j, pid, seed * 1_000_003 + base + j,
                              max(1, int(lens[j]))))
    return out


_FIRST_INT = re.compile(r"-?\d+")


def exact_match(answer: str, response: str) -> float:
    """1.0 when the first integer in the response equals the answer, else 0.0."""
    m = _FIRST_INT.search(response)
    return 1.0 if m is not None and m.group(0) == answer.strip() else 0.0
