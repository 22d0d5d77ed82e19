"""The user's prompts: read a dataset, render and tokenize its prompts, and order them.

Why: `yatt run` trains on what `data:` names (core/jobspec.DataSpec). This module turns
that into the one thing the step controllers ask for, `source.prompts(seed, step,
workload, round)`, with two sources behind it: the built-in arithmetic task
(`ArithSource`) and a table of rows (`TableSource`). Everything a step sees is a pure
function of (seed, step, round) and the dataset, so both placement modes, any number of
controllers, a redone step and a resumed run see exactly the same prompts; the data
position a checkpoint records is derived, and checked on resume (`fingerprint`).

Files are read (`dataset_files`) with maintained libraries: pyarrow (.jsonl, .parquet), the json module
(.json), `datasets.load_from_disk` (directories). Every problem is an `InputError` naming
the file, the row and the field. Reading is bounded like every input (yatt/core/limits.py):
a dataset past YATT_DATA_MAX_BYTES (the file, a directory's files, a parquet file's
decoded table) or past MAX_DATASET_ROWS rows is refused in one line before its rows are
built, and a file is never read past the cap.
"""
from __future__ import annotations

import functools
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np

from yatt.core.errors import InputError
from yatt.core.jobspec import ChatTemplate, DataSpec, OnLong
from yatt.core.safeio import read_text_at_most
from yatt.core.schema import show
from yatt.core.specs import Workload

from .dataset_files import fingerprint, read_rows
from .task import Prompt, id_block, step_prompts

# ---- rendering -------------------------------------------------------------------------
class PromptEncoder:
    """Prompt value (a string or a chat message list) -> token ids, with the chat template
    and system prompt of `data:` and the tokenizer's BOS rule: a tokenizer that has a BOS
    token gets exactly one at the start; one without (Qwen) gets none."""

    def __init__(self, tok: Any, data: DataSpec):
        self.tok, self.data = tok, data
        mode = data.template_mode
        if mode is None:        # a path
            p = Path(data.chat_template)
            try:
                self.template: Optional[str] = read_text_at_most(p, field="data.chat_template")
            except InputError as e:   # missing, unreadable, too large or not UTF-8
                raise InputError(f"cannot read the chat template {p} ({e.message})",
                                 field="data.chat_template") from None
        elif mode is ChatTemplate.AUTO:
            self.template = getattr(tok, "chat_template", None) or None
        else:
            self.template = None
        self.bos = tok.bos_token_id

    def text(self, value: Any, where: str) -> str:
        """The prompt as the text the model reads (chat-rendered when there is a template)."""
        system = self.data.system_prompt
        if isinstance(value, str):
            if self.template is None:
                return f"{system}\n{value}" if system else value
            messages = ([{"role": "system", "content": system}] if system else []) + \
                [{"role": "user", "content": value}]
        elif _is_messages(value):
            if self.template is None:
                raise InputError(f"{where}: a chat-message prompt needs a chat template; "
                                 "allowed: chat_template auto (with a tokenizer that has one) "
                                 "or a template path", field="data.chat_template")
            messages = [{"role": m["role"], "content": m["content"]} for m in value]
            if system and messages[0]["role"] != "system":
                messages.insert(0, {"role": "system", "content": system})
        else:
            raise InputError(f"{where}: got {show(value)}; allowed: a string or a list of "
                             "{role, content} messages", field=f"data.{self.data.prompt_key}")
        try:
            return self.tok.apply_chat_template(messages, chat_template=self.template,
                                                add_generation_prompt=True, tokenize=False)
        except Exception as e:  # noqa: BLE001 - a user template that fails to render
            raise InputError(f"{where}: the chat template failed ({type(e).__name__}: "
                             f"{' '.join(str(e).split())[:160]})",
                             field="data.chat_template") from None

    def ids(self, value: Any, where: str) -> tuple[int, ...]:
        ids = list(self.tok.encode(self.text(value, where), add_special_tokens=False))
        if self.bos is not None and (not ids or ids[0] != self.bos):
            ids.insert(0, self.bos)
        return tuple(ids)


def _is_messages(value: Any) -> bool:
    return (isinstance(value, list) and bool(value) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in value))


