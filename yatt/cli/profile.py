"""`yatt profile CONFIG --device cpu|cuda -o profile.yaml`: micro-benchmark this machine.

Why: the profiled cost model (`yatt.planner.profiled`) needs measured tables for the
experiment's models on the local hardware. This verb validates its input, runs
`yatt.profiling.profile.profile_experiment` under a progress bar (it takes minutes) and
writes the profile; `yatt plan|replay|run --profile FILE` then use it.
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Optional

from yatt.core.errors import InputError, clean

from .common import check_out_file, require_exec, shown

DEVICES = ("cpu", "cuda")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="micro-benchmark training/decode/prefill/switches -> profile.yaml",
                       description="Measure the experiment's models on this machine with the "
                                   "executor's own components (Megatron trainer, vLLM engine, "
                                   "weight update, engine teardown/re-create, Ray round trip) and "
                                   "write a yatt.profile/1 file with tables.")
    p.add_argument("config", nargs="+", help="experiment YAML(s); their distinct models are measured once")
    p.add_argument("--device", default="cpu", help="cpu|cuda (default: cpu; cuda is untested here)")
    p.add_argument("-o", "--out", default="profile.yaml", help="output file (default: profile.yaml)")
    p.add_argument("--quick", action="store_true",
                   help="re-profile a host in about a minute: the model tables with fewer "
                        "points and repetitions, and the Ray-path terms (round trips, "
                        "hand-off, engine calls, weight sync, TP/DP groups, contention) from "
                        "--base, rescaled by how this host ran the tables both measured, "
                        "when the base has them all for these models (else measured too)")
    p.add_argument("--base", default=None, metavar="PROFILE",
                   help="with --quick: the profile to take the Ray-path terms from "
                        "(default: the profile shipped for the config's device kind)")
    p.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)   # tests: tiny, incomplete
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=profile_command)


def profile_command(args: argparse.Namespace) -> int:
    from yatt.core.config import load_experiment

    if args.quick and args.smoke:
        raise InputError("--quick and --smoke are two point sets; allowed: one of them", field="--smoke")
    if args.device not in DEVICES:
        raise InputError(f"got {args.device!r}; allowed: {'|'.join(DEVICES)}", field="--device")
    if args.base is not None and not args.quick:
        raise InputError("takes effect with --quick only; allowed: add --quick, or drop --base",
                         field="--base")
    exps = [load_experiment(c) for c in args.config]
    base = _base(args, exps) if args.quick else None
    check_out_file(args.out, args.config)   # writable, not an input: before minutes of work
    out = Path(args.out)
    if out.is_dir() or not out.parent.is_dir():
        raise InputError("not a writable file path", field="--out", file=str(out))
    require_exec("profile")
    if args.device == "cuda":  # GPU path: written, untested in this project's CI
        import torch

        if not torch.cuda.is_available():
            raise InputError("no CUDA device on this machine; allowed: --device cpu", field="--device")
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from yatt.profiling.carry import lacks
    from yatt.profiling.points import Points, models_to_measure
    from yatt.profiling.profile import profile_experiments
    from yatt.profiling.ray_tables import ray_needs
    from yatt.planner.profile_io import save_profile

    pts = Points.smoke() if args.smoke else Points.quick() if args.quick else Points()
    actors, genrms = models_to_measure(exps)
    console = Console(stderr=True)
    if base is not None:
        lack = lacks(base[0], ray_needs(exps, pts, args.device), args.device)
        console.print(f"Ray-path terms: from {shown(base[1])}, rescaled to this host"
                      + (" (trainer groups and engine calls: measured)" if pts.own_ray else "")
                      if not lack
                      else f"Ray-path terms: measured ({shown(base[1])} lacks "
                           f"{shown(', '.join(lack))})")
        if lack:
            base = None
    with Progress(TextColumn("[bold]profiling[/] {task.description}"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                  disable=args.no_progress) as bar:
        tps = sum(len(pts.tp_sizes(exps, e.actor.name)) + len(pts.dp_sizes(exps, e.actor.name))
                  for e in actors)
        # with a base: the in-process tables, then (own_ray) the groups and engine calls
        total = (pts.ticks(len(actors), len(genrms), len(pts.busy_counts(exps, args.device)), tps)
                 if base is None else dataclasses.replace(pts, ray=False).ticks(len(actors),
                                                                                len(genrms))
                 + (tps + len(actors) + len(genrms) if pts.own_ray and pts.ray else 0))
        task = bar.add_task("starting", total=total)
        prof = profile_experiments(exps, args.device, pts,
                                  tick=lambda what: bar.update(task, advance=1, description=what),
                                  base=base)
    save_profile(prof, out)
    _summary(console, prof)
    from yatt.planner.coverage import missing_terms

    whole = "every term measured" + (" (Ray-path terms: the base's, rescaled)" if base else "")
    for e in exps:
        lack = missing_terms(prof, e)
        console.print(f"{shown(e.name)}: " + (whole if not lack else
                      "not measured (priced by the analytic model): " + shown(", ".join(lack))))
    print(f"wrote {clean(str(out))}")
    return 0


def _base(args: argparse.Namespace, exps) -> Optional[tuple]:
    """(profile, path) that a quick profile takes its Ray-path terms from: --base, else the
    profile shipped for the first config's device kind; None without either."""
    from yatt.planner.profiled import given_or_shipped

    from .common import profile_arg

    prof, path = given_or_shipped(profile_arg(args.base), args.base, exps[0].cluster.gpu.name)
    return None if prof is None else (prof, str(path))


def _summary(console, prof) -> None:
    t = prof.tables
    for name, m in t.models.items():
        bits = []
        if m.train:
            b, s, x = m.train[-1]
            bits.append(f"train b{b:g}xs{s:g} {x * 1e3:.0f} ms")
        if m.engine is not None:
            e = m.engine
            bits.append(f"decode step {e.decode[0][2] * 1e3:.1f} ms (b{e.decode[0][0]:g})")
            bits.append(f"re-create {e.start_s:.2f} s, teardown {e.stop_s:.2f} s")
        if m.weight_sync_s:
            bits.append(f"weight sync {m.weight_sync_s * 1e3:.0f} ms")
        console.print(f"{shown(name)}: " + "; ".join(bits))
    console.print(f"ray round trip {t.rpc_s * 1e3:.2f} ms; {shown(prof.source)}")
