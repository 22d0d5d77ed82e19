"""CPU shim for megatron-core 0.16.1: lets GPTModel/DDP/optimizer/checkpointing run without CUDA.

Why: megatron-core hard-codes CUDA in a handful of places (docs/design.md, "CPU runtime"):
`torch.cuda.current_device()` for buffers and pipeline send/recv, `device="cuda"` in the
causal mask, optimizer, grad clipping, grad scaler and the pipeline schedules,
`torch.cuda.synchronize()` when checkpointing and between pipeline sends, and an assert
that gradients are `torch.cuda.FloatTensor`. Our CPU demo and tests train on CPU
over gloo, so we map those to CPU here. The shim is a no-op for a trainer on a CUDA device.

Mechanism:
  * a `TorchFunctionMode` rewrites CUDA devices (``"cuda"``, ``"cuda:0"``, bare ints,
    ``torch.device("cuda")``) to CPU for factory calls and for ``Tensor.cuda()/.to()``;
  * `torch.cuda.current_device` -> 0 (which the mode then maps to CPU) and
    `torch.cuda.synchronize` -> no-op;
  * `Tensor.type()` (no arguments) reports the CUDA type name, because the optimizers and
    the distributed optimizer branch on `param.type() == 'torch.cuda.FloatTensor'`;
  * `clip_grad_by_total_norm_fp32` is replaced by a CPU version (the original asserts the
    CUDA tensor type string), in both modules that bind it.
The mode is entered only around megatron work (`thread_mode`, `on_any_thread`: every
trainer entry point), never for the whole process: it routes every torch call through
Python, which made a vLLM decode step in the same process ~1.5x slower (a profile that
built a trainer before measuring its engines read them that much too slow).
`PATCH_TARGETS` lists every megatron symbol we touch; tests assert they still exist so an
upgrade that moves them fails loudly instead of silently leaving CUDA calls in place.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import threading
from collections import Counter

import torch
from torch.overrides import TorchFunctionMode

# (module, attribute) pairs that install() replaces.
PATCH_TARGETS: tuple[tuple[str, str], ...] = (
    ("megatron.core.optimizer.clip_grads", "clip_grad_by_total_norm_fp32"),
    ("megatron.core.optimizer.optimizer", "clip_grad_by_total_norm_fp32"),
)
# (module, attribute) pairs whose CUDA-only bodies the device mode covers; kept here so a
# test notices if megatron renames them (then re-check the new code for CUDA calls).
MODE_COVERED: tuple[tuple[str, str], ...] = (
    ("megatron.core.transformer.utils", "get_default_causal_mask"),
    ("megatron.core.optimizer.grad_scaler", "ConstantGradScaler"),
    ("megatron.core.optimizer.clip_grads", "get_grad_norm_fp32"),
    ("megatron.core.utils", "GlobalMemoryBuffer"),
    ("megatron.core.optimizer.distrib_optimizer", "DistributedOptimizer"),
    ("megatron.core.optimizer.optimizer", "FP32Optimizer"),
    ("megatron.core.tensor_parallel.mappings", "_gather_along_first_dim"),
    # the pipeline schedules (token counters on "cuda") and stage-to-stage send/recv
    # (buffers and shape messages on `torch.cuda.current_device()`)
    ("megatron.core.pipeline_parallel.schedules", "forward_backward_no_pipelining"),
    ("megatron.core.pipeline_parallel.schedules", "forward_backward_pipelining_without_interleaving"),
    ("megatron.core.pipeline_parallel.p2p_communication", "P2PCommunicator"),
)

_lock = threading.Lock()
_installed = False
remapped: Counter = Counter()  # which torch functions had a CUDA device rewritten (diagnostics)


def _is_cuda(dev) -> bool:
    if isinstance(dev, bool):
        return False
    if isinstance(dev, int):
        return True  # a bare index means a CUDA device in torch
    if isinstance(dev, str):
        return dev.startswith("cuda")
    return isinstance(dev, torch.device) and dev.type == "cuda"


class CudaToCpuMode(TorchFunctionMode):
    """Rewrites CUDA device arguments to CPU for every torch call made while active."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda:
            remapped["Tensor.cuda"] += 1
            return args[0]
        if func is torch.Tensor.type and len(args) == 1 and not kwargs:
            # megatron's optimizers check `param.type() == 'torch.cuda.FloatTensor'`.
            name = func(*args)
            return name.replace("torch.", "torch.cuda.", 1) if ".cuda." not in name else name
        dev = kwargs.get("device")
        if dev is not None and _is_cuda(dev):
            kwargs["device"] = "cpu"
            kwargs.pop("pin_memory", None)
            remapped[getattr(func, "__name__", str(func))] += 1
        if func is torch.Tensor.to and len(args) > 1 and not isinstance(args[1], (torch.dtype, torch.Tensor)) \
                and _is_cuda(args[1]):
            args = (args[0], "cpu", *args[2:])
            remapped["Tensor.to"] += 1
        return func(*args, **kwargs)


