"""The rule reward: the user's function (or a built-in) called on every rollout, safely.

Why: a reward function is user code running inside the step controllers. It may raise,
return NaN or a string, or hang; none of that may kill a run silently or with a
traceback from deep inside Ray. Each call runs on a daemon worker thread under
`reward.timeout_s`; a bad result becomes one line naming the function, the sample and the
reason (`RewardError`, an `InputError`: `yatt run` exits 2), or, with
`reward.on_error: zero`, a 0.0 that is counted (metrics.csv `reward_errors`).

A function is "pkg.module:fn" (imported) or "/path/file.py:fn" (loaded from the file),
called as `fn(prompt, response, **row)`; it returns a float, or a dict with a float
`score` and other floats that are logged as `reward/<name>` columns.
"""
from __future__ import annotations

import importlib
import importlib.util
import math
import numbers
import queue
import re
import sys
import threading
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Union

from yatt.core.errors import InputError
from yatt.core.jobspec import BuiltinReward, OnError, RewardSpec
from yatt.core.schema import show

from .task import first_integer

RewardFn = Callable[..., Any]


class RewardError(InputError):
    """A reward function call failed and reward.on_error is fail."""


# ---- built-ins -------------------------------------------------------------------------
def _norm(text: Any) -> str:
    return " ".join(str(text).split()).casefold()


def exact_match(prompt: Any, response: str, answer: Any = None, **_: Any) -> float:
    """1.0 when the response equals the answer after trimming, whitespace runs and case."""
    return 1.0 if answer is not None and _norm(response) == _norm(answer) else 0.0


def first_integer_match(prompt: Any, response: str, answer: Any = None, **_: Any) -> float:
    """1.0 when the first integer in the response equals the answer (the arith task)."""
    got = first_integer(response)
    return 1.0 if answer is not None and got is not None and got == str(answer).strip() else 0.0


def math_equal(prompt: Any, response: str, answer: Any = None, **_: Any) -> float:
    """1.0 when math-verify finds the response's final answer equivalent to the answer.
    Its own signal-based timeouts are off (they only work on the main thread); the call's
    timeout is reward.timeout_s, as for any rule."""
    from math_verify import parse, verify
    if answer is None:
        return 0.0
    gold = parse(_math_text(answer), parsing_timeout=None)
    got = parse(response, parsing_timeout=None)
    return 1.0 if gold and got and verify(gold, got, timeout_seconds=None) else 0.0


def _math_text(answer: Any) -> str:
    s = str(answer).strip()
    return s if "$" in s or "\\" in s else f"${s}$"


BUILTINS: dict[BuiltinReward, RewardFn] = {
    BuiltinReward.EXACT_MATCH: exact_match,
    BuiltinReward.FIRST_INTEGER: first_integer_match,
    BuiltinReward.MATH: math_equal,
}


# ---- resolution ------------------------------------------------------------------------
def resolve(ref: Union[str, BuiltinReward], field: str = "reward.function") -> RewardFn:
    """The callable a rule names (InputError naming the field when it cannot be had)."""
    if isinstance(ref, BuiltinReward):
        if ref is BuiltinReward.MATH:
            try:
                import math_verify  # noqa: F401
            except ImportError:
                raise InputError("the math reward needs math-verify; allowed: "
                                 "pip install 'yatt[math]'", field="reward.builtin") from None
            _quiet_math_verify()
        return BUILTINS[ref]
    mod_name, _, qual = ref.rpartition(":")
    if mod_name.endswith(".py"):
        path = Path(mod_name)
        if not path.is_file():
            raise InputError(f"no such file {path}", field=field)
        name = "yatt_reward_" + re.sub(r"\W", "_", str(path.resolve()))
        try:
            if name in sys.modules:
                module = sys.modules[name]
            else:
                spec = importlib.util.spec_from_file_location(name, path)
                module = importlib.util.module_from_spec(spec)
                sys.modules[name] = module
                spec.loader.exec_module(module)
        except Exception as e:  # noqa: BLE001 - user code failed to import
            sys.modules.pop(name, None)
            raise InputError(f"importing {path} failed: {_why(e)}", field=field) from None
    else:
        try:
            module = importlib.import_module(mod_name)
        except Exception as e:  # noqa: BLE001
            raise InputError(f"cannot import {mod_name} ({_why(e)}); allowed: an importable "
                             "module or a .py path", field=field) from None
    obj: Any = module
    for part in qual.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise InputError(f"{mod_name} has no {qual}", field=field)
    if not callable(obj):
        raise InputError(f"{ref}: got a {type(obj).__name__}; allowed: a function", field=field)
    return obj


