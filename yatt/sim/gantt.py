"""PNG Gantt chart of a Trace with a utilization strip (matplotlib, Agg, imported lazily).

Why: a picture of who is busy when is how a person checks a plan. Devices are grouped
into rows by the roles placed on them: devices with the same set of roles share a row
block, labelled by every role on it. One bar per TP group would be unreadable at 48+
devices, so each row is one device, rows are thin and the block is labelled. A strip
below shows the fraction of devices busy over time.
"""
from __future__ import annotations

from pathlib import Path

from yatt.core import Phase, Role, Trace

COLORS = {Phase.ROLLOUT: "#4C72B0", Phase.GENRM: "#DD8452", Phase.TRAIN: "#55A868",
          Phase.REF_LOGPROB: "#8172B3", Phase.OLD_LOGPROB: "#64B5CD", Phase.OFFLOAD: "#C44E52", Phase.RELOAD: "#937860",
          Phase.WEIGHT_SYNC: "#DA8BC3", Phase.CHECKPOINT: "#8C8C8C", Phase.CONTROLLER: "#CCB974"}


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


def plot_gantt(trace: Trace, path: str | Path, title: str = "") -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    import numpy as np

    groups = _device_groups(trace)
    row: dict[int, int] = {}
    y = 0
    ticks, labels, seps = [], [], []
    for name, devs in groups:
        ticks.append(y + len(devs) / 2 - 0.5)
        labels.append(f"{name}\n({len(devs)} GPUs: {devs[0]}..{devs[-1]})")
        for d in devs:
            row[d] = y
            y += 1
        seps.append(y - 0.5)
    n = max(1, y)
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(13, 2.5 + min(8.0, 0.12 * n)), sharex=True,
                                  gridspec_kw={"height_ratios": [4, 1]})
    per_phase: dict[Phase, list[tuple[float, float, int]]] = {}
    for s in trace.spans:
        for d in s.devices:
            per_phase.setdefault(s.phase, []).append((s.start_s, s.duration, row[d]))
    for ph, items in per_phase.items():
        arr = np.array(items)
        ax.barh(arr[:, 2], arr[:, 1], left=arr[:, 0], height=0.9, color=COLORS[ph], linewidth=0)
    for sy in seps[:-1]:
        ax.axhline(sy, color="black", lw=0.8)
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.set_ylim(n - 0.5, -0.5)
    ax.legend(handles=[Patch(color=COLORS[p], label=p.value) for p in per_phase],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, title="phase")
    ax.set_title(title or f"{trace.meta.source.value}: {trace.meta.plan.describe()}", fontsize=10)
    hi = max((s.end_s for s in trace.spans), default=1.0)
    grid = np.linspace(0.0, hi, 600)
    busy = np.zeros_like(grid)
    for d, ivs in _busy_by_device(trace).items():
        for a, b in ivs:
            busy += (grid >= a) & (grid < b)
    ax2.fill_between(grid, busy / trace.meta.plan.cluster.num_gpus, step="post", color="#333333")
    ax2.set_ylim(0, 1.05)
    ax2.set_ylabel("busy\nfraction", fontsize=8)
    ax2.set_xlabel("time (s)")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _busy_by_device(trace: Trace) -> dict[int, list[tuple[float, float]]]:
    by: dict[int, list[tuple[float, float]]] = {}
    for s in trace.spans:
        for d in s.devices:
            by.setdefault(d, []).append((s.start_s, s.end_s))
    out = {}
    for d, ivs in by.items():
        ivs.sort()
        merged = [list(ivs[0])]
        for a, b in ivs[1:]:
            if a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        out[d] = [(a, b) for a, b in merged]
    return out
