"""Reading JSON Lines in bounded memory: capped line length, capped total size, strict JSON.

Why: a trace is the one input that is big by nature and often gzip-compressed, so a small
file can expand without end (a 4 MB .jsonl.gz holding one 4 GB line; a bomb of blank
lines). Reading goes block by block and counts decompressed bytes: a line past the line
cap, or a file past the total cap, stops the read with one line that names the cap and
the variable that raises it (`yatt.core.limits`). Blank lines are skipped without a
Python step each. JSON is parsed strictly: a duplicate key is refused (JSON keeps the last
one silently, so a second `"sample_id"` would rewrite a record), and every decoding error
becomes an `InputError` naming the line.
"""
from __future__ import annotations

import gzip
import json
import re
import zlib
from pathlib import Path
from typing import Any, Iterator

from .errors import InputError
from .limits import TRACE_MAX_BYTES, TRACE_MAX_LINE_BYTES, Knob
from .schema import show

BLOCK = 1 << 20                      # bytes decompressed per read
_CONTENT = re.compile(rb"\S[^\n]*")   # a line's text from its first non-space byte


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise _DuplicateKey(k)
            seen.add(k)
    return d


_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates)


def parse_line(raw: bytes, lineno: int, file: str) -> Any:
    """One line's JSON value; any problem is an InputError naming the line."""
    where = f"line {lineno}"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"not UTF-8 text (byte {e.start})", field=where, file=file) from None
    try:
        return _DECODER.decode(text)
    except json.JSONDecodeError as e:
        raise InputError(f"not valid JSON ({e.msg} at column {e.colno})", field=where,
                         file=file) from None
    except _DuplicateKey as e:
        raise InputError(f"duplicate key {show(e.key)}; allowed: each key once", field=where,
                         file=file) from None
    except RecursionError:
        raise InputError("not valid JSON (nested too deeply)", field=where, file=file) from None
    except ValueError as e:  # e.g. an integer past Python's digit limit
        why = str(e).splitlines()[0][:100] if str(e) else type(e).__name__
        if "integer string conversion" in why:
            why = "an integer with more than 4300 digits"
        raise InputError(f"not valid JSON ({why})", field=where, file=file) from None


def _too_big(knob: Knob, what: str, file: str, field: str = "") -> InputError:
    return InputError(f"{what} is larger than {knob.value():,} bytes (decompressed); allowed: "
                      f"a smaller input, or {knob.raise_hint()}", field=field, file=file)


def line_batches(path: str | Path) -> Iterator[list[tuple[int, bytes]]]:
    """The non-blank lines of a JSONL file (gzip when the name ends in .gz), in batches of
    (line number, bytes), reading at most the caps' worth of decompressed bytes."""
    path = Path(path)
    file = str(path)
    line_cap, total_cap = TRACE_MAX_LINE_BYTES.value(), TRACE_MAX_BYTES.value()
    base = 0        # lines before `buf`
    total = 0
    buf = b""
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as f:
            while True:
                block = f.read(BLOCK)
                total += len(block)
                if total > total_cap:
                    raise _too_big(TRACE_MAX_BYTES, "the trace", file)
                if block:
                    data = buf + block
                    cut = data.rfind(b"\n") + 1
                    data, buf = data[:cut], data[cut:]
                    if len(buf) > line_cap:
                        at = base + data.count(b"\n") + 1
                        raise _too_big(TRACE_MAX_LINE_BYTES, "a line", file, f"line {at}")
                else:
                    data, buf = buf, b""
                out = []
                pos, line = 0, base + 1
                for m in _CONTENT.finditer(data):
                    line += data.count(b"\n", pos, m.start())
                    pos = m.start()
                    seg = m.group()
                    if len(seg) > line_cap:
                        raise _too_big(TRACE_MAX_LINE_BYTES, "a line", file, f"line {line}")
                    out.append((line, seg))
                base += data.count(b"\n")
                if out:
                    yield out
                if not block:
                    return
    except (OSError, EOFError, zlib.error) as e:  # unreadable, or a corrupt/truncated .gz
        raise InputError(f"cannot read: {e}", field=f"line {base + 1}", file=file) from None
