"""Hardware probes for the GPU catalog: matmul rate, memory and host-link bandwidth, a
Megatron train step, and HF-`transformers` decode steps against batch size.

Why: the planner's GPU entries (`yatt/catalog/gpus.yaml`) should cite measurements, not
datasheets. `bench/gpu_probe.py` runs these on a GPU machine in one short process and
writes the raw numbers; the catalog cites that file. Every probe is device-generic (it
also runs on CPU with tiny sizes, which is how the tests exercise it here) and returns
plain frozen records. torch/transformers/megatron are imported inside the functions.

Timing: on CUDA, CUDA events around `reps` repetitions after `warmup` untimed ones (the
mean, as vendors quote); on CPU, `time.perf_counter`. Bandwidths are in GB/s (1e9 B/s).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from enum import Enum
from typing import Callable, Sequence

from yatt.core.specs import ModelSpec


class Precision(str, Enum):
    """How the probe's Megatron step computes."""

    FP32 = "fp32"                    # fp32 params and matmuls (the executor's dtype: float32)
    BF16_AUTOCAST = "bf16-autocast"  # the fp32 step under torch.autocast(bfloat16)
    BF16 = "bf16"                    # the executor's dtype: bfloat16 on CUDA: bf16 weights,
                                     # fp32 main parameters, gradients and Adam state


def device_precisions(device: str) -> list[Precision]:
    """The precisions a train probe can run on `device` (bf16 weights are CUDA-only, as in
    the executor)."""
    return [p for p in Precision if device.startswith("cuda") or p is not Precision.BF16]


@dataclass(frozen=True)
class Rate:
    """One measured rate: `value` in `unit`, from `seconds` per repetition."""

    what: str
    value: float
    unit: str
    seconds: float


@dataclass(frozen=True)
class DecodePoint:
    """HF decode at one batch size: seconds per decode step (median over steps) and the
    prefill that filled the KV cache."""

    batch: int
    context: int
    step_s: float
    prefill_s: float


@dataclass(frozen=True)
class TrainPoint:
    """One Megatron `train_step` at (batch, seq): seconds and model TFLOP/s."""

    precision: Precision
    batch: int
    seq: int
    step_s: float
    tflops: float


def _timer(device: str) -> Callable[[Callable[[], object], int, int], float]:
    """mean seconds of fn() over reps after warmup runs, synchronised on CUDA."""
    import torch

    def cuda(fn, reps: int, warmup: int) -> float:
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        stop.record()
        torch.cuda.synchronize()
        return start.elapsed_time(stop) / 1e3 / reps

    def cpu(fn, reps: int, warmup: int) -> float:
        for _ in range(warmup):
            fn()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t0) / reps

    return cuda if device.startswith("cuda") else cpu


def matmul(device: str, shapes: Sequence[tuple[int, int, int]], dtype: str = "bfloat16",
           reps: int = 10, warmup: int = 3) -> list[Rate]:
    """TFLOP/s of an (m, k) @ (k, n) product on random normal data, per shape."""
    import torch

    dt = getattr(torch, dtype)
    timer = _timer(device)
    out = []
    for m, k, n in shapes:
        a = torch.randn(m, k, device=device, dtype=dt)
        b = torch.randn(k, n, device=device, dtype=dt)
        s = timer(lambda: a @ b, reps, warmup)
        out.append(Rate(f"matmul {dtype} {m}x{k}x{n}", 2 * m * k * n / s / 1e12, "TFLOP/s", s))
        del a, b
    return out


