"""`yatt calibrate TRACE... -o profile.yaml`: fit cost-model efficiencies to traces.

Why: wiring and rendering for `yatt.planner.calibrate`. Prints the fitted coefficients
against the starting ones and the fit error per phase, in sample and on held-out steps,
then writes a profile that `yatt plan --profile` and `yatt replay --profile` accept.
With `--profile P` (a `yatt profile` file) it fits P's host-contention ratios to measured
traces instead and writes P with them. All traces are read and validated, and the fit is
done, before the profile is written.
"""
from __future__ import annotations

import argparse
import math

from .common import LazyProgress, check_out_file, efficiency_arg, shown, wide_console


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="fit cost-model efficiencies to recorded traces",
                       description="Fit the analytic cost model's efficiency coefficients (MFU, "
                                   "decode bandwidth, overheads, PCIe and sync bandwidth) to the "
                                   "phase times of recorded traces, by bounded least squares over "
                                   "re-simulations with the recorded sample lengths.")
    p.add_argument("traces", nargs="+", metavar="TRACE", help="trace JSONL files (.jsonl or .jsonl.gz)")
    p.add_argument("-o", "--output", default="profile.yaml", help="profile to write (default: profile.yaml)")
    p.add_argument("--start", default=None, help="profile.yaml whose efficiencies start the fit "
                   "(default: the built-in defaults)")
    p.add_argument("--profile", default=None, metavar="P",
                   help="a `yatt profile` file: fit its host-contention ratios (several devices "
                        "of one host busy at once) to these measured traces, keep every other "
                        "table, and write the result to --output")
    p.add_argument("--holdout", type=int, default=1,
                   help="last steps of each trace held out for the out-of-sample error (default: 1)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_calibrate_command)


def _pct(x: float) -> str:
    return "" if math.isnan(x) else f"{x * 100:.1f}%"


def run_calibrate_command(args: argparse.Namespace) -> int:
    from rich.table import Table

    from yatt.core.errors import InputError
    from yatt.core.trace import Trace
    from yatt.planner.calibrate import calibrate
    from yatt.planner.profile_io import save_profile

    if args.holdout < 0:
        raise InputError(f"got {args.holdout}; allowed: an integer >= 0", field="--holdout")
    if args.profile and args.start:
        raise InputError("given with --profile; allowed: one of --start (fit efficiencies) "
                         "and --profile (fit a profile's contention ratios)", field="--start")
    if args.profile:
        return _calibrate_contention(args)
    inputs = list(args.traces) + ([args.start] if args.start else [])
    check_out_file(args.output, inputs, field="--output")   # before reading anything big
    traces = [Trace.read_jsonl(p) for p in args.traces]
    start = efficiency_arg(args.start)
    out = check_out_file(args.output, inputs, field="--output")
    console = wide_console(120)
    prog = LazyProgress(console, "calibrating", enabled=not args.no_progress)
    try:
        cal = calibrate(traces, start=start, holdout=args.holdout, progress=prog)
    finally:
        prog.close()

    t = Table(title=f"Fitted coefficients ({cal.points_in} in-sample phase measurements, "
                    f"{cal.evaluations} re-simulations, {cal.seconds:.1f} s)", title_justify="left")
    for col in ("coefficient", "start", "fitted", "change"):
        t.add_column(col, justify="left" if col == "coefficient" else "right")
    for c in cal.fitted:
        a, b = getattr(cal.start, c.value), getattr(cal.efficiency, c.value)
        t.add_row(c.value, f"{a:.4g}", f"{b:.4g}", f"{(b - a) / a * 100:+.0f}%" if a else "")
    console.print(t)
    if cal.skipped:
        console.print("not fitted (kept at start): " + "; ".join(f"{c.value} ({shown(why)})"
                                                                 for c, why in cal.skipped))
    e = Table(title="Fit error per phase (mean |relative error| of busy seconds per step and role)",
              title_justify="left")
    for col in ("phase", "points in/out", "before fit", "in sample", "held out"):
        e.add_column(col, justify="left" if col == "phase" else "right")
    for r in cal.errors:
        e.add_row(r.phase.value, f"{r.n_in}/{r.n_out}", _pct(r.before), _pct(r.in_sample), _pct(r.held_out))
    console.print(e)
    if not cal.points_out:
        console.print("[yellow]no held-out steps (each trace needs more steps than --holdout): "
                      "the out-of-sample error is unknown[/]")
    save_profile(cal.profile("calibrate: " + ", ".join(args.traces)), out)
    console.print(f"wrote {shown(out)}  (use: yatt plan --profile {shown(out)}, yatt replay TRACE "
                  f"--profile {shown(out)})")
    return 0


def _calibrate_contention(args: argparse.Namespace) -> int:
    """`--profile P`: P's contention ratios fitted to the traces, printed against P's own."""
    from rich.table import Table

    from yatt.core.errors import InputError
    from yatt.core.trace import Trace
    from yatt.planner.calibrate import calibrate_contention
    from yatt.planner.profile_io import load_profile, save_profile

    inputs = list(args.traces) + [args.profile]
    check_out_file(args.output, inputs, field="--output")
    profile = load_profile(args.profile)
    traces = [Trace.read_jsonl(p) for p in args.traces]
    try:
        fitted = calibrate_contention(profile, traces)
    except InputError as e:
        raise e.within(file=args.profile if e.field == "--profile" else "") from None
    out = check_out_file(args.output, inputs, field="--output")
    console = wide_console(120)
    before = {c.busy: c for c in profile.tables.contention}
    fields = ("reload", "offload", "decode", "logprob", "train")
    t = Table(title=f"Host contention, the profile's -> measured over contention-free replayed "
                    f"time ({len(traces)} trace(s), steps after the first)", title_justify="left")
    for col in ("devices busy", *fields):
        t.add_column(col, justify="right")
    for c in fitted.tables.contention:
        b = before.get(c.busy)
        t.add_row(str(c.busy), *[(f"{getattr(b, f):.2f} -> " if b else "- -> ")
                                 + f"{getattr(c, f):.2f}" for f in fields])
    console.print(t)
    from yatt.planner.hostscale import HostProbe

    timed = sum(HostProbe.from_record(x.meta.extra) is not None for x in traces)
    console.print(f"host speed: {timed} of {len(traces)} trace(s) recorded the host probe timed "
                  "before their run; the profile is rescaled to it before the fit"
                  + ("" if timed == len(traces) else " (the others are fitted at the profile's "
                     "own speed, which a faster or slower host reads as less or more contention)"),
                  markup=False, highlight=False, soft_wrap=True)
    save_profile(fitted, out)
    console.print(f"wrote {shown(out)}  (use: yatt plan --profile {shown(out)})")
    return 0
