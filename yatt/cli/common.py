"""Helpers every verb of the `yatt` command shares: argument parsing, consoles, progress,
profile arguments, the bundled default configs, and the per-phase fidelity table.

Why: one public home for what the verbs have in common, so no verb imports another's
private helpers. Nothing heavy is imported at module level: `yatt --help` stays fast.
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any, Optional

from yatt.core.errors import InputError, clean
from yatt.core.limits import MAX_TOP
from yatt.core.safeio import (check_new_dir, check_not_inputs, check_out_dir,  # noqa: F401 - for the verbs
                              check_out_file)


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit status 2."""

    def error(self, message: str) -> None:
        self.exit(2, f"{self.prog}: error: {message}\n")


def config_or_bundled(text: Optional[str], bundled_name: str) -> Path:
    """The config path given on the command line, else the bundled one."""
    if text:
        return Path(text)
    from yatt.core.bundled import bundled

    return bundled(bundled_name)


def shown(value: Any, limit: int = 200) -> str:
    """User text (a name, a path, a message) to print on a rich console: one line, control
    bytes escaped, at most ~`limit` characters (a 100 KB name would stall the highlighter),
    and rich markup escaped (a name like `x[/]` is text, not a closing tag)."""
    from rich.markup import escape

    return escape(clean(str(value), limit))


def shown_lines(text: str, limit: int = 2000) -> str:
    """`shown` for text of several lines (each line cleaned and escaped on its own)."""
    return "\n".join(shown(line, limit) for line in str(text).split("\n"))


def plot_text(value: Any, limit: int = 120) -> str:
    """User text for a matplotlib title: one line, short, `$` not read as math."""
    return clean(str(value), limit).replace("$", r"\$")


def check_fault_env() -> None:
    """Parse YATT_FAULTS (fault injection) before anything starts: a typo must not surface
    inside an actor after Ray and the engines are up."""
    from yatt.exec import faults

    faults.check_env()


def check_top(top: int) -> None:
    """--top rows: each one is re-simulated over every seed, so it is bounded."""
    if not 1 <= top <= MAX_TOP:
        raise InputError(f"got {top}; allowed: an integer >= 1 and <= {MAX_TOP}", field="--top")


def wide_console(min_width: int = 140):
    """A rich console at least `min_width` columns wide (tables stay on one line)."""
    from rich.console import Console

    return Console(width=max(Console().width, min_width))


# What the exec install adds (pyproject's `exec` extra), cheapest imports first.
EXEC_MODULES = ("psutil", "safetensors", "tokenizers", "transformers", "torch", "megatron.core",
                "ray", "vllm")


def needs_exec(verb: str, err: ImportError, module: str = "") -> InputError:
    """The one line for a verb that needs the executor stack on a light install (the CLI
    prefixes it with `yatt VERB: error:`)."""
    missing = err.name or module or "a dependency"
    return InputError(f"needs the exec install ({missing} is missing); allowed: "
                      "`bash scripts/install.sh exec` or `pip install 'yatt[exec]'`")


def require_exec(verb: str) -> None:
    """Import the whole exec stack now, so a light install fails here in one line rather
    than deep inside the verb with a traceback."""
    import importlib

    for m in EXEC_MODULES:
        try:
            importlib.import_module(m)
        except ImportError as e:
            raise needs_exec(verb, e, m) from None


def profile_arg(path: Optional[str]):
    """The profile named by --profile (None without the flag)."""
    if not path:
        return None
    from yatt.planner.profile_io import load_profile

    return load_profile(path)


def profile_or_shipped(args: argparse.Namespace, exp: Any):
    """The profile named by --profile, else the one shipped for the config's device kind
    (sets `args.profile` to its path), else None (analytic defaults): `yatt plan` and
    `yatt run` predict the same config with the same cost model."""
    from yatt.planner.profiled import given_or_shipped

    profile, args.profile = given_or_shipped(profile_arg(args.profile), args.profile,
                                             exp.cluster.gpu.name)
    return profile


def add_host_check_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-host-check", action="store_true",
                   help="predict with the profile's times as measured (no host probe, no "
                        "rescale; reproducible planning)")


def host_check_on(args: argparse.Namespace) -> bool:
    """Whether the verb times the host probe: not with --no-host-check, nor with
    YATT_HOST_CHECK=off (a bad value: one line, exit 2). Call it while validating."""
    from yatt.profiling.hostcheck import enabled_by_env

    return enabled_by_env() and not getattr(args, "no_host_check", False)


