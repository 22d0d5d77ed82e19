"""What a step controller sends back to the driver: mergeable reward moments and phase
reports, and the contiguous prompt shard each controller owns.

Why: the driver combines K controllers' results without their samples; these plain
records are the whole of that traffic, so they live apart from the controller that fills
them and the runners and schedules that merge them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Moments:
    """Mergeable reward statistics (the only per-step data controllers send back)."""

    n: int = 0
    total: float = 0.0
    total_sq: float = 0.0
    parse_fail: int = 0
    response_tokens: int = 0
    payload_bytes: int = 0
    correct: int = 0               # rule scores >= reward.correct_at among the n rollouts
    dropped: int = 0               # samples dropped by dynamic sampling
    judged: int = 0                # verdicts the GenRM wrote
    reward_errors: int = 0         # rule calls that failed and scored 0 (on_error: zero)
    checked: int = 0               # rollouts the rule scored (0: no rule, no accuracy)
    extras: tuple[tuple[str, float, int], ...] = ()   # (name, sum, count) of rule extras
    example: str = ""              # an unparseable verdict / a reward error, for the log

    def __add__(self, o: "Moments") -> "Moments":
        """Counts and sums add; extras add by name; the first example is kept."""
        plain = {f.name: getattr(self, f.name) + getattr(o, f.name) for f in fields(Moments)
                 if f.name not in ("extras", "example")}
        ex: dict[str, list] = {}
        for name, total, count in self.extras + o.extras:
            acc = ex.setdefault(name, [0.0, 0])
            acc[0] += total
            acc[1] += count
        return Moments(**plain, extras=tuple((k, v[0], v[1]) for k, v in sorted(ex.items())),
                       example=self.example or o.example)

    @property
    def accuracy(self) -> float:
        return self.correct / self.checked if self.checked else math.nan

    def extra_means(self) -> dict[str, float]:
        return {f"reward/{k}": t / c for k, t, c in self.extras if c}

    @property
    def mean(self) -> float:
        return self.total / self.n if self.n else 0.0

    @property
    def std(self) -> float:
        return math.sqrt(max(0.0, self.total_sq / self.n - self.mean ** 2)) if self.n else 0.0


@dataclass(frozen=True)
class PhaseReport:
    """What a phase did, in this controller: tokens and wall-clock end times."""

    tokens: int = 0
    start_s: float = 0.0
    end_s: float = 0.0
    genrm_end_s: float = 0.0
    genrm_tokens: int = 0


def shard(items: list, index: int, count: int) -> list:
    """Contiguous shard `index` of `count` (sizes differ by at most one)."""
    n = len(items)
    lo = index * n // count
    return items[lo:(index + 1) * n // count]
