"""`yatt plan`: load an experiment, price it, and print/write the recommendation.

Why: kept apart from cli.py so the argument wiring stays small and the rendering (rich
tables, file outputs) has one home.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from yatt.core.config import load_experiment
from yatt.core.errors import InputError
from yatt.planner.breakdown import infeasibility, role_facts
from yatt.planner.costmodel import AnalyticCostModel


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


def print_breakdown(console: Console, exp, cost) -> list[str]:
    facts = role_facts(exp, cost)
    c = exp.cluster
    console.print(f"[bold]{exp.name}[/]: {c.num_gpus} x {c.gpu.name} ({c.nodes} nodes x "
                  f"{c.gpus_per_node}); actor {exp.actor.name}"
                  + (f", GenRM {exp.genrm.name}" if exp.genrm else ", rule reward")
                  + f"; {exp.workload.prompts_per_step} prompts x {exp.workload.samples_per_prompt}"
                  " samples per step")
    t = Table(title="Memory per device (GB) at the smallest TP that fits", title_justify="left")
    for col in ("role", "model", "params", "min TP", "weights", "grads", "optim",
                "activ.", "min KV", "total/cap GB", "KV tok/engine"):
        t.add_column(col, justify="right" if col not in ("role", "model") else "left")
    for f in facts:
        m = f.mem
        if m is None:
            t.add_row(f.role.value, f.model, _count(f.params_b * 1e9), "none", f"{f.weights_gb:.1f}",
                      "", "", "", "", "does not fit", "")
            continue
        t.add_row(f.role.value, f.model, _count(f.params_b * 1e9), str(f.min_tp), _gb(m.weights),
                  _gb(m.grads), _gb(m.optimizer), _gb(m.activations), _gb(m.kv_cache),
                  f"{_gb(m.total)}/{_gb(m.capacity)}", f"{f.kv_tokens:,}" if f.kv_tokens else "")
    console.print(t)
    u = Table(title="Unit costs (analytic roofline model)", title_justify="left")
    u.add_column("role")
    u.add_column("operation")
    u.add_column("time", justify="right")
    for f in facts:
        for label, secs in f.unit_costs:
            u.add_row(f"{f.role.value} (TP{f.min_tp})", label, _secs(secs))
    console.print(u)
    return infeasibility(exp, facts)


def run_plan_command(args: argparse.Namespace) -> int:
    from yatt.cli import _default_config

    config = Path(args.config) if args.config else _default_config()
    exp = load_experiment(config)
    cost = AnalyticCostModel.for_experiment(exp)
    console = Console(width=max(Console().width, 120))
    why = print_breakdown(console, exp, cost)
    if why:
        raise InputError("cannot place this experiment: " + "; ".join(why), file=str(config))
    return 0
