"""One line for a worker that raised or died: which worker, its last error, its full log.

Why: workers run in Ray processes whose output does not reach the terminal
(`log_to_driver=False` keeps vLLM's and Megatron's chatter out of `yatt run`). When one
fails, a wall of nested tracebacks helps nobody; the user needs what failed, the last
error it raised, and where its whole log is (Ray writes each worker's stderr to
`<session>/logs/worker-<id>-<job>-<pid>.err`).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional


def session_logs() -> Optional[Path]:
    """This Ray session's log folder (None when Ray is not up or does not say)."""
    try:
        from ray._private import worker
        node = worker._global_node
        return Path(node.get_session_dir_path()) / "logs" if node is not None else None
    except Exception:  # noqa: BLE001 - an internal API: no path is better than a crash
        return None


def log_file(pid: Optional[int], logs: Optional[Path] = None) -> str:
    """The stderr log of the worker process `pid`, or the session's log folder."""
    logs = logs or session_logs()
    if logs is None:
        return "the Ray session's logs folder"
    if pid:
        found = sorted(logs.glob(f"worker-*-{pid}.err"))
        if found:
            return str(found[-1])
    return f"{logs}/worker-*-{pid or '<pid>'}.err"


def _last_error(traceback_str: str) -> str:
    lines = [ln.strip() for ln in (traceback_str or "").splitlines() if ln.strip()]
    for ln in reversed(lines):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b", ln):
            return ln[:300]
    return lines[-1][:300] if lines else "no message"


def describe(e: BaseException) -> Optional[str]:
    """The one line for a Ray worker failure, or None when `e` is not one (or cannot be
    read: this runs inside fault recovery, which must not fail on a message)."""
    try:
        return _describe(e)
    except Exception:  # noqa: BLE001
        return None


def _describe(e: BaseException) -> Optional[str]:
    try:
        from ray.exceptions import ActorDiedError, RayTaskError
    except ImportError:
        return None
    if isinstance(e, RayTaskError):
        who = getattr(e, "function_name", "") or "a worker task"
        pid = getattr(e, "pid", None)
        last = _last_error(getattr(e, "traceback_str", "") or str(e))
        return f"{who} (pid {pid}) raised {last}; full log: {log_file(pid)}"
    if isinstance(e, ActorDiedError):
        text = str(e)
        cls = re.search(r"class_name:\s*(\S+)", text)
        pid = re.search(r"pid:\s*(\d+)", text)
        p = int(pid.group(1)) if pid else None
        reason = " ".join(ln.strip() for ln in text.splitlines()
                          if ln.strip() and ":" not in ln.strip()[:20])[:200]
        return (f"{cls.group(1) if cls else 'a worker'} (pid {p}) died: "
                f"{reason or 'no reason given'}; full log: {log_file(p)}")
    return None
