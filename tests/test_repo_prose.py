"""The repository describes what the code does and why, not how the work went.

Docs, comments, configs and bench results must not narrate history: numbered sessions or
work periods, which machine was lent, what something "used to" do, "previous runs". A
measurement's provenance belongs in its result file's `_meta` (bench/_results.py).
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("README.md", "docs", "yatt", "tests", "bench", "traces", "configs", "scripts")
TEXT_SUFFIXES = {".md", ".py", ".yaml", ".yml", ".json", ".txt", ".toml", ".sh", ".cfg", ".ini", ""}
SELF = Path(__file__).resolve()

# (pattern, applies to) -- "all" or a set of suffixes
PHRASES: tuple[tuple[str, str | frozenset[str]], ...] = (
    (r"\bsessions? [0-9]", "all"),
    (r"\bsessions [0-9]+\s*-\s*[0-9]", "all"),
    (r"\b(this|that|earlier|previous|last|next|a later) session\b", "all"),
    (r"\bwas lent\b|\bbeing lent\b|\blent (us |this |one |an? )", "all"),
    (r"\bturn [0-9]", "all"),
    (r"\bwork periods?\b", "all"),
    (r"\bprevious (GenRM|run|runs|session|version|profile|recipe|bench)\b", "all"),
    (r"\bearlier (run|runs|session|measurements?)\b", "all"),
    (r"(?<!\bis )(?<!\bare )(?<!\bbe )(?<!\bbeen )(?<!\bwas )(?<!\bwere )\bused to\b(?! (compute|build|"
     r"make|run|measure|time|rank|fit|check|sample|seed|pick|drive|train|judge|score|price|"
     r"predict|load|write|read|name|mark|pad|decide|start|count|scale|exercise|test))", "all"),
    (r"\bno longer\b", "all"),
    (r"\bload average\b", frozenset({".md"})),
    (r"\b(run|session) [0-9]+:", "all"),
    (r"\bfound and fixed\b|\bfixed on the way\b|\bon the way\b", "all"),
    (r"\bonce (it|this|that) lands\b|\bwhen (it|this) lands\b", "all"),
)
_COMPILED = [(re.compile(p, re.IGNORECASE), where) for p, where in PHRASES]


def _files() -> list[Path]:
    seen: set[Path] = set()
    out = []
    for name in SCANNED:
        base = ROOT / name
        paths = [base] if base.is_file() else sorted(base.rglob("*")) if base.exists() else []
        for p in paths:
            real = p.resolve()
            if (not p.is_file() or real in seen or real == SELF or p.suffix not in TEXT_SUFFIXES
                    or "__pycache__" in p.parts or p.stat().st_size > 2_000_000):
                continue
            seen.add(real)
            out.append(p)
    return out


def findings() -> list[str]:
    hits = []
    for p in _files():
        try:
            lines = p.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            continue
        for i, line in enumerate(lines, 1):
            for rx, where in _COMPILED:
                if where != "all" and p.suffix not in where:
                    continue
                m = rx.search(line)
                if m:
                    hits.append(f"{p.relative_to(ROOT)}:{i}: {m.group(0)!r}: {line.strip()[:100]}")
    return hits


def test_no_narrative_of_how_the_work_went():
    hits = findings()
    assert not hits, "history narrated in the repository:\n" + "\n".join(hits)


if __name__ == "__main__":
    print("\n".join(findings()))
