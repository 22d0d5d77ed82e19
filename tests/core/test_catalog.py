"""Catalogs: every entry loads, carries a source, and derived parameter counts match the
published counts within 3%."""
from __future__ import annotations

import pytest

from yatt.core import catalog

REQUIRED_GPUS = {"A100-40G", "A100-80G", "H100-SXM", "H200", "H20", "L40S", "cpu-local"}
REQUIRED_MODELS = {"Qwen2.5-0.5B", "Qwen2.5-1.5B", "Qwen2.5-7B", "Qwen2.5-32B", "Qwen2.5-72B",
                   "Qwen2.5-Math-72B", "Llama-3.1-8B", "Llama-3.1-70B", "Qwen3-8B", "Qwen3-32B"}


def test_required_entries_present():
    assert REQUIRED_GPUS <= set(catalog.gpu_names())
    assert REQUIRED_MODELS <= set(catalog.model_names())


@pytest.mark.parametrize("name", sorted(REQUIRED_GPUS))
def test_gpu_has_source(name):
    g = catalog.gpu(name)
    assert g.source and g.bf16_tflops > 0 and g.hbm_gb > 0


@pytest.mark.parametrize("name", sorted(REQUIRED_MODELS))
def test_param_count_matches_published(name):
    m = catalog.model(name)
    assert m.source
    assert m.published_params > 0
    assert abs(m.params / m.published_params - 1) <= 0.03, (m.params, m.published_params)
