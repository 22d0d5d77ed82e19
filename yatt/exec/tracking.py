"""Step metrics to experiment trackers, besides metrics.csv.

Why: users watch curves in the tools they already run. Every numeric metrics.csv column
goes out per step under its own name (`reward_mean`, `eval_accuracy`, `reward/<extra>`,
...): `log.tensorboard: DIR` with tensorboardX (a maintained writer that needs neither
TensorFlow nor the `tensorboard` package); `log.wandb: PROJECT` to Weights & Biases in
offline mode (files under the run directory, `wandb sync` uploads them);
`log.mlflow: DIR` to an MLflow file store. The last two only when their packages are
installed (job.py refuses the run otherwise).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

from yatt.core.jobspec import LogSpec


class Tracker:
    """Writes each step's row to the configured trackers; a no-op when none is set."""

    def __init__(self, spec: LogSpec, run_name: str = "", run_dir: str = "."):
        self.tb: Optional[Any] = None
        self.wandb: Optional[Any] = None
        self.mlflow: Optional[Any] = None
        if spec.tensorboard:
            from tensorboardX import SummaryWriter
            self.tb = SummaryWriter(logdir=spec.tensorboard, comment=run_name)
        if spec.wandb:
            import wandb
            self.wandb = wandb.init(project=spec.wandb, name=run_name, mode="offline",
                                    dir=run_dir)
        if spec.mlflow:
            import mlflow
            mlflow.set_tracking_uri(Path(spec.mlflow).resolve().as_uri())
            mlflow.set_experiment(run_name or "yatt")
            mlflow.start_run()
            self.mlflow = mlflow

    def log(self, row: dict[str, Any]) -> None:
        step = int(row["step"])
        scalars = {k: float(v) for k, v in row.items()
                   if k != "step" and not isinstance(v, bool) and isinstance(v, (int, float))
                   and math.isfinite(float(v))}
        if self.tb is not None:
            for k, v in scalars.items():
                self.tb.add_scalar(k, v, step)
            self.tb.flush()
        if self.wandb is not None:
            self.wandb.log(scalars, step=step)
        if self.mlflow is not None:
            self.mlflow.log_metrics({k.replace("/", "."): v for k, v in scalars.items()}, step=step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
            self.tb = None
        if self.wandb is not None:
            self.wandb.finish()
            self.wandb = None
        if self.mlflow is not None:
            self.mlflow.end_run()
            self.mlflow = None
