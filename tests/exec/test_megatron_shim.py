"""The megatron CPU shim: patched symbols still exist, and real megatron paths run on CPU.

If a megatron upgrade adds a CUDA-only call, the spawned smoke run fails with a CUDA
error ("Torch not compiled with CUDA enabled") instead of passing silently.
"""
from __future__ import annotations

import pytest
import torch

from tests.exec._train_helpers import device_mode_active, run_trainer, spawn
from yatt.exec import megatron_shim


def test_patched_symbols_still_exist():
    import megatron.core
    assert megatron.core.__version__.startswith("0.16"), (
        f"megatron-core {megatron.core.__version__}: re-audit the shim (docs/design.md, \"CPU runtime\")")
    assert megatron_shim.missing_targets() == []


def test_known_cuda_calls_are_still_what_we_cover():
    """The causal mask still hard-codes CUDA; if megatron fixes it, prune the shim."""
    import inspect

    from megatron.core.transformer import utils
    assert 'device="cuda"' in inspect.getsource(utils.get_default_causal_mask)


def test_noop_for_cuda_but_needed_for_cpu_even_where_cuda_exists(monkeypatch):
    assert megatron_shim.needed("cuda") is False
    assert megatron_shim.install("cuda") is False
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    # a CPU trainer on a CUDA host: unshimmed, megatron moved RoPE's inv_freq to cuda:0 and
    # the first forward failed (seen on an H200)
    assert megatron_shim.needed("cpu") is True


def test_mode_maps_cuda_factories_to_cpu():
    mode = megatron_shim.CudaToCpuMode()
    with mode:
        a = torch.zeros(2, device="cuda")
        b = torch.ones(2, device=0).cuda()
        c = torch.tensor([1.0], device=torch.device("cuda", 0)).to("cuda:0")
        d = torch.zeros(2).to(torch.float64)
    assert {a.device.type, b.device.type, c.device.type} == {"cpu"} and d.dtype == torch.float64


@pytest.mark.slow
def test_cpu_smoke_train_clip_checkpoint(tmp_path, monkeypatch):
    """Forward/backward, distributed optimizer step with clipping, dist_checkpointing save+load.
    The trainer process sees no CUDA device, also on a CUDA host: a CUDA-only call then
    fails there instead of silently running on the GPU."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    ckpt = tmp_path / "ckpt"
    spawn(run_trainer, 1, {"tp": 1, "dp": 1, "steps": 2, "distributed_optimizer": True,
                           "ckpt_dir": str(ckpt)}, tmp_path)
    res = torch.load(tmp_path / "rank0.pt", weights_only=False)
    assert res["cuda"] is False
    # the device mode routes every torch call through Python: it is on only inside the
    # trainer's own calls, so other work in the process (an engine, a reference) runs at
    # full speed
    assert res["mode_outside_calls"] is False
    assert all(m["skipped"] == 0.0 for m in res["metrics"])
    assert res["metrics"][0]["grad_norm"] > 1.0  # clip_grad=1.0 => the clip path ran
    assert (ckpt / "metadata.json").exists()


def test_install_leaves_the_mode_off_and_enter_turns_it_on():
    import threading
    megatron_shim.install()
    assert not device_mode_active()
    with megatron_shim.thread_mode():
        assert device_mode_active()
        assert torch.zeros(1, device="cuda").device.type == "cpu"
    assert not device_mode_active()
    out = {}

    def own_process():   # `enter` is for a thread that does nothing else: run it on one
        megatron_shim.enter()
        out["on"] = device_mode_active()

    t = threading.Thread(target=own_process)
    t.start()
    t.join()
    assert out["on"] is True and not device_mode_active()


def test_thread_mode_covers_other_threads(monkeypatch):
    """Torch function modes are thread-local; the trainer's methods re-enter the mode."""
    import threading
    monkeypatch.setattr(megatron_shim, "_installed", True)
    out = {}

    @megatron_shim.on_any_thread
    def make():
        return torch.zeros(1, device="cuda").device.type

    t = threading.Thread(target=lambda: out.update(dev=make()))
    t.start()
    t.join()
    assert out["dev"] == "cpu"
