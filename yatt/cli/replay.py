"""`yatt replay TRACE`: predicted against recorded per phase, what-if table, scaling curve.

Why: the capacity-planning verb. One command answers "what if we had twice the GPUs, or
the other mode?" from a recorded run, with the run's own sample lengths. Wiring and
rendering live here; the work is `yatt.planner.replay`. Every input is validated before
anything is computed or written; heavy imports (rich, matplotlib, the planner) happen
inside the command, so `yatt --help` stays fast.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional

from yatt.planner.sizes import parse_gpu_sizes
from yatt.core.errors import InputError, clean
from yatt.core.limits import MAX_GPUS
from yatt.core.safeio import atomic_write
from yatt.core.roles import Mode, TraceSource
from yatt.core.specs import ClusterSpec
from yatt.core.trace import Trace

from .common import (LazyProgress, add_host_check_flag, check_not_inputs, check_out_dir,
                     host_check_on, host_checked, phase_table, plot_text, profile_or_shipped, shown,
                     wide_console)

OUTPUTS = ("replay_timeline.json", "replay_timeline.png", "scaling.csv", "scaling.png",
           "samples.parquet", "spans.parquet")

MODES: dict[str, tuple[Mode, ...]] = {"colocate": (Mode.COLOCATE,), "partial": (Mode.PARTIAL,),
                                      "best": (Mode.COLOCATE, Mode.PARTIAL)}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="re-simulate a recorded trace; what-if other modes/sizes",
                       description="Re-simulate a trace's steps with its recorded sample lengths: "
                                   "predicted vs recorded per phase, a what-if table (other mode, "
                                   "other cluster, more GPUs), a scaling curve and a timeline.")
    p.add_argument("trace", help="trace JSONL (.jsonl or .jsonl.gz)")
    p.add_argument("--cluster", default=None, help="cluster YAML for the what-if rows")
    p.add_argument("--mode", default="best", choices=list(MODES),
                   help="mode(s) of the what-if placements (default: best = both)")
    p.add_argument("--gpus", default=None,
                   help="comma-separated cluster sizes (default: the recorded size and twice it)")
    p.add_argument("--profile", default=None, help="profile.yaml from `yatt calibrate`/`yatt profile` "
                   "(default: the profile shipped for the trace's device kind, if any)")
    add_host_check_flag(p)
    p.add_argument("--out", default="out/replay", help="output directory (default: out/replay)")
    p.add_argument("--parquet", action="store_true", help="also export samples/spans as Parquet "
                   "(needs pyarrow; skipped with a note otherwise)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_replay_command)


def load_cluster(path: str) -> ClusterSpec:
    """A cluster YAML (gpu by catalog name or inline), strictly validated."""
    from yatt.core import catalog
    from yatt.core.config import read_yaml
    from yatt.core.schema import from_dict

    data = read_yaml(path)
    try:
        if not isinstance(data, dict):
            raise InputError(f"got {type(data).__name__}; allowed: a mapping")
        if isinstance(data.get("gpu"), str):
            try:
                data = {**data, "gpu": catalog.gpu(data["gpu"])}
            except InputError as e:
                raise InputError(e.message, field="gpu") from None
        return from_dict(ClusterSpec, data)
    except InputError as e:
        raise e.within(file=path) from None


def parse_sizes(text: Optional[str], cluster: ClusterSpec) -> list[int]:
    """--gpus sizes; without the flag: the recorded size and twice it."""
    if text is None:
        n = cluster.num_gpus
        return [g for g in (n, 2 * n) if g <= MAX_GPUS]
    return parse_gpu_sizes(text, cluster)


def whatif_table(rep, rows):
    from rich.table import Table

    t = Table(title="What if (each row replays the recorded steps; speed-up vs the replayed "
                    "recorded plan)", title_justify="left")
    for col in ("scenario", "GPUs", "placement", "step s", "samples/s", "samples/s/GPU", "speed-up"):
        t.add_column(col, justify="left" if col in ("scenario", "placement") else "right")
    plan = rep.recorded.meta.plan
    n = plan.cluster.num_gpus
    t.add_row("recorded (measured)" if rep.recorded.meta.source.value == "measured" else "recorded",
              f"{n} {shown(plan.cluster.gpu.name)}", plan.describe(),
              f"{rep.recorded_stats.step_time_mean:.2f}", f"{rep.recorded_stats.samples_per_s:.2f}",
              _per_gpu(rep.recorded_stats.samples_per_s, n), "")
    t.add_row("recorded plan, replayed", f"{n} {shown(plan.cluster.gpu.name)}", plan.describe(),
              f"{rep.predicted_stats.step_time_mean:.2f}", f"{rep.predicted_stats.samples_per_s:.2f}",
              _per_gpu(rep.predicted_stats.samples_per_s, n), "1.00x")
    for w in rows:
        t.add_row(w.label, f"{w.gpus} {shown(w.gpu)}", w.plan.describe(), f"{w.step_s:.2f}",
                  f"{w.stats.samples_per_s:.2f}", _per_gpu(w.stats.samples_per_s, w.gpus),
                  f"{w.speedup:.2f}x")
    return t


def _per_gpu(samples_per_s: float, gpus: int) -> str:
    """Samples/s per GPU: how efficiently a cluster size is used (the cost view)."""
    return f"{samples_per_s / gpus:.4f}" if gpus else ""


def write_scaling_curve(out: Path, rep, rows, title: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import csv as csvmod

    csv, png = out / "scaling.csv", out / "scaling.png"
    plan = rep.recorded.meta.plan
    n, gname = plan.cluster.num_gpus, plan.cluster.gpu.name
    with atomic_write(csv, newline="") as f:
        # csv quoting: a GPU name may hold a comma or a newline, a placement label commas
        w_ = csvmod.writer(f)
        w_.writerow(["scenario", "gpus", "gpu", "mode", "placement", "step_s", "samples_per_s",
                     "speedup", "samples_per_s_per_gpu"])
        rs, ps = rep.recorded_stats, rep.predicted_stats
        w_.writerow(["recorded", n, gname, plan.mode.value, plan.describe(),
                     f"{rs.step_time_mean:.4f}", f"{rs.samples_per_s:.4f}", "",
                     f"{rs.samples_per_s / n:.5f}"])
        w_.writerow(["recorded plan replayed", n, gname, plan.mode.value, plan.describe(),
                     f"{ps.step_time_mean:.4f}", f"{ps.samples_per_s:.4f}", "1.0000",
                     f"{ps.samples_per_s / n:.5f}"])
        for w in rows:
            w_.writerow([w.label, w.gpus, w.gpu, w.mode.value, w.plan.describe(), f"{w.step_s:.4f}",
                         f"{w.stats.samples_per_s:.4f}", f"{w.speedup:.4f}",
                         f"{w.stats.samples_per_s / w.gpus:.5f}"])
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for mode in sorted({w.mode for w in rows}, key=lambda m: m.value):
        pts = sorted((w.gpus, w.stats.samples_per_s) for w in rows if w.mode is mode)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"best {mode.value} (predicted)")
        for g, y in pts:
            ax.annotate(f"{y:.1f}", (g, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    n = rep.recorded.meta.plan.cluster.num_gpus
    ax.scatter([n], [rep.recorded_stats.samples_per_s], marker="*", s=220, color="black", zorder=5,
               label=f"recorded ({rep.recorded.meta.source.value})")
    ax.scatter([n], [rep.predicted_stats.samples_per_s], marker="D", s=60, facecolors="none",
               edgecolors="red", zorder=6, label="recorded plan, replayed")
    sizes = sorted({w.gpus for w in rows} | {n})
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(s) for s in sizes])
    ax.set_xlabel("GPUs")
    ax.set_ylabel("trained samples / s")
    top = max([w.stats.samples_per_s for w in rows] + [rep.recorded_stats.samples_per_s,
                                                       rep.predicted_stats.samples_per_s])
    ax.set_ylim(0, top * 1.2)
    ax.margins(x=0.08)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    with atomic_write(png, "wb") as f:
        fig.savefig(f, format="png", dpi=120)
    plt.close(fig)
    return [csv, png]


def run_replay_command(args: argparse.Namespace) -> int:
    from yatt.planner.profiled import cost_model_for
    from yatt.planner.replay import CALIBRATE_ABOVE, median_phase_error, replay, sample_steps, what_if

    # ---- validate everything first -------------------------------------------------------
    trace = Trace.read_jsonl(args.trace)
    try:
        sample_steps(trace)
    except InputError as e:
        raise e.within(file=args.trace) from None
    # the recorded run's device kind picks the shipped profile, as `yatt plan` and `yatt run` do
    profile = profile_or_shipped(args, trace.meta.plan.experiment)
    cluster = load_cluster(args.cluster) if args.cluster else None
    sizes = parse_sizes(args.gpus, cluster or trace.meta.plan.cluster)
    modes = MODES[args.mode]
    from yatt.planner.budget import check_replay

    check_replay(trace, sizes, modes, cluster, file=args.trace)   # the work, estimated before it starts
    probe_host = host_check_on(args)
    out = check_out_dir(args.out)                       # writable, before the work
    check_not_inputs(out, OUTPUTS, [args.trace] + [p for p in (args.profile, args.cluster) if p])

    console = wide_console()
    plan = trace.meta.plan
    console.print(f"[bold]{shown(args.trace)}[/]: {trace.meta.source.value} trace, "
                  f"{len(sample_steps(trace))} steps with samples, {len(trace.samples)} samples; "
                  f"recorded plan {plan.describe()} on {plan.cluster.num_gpus} x "
                  f"{shown(plan.cluster.gpu.name)}; cost model: "
                  + (f"profile {shown(args.profile)}" if args.profile else "default efficiencies"))
    # the recorded run's experiment is in the trace: the refresh names its config generically
    host = host_checked(console, profile, "EXPERIMENT.yaml", probe_host, trace)
    profile = host.profile
    # a measured run's step 0 pays one-off warm-up, as `yatt run`'s own comparison excludes it
    warmup = int(trace.meta.source is TraceSource.MEASURED and len(sample_steps(trace)) > 1)
    if warmup:
        console.print("step 0 excluded: a measured run's first step pays one-off warm-up")
    prog = LazyProgress(console, "replaying", enabled=not args.no_progress)
    try:
        rep = replay(trace, cost_model_for(plan.experiment, profile), warmup=warmup)
        rows = what_if(trace, rep, lambda e: cost_model_for(e, profile), sizes=sizes,
                       modes=modes, cluster=cluster, progress=prog)
    finally:
        prog.close()
    console.print(phase_table(rep, host.note))
    err = median_phase_error(rep)
    if err > CALIBRATE_ABOVE:
        console.print(f"median per-phase error {err * 100:.0f}% (> {CALIBRATE_ABOVE * 100:.0f}%): the trace "
                      f"ran at other efficiencies; fit them with `yatt calibrate {clean(args.trace, 400)} -o "
                      "profile.yaml` and replay with --profile profile.yaml", markup=False, soft_wrap=True)
    console.print(whatif_table(rep, rows))
    best = min(rows, key=lambda w: w.step_s, default=None)
    if best is not None:
        console.print(f"fastest: {best.label} on {best.gpus} x {shown(best.gpu)} ({best.plan.describe()}): "
                      f"{best.step_s:.1f} s/step, {best.speedup:.2f}x the recorded plan")

    # ---- write -----------------------------------------------------------------------------
    from yatt.core.timeline import write_chrome_trace
    from yatt.sim.gantt import plot_gantt

    paths = [write_chrome_trace(rep.predicted, out / "replay_timeline.json"),
             plot_gantt(rep.predicted, out / "replay_timeline.png",
                        title=f"replay of {plot_text(Path(args.trace).name)}: {plan.describe()}, "
                              f"{rep.predicted_stats.step_time_mean:.1f} s/step predicted")]
    paths += write_scaling_curve(out, rep, rows, f"{plot_text(Path(args.trace).name)}: throughput vs GPUs "
                                 "(recorded lengths replayed)")
    if args.parquet:
        from yatt.planner.frames import write_parquet

        pq = write_parquet(trace, out)
        if pq is None:
            console.print("[yellow]--parquet: skipped, pyarrow is not installed[/]")
        else:
            paths += pq
    console.print("wrote " + ", ".join(shown(p) for p in paths))
    return 0