def describe(ref: Union[str, BuiltinReward, None]) -> str:
    if isinstance(ref, BuiltinReward):
        return f"builtin {ref.value}"
    return str(ref)


def _why(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:200]}" if text else type(e).__name__


def _quiet_math_verify() -> None:
    """math-verify logs a warning on every call made without its own timeout."""
    import logging
    for name in ("math_verify", "math_verify.parser", "math_verify.grader", "math_verify.utils"):
        logging.getLogger(name).setLevel(logging.ERROR)


# ---- calling ---------------------------------------------------------------------------
class _Outcome(Enum):
    RETURNED = "returned"
    RAISED = "raised"
    TIMED_OUT = "timed out"


class _Worker:
    """One daemon thread that runs calls; a call past its timeout abandons the thread
    (it cannot be killed) and the next call gets a fresh one. Daemon: a hung user function
    never keeps the process from exiting."""

    def __init__(self) -> None:
        self.jobs: "queue.Queue" = queue.Queue()
        threading.Thread(target=self._loop, daemon=True, name="yatt-reward").start()

    def _loop(self) -> None:
        while True:
            fn, box, done = self.jobs.get()
            try:
                box.append((_Outcome.RETURNED, fn()))
            except BaseException as e:  # noqa: BLE001 - reported to the caller
                box.append((_Outcome.RAISED, e))
            done.set()

    def call(self, fn: Callable[[], Any], timeout: float) -> tuple[_Outcome, Any]:
        box: list = []
        done = threading.Event()
        self.jobs.put((fn, box, done))
        if not done.wait(timeout):
            return _Outcome.TIMED_OUT, None
        return box[0]


@dataclass(frozen=True)
class RuleScore:
    score: float
    extras: tuple[tuple[str, float], ...] = ()
    error: str = ""           # set when the call failed and on_error is zero


class RuleReward:
    """Calls one rule on (prompt, response, row) with the spec's timeout and error policy."""

    def __init__(self, spec: RewardSpec, ref: Union[str, BuiltinReward],
                 fn: Optional[RewardFn] = None):
        self.spec, self.name = spec, describe(ref)
        self.field = "reward.builtin" if isinstance(ref, BuiltinReward) else "reward.function"
        self.fn = fn if fn is not None else resolve(ref, self.field)
        self._worker: Optional[_Worker] = None

    def __call__(self, prompt: Any, response: str, row: Optional[Mapping[str, Any]],
                 sample: str) -> RuleScore:
        """Score one response; `sample` names it in error lines (e.g. "sample 12 (FILE row 3)")."""
        kw = dict(row or {})
        if self._worker is None:
            self._worker = _Worker()
        status, value = self._worker.call(lambda: self.fn(prompt, response, **kw),
                                          self.spec.timeout_s)
        if status is _Outcome.TIMED_OUT:
            self._worker = None
            return self._fail(sample, f"did not return within reward.timeout_s="
                                      f"{self.spec.timeout_s:g} s")
        if status is _Outcome.RAISED:
            return self._fail(sample, f"raised {_why(value)}")
        return self._check(value, sample)

    def _check(self, value: Any, sample: str) -> RuleScore:
        extras: tuple[tuple[str, float], ...] = ()
        if isinstance(value, Mapping):
            if "score" not in value:
                return self._fail(sample, f"returned a dict without 'score' (keys: "
                                          f"{', '.join(map(str, list(value)[:6]))})")
            rest = []
            for k, v in value.items():
                if k == "score":
                    continue
                if not _number(v):
                    return self._fail(sample, f"returned {k}={show(v)}; allowed: floats beside "
                                              "'score'")
                rest.append((str(k), float(v)))
            extras = tuple(rest)
            value = value["score"]
        if not _number(value):
            return self._fail(sample, f"returned {show(value)}; allowed: a float, or a dict "
                                      "with a float 'score'")
        score = float(value)
        if not math.isfinite(score):
            return self._fail(sample, f"returned {score}; allowed: a finite number")
        return RuleScore(score, extras)

    def _fail(self, sample: str, reason: str) -> RuleScore:
        line = f"{self.name} on {sample}: {reason}"
        if self.spec.on_error is OnError.FAIL:
            raise RewardError(line + " (reward.on_error: zero scores such calls 0 and counts "
                              "them)", field=self.field)
        return RuleScore(0.0, (), line)


def _number(v: Any) -> bool:
    return isinstance(v, numbers.Real)      # bool included: True scores 1.0
