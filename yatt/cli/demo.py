"""`yatt demo prepare`: train the learning demo's actor and GenRM checkpoints offline.

Why: `yatt run configs/demo-learn.yaml` needs an actor that is sometimes right and a
GenRM that agrees with the exact checker. The default recipe's checkpoints ship with yatt
(the demo model YAMLs point at them); this verb re-creates them reproducibly from a seed
(yatt/demo/prep.py) into the model cache or `--out`, and reports how good they are.
"""
from __future__ import annotations

import argparse
import dataclasses
import json

from yatt.core.bundled import DEMO_LEARN_EXPERIMENT
from yatt.core.errors import InputError
from yatt.core.safeio import write_text

from .common import check_out_dir, config_or_bundled, needs_exec, shown

def prepare_command(args: argparse.Namespace) -> int:
    from rich.console import Console

    from yatt.core.config import load_experiment

    if args.seed < 0:
        raise InputError(f"got {args.seed}; allowed: an integer >= 0", field="--seed")
    if not 0 < args.actor_target < 1:
        raise InputError(f"got {args.actor_target}; allowed: 0 < target < 1", field="--actor-target")
    exp = load_experiment(config_or_bundled(args.config, DEMO_LEARN_EXPERIMENT))
    try:
        from yatt.demo.prep import PrepConfig, prepare
        from yatt.exec.env import apply_local_env
        from yatt.exec.models import cache_dir
    except ImportError as e:
        raise needs_exec("demo prepare", e) from None
    apply_local_env(cpu=True)
    console = Console()
    out = check_out_dir(args.out, field="--out") if args.out else cache_dir()
    cfg = PrepConfig(seed=args.seed, actor_target=args.actor_target)
    rep = prepare(exp.actor, exp.genrm, out, cfg, log=console.print if args.verbose else (lambda s: None))
    console.print(f"actor: {shown(rep.actor_dir)}  ({rep.actor_steps} SFT steps, expected exact "
                  f"accuracy at T=1: {rep.actor_expected_accuracy:.3f})")
    console.print(f"genrm: {shown(rep.genrm_dir)}  ({rep.genrm_steps} steps; whole verdict right "
                  f"token by token: {rep.genrm_agreement:.3f}; on correct answers "
                  f"{rep.genrm_agreement_on_correct:.3f}, on wrong ones "
                  f"{rep.genrm_agreement_on_wrong:.3f})")
    from yatt.demo.evaluate import generated_agreement
    gen = generated_agreement(rep.genrm_dir)
    console.print(f"genrm as used in a run (greedy generation + ScoreParser, {gen['pairs']} "
                  f"fresh pairs): agreement {gen['agreement']:.3f} (correct answers "
                  f"{gen['on_correct']:.3f}, wrong ones {gen['on_wrong']:.3f})")
    write_text(out / "demo_report.json", json.dumps({**dataclasses.asdict(rep),
                                                    "genrm_generated": gen}, indent=1))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="learning-demo helpers (prepare checkpoints)",
                       description="Learning-demo helpers.")
    dsub = p.add_subparsers(dest="demo_command", metavar="ACTION", parser_class=type(p))
    dsub.required = True
    q = dsub.add_parser("prepare", help="train the demo actor (SFT warm start) and GenRM",
                        description="Train the demo actor and GenRM from a seed into the "
                                    "model cache ($YATT_CACHE/models).")
    q.add_argument("--config", default=None, help=f"experiment naming the models (default: the bundled {DEMO_LEARN_EXPERIMENT})")
    q.add_argument("--seed", type=int, default=0, help="preparation seed (default 0, what runs use)")
    q.add_argument("--actor-target", type=float, default=0.3,
                   help="stop the actor's SFT at this expected accuracy (default 0.3)")
    q.add_argument("--out", default=None, help="output root (default: the model cache)")
    q.add_argument("--verbose", action="store_true", help="print training progress")
    q.set_defaults(func=prepare_command)
