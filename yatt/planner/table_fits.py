"""The least-squares fits behind ProfiledCostModel: each profile table's analytic shape
(features) and its non-negative coefficients, per model.

Why: the fitting (what a micro-batch, a sequence, a padded token or a KV GiB costs) is
pure arithmetic on the tables, independent of how the cost model answers the simulator
with it; `calibrate` and the tests use the same features.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
from scipy.optimize import nnls

from yatt.core.balance import REF_BATCH_TOKENS, pack_padded

from .profile_io import EngineTable, ModelTables

GIB = float(1 << 30)


def micro_batch_shapes(lengths: Sequence[int], budget: int) -> list[tuple[int, int]]:
    """(count, longest) per padded group of at most `budget` padded tokens, packed as
    `exec.train_batch.micro_batches` and the reference worker pack them (`pack_padded`)."""
    groups = pack_padded(lengths, budget)
    return [(len(g), max(lengths[i] for i in g)) for g in groups]


def train_features(lengths: Sequence[int], budget: int) -> np.ndarray:
    mbs = micro_batch_shapes(lengths, budget)
    return np.array([1.0, len(mbs), float(len(lengths)), float(sum(n * m for n, m in mbs)),
                     float(sum(n * m * m for n, m in mbs))])


def logprob_features(lengths: Sequence[int]) -> np.ndarray:
    """(sequences, padded tokens, sum of count x longest^2) over the reference worker's
    right-padded forwards: a long sequence makes its whole group as wide as itself."""
    groups = micro_batch_shapes(lengths, REF_BATCH_TOKENS)
    return np.array([float(len(lengths)), float(sum(n * m for n, m in groups)),
                     float(sum(n * m * m for n, m in groups))])


def by_count(points: Sequence[tuple[float, float]], n: int) -> float:
    """Seconds at count `n` from measured (count, seconds) points: linear between them, the
    slope of the last two beyond the largest (never below the largest), the smallest below."""
    pts = sorted(points)
    xs, ys = [float(c) for c, _ in pts], [float(t) for _, t in pts]
    if n <= xs[-1] or len(pts) == 1:
        return float(np.interp(float(n), xs, ys))
    slope = max(0.0, (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]))
    return ys[-1] + slope * (n - xs[-1])


def nnls_relative(rows: list[np.ndarray], y: list[float], scale: Optional[list[float]] = None) -> np.ndarray:
    """Non-negative least squares on relative error: each row divided by its `scale`
    (default: its own y; a residual fit passes the measured total instead)."""
    a = np.array(rows, dtype=float)
    b = np.array(y, dtype=float)
    w = 1.0 / np.maximum(np.array(scale if scale is not None else y, dtype=float), 1e-6)
    coef, _ = nnls(a * w[:, None], b * w)
    return coef


class ModelFits:
    """Fitted coefficients of one model's tables (None where a table is empty)."""

    def __init__(self, t: ModelTables) -> None:
        self.mbt = t.micro_batch_tokens
        self.train = (nnls_relative([train_features([int(s)] * int(b), self.mbt)
                                     for b, s, _ in t.train],
                                    [x for _, _, x in t.train]) if t.train else None)
        self.logprob = (nnls_relative([logprob_features([int(s)] * int(b))
                                       for b, s, _ in t.logprob],
                                      [x for _, _, x in t.logprob]) if t.logprob else None)
        e: Optional[EngineTable] = t.engine
        self.engine = e
        self.decode = self.prefill = self.join = None
        if e is not None and e.decode:
            self.decode = nnls_relative([np.array([1.0, b, b * c]) for b, c, _ in e.decode],
                                        [x for _, _, x in e.decode])
            if e.prefill:
                # what a prefill step costs beyond an ordinary step of that many sequences
                resid = [x - self._step(n, p) for n, p, x in e.prefill]
                self.prefill = nnls_relative([np.array([n * p, n * p * p])
                                              for n, p, _ in e.prefill], resid,
                                             [x for _, _, x in e.prefill])
        self.call = None
        if e is not None and e.call:   # absolute least squares: overheads can be ~0
            self.call, _ = nnls(np.array([[1.0, n] for n, _ in e.call]),
                                np.array([t for _, t in e.call]))
        if e is not None and e.join:
            # measured as the mixed step minus the plain step after it: already an extra
            self.join = nnls_relative([np.array([k, k * p, k * p * p]) for _, k, p, _ in e.join],
                                      [x for _, _, _, x in e.join])
        self.weight_sync_s, self.sync = t.weight_sync_s, t.sync
        self.train_tp, self.train_dp = t.train_tp, t.train_dp
        self.restart = None
        if e is not None and e.restart:
            # re-create / teardown: a + b * KV GiB each (allocating and freeing the cache)
            kv = [np.array([1.0, k / GIB]) for k, _, _ in e.restart]
            self.restart = (nnls_relative(kv, [a for _, a, _ in e.restart]),
                            nnls_relative(kv, [b for _, _, b in e.restart]))

    def restart_at(self, kv_bytes: Optional[int]) -> tuple[float, float]:
        """(re-create s, teardown s) of this engine with a KV cache of `kv_bytes`: the
        `restart` fit where the profile has one and the size is known, else the
        measured start_s / stop_s."""
        e = self.engine
        if self.restart is None or kv_bytes is None:
            return e.start_s, e.stop_s
        x = np.array([1.0, kv_bytes / GIB])
        return float(self.restart[0] @ x), float(self.restart[1] @ x)

    def _step(self, batch: float, ctx: float) -> float:
        a0, a1, a2 = self.decode
        return a0 + a1 * batch + a2 * batch * ctx