# ---- the table -------------------------------------------------------------------------
@dataclass(frozen=True)
class PromptTable:
    """A dataset's usable rows, tokenized. `rows[i]` are row i's other columns (they reach
    the reward function as keywords); `lines[i]` is its index in the file."""

    path: str
    ids: tuple[tuple[int, ...], ...]
    prompts: tuple[Any, ...]
    rows: tuple[Mapping[str, Any], ...]
    lines: tuple[int, ...]
    dropped: int = 0
    truncated: int = 0
    fingerprint: str = ""

    def __len__(self) -> int:
        return len(self.ids)

    def answer(self, i: int, key: str) -> Optional[str]:
        return None if not key else _answer_text(self.rows[i].get(key))

    @property
    def longest(self) -> int:
        return max(len(x) for x in self.ids)


def _answer_text(v: Any) -> Optional[str]:
    if v is None:
        return None
    return v if isinstance(v, str) else json.dumps(v) if isinstance(v, (list, dict)) else str(v)


def load_table(path: str, data: DataSpec, enc: PromptEncoder, cap: int, field: str) -> PromptTable:
    """Read, check and tokenize `path`: every row needs the prompt column (and the answer
    column when data.answer_key is set); prompts over `cap` tokens are dropped, cut or
    refused per data.on_long."""
    rows = read_rows(path)
    key, akey = data.prompt_key, data.answer_key
    for i, r in enumerate(rows):
        if key not in r or r[key] is None:
            # (pyarrow gives every row every column; a missing one reads as null)
            cols = ", ".join(str(k) for k, v in list(r.items())[:8] if v is not None)
            raise InputError(f"row {i}: no {key!r} column (columns: {cols}); allowed: set "
                             "data.prompt_key to the prompt's column", file=path)
        if akey and (akey not in r or r[akey] is None):
            raise InputError(f"row {i}: no {akey!r} column; allowed: set data.answer_key to "
                             "the answer's column, or leave it empty", file=path)
    ids, prompts, others, lines = [], [], [], []
    dropped = truncated = 0
    for i, r in enumerate(rows):
        where = f"{path}: row {i}"
        x = enc.ids(r[key], where)
        if len(x) > cap:
            if data.on_long is OnLong.FAIL:
                raise InputError(f"row {i}: the prompt is {len(x)} tokens, over the cap of "
                                 f"{cap}; allowed: data.max_prompt_len >= {len(x)}, or "
                                 "data.on_long: drop|truncate", file=path)
            if data.on_long is OnLong.DROP:
                dropped += 1
                continue
            x = x[:cap]
            truncated += 1
        ids.append(x)
        prompts.append(r[key])
        others.append({k: v for k, v in r.items() if k != key})
        lines.append(i)
    if not ids:
        raise InputError(f"every one of its {len(rows)} prompts is over the cap of {cap} "
                         "tokens and was dropped; allowed: a larger data.max_prompt_len",
                         file=path)
    return PromptTable(path, tuple(ids), tuple(prompts), tuple(others), tuple(lines), dropped,
                       truncated, fingerprint(path))


# ---- order -----------------------------------------------------------------------------
@dataclass(frozen=True)
class DataOrder:
    """Which rows each step takes: the rows of epoch e in a permutation seeded by
    (shuffle_seed, e) (file order without a seed), epochs one after another, and step s
    takes stream positions [s*P, (s+1)*P). So every row is used exactly once per epoch, and
    the position after step s is a function of s alone."""

    rows: int
    per_step: int
    shuffle_seed: Optional[int] = 0
    epochs: int = 0      # 0: no limit

    def epoch_order(self, epoch: int) -> np.ndarray:
        return _permutation(self.rows, self.shuffle_seed, epoch)

    def indices(self, step: int) -> list[int]:
        out = []
        for k in range(step * self.per_step, (step + 1) * self.per_step):
            e, o = divmod(k, self.rows)
            out.append(int(self.epoch_order(e)[o]))
        return out

    @property
    def steps_available(self) -> Optional[int]:
        """Steps the epoch limit allows (None: no limit)."""
        return self.epochs * self.rows // self.per_step if self.epochs else None

    def position(self, next_step: int) -> dict[str, int]:
        """Where the stream stands before `next_step`: epoch, offset in it, rows used."""
        used = next_step * self.per_step
        e, o = divmod(used, self.rows)
        return {"epoch": e, "offset": o, "rows_used": used}


@functools.lru_cache(maxsize=8)
def _permutation(n: int, seed: Optional[int], epoch: int) -> np.ndarray:
    if seed is None:
        return np.arange(n)
    return np.random.default_rng([seed, epoch]).permutation(n)


