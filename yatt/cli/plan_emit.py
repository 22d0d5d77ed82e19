"""`yatt plan --emit verl,openrlhf,nemo-rl`: parse the flag, emit, print and write.

Why: the translation lives in `yatt.planner.emit`; this module only wires the flag to it,
prints what each framework can and cannot express, and writes one script per framework.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from yatt.core.errors import InputError
from yatt.core.safeio import write_text
from yatt.planner.emit import Emission, layout_text
from yatt.planner.frameworks import Framework, parse_framework


def parse_frameworks(text: Optional[str]) -> list[Framework]:
    """--emit: one framework or several, comma-separated (none without the flag)."""
    if text is None:
        return []
    out: list[Framework] = []
    for part in text.split(","):
        fw = parse_framework(part)
        if fw in out:
            raise InputError(f"{fw.value} is given twice", field="--emit")
        out.append(fw)
    return out


def file_name(fw: Framework) -> str:
    return f"emit-{fw.value}.sh"


def emit_all(console, result, frameworks: list[Framework], progress: bool = True) -> list[Emission]:
    """Emit the best placement for each framework and print a summary table."""
    if not frameworks:
        return []
    from rich.table import Table

    from .common import LazyProgress, shown

    out = []
    for fw in frameworks:
        with LazyProgress(console, f"--emit {fw.value}", enabled=progress) as prog:
            out.append(result.emit(fw, prog))
    t = Table(title="--emit: the best placement in each framework's terms (predicted by yatt)",
              title_justify="left")
    for col in ("framework", "expresses it?", "emitted layout", "step s", "vs best", "file"):
        t.add_column(col, justify="right" if col in ("step s", "vs best") else "left")
    best = result.best.mean
    for e in out:
        tgt = e.target
        t.add_row(e.framework.value, "yes" if e.exact else "no",
                  (e.label + ": " + layout_text(tgt.plan)) if tgt else "nothing expressible",
                  f"{tgt.mean:.1f}" if tgt else "",
                  f"{(tgt.mean - best) / best * 100:+.1f}%" if tgt else "", file_name(e.framework))
    console.print(t)
    for e in out:
        for r in e.reasons:
            console.print(f"{e.framework.value} cannot express it: {shown(r, 1000)}.", highlight=False)
    return out


def write_emitted(out: Path, emitted: list[Emission]) -> list[Path]:
    paths = []
    for e in emitted:
        paths.append(write_text(out / file_name(e.framework), e.text()))   # never through a link
    return paths
