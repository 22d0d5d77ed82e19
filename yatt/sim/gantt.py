"""PNG Gantt chart of a Trace with a utilization strip (matplotlib, Agg, imported lazily).

Why: a picture of who is busy when is how a person checks a plan. Devices are grouped
into blocks by the roles placed on them: devices with the same set of roles share a
block, labelled by every role on it. The chart is drawn as one raster image (lanes x time
pixels), whatever the number of spans: its cost grows with the spans, not with matplotlib
artists. Up to `MAX_LANES` devices each lane is one device; beyond that, a lane is a run of
consecutive devices of one block, and each pixel is coloured by the phase with the most
device-time in it, faded towards white by the share of the lane's devices idle there. A
strip below shows the fraction of devices busy over time.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from yatt.core import Phase, Role, Trace
from yatt.core.safeio import atomic_write

COLORS = {Phase.ROLLOUT: "#4C72B0", Phase.GENRM: "#DD8452", Phase.TRAIN: "#55A868",
          Phase.REF_LOGPROB: "#8172B3", Phase.OLD_LOGPROB: "#64B5CD", Phase.OFFLOAD: "#C44E52", Phase.RELOAD: "#937860",
          Phase.WEIGHT_SYNC: "#DA8BC3", Phase.CHECKPOINT: "#8C8C8C", Phase.CONTROLLER: "#CCB974"}
MAX_LANES = 256   # more devices than this share lanes
TIME_PIXELS = 1000


def _device_groups(trace: Trace) -> list[tuple[str, list[int]]]:
    """Devices grouped by the set of roles placed on them, labelled by all those roles
    (a colocated device reads "rollout+genrm+trainer+reference"); "idle" where none."""
    plan = trace.meta.plan
    on: dict[int, set[Role]] = {}
    for p in plan.placements:
        for d in p.devices:
            on.setdefault(d, set()).add(p.role)
    groups: dict[tuple[str, ...], list[int]] = {}
    for d in range(plan.cluster.num_gpus):
        key = tuple(r.value for r in Role if r in on.get(d, ())) or ("idle",)
        groups.setdefault(key, []).append(d)
    return [("+".join(k), v) for k, v in groups.items()]


@dataclass(frozen=True)
class Lanes:
    """Rows of the chart: `lane_of[d]` is device d's lane, `size[l]` its device count;
    `blocks` are (label, first lane, lanes, devices) per role-set group."""

    lane_of: np.ndarray
    size: np.ndarray
    blocks: list[tuple[str, int, int, list[int]]]
    per_lane: int  # devices per lane (the last lane of a block may hold fewer)


def lanes(trace: Trace, max_lanes: int = MAX_LANES) -> Lanes:
    """One lane per device up to `max_lanes` devices; beyond, runs of k consecutive devices
    of one block share a lane, k the smallest power of two that fits `max_lanes`."""
    groups = _device_groups(trace)
    n = trace.meta.plan.cluster.num_gpus
    k = 1
    while sum(-(-len(devs) // k) for _, devs in groups) > max_lanes:
        k *= 2
    lane_of = np.zeros(max(1, n), np.int64)
    sizes: list[int] = []
    blocks = []
    for name, devs in groups:
        first = len(sizes)
        for j in range(0, len(devs), k):
            chunk = devs[j:j + k]
            lane_of[chunk] = len(sizes)
            sizes.append(len(chunk))
        blocks.append((name, first, len(sizes) - first, devs))
    return Lanes(lane_of, np.array(sizes, float), blocks, k)


def coverage(trace: Trace, ln: Lanes, t0: float, t1: float,
             width: int) -> tuple[list[Phase], np.ndarray]:
    """Device-seconds of each phase per (lane, time pixel), as a fraction of the pixel's
    duration: array [phase, lane, pixel]; the phases in that order. Vectorised over every
    (span, lane) pair: no Python work per device."""
    spans = trace.spans
    phases = [p for p in COLORS if any(s.phase is p for s in spans)]
    cov = np.zeros((max(1, len(phases)), len(ln.size), width + 1))
    if not spans or t1 <= t0:
        return phases, cov[:, :, :width]
    pidx = {p: i for i, p in enumerate(phases)}
    ndev = np.fromiter((len(s.devices) for s in spans), np.int64, len(spans))
    devs = np.fromiter((d for s in spans for d in s.devices), np.int64, int(ndev.sum()))
    sid = np.repeat(np.arange(len(spans)), ndev)
    L = len(ln.size)
    key, count = np.unique(sid * L + ln.lane_of[devs], return_counts=True)
    si, lane = key // L, key % L
    a = np.fromiter((s.start_s for s in spans), float, len(spans))[si]
    b = np.fromiter((s.end_s for s in spans), float, len(spans))[si]
    ph = np.fromiter((pidx[s.phase] for s in spans), np.int64, len(spans))[si]
    dx = (t1 - t0) / width
    xa = np.clip((a - t0) / dx, 0, width)
    xb = np.clip((b - t0) / dx, 0, width)
    ca = np.minimum(np.floor(xa).astype(np.int64), width)
    cb = np.minimum(np.floor(xb).astype(np.int64), width)
    w = count.astype(float)
    same = ca == cb
    # a span inside one pixel: its share of that pixel
    np.add.at(cov, (ph[same], lane[same], ca[same]), w[same] * (xb[same] - xa[same]))
    m = ~same
    ph, lane, ca, cb, xa, xb, w = ph[m], lane[m], ca[m], cb[m], xa[m], xb[m], w[m]
    np.add.at(cov, (ph, lane, ca), w * (ca + 1 - xa))        # partial first pixel
    np.add.at(cov, (ph, lane, cb), w * (xb - cb))            # partial last pixel
    diff = np.zeros_like(cov)                                 # whole pixels in between
    np.add.at(diff, (ph, lane, ca + 1), w)
    np.add.at(diff, (ph, lane, cb), -w)
    cov += np.cumsum(diff, axis=2)
    return phases, cov[:, :, :width]


def _rgb(color: str) -> np.ndarray:
    return np.array([int(color[i:i + 2], 16) for i in (1, 3, 5)], float) / 255.0


def raster(phases: list[Phase], cov: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """RGB image [lane, pixel, 3] (dominant phase, faded by the idle share) and the busy
    device count per (lane, pixel), at most the lane's size."""
    busy = np.minimum(cov.sum(axis=0), size[:, None])
    frac = busy / size[:, None]
    colors = np.array([_rgb(COLORS[p]) for p in phases]) if phases else np.zeros((1, 3))
    img = colors[cov.argmax(axis=0)]
    img = 1.0 - frac[:, :, None] * (1.0 - img)
    return img, busy


