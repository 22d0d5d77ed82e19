"""`yatt export`: a run's Megatron checkpoint -> a Hugging Face model directory.

Why: a trained policy is only useful where users serve and evaluate models, and those
tools load Hugging Face directories. The checkpoint (any TP x DP layout) is loaded into
one Megatron rank in this process, converted with the same `hf_convert` the trainer uses
to hand weights to vLLM, and written as safetensors next to the actor's own config,
tokenizer files and generation config. The result is checked before it is kept: the
exported model's `transformers` logits must equal the Megatron trainer's on a probe
batch (fp32: |diff| <= 1e-5 x max(1, |logit|); see `LOGIT_TOL`), and the numbers go to
`yatt_export.json`. The directory appears whole or not at all: it is written in a fresh
private directory beside the target (mode 0700, a unique name: nothing planted there can
redirect a write) and renamed into place; the target must be absent or empty and not a
link, and its parent writable, before the checkpoint is loaded (`safeio.check_new_dir`).
"""
from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path
from typing import Callable, Optional

from yatt.core.config import load_plan
from yatt.core.errors import InputError
from yatt.core.safeio import (check_new_dir, copy_file, new_private_dir, publish_dir,
                              read_text_at_most, write_text)

from . import checkpoint as ckpt

# Relative logit tolerance. Both sides run the same fp32 weights through the same math in a
# different kernel order (Megatron's fused QKV and GEMM layout vs transformers'); each of the
# ~2 + 4L matmuls rounds at fp32's unit roundoff 6e-8 times a sqrt(depth)-like growth, so
# tiny models differ by ~1e-7 relative and 1e-5 leaves two orders of magnitude of room.
LOGIT_TOL = 1e-5
REPORT = "yatt_export.json"
# Files of the actor's directory that are not weights: copied as they are.
_WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".index.json")
_SKIP = ("yatt_build.json", "yatt_demo.json")


def pick_checkpoint(run_dir: Path, step: Optional[int], log: Callable[[str], None]) -> tuple[int, Path]:
    """The checkpoint of `step` (verified), or the newest valid one."""
    if step is None:
        return ckpt.latest_valid(run_dir, log)
    done = dict(ckpt.complete(run_dir))
    if step not in done:
        have = ", ".join(str(s) for s in sorted(done)) or "none"
        raise InputError(f"no checkpoint of step {step} in {ckpt.root(run_dir)}; allowed: "
                         f"{have}", field="--step")
    why = ckpt.verify(done[step])
    if why is not None:
        raise InputError(f"refusing checkpoint step-{step:06d}: {why}", field="--step")
    return step, done[step]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def export_run(run_dir: Path, out: Path, step: Optional[int] = None, verify: bool = True,
               log: Callable[[str], None] = print) -> dict:
    """Write the HF directory `out` from `run_dir`'s checkpoint; returns the report."""
    import torch
    from safetensors.torch import save_file

    from .models import resolve_model
    from .runner import read_run_file
    from .trainer import MegatronTrainer

    run_dir, out = Path(run_dir), Path(out)
    check_new_dir(out, field="-o")   # not a link, absent or empty, writable: before any work
    plan_file = run_dir / "plan.yaml"
    if not plan_file.is_file():
        raise InputError(f"{plan_file} not found: not a yatt run directory", field="RUN_DIR")
    plan = load_plan(plan_file)
    seed = read_run_file(run_dir)["seed"]
    at, cdir = pick_checkpoint(run_dir, step, log)
    exp = plan.experiment
    actor = Path(resolve_model(exp.actor, seed))
    trainer = MegatronTrainer(exp.actor, str(actor), exp.algo, tp=1, dp=1, rank=0,
                              master_addr="127.0.0.1", master_port=_free_port(), seed=seed)
    tmp: Optional[Path] = None
    try:
        trainer.load_checkpoint(str(cdir / ckpt.TRAINER), optimizer=False)
        state = trainer.hf_state_dict()
        tmp = new_private_dir(out.parent, out.name)
        # safetensors writes by path: into the private directory only
        save_file({k: v.contiguous() for k, v in state.items()}, str(tmp / "model.safetensors"),
                  metadata={"format": "pt"})
        for f in sorted(actor.iterdir()):
            if f.is_file() and not f.name.endswith(_WEIGHTS) and f.name not in _SKIP:
                copy_file(f, tmp / f.name)
        cfg = json.loads(read_text_at_most(tmp / "config.json", field="actor"))
        cfg["dtype"] = "float32"
        cfg.pop("torch_dtype", None)
        write_text(tmp / "config.json", json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        report = {"run_dir": str(run_dir.resolve()), "checkpoint": cdir.name, "step": at,
                  "actor": str(actor), "tensors": len(state),
                  "parameters": int(sum(v.numel() for v in state.values()))}
        if verify:
            report.update(_verify(trainer, tmp, exp.actor.vocab, torch))
        write_text(tmp / REPORT, json.dumps(report, indent=1) + "\n")
        publish_dir(tmp, out)
        tmp = None
    finally:
        trainer.shutdown()
        if tmp is not None:   # a failed export leaves nothing behind
            shutil.rmtree(tmp, ignore_errors=True)
    return report


def _verify(trainer, hf_dir: Path, vocab: int, torch) -> dict:
    """Megatron logits vs `transformers` logits of the written directory on a probe batch."""
    from transformers import AutoModelForCausalLM

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (2, 12), generator=g)
    pos = torch.arange(ids.shape[1]).unsqueeze(0).expand_as(ids)
    with torch.no_grad():
        ours = trainer.logits(ids, pos)[..., :vocab]
        model = AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32).eval()
        theirs = model(input_ids=ids).logits.float()[..., :vocab]
    diff = float((ours - theirs).abs().max())
    scale = max(1.0, float(ours.abs().max()))
    if diff > LOGIT_TOL * scale:
        raise RuntimeError(f"export check failed: transformers logits differ from the "
                           f"trainer's by {diff:.3g} (allowed {LOGIT_TOL * scale:.3g}); "
                           f"nothing was written")
    return {"max_abs_logit_diff": diff, "logit_scale": scale, "logit_tol": LOGIT_TOL * scale}
