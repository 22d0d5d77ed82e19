"""`yatt` command line: parse -> validate -> call one package -> print/write.

Why: the only module that sees every package. Each verb is a small function; bad input
ends with exit status 2 and one line on stderr, and writes nothing.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Sequence

from yatt.core.errors import InputError

DEFAULT_CONFIG = "configs/default.yaml"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage too)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _default_config() -> Path:
    """configs/default.yaml next to the working directory, else the one in this checkout."""
    here = Path(DEFAULT_CONFIG)
    if here.is_file():
        return here
    return Path(__file__).resolve().parents[1] / DEFAULT_CONFIG


def cmd_plan(args: argparse.Namespace) -> int:
    from yatt.cli_plan import run_plan_command

    return run_plan_command(args)


def _add_plan(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="simulate placements and recommend one",
                       description="Search placements (mode, GPU split, TP/DP) for an experiment, "
                                   "simulate them, and write plan.yaml plus a timeline.")
    p.add_argument("config", nargs="?", default=None, help=f"experiment YAML (default: {DEFAULT_CONFIG})")
    p.add_argument("--out", default="out/plan", help="output directory (default: out/plan)")
    p.add_argument("--top", type=int, default=5, help="rows in the ranked table (default: 5)")
    p.add_argument("--gpus", default=None, help="comma-separated cluster sizes for a scaling curve")
    p.add_argument("--profile", default=None, help="profile.yaml from `yatt profile`/`yatt calibrate`")
    p.add_argument("--breakdown", action="store_true", help="also print per-role memory and unit costs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_plan)


def _add_replay(sub: argparse._SubParsersAction) -> None:
    from yatt.cli_replay import _add_replay as add  # light module: heavy imports run in the handler

    add(sub)


def _add_calibrate(sub: argparse._SubParsersAction) -> None:
    from yatt.cli_calibrate import _add_calibrate as add

    add(sub)


def _add_run(sub: argparse._SubParsersAction) -> None:
    from yatt.cli_run import add_run  # light: the executor is imported only when run

    add_run(sub)


def _add_profile(sub: argparse._SubParsersAction) -> None:
    from yatt.cli_profile import add_profile

    add_profile(sub)


COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [_add_plan, _add_run, _add_replay,
                                                               _add_calibrate, _add_profile]


def _add_demo(sub: argparse._SubParsersAction) -> None:
    from yatt.cli_demo import add_demo  # light: training code is imported only when run

    add_demo(sub)


COMMANDS.append(_add_demo)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="yatt", description="Plan and run RLHF placements with a generative reward model.")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="VERB", parser_class=_Parser)
    sub.required = True
    for add in COMMANDS:
        add(sub)
    return parser


def _version() -> str:
    from yatt import __version__

    return f"yatt {__version__}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except InputError as e:
        print(f"yatt {args.command}: error: {e.one_line()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("yatt: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
