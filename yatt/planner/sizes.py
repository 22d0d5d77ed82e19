"""Cluster sizes for what-if questions: parse `--gpus 16,32,64` and resize an experiment.

Why: `yatt plan --gpus` and `yatt replay --gpus` ask the same question of different
inputs; one parser and one resize keep their rules (whole nodes, or a divisor of one
node) identical.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from yatt.core.errors import InputError
from yatt.core.limits import MAX_GPUS, MAX_LIST
from yatt.core.schema import show
from yatt.core.plan import Experiment
from yatt.core.specs import ClusterSpec


def _check(g: int, per: int) -> None:
    if g < 1 or (g > per and g % per) or (g < per and per % g) or g > MAX_GPUS:
        raise InputError(f"got {g}; allowed: a multiple of {per} GPUs per node (or a divisor "
                         f"of it), at most {MAX_GPUS}", field="--gpus")


def parse_gpu_sizes(text: Optional[str], cluster: ClusterSpec) -> list[int]:
    """Sorted, distinct cluster sizes from 'a,b,c' (None, no flag: no sizes)."""
    if text is None:
        return []
    parts = text.split(",")
    if len(parts) > MAX_LIST:
        raise InputError(f"got {len(parts)} sizes; allowed: at most {MAX_LIST}", field="--gpus")
    out = []
    for part in parts:
        try:
            if len(part) > 20:
                raise ValueError
            g = int(part)
        except ValueError:
            raise InputError(f"got {show(part)}; allowed: comma-separated integers, e.g. 16,32",
                             field="--gpus") from None
        _check(g, cluster.gpus_per_node)
        out.append(g)
    return sorted(set(out))


def resize(exp: Experiment, gpus: int, cluster: Optional[ClusterSpec] = None) -> Experiment:
    """`exp` on `gpus` devices of `cluster`'s kind (default: its own): whole nodes when
    gpus >= a node, else one partial node."""
    c = cluster or exp.cluster
    per = c.gpus_per_node
    _check(gpus, per)
    c = (dataclasses.replace(c, nodes=gpus // per) if gpus >= per
         else dataclasses.replace(c, nodes=1, gpus_per_node=gpus))
    return dataclasses.replace(exp, cluster=c)
