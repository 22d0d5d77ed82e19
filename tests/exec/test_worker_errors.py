"""The one line for a failed worker (yatt/exec/worker_errors.py): which worker, its last
error, and the path of its full log, built from Ray's own exception types."""
from __future__ import annotations

import pytest

pytest.importorskip("ray")

from ray.exceptions import RayTaskError  # noqa: E402

from yatt.exec import worker_errors  # noqa: E402

TB = """Traceback (most recent call last):
  File "x.py", line 3, in train_step
    raise RuntimeError("CUDA out of memory")
RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"""


def test_task_error_names_worker_last_error_and_log(tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "worker-abc-01000000-4242.err").write_text(TB)
    monkeypatch.setattr(worker_errors, "session_logs", lambda: logs)
    e = RayTaskError("TrainerWorker.train_step", TB, RuntimeError("CUDA out of memory"), pid=4242)
    line = worker_errors.describe(e)
    assert line == ("TrainerWorker.train_step (pid 4242) raised RuntimeError: CUDA out of memory. "
                    f"Tried to allocate 2.00 GiB; full log: {logs}/worker-abc-01000000-4242.err")


def test_other_errors_are_not_worker_failures():
    assert worker_errors.describe(ValueError("x")) is None


def test_log_path_without_a_session(monkeypatch):
    monkeypatch.setattr(worker_errors, "session_logs", lambda: None)
    assert worker_errors.log_file(7) == "the Ray session's logs folder"


def test_a_dead_actor_says_it_died(monkeypatch):
    from ray.exceptions import ActorDiedError
    monkeypatch.setattr(worker_errors, "session_logs", lambda: None)
    line = worker_errors.describe(ActorDiedError())
    assert line.startswith("a worker (pid None) died: The actor died unexpectedly")
    assert line.endswith("full log: the Ray session's logs folder") and "\n" not in line
