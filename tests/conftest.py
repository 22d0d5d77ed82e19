"""Shared test configuration: GPU tests are skipped on machines without CUDA; one emulated
Ray cluster per session and the tiny demo models, for every test that runs the executor.

The cluster is 2 emulated nodes x 2 fake GPUs (`ray.cluster_utils.Cluster`) under a head
node without GPUs (it holds Ray's GCS and the driver, as on many clusters, so any device
node can be taken away by the node-loss test), and the node-spanning placement test and
the 2-device end-to-end runs share one start-up. It
ends with `ray.shutdown()` and `cluster.shutdown()` (never `ray stop`).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("OMP_NUM_THREADS", "1")
# plans with a profile use its times as measured (no host probe: seconds per plan, and a
# result that depends on the machine's speed); tests of the host check turn it on
os.environ.setdefault("YATT_HOST_CHECK", "off")


def _has_cuda() -> bool:
    try:
        import torch  # noqa: PLC0415 - only probed when collecting gpu tests
    except Exception:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config, items):
    if not any("gpu" in item.keywords for item in items):
        return
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def ray_cluster():
    pytest.importorskip("ray")
    pytest.importorskip("vllm")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_TMPDIR", tempfile.mkdtemp(prefix="yatt-ray-"))
    from yatt.exec.env import apply_local_env, job_runtime_env

    apply_local_env(cpu=True)
    import ray

    from yatt.exec.node_drill import emulated_cluster

    cluster = emulated_cluster(nodes=2, gpus_per_node=2)
    ray.init(address=cluster.address, runtime_env=job_runtime_env(True), log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture(scope="session")
def demo_experiment():
    from yatt.core.config import load_experiment

    return load_experiment(ROOT / "configs" / "demo-cpu.yaml")


@pytest.fixture(scope="session")
def actor_path(demo_experiment):
    pytest.importorskip("transformers")
    from yatt.exec.models import resolve_model

    return resolve_model(demo_experiment.actor, seed=0)


@pytest.fixture(scope="session")
def genrm_path(demo_experiment):
    pytest.importorskip("transformers")
    from yatt.exec.models import resolve_model

    return resolve_model(demo_experiment.genrm, seed=0)


@pytest.fixture
def victim(tmp_path):
    """A file outside every output directory: a planted link points at it, and it must
    keep its content."""
    v = tmp_path / "victim.txt"
    v.write_text("keep me\n")
    return v