def host_checked(console: Any, profile: Any, config: Any, enabled: bool, trace: Any = None):
    """The profile rescaled to this host (`yatt.profiling.hostcheck`), or to the host a
    measured `trace`'s run recorded, its lines printed on `console`; a `HostCheck` whose
    `.profile` the verb predicts with."""
    from yatt.planner.hostscale import HostProbe
    from yatt.profiling.hostcheck import check_host, check_recorded

    recorded = HostProbe.from_record(trace.meta.extra) if trace is not None else None
    check = (check_recorded(profile, recorded, enabled=enabled)
             or check_host(profile, clean(str(config), 400), enabled=enabled))
    for line in check.lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return check


def cost_model_line(path: Optional[str], profile: Any, note: str = "") -> str:
    """Which cost model a verb uses, in one line (`note`: how the host check rescaled it)."""
    if not path:
        return "cost model: analytic defaults"
    kind = "measured tables" if getattr(profile, "tables", None) is not None else "efficiencies"
    kind += f"; {note}" if note else ""
    return f"cost model: profile {clean(path)} ({kind})"   # plain text (printed markup=False)


def print_profile_gaps(console: Any, profile: Any, exp: Any, config: Any) -> None:
    """Print one line naming the terms `exp` needs that a tables profile did not measure (a
    model of the user's own, say), which the analytic model prices instead, and the `yatt
    profile` command that measures them; nothing when the profile covers the experiment or
    has no tables (then the cost-model line already says "efficiencies")."""
    tables = getattr(profile, "tables", None)
    if tables is None:
        return
    from yatt.planner.coverage import missing_terms
    from yatt.planner.hostscale import refresh_command

    gaps = missing_terms(profile, exp)
    if not gaps:
        return
    shown_gaps = ", ".join(gaps[:4]) + (f" and {len(gaps) - 4} more" if len(gaps) > 4 else "")
    console.print(f"profile gaps: {clean(shown_gaps, 400)} not measured (the analytic model "
                  "prices such tables; without stop lengths every response runs to its "
                  "budget): predictions can be off several-fold; measure them: "
                  f"`{refresh_command(clean(str(config), 400), tables.device)}` and pass "
                  "--profile profile.yaml", markup=False, highlight=False, soft_wrap=True)


def efficiency_arg(path: Optional[str]):
    """The efficiencies of the profile named by a flag, else the defaults."""
    from yatt.planner.costmodel import Efficiency

    prof = profile_arg(path)
    return prof.efficiency if prof is not None else Efficiency()


class LazyProgress:
    """A progress display that appears only once the work has run for `after` seconds.
    Call it as `progress(n, what)`; `close()` when done."""

    def __init__(self, console: Any, label: str, enabled: bool, after: float = 1.5) -> None:
        self.console, self.label, self.enabled, self.after = console, label, enabled, after
        self.t0 = time.perf_counter()
        self.progress = None
        self.task = None

    def __call__(self, n: int, what: str) -> None:
        if not self.enabled:
            return
        if self.progress is None:
            if time.perf_counter() - self.t0 < self.after:
                return
            from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                     TextColumn("{task.completed} simulations"), TimeElapsedColumn(),
                                     console=self.console, transient=True)
            self.progress.start()
            self.task = self.progress.add_task(self.label, total=None)
        self.progress.update(self.task, completed=n, description=f"{self.label}: {what}")

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()

    def __enter__(self) -> "LazyProgress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x * 100:+.1f}%"


def phase_table(rep, note: str = ""):
    """Recorded against predicted busy seconds per (phase, role) of a replay (`note`: how the
    host check rescaled the profile, shown in the title)."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=f"Recorded vs predicted, recorded plan ({len(rep.steps)} steps; busy seconds "
                    "per step, mean" + (f"; profile {escape(note)}" if note else "") + ")",
              title_justify="left")
    for col in ("phase", "role", "recorded s", "predicted s", "error"):
        t.add_column(col, justify="left" if col in ("phase", "role") else "right")
    for r in rep.phases():
        t.add_row(r.phase.value, r.role.value, f"{r.recorded_s:.2f}", f"{r.predicted_s:.2f}", pct(r.error))
    t.add_row("[bold]step time[/]", "", f"{rep.recorded_stats.step_time_mean:.2f}",
              f"{rep.predicted_stats.step_time_mean:.2f}", pct(rep.step_error))
    t.add_row("samples/s", "", f"{rep.recorded_stats.samples_per_s:.2f}",
              f"{rep.predicted_stats.samples_per_s:.2f}", "")
    return t
