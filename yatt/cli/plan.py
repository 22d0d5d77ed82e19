"""`yatt plan`: search placements, print the ranked, explained table, write plan files.

Why: kept apart from cli.py so argument wiring stays small and rendering (rich tables,
progress, output files) has one home. Everything that can fail on input fails before
anything is written.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional

from rich.console import Console
from rich.table import Table

from yatt.core.bundled import DEFAULT_EXPERIMENT
from yatt.core.config import dump_yaml, load_experiment
from yatt.core.errors import InputError
from yatt.core.plan import Experiment
from yatt.core.safeio import atomic_write
from yatt.core.roles import Mode, Role
from yatt.planner.breakdown import role_facts
from yatt.planner.costmodel import AnalyticCostModel
from yatt.planner.asyncnote import mode_verdicts
from yatt.planner.explain import dp_text, peak_memory
from yatt.planner.advice import PlanResult
from yatt.planner.frameworks import Framework
from yatt.planner.ranking import write_csv
from yatt.planner.candidate import SearchResult
from yatt.planner.sizes import parse_gpu_sizes

from .common import (LazyProgress, add_host_check_flag, check_not_inputs, check_out_dir,
                     check_out_file, check_top, config_or_bundled, cost_model_line, host_check_on,
                     host_checked, print_profile_gaps, profile_or_shipped, shown, shown_lines)
from .plan_emit import emit_all, file_name, parse_frameworks, write_emitted
from .plan_report import cost_table, given_table, scaling_table


def _gb(x: float) -> str:
    return f"{x / 1e9:.1f}"


def _count(n: float) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


def _secs(x: float) -> str:
    if x < 1e-3:
        return f"{x * 1e6:.0f} us"
    if x < 1:
        return f"{x * 1e3:.1f} ms"
    return f"{x:.2f} s"


def print_breakdown(console: Console, exp: Experiment, cost: AnalyticCostModel) -> None:
    """Memory per role at its smallest fitting TP, and unit costs."""
    facts = role_facts(exp, cost)
    t = Table(title="Memory per device (GB) at the smallest TP that fits", title_justify="left")
    for col in ("role", "model", "params", "min TP", "weights", "grads", "optim",
                "activ.", "min KV", "total/cap GB", "KV tok/engine"):
        t.add_column(col, justify="right" if col not in ("role", "model") else "left")
    for f in facts:
        m = f.mem
        if m is None:
            t.add_row(f.role.value, shown(f.model), _count(f.params_b * 1e9), "none", f"{f.weights_gb:.1f}",
                      "", "", "", "", "does not fit", "")
            continue
        t.add_row(f.role.value, shown(f.model), _count(f.params_b * 1e9), f.layout, _gb(m.weights),
                  _gb(m.grads), _gb(m.optimizer), _gb(m.activations), _gb(m.kv_cache),
                  f"{_gb(m.total)}/{_gb(m.capacity)}", f"{f.kv_tokens:,}" if f.kv_tokens else "")
    console.print(t)
    u = Table(title="Unit costs (analytic roofline model)", title_justify="left")
    u.add_column("role")
    u.add_column("operation")
    u.add_column("time", justify="right")
    for f in facts:
        for label, secs in f.unit_costs:
            u.add_row(f"{f.role.value} (TP{f.layout})", shown(label), _secs(secs))
    console.print(u)


def _header(exp: Experiment) -> str:
    c = exp.cluster
    return (f"[bold]{shown(exp.name)}[/]: {c.num_gpus} x {shown(c.gpu.name)} ({c.nodes} nodes x "
            f"{c.gpus_per_node}); actor {shown(exp.actor.name)}"
            + (f", GenRM {shown(exp.genrm.name)}" if exp.genrm else ", rule reward")
            + f"; {exp.workload.prompts_per_step} prompts x {exp.workload.samples_per_prompt}"
            " samples per step")


def ranked_table(result: SearchResult, top: int) -> Table:
    n_seeds = len(result.best.step_times)
    t = Table(title=f"Top placements (simulated step time, mean±std over {n_seeds} seeds)",
              title_justify="left", caption_justify="left")
    for col in ("#", "mode", "rollout", "GenRM", "trainer", "step s", "samples/s", "tokens/s",
                "util%", "bubble%", "peak/cap GB"):
        t.add_column(col, justify="left" if col in ("mode", "rollout", "GenRM", "trainer") else "right")
    rows = list(enumerate(result.ranked, 1))[:top]
    extra = []
    for mode in Mode:  # always show the best of each mode
        if not any(c.plan.mode is mode for _, c in rows):
            extra += [(i, c) for i, c in enumerate(result.ranked, 1) if c.plan.mode is mode][:1]
    marked = {i for i, _ in extra}
    for i, c in rows + extra:
        peak, cap = peak_memory(c.plan)
        mark = "*" if i in marked else ""
        t.add_row(f"{i}{mark}", mode_text(c.plan), dp_text(c.plan, Role.ROLLOUT),
                  dp_text(c.plan, Role.GENRM), dp_text(c.plan, Role.TRAINER),
                  f"{c.mean:.1f}±{c.spread:.1f}", f"{c.samples_per_s:.2f}", f"{c.tokens_per_s:,.0f}",
                  f"{(1 - c.bubble) * 100:.0f}", f"{c.bubble * 100:.0f}", f"{_gb(peak)}/{_gb(cap)}")
    notes = [f"samples/s, tokens/s: trained samples and tokens of the same {n_seeds} seeds "
             "over their total step time; util%, bubble%: mean over those seeds."]
    for i, c in extra:
        notes.append(f"*{i}: the best {c.plan.mode.value} placement, outside --top {top}, "
                     "shown for the mode comparison.")
    t.caption = "\n".join(notes)
    return t


def explanation(result: SearchResult) -> str:
    lines = mode_verdicts(result)
    for r in result.split_reports:
        if r.mode is Mode.ASYNC:
            lines.append(f"async split search R tp{r.rollout_tp}, k{r.staleness}: {r.evaluated} of "
                         f"{r.splits} generator/trainer splits simulated "
                         f"({_how(r)}); best R{r.best_rollout_devices} T{r.trainer_devices}")
            continue
        lines.append(f"split search R tp{r.rollout_tp} / G tp{r.genrm_tp}: {r.evaluated} of {r.splits} "
                     f"splits simulated ({_how(r)}); best R{r.best_rollout_devices}")
    for r in result.refinements:
        lines.append(f"split at full size R tp{r.rollout_tp} / G tp{r.genrm_tp}: {r.evaluated} of "
                     f"{r.splits} splits priced by the fluid model, from the slice's R{r.start}; "
                     f"best R{r.best}")
    if result.trainer_note:
        lines.append(result.trainer_note)
    if result.idle_note:
        lines.append(result.idle_note)
    lines.append(f"searched {result.space_size} placements with {result.simulations} simulations "
                 f"in {result.seconds:.1f} s" + (f"; {result.note}" if result.note else ""))
    return "\n".join(lines)


def mode_text(plan) -> str:
    """The mode column: async carries its max_staleness."""
    return plan.mode.value + (f" k{plan.max_staleness}" if plan.mode is Mode.ASYNC else "")


def _how(r) -> str:
    return {"local": "hill-climb from the previous optimum",
            "exhaustive": "all splits" + ("" if r.unimodal else "; NOT unimodal"),
            "ternary": "ternary search; unimodal on the coarse grid",
            "scan": "NOT unimodal on the coarse grid: bounded scan"}.get(r.method, r.method)


def write_outputs(out: Path, result: PlanResult) -> list[Path]:
    """plan.yaml (the best plan with its `predicted:` section), the best's timeline,
    ranking.csv, and given-plan.yaml when a placement was given."""
    from yatt.core.timeline import write_chrome_trace
    from yatt.sim.gantt import plot_gantt

    out.mkdir(parents=True, exist_ok=True)
    best = result.best
    paths = [out / "plan.yaml", out / "timeline.json", out / "timeline.png", out / "ranking.csv"]
    dump_yaml(result.best_plan(), paths[0])
    write_chrome_trace(best.trace, paths[1])
    n = len(best.step_times)
    fluid = " by the fluid model" if best.trace.meta.extra.get("model") == "fluid" else ""
    title = (f"{best.plan.describe()}: seed 0 drawn{fluid}, {best.step_times[0]:.1f} s/step"
             + (f" (mean over {n} seeds {best.mean:.1f} s)" if n > 1 else ""))
    plot_gantt(best.trace, paths[2], title=title)
    write_csv(result.rows(), paths[3])
    given = result.given_plan()
    if given is not None:
        paths.append(out / "given-plan.yaml")
        dump_yaml(given, paths[-1])
    return paths


def scaling_figure(rows: list[tuple[int, str, float, float]]):
    """samples/s against cluster size per mode, ticks at the plain GPU counts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for mode in sorted({r[1] for r in rows}):
        pts = [(g, sps) for g, m, _, sps in rows if m == mode]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=mode)
    sizes = sorted({r[0] for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(g) for g in sizes])  # plain GPU counts, not powers of two
    ax.minorticks_off()
    ax.set_xlabel("GPUs")
    ax.set_ylabel("samples / s (simulated)")
    ax.set_title("Throughput vs cluster size, best placement per mode")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def write_scaling(out: Path, result: PlanResult) -> list[Path]:
    import csv as _csv

    import matplotlib.pyplot as plt

    csv, png = out / "scaling.csv", out / "scaling.png"
    rows = [r.as_dict(result.pricing) for r in result.scaling]
    with atomic_write(csv, newline="") as f:
        w = _csv.DictWriter(f, fieldnames=SCALING_COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r[k] is None else r[k]) for k in SCALING_COLUMNS})
    fig = scaling_figure([(r.gpus, r.mode.value, r.step_s, r.samples_per_s) for r in result.scaling])
    with atomic_write(png, "wb") as f:
        fig.savefig(f, format="png", dpi=120)
    plt.close(fig)
    return [csv, png]


