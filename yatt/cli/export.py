"""`yatt export RUN_DIR [--step N] -o DIR`: a run's trained actor as a Hugging Face directory.

Why: the verb users reach for after training; the work is yatt.exec.export (it needs
the executor stack: Megatron reads the checkpoint).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .common import needs_exec


def export_command(args: argparse.Namespace) -> int:
    try:
        from yatt.exec.export import export_run
    except ImportError as e:
        raise needs_exec("export", e) from None
    from rich.console import Console

    console = Console()
    rep = export_run(Path(args.run_dir), Path(args.out), args.step, verify=not args.no_verify,
                     log=lambda m: console.print(m, highlight=False))
    check = (f"; logits match the trainer's (max |diff| {rep['max_abs_logit_diff']:.2g} <= "
             f"{rep['logit_tol']:.2g})" if "max_abs_logit_diff" in rep else "")
    console.print(f"exported {rep['checkpoint']} ({rep['parameters']:,} parameters) to "
                  f"{args.out}{check}", highlight=False)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a run's trained actor as a Hugging Face directory",
                       description="Convert a run's checkpoint (default: the newest valid one) "
                                   "into safetensors + config + tokenizer + generation config, "
                                   "loadable by transformers and vLLM.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a `yatt run` output directory")
    p.add_argument("--step", type=int, default=None, metavar="N",
                   help="the checkpoint of step N (default: the newest valid one)")
    p.add_argument("-o", "--out", required=True, metavar="DIR", help="new output directory")
    p.add_argument("--no-verify", action="store_true",
                   help="skip the logit check against the trainer")
    p.set_defaults(func=export_command)