def _cpu_clip_grad_by_total_norm_fp32(parameters, max_norm, total_norm, use_decoupled_grad=False):
    """CPU twin of megatron's clip_grad_by_total_norm_fp32 (same semantics, no type assert)."""
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    attr = "decoupled_grad" if use_decoupled_grad else "grad"
    grads = [getattr(p, attr).detach() for p in parameters if getattr(p, attr, None) is not None]
    for g in grads:
        assert g.dtype in (torch.float32, torch.bfloat16), g.dtype
    clip_coeff = max_norm / (total_norm + 1.0e-6)
    if clip_coeff < 1.0:
        for g in grads:
            g.mul_(clip_coeff)


def needed(device: str = "cpu") -> bool:
    """The shim is needed for every CPU run, also on a machine with CUDA: megatron moves
    RoPE's `inv_freq` to `torch.cuda.current_device()` at the first forward whenever CUDA is
    usable, which broke a CPU trainer on an H200 host (tests/exec/test_trainer.py, gpu)."""
    return not str(device).startswith("cuda")


def install(device: str = "cpu") -> bool:
    """Install the shim's patches (idempotent). Returns True if active. No-op for a CUDA
    device. Megatron code then runs under `thread_mode()` (or `enter()` for a process that
    does nothing else).

    Call before building any megatron model. It imports megatron modules to patch them.
    """
    global _installed
    if not needed(device):
        return False
    with _lock:
        if _installed:
            return True
        torch.cuda.current_device = lambda: 0          # type: ignore[assignment]
        torch.cuda.synchronize = lambda *a, **k: None  # type: ignore[assignment]
        for mod_name, attr in PATCH_TARGETS:
            mod = importlib.import_module(mod_name)
            getattr(mod, attr)  # AttributeError if megatron moved it
            setattr(mod, attr, _cpu_clip_grad_by_total_norm_fp32)
        _installed = True
        return True


def enter(device: str = "cpu") -> bool:
    """`install()` and push the device mode on the calling thread for good: for a process
    that runs megatron code only (test ranks, tools). Returns True if active."""
    if not install(device):
        return False
    thread_mode().__enter__()
    return True


def thread_mode():
    """Context that activates the device mode on the *current* thread if the shim is installed.

    Torch function modes are thread-local: `install()` covers only the thread that called it.
    Code that may run on other threads (Ray threaded actors, executors) enters this.
    """
    if not _installed:
        return contextlib.nullcontext()
    stack = torch.overrides._get_current_function_mode_stack()
    if any(isinstance(m, CudaToCpuMode) for m in stack):
        return contextlib.nullcontext()
    return CudaToCpuMode()


def on_any_thread(fn):
    """Decorator: run fn under `thread_mode()` (no-op on CUDA machines)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with thread_mode():
            return fn(*args, **kwargs)
    return wrapper


def missing_targets() -> list[str]:
    """Megatron symbols the shim relies on that the installed version lacks (should be empty)."""
    out = []
    for mod_name, attr in PATCH_TARGETS + MODE_COVERED:
        try:
            mod = importlib.import_module(mod_name)
        except ImportError:
            out.append(mod_name)
            continue
        if not hasattr(mod, attr):
            out.append(f"{mod_name}.{attr}")
    return out