SCALING_COLUMNS = ["gpus", "mode", "step_s", "samples_per_s", "samples_per_s_per_gpu",
                   "gpu_hours_per_step", "gpu_hours_run", "dollars_run", "placement"]


OUTPUTS = ("plan.yaml", "given-plan.yaml", "timeline.json", "timeline.png", "ranking.csv",
           "scaling.csv", "scaling.png", "summary.json")


def _json_target(text: Optional[str], out: Path) -> Optional[Path]:
    """--json: None (no flag), '-' (stdout) as Path('-'), or a file path."""
    if text is None:
        return None
    if text == "":
        return out / "summary.json"
    p = Path(text)
    if text != "-" and p.is_dir():
        raise InputError("is a directory; allowed: a file path, or - for stdout", field="--json",
                         file=text)
    return p


def run_plan_command(args: argparse.Namespace) -> int:
    from yatt.core.config import is_plan_file, load_plan
    from yatt.planner.advice import plan_experiment, scaling, with_scaling
    from yatt.planner.costs import Pricing
    from yatt.planner.placement_text import parse_placement
    from yatt.planner.profiled import cost_model_for, experiment_for

    # ---- validate everything first: nothing is searched or written on bad input ---------
    from yatt.planner.budget import check_plan

    config = config_or_bundled(args.config, DEFAULT_EXPERIMENT)
    check_top(args.top)
    pricing = Pricing(args.steps if args.steps is not None else 1, args.price_per_gpu_hour)
    frameworks = parse_frameworks(args.emit)
    out = Path(args.out)
    json_to = _json_target(args.json, out)
    given = None
    if is_plan_file(config):
        if args.placement is not None:
            raise InputError(f"{config} is a plan file; --placement applies to experiment configs",
                             field="--placement")
        given = load_plan(config)
        exp = given.experiment
    else:
        exp = load_experiment(config)
    profile = profile_or_shipped(args, exp)
    exp = experiment_for(exp, profile)   # the actor's measured stop lengths (EOS), if any
    if args.placement is not None:
        given = parse_placement(args.placement, exp)
    sizes = parse_gpu_sizes(args.gpus, exp.cluster)
    label = f"profile {args.profile}" if args.profile else "analytic defaults"
    check_plan(exp, args.top, sizes, file=str(config), given=given is not None)  # before it starts
    probe_host = host_check_on(args)
    inputs = [config] + ([args.profile] if args.profile else [])
    out = check_out_dir(args.out)                        # writable, before the work
    check_not_inputs(out, OUTPUTS + tuple(file_name(f) for f in frameworks), inputs)
    if json_to is not None and str(json_to) != "-":
        check_out_file(json_to, inputs, field="--json")

    # ---- plan --------------------------------------------------------------------------
    to_stdout = json_to is not None and str(json_to) == "-"
    console = Console(width=max(Console().width, 140), stderr=to_stdout)
    console.print(_header(exp))
    # before any prediction; `yatt profile` takes experiment configs, not plans
    host = host_checked(console, profile, "EXPERIMENT.yaml" if is_plan_file(config) else config,
                        probe_host)
    profile = host.profile
    cost = cost_model_for(exp, profile)
    if host.note:
        label += f" ({host.note})"
    console.print(cost_model_line(args.profile, profile, host.note), markup=False, soft_wrap=True)
    print_profile_gaps(console, profile, exp, "EXPERIMENT.yaml" if is_plan_file(config) else config)
    if args.breakdown:
        print_breakdown(console, exp, cost)
    prog = LazyProgress(console, "searching placements", enabled=not args.no_progress)
    try:
        result = plan_experiment(exp, cost, cost_label=label, given=given, top=args.top,
                                 pricing=pricing, progress=prog)
    except InputError as e:
        raise e.within(file=str(config)) from None
    finally:
        prog.close()
    console.print(ranked_table(result.search, args.top))
    console.print(shown_lines(explanation(result.search)))
    if result.given is not None:
        console.print(given_table(result))
        console.print(shown_lines(result.gap()))
    console.print(cost_table(result))
    if sizes:
        progs: list[LazyProgress] = []

        def progress_for(g: int) -> LazyProgress:
            progs.append(LazyProgress(console, f"{g} GPUs", enabled=not args.no_progress))
            return progs[-1]

        rows, problems = scaling(exp, sizes, lambda e: cost_model_for(e, profile), progress_for,
                                 done=lambda: progs[-1].close())
        for p in problems:
            console.print(f"[yellow]{shown(p, 400)}[/]")
        result = with_scaling(result, rows, problems)
        console.print(scaling_table(result))
    emitted = emit_all(console, result, frameworks, not args.no_progress)

    # ---- write -------------------------------------------------------------------------
    paths = write_outputs(out, result)
    if sizes:
        paths += write_scaling(out, result)
    paths += write_emitted(out, emitted)
    if json_to is not None:
        summary = result.summary()
        summary["emit"] = [e.as_dict() for e in emitted]
        text = json.dumps(summary, indent=1, allow_nan=False, default=_json_default) + "\n"
        if to_stdout:
            sys.stdout.write(text)
        else:
            with atomic_write(json_to) as f:   # its directory was checked before the work
                f.write(text)
            paths.append(json_to)
    console.print("wrote " + ", ".join(shown(p) for p in paths))
    return 0


