"""Shared fixtures for executor tests: one emulated Ray cluster per session, tiny models.

The cluster is 2 emulated nodes x 2 fake GPUs (`ray.cluster_utils.Cluster`), so the
node-spanning placement test and the 2-device end-to-end runs share one start-up. It
ends with `ray.shutdown()` and `cluster.shutdown()` (never `ray stop`).
"""
from __future__ import annotations

import os
import tempfile

import pytest

from yatt.exec.env import apply_local_env, worker_env


@pytest.fixture(scope="session")
def ray_cluster():
    pytest.importorskip("ray")
    pytest.importorskip("vllm")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_TMPDIR", tempfile.mkdtemp(prefix="yatt-ray-"))
    apply_local_env(cpu=True)
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "num_gpus": 2, "include_dashboard": False})
    cluster.add_node(num_cpus=0, num_gpus=2)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, runtime_env={"env_vars": worker_env(True)},
             log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture(scope="session")
def demo_experiment():
    from yatt.core.config import load_experiment

    here = os.path.dirname(__file__)
    return load_experiment(os.path.join(here, "..", "..", "configs", "demo-cpu.yaml"))


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
