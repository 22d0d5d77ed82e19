"""`python -m yatt.planner.docgen > docs/config.md`: the full configuration reference.

Why here: the reference covers the core specs (`yatt.core.docgen`) and the profile file's
`efficiency:` section (`Efficiency`, a planner class), and only the planner may import both.
"""
from __future__ import annotations

import sys

from yatt.core.docgen import CORE_SECTIONS, Section, config_reference

from .costmodel import Efficiency

SECTIONS: tuple[Section, ...] = CORE_SECTIONS + (
    Section("Profile file `efficiency`", Efficiency,
            "Set by `yatt calibrate`, or by hand in a profile file "
            "(`kind: yatt.profile/1`, `efficiency: {train_mfu: 0.4, ...}`); "
            "`yatt plan|replay|run --profile FILE` uses it. The cost model: docs/fidelity.md."),
)


def reference() -> str:
    """docs/config.md's text."""
    return config_reference(SECTIONS)


if __name__ == "__main__":
    sys.stdout.write(reference())
