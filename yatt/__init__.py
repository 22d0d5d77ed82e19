"""yatt: plan and run RLHF placements (full vs partial colocate) with a generative reward model.

`from yatt import Trainer` is the Python quick start (yatt.api); it is imported lazily so
`import yatt` stays free of work.
"""
__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "Trainer":
        from yatt.api import Trainer

        return Trainer
    raise AttributeError(f"module 'yatt' has no attribute {name!r}")
