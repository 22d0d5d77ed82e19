"""Reward functions that fail at run time (tests/exec/test_hostile_runtime.py)."""
import math
import time


def raises(prompt, response, answer, **row):
    raise ValueError(f"cannot grade {answer!r}")


def nan(prompt, response, **row):
    return math.nan


def hangs(prompt, response, **row):
    time.sleep(3600)