def memory(device: str, nbytes: int, reps: int = 10, warmup: int = 3) -> list[Rate]:
    """Device-memory bandwidth: a copy (read + write counted), a read (sum) and a fill."""
    import torch

    timer = _timer(device)
    n = nbytes // 4
    src = torch.ones(n, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    out = []
    s = timer(lambda: dst.copy_(src), reps, warmup)
    out.append(Rate("copy (read+write bytes)", 2 * nbytes / s / 1e9, "GB/s", s))
    s = timer(lambda: src.sum(), reps, warmup)
    out.append(Rate("read (sum)", nbytes / s / 1e9, "GB/s", s))
    s = timer(lambda: dst.fill_(1.0), reps, warmup)
    out.append(Rate("write (fill)", nbytes / s / 1e9, "GB/s", s))
    return out


def host_link(device: str, nbytes: int, reps: int = 5, warmup: int = 2) -> list[Rate]:
    """Host-to-device and device-to-host copies, pinned and pageable host memory."""
    import torch

    timer = _timer(device)
    n = nbytes // 4
    dev = torch.empty(n, device=device, dtype=torch.float32)
    out = []
    pinnable = device.startswith("cuda")
    for pinned in (True, False):
        if pinned and not pinnable:
            continue
        host = torch.ones(n, dtype=torch.float32, pin_memory=pinned)
        tag = "pinned" if pinned else "pageable"
        s = timer(lambda: dev.copy_(host, non_blocking=pinned), reps, warmup)
        out.append(Rate(f"h2d {tag}", nbytes / s / 1e9, "GB/s", s))
        s = timer(lambda: host.copy_(dev, non_blocking=pinned), reps, warmup)
        out.append(Rate(f"d2h {tag}", nbytes / s / 1e9, "GB/s", s))
        del host
    return out


def train_flops(spec: ModelSpec, batch: int, seq: int) -> float:
    """Model FLOPs of one forward+backward: 6 x params (embeddings excluded) per token plus
    causal attention (QK^T and AV: 2 x 2 x s/2 x heads x head_dim per token and layer, x3)."""
    tokens = batch * seq
    dense = 6 * spec.non_embedding_params * tokens
    lm_head = 6 * spec.vocab * spec.hidden * tokens
    attn = 3 * 2 * 2 * spec.layers * spec.heads * spec.dim_head * (seq / 2) * tokens
    return dense + lm_head + attn


def megatron_train(spec: ModelSpec, hf_path: str, device: str,
                   points: Sequence[tuple[int, int]], precisions: Sequence[Precision],
                   reps: int = 3, seed: int = 0) -> list[TrainPoint]:
    """Our `MegatronTrainer` (the executor's trainer, TP=1) on `device`, per precision: one
    trainer per precision (bf16 weights are built that way), each timed at every point."""
    import contextlib

    import numpy as np
    import torch

    from yatt.core.jobspec import Dtype

    from .microbench import TrainBench

    dev_type = "cuda" if device.startswith("cuda") else "cpu"
    bad = [p.value for p in precisions if p not in device_precisions(device)]
    if bad:
        raise ValueError(f"precision {', '.join(bad)} needs a CUDA device (got {device!r})")
    rng = np.random.default_rng(seed)
    out = []
    for precision in precisions:
        bench = TrainBench(spec, hf_path, device, micro_batch_tokens=max(b * s for b, s in points),
                           dtype=Dtype.BFLOAT16 if precision is Precision.BF16 else Dtype.FLOAT32)
        try:
            for batch, seq in points:
                ctx = (torch.autocast(dev_type, dtype=torch.bfloat16)
                       if precision is Precision.BF16_AUTOCAST else contextlib.nullcontext())
                with ctx:
                    s = bench.step_time(batch, seq, reps, rng)
                out.append(TrainPoint(precision, batch, seq, s,
                                      train_flops(spec, batch, seq) / s / 1e12))
        finally:
            bench.close()
    return out


def hf_decode(spec: ModelSpec, device: str, batches: Sequence[int], context: int,
              steps: int = 16, warmup: int = 2, dtype: str = "bfloat16",
              seed: int = 0) -> list[DecodePoint]:
    """Decode-step seconds of a random-weight HF model of `spec`'s shape, per batch size:
    prefill `context` tokens per sequence (keeping only the last logits), then `steps`
    timed single-token steps on the KV cache (`DynamicCache`, eager attention kernels as
    `transformers` picks them)."""
    import torch
    from transformers import Qwen2ForCausalLM

    from yatt.exec.hf_model import hf_config

    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    torch.manual_seed(seed)
    cfg = hf_config(spec)
    old = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))
    try:
        with torch.device(device):
            model = Qwen2ForCausalLM(cfg).eval()
    finally:
        torch.set_default_dtype(old)
    out = []
    with torch.inference_mode():
        for b in batches:
            ids = torch.randint(3, spec.vocab, (b, context), device=device)
            sync()
            t0 = time.perf_counter()
            res = model(input_ids=ids, use_cache=True, logits_to_keep=1)
            sync()
            prefill = time.perf_counter() - t0
            cache = res.past_key_values
            tok = res.logits[:, -1:].argmax(-1)
            times = []
            for i in range(warmup + steps):
                sync()
                t0 = time.perf_counter()
                res = model(input_ids=tok, past_key_values=cache, use_cache=True,
                            logits_to_keep=1)
                tok = res.logits[:, -1:].argmax(-1)
                sync()
                if i >= warmup:
                    times.append(time.perf_counter() - t0)
                cache = res.past_key_values
            out.append(DecodePoint(b, context, float(statistics.median(times)), prefill))
            del cache, res, ids
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return out


