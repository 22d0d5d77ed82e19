"""The samples of one step, drawn up front (numpy) or taken from a recorded trace.

Why: separating "what the step processes" from "how long it takes" keeps the simulator
deterministic and fast. Everything random about a step -- lengths, rewards, which GRPO
groups have all-equal rewards -- is decided here from a seeded rng, before any SimPy
event runs, so the timing code cannot perturb the random stream and a replay can swap in
recorded lengths.

Samples are stored group-contiguous, rounds in order. Dynamic sampling: round 0 has
`prompts_per_step` groups; round r+1 has one replacement group per dropped group of round
r, for at most `max_resample_rounds` extra rounds. Groups dropped in the last round are
not replaced (the trained batch is then smaller), as in DAPO.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from yatt.core import SampleRecord, Workload


@dataclass(frozen=True)
class StepPool:
    step: int
    prompt_tokens: np.ndarray
    response_tokens: np.ndarray
    genrm_in: np.ndarray
    genrm_out: np.ndarray
    reward: np.ndarray
    round: np.ndarray
    prompt_id: np.ndarray
    sample_id: np.ndarray
    group_start: np.ndarray  # per group: first sample index
    group_size: np.ndarray
    group_round: np.ndarray
    group_dropped: np.ndarray  # bool

    @property
    def n(self) -> int:
        return int(self.prompt_tokens.shape[0])

    @property
    def groups(self) -> int:
        return int(self.group_start.shape[0])

    def round_groups(self, r: int) -> np.ndarray:
        return np.flatnonzero(self.group_round == r)

    def members(self, g: int) -> range:
        s = int(self.group_start[g])
        return range(s, s + int(self.group_size[g]))

    @property
    def kept(self) -> np.ndarray:
        return ~np.repeat(self.group_dropped, self.group_size)


def draw_pool(w: Workload, step: int, rng: np.random.Generator) -> StepPool:
    """Sample one step's groups, lengths and rewards."""
    k = w.samples_per_prompt
    counts, flags = [], []
    count = w.prompts_per_step
    for r in range(w.max_resample_rounds + 1):
        counts.append(count)
        if w.dynamic_sampling and w.all_equal_prob > 0:
            f = rng.random(count) < w.all_equal_prob
        else:
            f = np.zeros(count, bool)
        flags.append(f)
        count = int(f.sum())
        if count == 0:
            break
    G = sum(counts)
    dropped = np.concatenate(flags)
    g_round = np.repeat(np.arange(len(counts)), counts)
    prompt = np.repeat(w.prompt_len.sample(rng, G), k)
    resp = w.response_len.sample(rng, G * k)
    if w.response_growth_per_step:
        grown = np.rint(resp * (1.0 + w.response_growth_per_step) ** step)
        resp = np.clip(grown, w.response_len.min, w.response_len.max).astype(np.int64)
    gout = w.genrm_output_len.sample(rng, G * k)
    reward = rng.integers(0, 2, size=(G, k)).astype(float)
    same = np.all(reward == reward[:, :1], axis=1)
    if k > 1:  # groups that must differ: flip one reward; groups that must agree: copy one
        fix = same & ~dropped
        reward[fix, 0] = 1.0 - reward[fix, 0]
    reward[dropped] = reward[dropped, :1]
    if w.stop_len is not None:  # drawn last: without it every other draw is unchanged
        resp = np.minimum(resp, w.stop_len.sample(rng, G * k))
    return StepPool(
        step=step, prompt_tokens=prompt, response_tokens=resp,
        genrm_in=prompt + resp + w.genrm_template_tokens, genrm_out=gout,
        reward=reward.reshape(-1), round=np.repeat(g_round, k),
        prompt_id=np.repeat(np.arange(G), k), sample_id=np.arange(G * k),
        group_start=np.arange(G) * k, group_size=np.full(G, k), group_round=g_round,
        group_dropped=dropped)


def recorded_pool(w: Workload, step: int, records: Sequence[SampleRecord]) -> StepPool:
    """Rebuild a step's pool from recorded samples (replay): lengths, rounds and kept flags
    are taken as recorded; a group is dropped when none of its samples was kept."""
    recs = sorted(records, key=lambda s: (s.round, s.prompt_id, s.sample_id))
    starts, sizes, rounds, dropped = [], [], [], []
    key = None
    for j, s in enumerate(recs):
        if (s.round, s.prompt_id) != key:
            key = (s.round, s.prompt_id)
            starts.append(j)
            sizes.append(0)
            rounds.append(s.round)
            dropped.append(True)
        sizes[-1] += 1
        dropped[-1] = dropped[-1] and not s.kept

    def arr(f) -> np.ndarray:
        return np.fromiter((f(s) for s in recs), np.int64, len(recs))

    prompt, resp = arr(lambda s: s.prompt_tokens), arr(lambda s: s.response_tokens)
    reward = np.array([s.reward if s.reward is not None else 0.0 for s in recs], float)
    return StepPool(
        step=step, prompt_tokens=prompt, response_tokens=resp,
        genrm_in=prompt + resp + w.genrm_template_tokens, genrm_out=arr(lambda s: s.genrm_output_tokens),
        reward=reward, round=arr(lambda s: s.round), prompt_id=arr(lambda s: s.prompt_id),
        sample_id=arr(lambda s: s.sample_id), group_start=np.array(starts, np.int64),
        group_size=np.array(sizes, np.int64), group_round=np.array(rounds, np.int64),
        group_dropped=np.array(dropped, bool))


def step_pool(w: Workload, step: int, seed: int,
              recorded: Optional[dict[int, list[SampleRecord]]] = None) -> StepPool:
    """The pool for `step`: recorded if given for that step, else drawn from (seed, step)."""
    if recorded is not None and recorded.get(step):
        return recorded_pool(w, step, recorded[step])
    return draw_pool(w, step, np.random.default_rng([seed, step]))


def sample_records(rows) -> list[SampleRecord]:
    """SampleRecords from tuples of field values (declaration order): the same objects as
    the constructor makes, for a type without __post_init__ checks."""
    new, put = object.__new__, object.__setattr__
    names = tuple(f.name for f in dataclasses.fields(SampleRecord))
    out = []
    for row in rows:
        r = new(SampleRecord)
        for name, value in zip(names, row, strict=True):   # slotted: no __dict__
            put(r, name, value)
        out.append(r)
    return out
