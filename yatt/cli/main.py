"""`yatt` command line: parse -> validate -> call one package -> print/write.

Why: the one entry point that sees every verb. Each verb lives in its own module of
`yatt.cli` with an `add_parser(sub)` that registers it; bad input ends with exit status 2
and one line on stderr, and writes nothing.
"""
from __future__ import annotations

import sys
from typing import Sequence

from yatt.core.errors import InputError
from yatt.core.limits import work_budget

from . import calibrate, demo, export, plan, profile, replay, run
from .common import Parser

VERBS = (plan, run, export, replay, calibrate, profile, demo)


def build_parser() -> Parser:
    parser = Parser(prog="yatt", description="Plan and run RLHF placements with a generative reward model.")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="VERB", parser_class=Parser)
    sub.required = True
    for verb in VERBS:
        verb.add_parser(sub)
    return parser


def _version() -> str:
    from yatt.core.version import yatt_version

    return f"yatt {yatt_version()}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if argv is None:   # the process's own command (not an in-process call from a caller)
        from yatt.exec import diag
        diag.install()   # `kill -USR1 PID` dumps the stacks of a hung `yatt` (docs/reliability.md)
    try:
        with work_budget():   # every simulation a verb runs is metered (yatt.core.limits)
            return int(args.func(args) or 0)
    except InputError as e:
        print(f"yatt {args.command}: error: {e.one_line()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("yatt: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
