"""yatt.sim: the SimPy simulator of RL steps under a Plan, and its metrics/plots.

Imports only yatt.core, simpy and numpy (matplotlib lazily, inside `gantt.plot_gantt`).
"""
from .metrics import StepStats, summarize
from yatt.core.layout import make_plan
from .simulate import simulate

__all__ = ["simulate", "summarize", "StepStats", "make_plan"]