def _json_default(x: object) -> object:
    raise TypeError(f"not JSON-serialisable: {type(x).__name__}")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="simulate placements and recommend one",
                       description="Search placements (mode, GPU split, TP/DP) for an experiment, "
                                   "simulate them, and write plan.yaml plus a timeline.")
    p.add_argument("config", nargs="?", default=None,
                   help=f"experiment YAML, or a plan.yaml to score against the best "
                        f"(default: the bundled {DEFAULT_EXPERIMENT})")
    p.add_argument("--out", default="out/plan", help="output directory (default: out/plan)")
    p.add_argument("--top", type=int, default=5, help="rows in the ranked table (default: 5)")
    p.add_argument("--gpus", default=None, help="comma-separated cluster sizes for a scaling curve")
    p.add_argument("--profile", default=None, help="profile.yaml from `yatt profile`/`yatt calibrate`")
    add_host_check_flag(p)
    p.add_argument("--breakdown", action="store_true", help="also print per-role memory and unit costs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--placement", default=None, metavar="TEXT",
                   help="also score this placement against the best, e.g. "
                        "\"partial R4(tp2) G44(tp4) T48(tp1)\" (docs/plan.md)")
    p.add_argument("--json", nargs="?", const="", default=None, metavar="PATH",
                   help="write a JSON summary (default OUT/summary.json; - for stdout)")
    p.add_argument("--steps", type=int, default=None, metavar="N",
                   help="price a run of N steps (GPU-hours, wall hours; default 1)")
    p.add_argument("--price-per-gpu-hour", type=float, default=None, metavar="X",
                   help="dollars per GPU-hour: adds dollars to the cost table")
    p.add_argument("--emit", default=None, metavar="FRAMEWORK",
                   help="translate the best placement into settings for "
                        f"{'|'.join(f.value for f in Framework)} (comma-separated for several)")
    p.set_defaults(func=run_plan_command)