# ---- sources ---------------------------------------------------------------------------
class PromptSource(ABC):
    """What a step controller asks for: the prompts of (seed, step, round), and the eval set."""

    @abstractmethod
    def prompts(self, seed: int, step: int, workload: Workload, round: int = 0) -> list[Prompt]:
        """`workload.prompts_per_step` prompts with ids in the (step, round) block."""

    def eval_prompts(self) -> list[Prompt]:
        return []

    @abstractmethod
    def position(self, next_step: int) -> dict[str, Any]:
        """The data position before `next_step` (recorded in checkpoints, checked on resume)."""


class ArithSource(PromptSource):
    """The built-in arithmetic task (yatt/exec/task.py), rendered like any prompt."""

    def __init__(self, enc: PromptEncoder):
        self.enc = enc

    def prompts(self, seed: int, step: int, workload: Workload, round: int = 0) -> list[Prompt]:
        out = []
        for p in step_prompts(seed, step, workload, round):
            out.append(Prompt(p.prompt_id, p.text, p.answer, p.payload,
                              ids=self.enc.ids(p.text, "arith"), raw=p.text,
                              row={"answer": p.answer}))
        return out

    def cap(self) -> int:
        """The longest arith prompt in tokens (operands are 10..98)."""
        return max(len(self.enc.ids(f"Q: {a}+{b}= A:", "arith"))
                   for a in (10, 55, 98) for b in (10, 55, 98))

    def position(self, next_step: int) -> dict[str, Any]:
        return {"builtin": "arith", "next_step": next_step}


class TableSource(PromptSource):
    """Rows of a dataset in `DataOrder`; dynamic sampling's replacement groups (round r > 0)
    draw rows with a generator seeded by (seed, step, r), outside the epoch stream."""

    def __init__(self, data: DataSpec, train: PromptTable, evals: Optional[PromptTable],
                 per_step: int):
        self.data, self.train, self.evals = data, train, evals
        self.order = DataOrder(len(train), per_step, data.shuffle_seed, data.epochs)

    def _prompt(self, t: PromptTable, i: int, pid: int) -> Prompt:
        return Prompt(pid, "", t.answer(i, self.data.answer_key) or "", ids=t.ids[i],
                      raw=t.prompts[i], row=t.rows[i], where=f"{t.path} row {t.lines[i]}")

    def prompts(self, seed: int, step: int, workload: Workload, round: int = 0) -> list[Prompt]:
        P = workload.prompts_per_step
        if round == 0:
            rows = self.order.indices(step)
        else:
            rng = np.random.default_rng([seed, step, 13, round])
            rows = [int(x) for x in rng.integers(0, len(self.train), size=P)]
        block = id_block(step, round, workload)
        return [self._prompt(self.train, r, block * P + i) for i, r in enumerate(rows)]

    def eval_prompts(self) -> list[Prompt]:
        if self.evals is None:
            return []
        return [self._prompt(self.evals, i, -1 - i) for i in range(len(self.evals))]

    def position(self, next_step: int) -> dict[str, Any]:
        return {"train": self.train.path, "fingerprint": self.train.fingerprint,
                **self.order.position(next_step)}


def check_resume_position(saved: Mapping[str, Any], source: PromptSource, next_step: int) -> None:
    """Refuse to resume onto other data than the checkpoint's (one line naming the file)."""
    now = source.position(next_step)
    for key in ("train", "fingerprint", "builtin"):
        if key in saved and saved.get(key) != now.get(key):
            raise InputError(f"the checkpoint was trained on {key} {show(saved.get(key))}, the "
                             f"run now has {show(now.get(key))}; allowed: the same data "
                             "(start a new run for new data)", field="data")


def steps_check(source: PromptSource, steps: int) -> None:
    """The epoch limit must cover the run."""
    if isinstance(source, TableSource):
        avail = source.order.steps_available
        if avail is not None and steps > avail:
            raise InputError(
                f"data.epochs {source.data.epochs} over the {len(source.train)} rows of "
                f"{source.train.path} cover {avail} steps of {source.order.per_step} prompts; "
                f"allowed: --steps <= {avail}, or more data.epochs (0: no limit)",
                field="--steps")


def eval_due(data: DataSpec, step: int) -> bool:
    """Whether step `step` evaluates (before its update: steps 0, N, 2N, ...)."""
    return bool(data.eval_every) and step % data.eval_every == 0
