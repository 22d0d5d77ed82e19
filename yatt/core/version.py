"""The installed yatt version, read from the package metadata.

Why: the version number lives in one place (pyproject.toml); traces, plans and
`yatt --version` all read it from the installed distribution.
"""
from __future__ import annotations

from functools import lru_cache
from importlib import metadata


@lru_cache(maxsize=1)
def yatt_version() -> str:
    try:
        return metadata.version("yatt")
    except metadata.PackageNotFoundError:   # running from a source tree that was never installed
        return "0+unknown"