def plot_gantt(trace: Trace, path: str | Path, title: str = "") -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    ln = lanes(trace)
    n = len(ln.size)
    hi = max((s.end_s for s in trace.spans), default=1.0)
    lo = min(0.0, min((s.start_s for s in trace.spans), default=0.0))
    phases, cov = coverage(trace, ln, lo, hi, TIME_PIXELS)
    img, busy = raster(phases, cov, ln.size)
    height = 2.5 + min(8.0, 0.12 * n)
    fig = Figure(figsize=(13, height))
    FigureCanvasAgg(fig)
    ax, ax2 = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [4, 1]})
    # fixed margins (inches) for the block labels, legend and axis titles: no layout pass
    fig.subplots_adjust(left=2.4 / 13, right=1 - 1.3 / 13, top=1 - 0.45 / height,
                        bottom=0.55 / height, hspace=0.5 / (height - 1.0))
    ax.imshow(img, aspect="auto", interpolation="nearest", extent=(lo, hi, n - 0.5, -0.5))
    ticks, labels = [], []
    for name, first, count, devs in ln.blocks:
        ticks.append(first + count / 2 - 0.5)
        per = f"; {ln.per_lane} per lane" if ln.per_lane > 1 else ""
        labels.append(f"{name}\n({len(devs)} GPUs: {devs[0]}..{devs[-1]}{per})")
        if first + count < n:
            ax.axhline(first + count - 0.5, color="black", lw=0.8)
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlim(lo, hi)
    ax.legend(handles=[Patch(color=COLORS[p], label=p.value) for p in phases],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, title="phase")
    ax.set_title(title or f"{trace.meta.source.value}: {trace.meta.plan.describe()}", fontsize=10)
    if ln.per_lane > 1:
        ax.text(1.0, -0.02, f"a lane is {ln.per_lane} devices: colour = phase with the most "
                "device-time, paler = more of them idle", transform=ax.transAxes, ha="right",
                va="top", fontsize=7)
    grid = lo + (np.arange(TIME_PIXELS + 1)) * (hi - lo) / TIME_PIXELS
    frac = busy.sum(axis=0) / trace.meta.plan.cluster.num_gpus
    ax2.fill_between(grid, np.append(frac, frac[-1:]), step="post", color="#333333")
    ax2.set_ylim(0, 1.05)
    ax2.set_ylabel("busy\nfraction", fontsize=8)
    ax2.set_xlabel("time (s)")
    path = Path(path)
    with atomic_write(path, "wb") as f:   # never through a link, never half a file
        fig.savefig(f, format="png", dpi=110)
    return path
