"""yatt: plan and run RLHF placements (full vs partial colocate) with a generative reward model.

`from yatt import Trainer` is the Python quick start and `yatt.plan(config)` the planning
API (yatt.api; docs/plan.md). Attributes load lazily, so `import yatt` does no work.
"""


def __getattr__(name: str):
    if name == "Trainer":
        from yatt.api import Trainer

        return Trainer
    if name == "plan":
        from yatt.api import plan

        return plan
    if name == "PlanResult":
        from yatt.api import PlanResult

        return PlanResult
    if name == "__version__":
        from yatt.core.version import yatt_version

        return yatt_version()
    raise AttributeError(f"module 'yatt' has no attribute {name!r}")
