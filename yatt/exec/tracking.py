"""Step metrics to experiment trackers (TensorBoard), besides metrics.csv.

Why: users watch curves in the tools they already run. `log.tensorboard: DIR` writes every
numeric metrics.csv column as a scalar per step with tensorboardX (a maintained writer that
needs neither TensorFlow nor the `tensorboard` package), under the column's name
(`reward_mean`, `eval_accuracy`, `reward/<extra>`, ...).
"""
from __future__ import annotations

import math
from typing import Any, Optional

from yatt.core.jobspec import LogSpec


class Tracker:
    """Writes each step's row to the configured trackers; a no-op when none is set."""

    def __init__(self, spec: LogSpec, run_name: str = ""):
        self.tb: Optional[Any] = None
        if spec.tensorboard:
            from tensorboardX import SummaryWriter
            self.tb = SummaryWriter(logdir=spec.tensorboard, comment=run_name)

    def log(self, row: dict[str, Any]) -> None:
        if self.tb is None:
            return
        step = int(row["step"])
        for k, v in row.items():
            if k == "step" or isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            if math.isfinite(float(v)):
                self.tb.add_scalar(k, float(v), step)
        self.tb.flush()

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
            self.tb = None
