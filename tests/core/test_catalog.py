"""Catalogs: every entry loads, carries a source, and derived parameter counts match the
published counts within 3%."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from yatt.core import catalog

REQUIRED_GPUS = {"A100-40G", "A100-80G", "H100-SXM", "H800", "H200", "H20", "L40S",
                 "cpu-local"}
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


# ---- GPU provenance: the H200 entry is the measurement, the rest follow by its ratios ----
RESULT = Path(__file__).resolve().parents[2] / "bench" / "results" / "gpu_h200.json"
# datasheet (bf16 dense TF, memory GB/s, host link GB/s) of the entries taken "by ratio"
DATASHEET = {"A100-40G": (312, 1555, 32), "A100-80G": (312, 2039, 32),
             "H100-SXM": (989, 3350, 64), "H800": (989, 3350, 64), "H20": (148, 4000, 64),
             "L40S": (362, 864, 32)}


def _measured() -> dict:
    return json.loads(RESULT.read_text())["derived"]


def test_h200_entry_is_the_measurement_it_cites():
    d, g = _measured(), catalog.gpu("H200")
    assert "gpu_h200.json" in g.source
    assert g.bf16_tflops == round(d["bf16_matmul_tflops"])
    assert g.hbm_gbps == round(d["hbm_read_gbps"])
    assert g.host_link_gbps == round(d["host_link_gbps"], 1)


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_unmeasured_entries_follow_the_h200_ratios(name):
    d = _measured()
    ratios = (d["bf16_matmul_tflops"] / 989, d["hbm_read_gbps"] / 4800, d["host_link_gbps"] / 64)
    g = catalog.gpu(name)
    assert "by ratio" in g.source
    for got, sheet, r in zip((g.bf16_tflops, g.hbm_gbps, g.host_link_gbps), DATASHEET[name], ratios):
        assert got == pytest.approx(sheet * r, rel=0.005), (name, got, sheet * r)
