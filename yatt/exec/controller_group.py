"""K step controllers behind one call surface: in-process (K=1) or Ray actors (K>1).

Why: the runners and schedules drive every controller the same way whatever K is; this
keeps the choice between a local object and Ray actors (and how an actor's input error
surfaces) out of the controller itself.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from .controller import ControllerConfig, StepController


class ControllerGroup:
    """K controllers behind one call surface: in-process (K=1) or Ray actors (K>1).

    `call(StepController.rollout)` runs that method on every controller and returns
    the results in controller order; remote calls go out together (they run in parallel).
    """

    def __init__(self, make_cfg: Callable[[int, int], ControllerConfig], count: int,
                 args: tuple, env: Optional[dict] = None, max_restarts: int = 0):
        self.count = count
        if count == 1:
            self.local = [StepController(make_cfg(0, 1), *args)]
            self.remote = []
        else:
            import ray
            cls = ray.remote(num_cpus=0)(StepController)
            opts = {"runtime_env": {"env_vars": env}} if env else {}
            # a dead controller is restarted by Ray (it keeps no state across steps: the
            # supervisor redoes the step, whose prompts derive from (seed, step, round))
            self.local = []
            self.remote = [cls.options(**opts, max_restarts=max_restarts, max_task_retries=0)
                           .remote(make_cfg(i, count), *args) for i in range(count)]

    def call(self, method: Callable, *args: Any) -> list:
        if self.local:
            return [method(c, *args) for c in self.local]
        import ray
        from ray.exceptions import RayTaskError

        from yatt.core.errors import InputError
        try:
            return ray.get([getattr(c, method.__name__).remote(*args) for c in self.remote])
        except RayTaskError as e:   # a user-input error in a controller actor: its own line
            if isinstance(e.cause, InputError):
                raise e.cause from None
            raise

    def shutdown(self) -> None:
        self.call(StepController.shutdown)
        if self.remote:
            import ray
            for c in self.remote:
                ray.kill(c)
