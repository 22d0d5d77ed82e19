"""Reading a dataset file into rows: jsonl, json, parquet or a `datasets` directory, bounded
like every input, and a fingerprint of its bytes for resume checks.

Why apart from `data`: reading is file formats and limits; `data` renders, tokenizes and
orders the rows it gets from here.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

from yatt.core.errors import InputError
from yatt.core.limits import DATA_MAX_BYTES, MAX_DATASET_ROWS
from yatt.core.safeio import read_at_most
from yatt.core.schema import show


SUFFIXES = (".jsonl", ".json", ".parquet")


def _too_large(path: Path, what: str) -> InputError:
    return InputError(f"{what} is larger than {DATA_MAX_BYTES.value():,} bytes; allowed: a "
                      f"smaller dataset, or {DATA_MAX_BYTES.raise_hint()}", file=str(path))


def _check_rows(n: int, path: Path) -> None:
    if n > MAX_DATASET_ROWS:
        raise InputError(f"{n:,} rows; allowed: at most {MAX_DATASET_ROWS:,} rows in one "
                         "dataset (yatt/core/limits.py)", file=str(path))


def _dir_bytes(path: Path, cap: int) -> int:
    """Bytes of the files under a directory (links to files counted as their targets,
    links to directories not followed), counting stops past `cap`."""
    total = 0
    for top, _, files in os.walk(path, followlinks=False):
        for n in files:
            try:
                total += os.stat(os.path.join(top, n)).st_size
            except OSError:
                continue
            if total > cap:
                return total
    return total


def _jsonl_rows(path: Path, raw: bytes) -> list[dict]:
    import pyarrow as pa
    import pyarrow.json as pj

    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise InputError(f"line {line}: not UTF-8 text (byte 0x{raw[e.start]:02x}); allowed: "
                         "UTF-8 JSON lines", file=str(path)) from None
    if not raw.strip():
        raise InputError("no rows (empty file); allowed: one JSON object per line", file=str(path))
    try:
        table = pj.read_json(io.BytesIO(raw))
    except pa.ArrowInvalid as e:
        raise InputError(f"not JSON lines ({_arrow_reason(e)}); allowed: one JSON object per "
                         "line", file=str(path)) from None
    _check_rows(table.num_rows, path)
    return table.to_pylist()


def _arrow_reason(e: Exception) -> str:
    """pyarrow's message, with its 0-based "row N" turned into the file's 1-based line."""
    import re
    text = " ".join(str(e).split())
    return re.sub(r"in row (\d+)", lambda m: f"at line {int(m.group(1)) + 1}", text)


def _json_rows(path: Path, raw: bytes) -> list[dict]:
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise InputError(f"not UTF-8 text (byte {e.start})", file=str(path)) from None
    except json.JSONDecodeError as e:
        raise InputError(f"invalid JSON at line {e.lineno} ({e.msg})", file=str(path)) from None
    except RecursionError:
        raise InputError("invalid JSON (nested too deeply)", file=str(path)) from None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list):
        raise InputError(f"got a JSON {type(data).__name__}; allowed: a list of objects "
                         "(or {\"data\": [...]})", file=str(path))
    _check_rows(len(data), path)
    return data


def read_rows(path: str) -> list[dict]:
    """The rows of a .jsonl/.json/.parquet file or a `save_to_disk` directory, as dicts
    (within YATT_DATA_MAX_BYTES and MAX_DATASET_ROWS)."""
    p = Path(path)
    cap = DATA_MAX_BYTES.value()
    if p.is_dir():
        if not (p / "dataset_info.json").is_file() and not (p / "dataset_dict.json").is_file():
            raise InputError("a directory but not one written by datasets' save_to_disk "
                             "(no dataset_info.json)", file=str(p))
        if _dir_bytes(p, cap) > cap:
            raise _too_large(p, "the directory's files")
        import datasets
        try:
            ds = datasets.load_from_disk(str(p))
        except Exception as e:  # noqa: BLE001 - any reader failure is the file's fault
            raise InputError(f"cannot load with datasets.load_from_disk ({type(e).__name__}: "
                             f"{' '.join(str(e).split())[:200]})", file=str(p)) from None
        if isinstance(ds, datasets.DatasetDict):
            raise InputError(f"holds splits {', '.join(ds)}; allowed: one split's directory "
                             f"(e.g. {p / next(iter(ds))})", file=str(p))
        _check_rows(ds.num_rows, p)
        rows = ds.to_list()
    elif not p.exists():
        raise InputError("no such file", file=str(p))
    elif p.suffix not in SUFFIXES:
        raise InputError(f"got a {p.suffix or 'suffix-less'} file; allowed: "
                         f"{', '.join(SUFFIXES)} or a save_to_disk directory", file=str(p))
    else:
        try:
            raw = read_at_most(p, cap)   # never more than the cap: a huge file is refused unread
        except OSError as e:
            raise InputError(f"cannot read: {e.strerror or e}", file=str(p)) from None
        if len(raw) > cap:
            raise _too_large(p, "the file")
        if p.suffix == ".jsonl":
            rows = _jsonl_rows(p, raw)
        elif p.suffix == ".json":
            rows = _json_rows(p, raw)
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq
            try:
                pf = pq.ParquetFile(io.BytesIO(raw))
                _check_rows(pf.metadata.num_rows, p)
                table = pf.read()
            except (pa.ArrowException, OSError) as e:
                raise InputError(f"not a parquet file ({' '.join(str(e).split())[:200]})",
                                 file=str(p)) from None
            if table.nbytes > cap:   # compressed and encoded pages decode to more
                raise _too_large(p, "its decoded table")
            rows = table.to_pylist()
    if not rows:
        raise InputError("no rows (empty dataset)", file=str(p))
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise InputError(f"row {i}: got {show(r)}; allowed: an object of columns", file=str(p))
    return rows


def fingerprint(path: str) -> str:
    """sha256 over the dataset's bytes (a directory: its files, in name order)."""
    p = Path(path)
    files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(p) if p.is_dir() else f.name).encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]