@dataclass(frozen=True)
class KernelPoint:
    """One decode step's kernels at a batch size: seconds, and the bytes and FLOPs it moves."""

    batch: int
    context: int
    step_s: float
    bytes: float       # weights + KV cache read once
    flops: float       # 2 x params x batch + attention
    graph: bool        # replayed as one CUDA graph (no launch overhead)
    gqa: bool          # attention read the KV heads once (enable_gqa), not expanded


def decode_kernels(spec: ModelSpec, device: str, batches: Sequence[int], context: int,
                   reps: int = 20, warmup: int = 3, dtype: str = "bfloat16",
                   seed: int = 0) -> list[KernelPoint]:
    """One decode step of `spec`'s shape as bare torch kernels: per layer the QKV, output,
    gate/up and down projections and a one-token attention over a `context`-token KV cache,
    then the LM head. On CUDA the step is captured once per batch size in a CUDA graph and
    replayed, which is what vLLM does, so the time is the kernels' own (weights and KV
    streamed from device memory, or the matmuls at large batch) without Python launch cost.
    """
    import torch
    import torch.nn.functional as F

    dt = getattr(torch, dtype)
    g = torch.Generator(device=device).manual_seed(seed)
    h, d, nh, nkv, inter = spec.hidden, spec.dim_head, spec.heads, spec.kv_heads, spec.intermediate

    def w(*shape):
        return torch.randn(*shape, device=device, dtype=dt, generator=g) * 0.02

    layers = [(w(h, (nh + 2 * nkv) * d), w(nh * d, h), w(h, 2 * inter), w(inter, h))
              for _ in range(spec.layers)]
    head = w(h, spec.vocab)
    weight_bytes = sum(t.numel() for layer in layers for t in layer) * dt.itemsize \
        + head.numel() * dt.itemsize
    timer = _timer(device)
    cuda = device.startswith("cuda")
    out = []
    for b in batches:
        kv = [(w(b, nkv, context, d), w(b, nkv, context, d)) for _ in range(spec.layers)]
        x0 = w(b, h)
        gqa = [nkv != nh]

        def attend(q, k, v):
            if gqa[0]:
                try:
                    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                except (RuntimeError, TypeError):
                    gqa[0] = False
            rep = nh // nkv
            return F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1),
                                                  v.repeat_interleave(rep, 1))

        def step():
            x = x0
            for (wqkv, wo, wgu, wdown), (k, v) in zip(layers, kv):
                q = (x @ wqkv)[:, :nh * d].view(b, nh, 1, d)
                x = x + attend(q, k, v).reshape(b, nh * d) @ wo
                gate, up = (x @ wgu).chunk(2, -1)
                x = x + (F.silu(gate) * up) @ wdown
            return x @ head

        run, graphed = step, False
        if cuda:
            try:
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(3):
                        step()
                torch.cuda.current_stream().wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    step()
                run, graphed = graph.replay, True
            except RuntimeError:
                run, graphed = step, False
        s = timer(run, reps, warmup)
        kv_bytes = 2 * spec.layers * b * nkv * context * d * dt.itemsize
        attn_flops = 4 * spec.layers * b * nh * d * context
        flops = 2 * (weight_bytes / dt.itemsize) * b + attn_flops
        out.append(KernelPoint(b, context, s, weight_bytes + kv_bytes, flops, graphed, gqa[0]))
        del kv, run
        if cuda:
            torch.cuda.empty_cache()
    return out


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of ys against xs."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - slope * mx, slope
