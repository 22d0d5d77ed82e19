"""Profile files: fitted or measured cost-model coefficients that `yatt plan --profile` uses.

Why: `yatt calibrate` (fit from traces) and `yatt profile` (micro-benchmarks) both end in
the same small YAML file, so every consumer reads one format:

    kind: yatt.profile/1
    hardware: "2 x cpu-local"
    source: "calibrate: runs/demo/trace.jsonl"
    efficiency: {train_mfu: 0.31, decode_bw_eff: 0.62, ...}   # any Efficiency field
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from yatt.core.config import dump_yaml, read_yaml
from yatt.core.errors import InputError
from yatt.core.schema import from_dict, spec_field

from .costmodel import Efficiency

PROFILE_KIND = "yatt.profile/1"


@dataclass(frozen=True)
class Profile:
    efficiency: Efficiency = spec_field(default_factory=Efficiency)
    kind: str = PROFILE_KIND
    hardware: str = ""
    source: str = ""
    fit_error: dict[str, float] = spec_field(default_factory=dict, help="relative error per phase")

    def __post_init__(self) -> None:
        if self.kind != PROFILE_KIND:
            raise InputError(f"got {self.kind!r}; allowed: {PROFILE_KIND}", field="kind")


def load_profile(path: str | Path) -> Profile:
    data = read_yaml(path)
    try:
        return from_dict(Profile, data)
    except InputError as e:
        raise e.within(file=str(path)) from None


def save_profile(profile: Profile, path: str | Path) -> None:
    dump_yaml(profile, path)
