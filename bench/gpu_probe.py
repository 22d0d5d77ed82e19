"""The GPU measurements behind the catalog, in one short process.

Why: `yatt/catalog/gpus.yaml` should cite what an H200 (and, by ratio, an H100) measured,
not the datasheet. This runs the probes of `yatt.profiling.gpu_probe` in one process, section by
section, and writes the JSON after every section, so a run that is cut short still returns
what it measured:
  env       device name, torch/driver versions
  matmul    bf16 TFLOP/s on random data, square and one decode-like skinny shape
  memory    device-memory copy/read/write GB/s (4 GiB buffers)
  host      pinned and pageable host<->device GB/s (1 GiB)
  train     our MegatronTrainer (TP=1) on a ~250M model: fp32, fp32 under bf16 autocast,
            and (CUDA) the executor's bf16 training (bf16 weights, fp32 main parameters and
            Adam); model TFLOP/s
  decode    HF-transformers decode-step seconds against batch size for Qwen2.5-1.5B and
            Qwen2.5-7B shapes (random bf16 weights, 512-token context); eager HF is bound by
            its Python launch cost, so this is a host-overhead reading
  kernels   the same decode step as bare torch kernels replayed from a CUDA graph (as vLLM
            runs it): weights + KV streaming and matmul rate against batch size
  derived   the catalog coefficients these imply (`derive`)
`--quick` runs every section with tiny sizes on CPU (what the tests do here).
Usage: python bench/gpu_probe.py --device cuda --out bench/results/gpu_h200.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import subprocess
import sys
import time
import traceback
from enum import Enum
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _results import render, write_result  # noqa: E402  (bench/ holds the script: on sys.path)

from yatt.core import catalog  # noqa: E402
from yatt.core.specs import ModelSpec  # noqa: E402

# The train-probe model: big enough that a step is well past launch overhead on an H200,
# small enough to build, save and load in seconds (~250M parameters, fp32 Adam ~4 GB).
PROBE_MODEL = ModelSpec(name="probe-250m", layers=12, hidden=1024, intermediate=4096,
                        heads=16, kv_heads=4, vocab=32000, qkv_bias=True, dtype_bytes=2,
                        source="bench/gpu_probe.py train probe (random init)")
TINY = ModelSpec(name="probe-tiny", layers=2, hidden=128, intermediate=256, heads=4,
                 kv_heads=2, vocab=256, qkv_bias=True, dtype_bytes=4,
                 source="bench/gpu_probe.py --quick")


def sizes(quick: bool) -> dict:
    if quick:
        return dict(shapes=[(128, 128, 128), (64, 128, 256)], mem=8 << 20, host=4 << 20,
                    train_model=TINY, train_points=[(2, 32)], decode_models=[TINY],
                    batches=[1, 2], context=16, steps=2,
                    kernel_batches=[1, 4], kernel_contexts=[16])
    return dict(shapes=[(8192, 8192, 8192), (4096, 4096, 4096), (2048, 2048, 2048),
                        (256, 3584, 18944)],
                mem=4 << 30, host=1 << 30,
                train_model=PROBE_MODEL, train_points=[(8, 1024), (32, 1024)],
                decode_models=[catalog.model("Qwen2.5-1.5B"), catalog.model("Qwen2.5-7B")],
                batches=[1, 8, 32, 128, 256], context=512, steps=16,
                kernel_batches=[1, 8, 32, 64, 128, 256], kernel_contexts=[512, 2048])


def env_info(device: str) -> dict:
    import torch

    info = {"torch": torch.__version__, "python": platform.python_version(),
            "device": device, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if device.startswith("cuda"):
        p = torch.cuda.get_device_properties(0)
        info.update(name=p.name, sms=p.multi_processor_count, memory_gb=p.total_memory / 1e9,
                    capability=f"{p.major}.{p.minor}", cuda=torch.version.cuda)
        try:
            info["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,"
                 "power.limit", "--format=csv,noheader"], capture_output=True, text=True,
                timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError) as e:
            info["nvidia_smi"] = f"unavailable: {e}"
    else:
        info["name"] = platform.processor() or "cpu"
    return info


def gpu_host(env: dict) -> str | None:
    """The result's host line for a CUDA run (None: the CPU host, as `_results` describes it)."""
    if env.get("device") != "cuda":
        return None
    smi = env.get("nvidia_smi", "").split(", ")
    driver = f", driver {smi[1]}" if len(smi) > 1 else ""
    return (f"one {env.get('name')} ({env.get('sms')} SMs{driver}), torch {env.get('torch')} + "
            f"CUDA {env.get('cuda')}, Python {env.get('python')}")


def _rows(xs) -> list[dict]:
    return [{k: (v.value if isinstance(v, Enum) else v) for k, v in dataclasses.asdict(x).items()}
            for x in xs]


def derive(res: dict) -> dict:
    """The catalog coefficients the raw sections imply (empty where a section failed)."""
    out: dict = {}
    mm = res.get("matmul") or []
    if mm:
        out["bf16_matmul_tflops"] = max(r["value"] for r in mm)
    mem = {r["what"]: r["value"] for r in res.get("memory") or []}
    if mem:
        out["hbm_read_gbps"] = mem.get("read (sum)")
        out["hbm_copy_gbps"] = mem.get("copy (read+write bytes)")
    host = {r["what"]: r["value"] for r in res.get("host") or []}
    if "h2d pinned" in host:
        out["host_link_gbps"] = min(host["h2d pinned"], host["d2h pinned"])
    tr = res.get("train") or []
    if tr:
        out["train_model_tflops"] = {f"{r['precision']} b{r['batch']}s{r['seq']}": r["tflops"]
                                     for r in tr}
    dec = res.get("decode") or {}
    from yatt.profiling.gpu_probe import fit_line
    fits = {}
    for name, pts in dec.items():
        if not isinstance(pts, list) or len(pts) < 2:
            continue
        a, b = fit_line([p["batch"] for p in pts], [p["step_s"] for p in pts])
        spec = catalog.model(name) if name in catalog.model_names() else None
        fits[name] = {"step_s_at_b0": a, "step_s_per_seq": b}
        if spec is not None:
            one = min(pts, key=lambda p: p["batch"])
            fits[name]["weights_gb_per_s_at_b%d" % one["batch"]] = (
                spec.params * 2 / one["step_s"] / 1e9)
    if fits:
        out["hf_decode"] = fits
    kern = {}
    for name, pts in (res.get("kernels") or {}).items():
        if not isinstance(pts, list) or not pts:
            continue
        lo = min(pts, key=lambda p: p["batch"])
        hi = max(pts, key=lambda p: p["batch"])
        kern[name] = {f"gbps_at_b{lo['batch']}": lo["bytes"] / lo["step_s"] / 1e9,
                      f"tflops_at_b{hi['batch']}": hi["flops"] / hi["step_s"] / 1e12,
                      "graph": all(p["graph"] for p in pts)}
    if kern:
        out["decode_kernels"] = kern
    return out


def model_check(res: dict) -> dict:
    """The analytic cost model (catalog H200, default `Efficiency`) against the kernels and
    the HF prefills: |predicted/measured - 1| per point, median and max. The kernels run
    without a scheduler, so `decode_step_overhead_s` is 0 for them."""
    import statistics

    from yatt.core.specs import ClusterSpec
    from yatt.planner.costmodel import AnalyticCostModel, Efficiency

    cluster = ClusterSpec(catalog.gpu("H200"), nodes=1, gpus_per_node=1)
    bare = AnalyticCostModel(cluster, Efficiency(decode_step_overhead_s=0.0))
    out: dict = {}
    rows = []
    for name, pts in (res.get("kernels") or {}).items():
        spec = catalog.model(name.split()[0])
        for p in pts:
            pred = bare.decode_step_time(spec, 1, p["batch"], p["context"])
            rows.append({"model": spec.name, "batch": p["batch"], "context": p["context"],
                         "measured_s": p["step_s"], "predicted_s": pred,
                         "err": pred / p["step_s"] - 1})
    if rows:
        errs = [abs(r["err"]) for r in rows]
        out["decode_kernels"] = {"median_abs_err": statistics.median(errs),
                                 "max_abs_err": max(errs), "points": rows}
    rows = []
    for name, pts in (res.get("decode") or {}).items():
        if name not in catalog.model_names():
            continue
        spec = catalog.model(name)
        for p in pts:
            pred = p["batch"] * bare.prefill_time(spec, 1, p["context"])
            rows.append({"model": name, "batch": p["batch"], "context": p["context"],
                         "measured_s": p["prefill_s"], "predicted_s": pred,
                         "err": pred / p["prefill_s"] - 1})
    big = [abs(r["err"]) for r in rows if r["batch"] * r["context"] >= 64 * 1024]
    if big:
        out["prefill_hf"] = {"median_abs_err_64k_tokens_up": statistics.median(big),
                             "max_abs_err_64k_tokens_up": max(big), "points": rows}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda | cpu")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gpu_probe.json")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (CPU smoke test)")
    ap.add_argument("--skip", default="", help="comma-separated sections to skip")
    ap.add_argument("--check", type=Path, metavar="RESULT",
                    help="no measuring: add the cost model's check of RESULT to it, print it")
    ap.add_argument("--merge", type=Path, help="start from this earlier result file (its "
                    "sections are kept unless measured again)")
    a = ap.parse_args()
    if a.device not in ("cuda", "cpu"):
        print(f"error: --device: got {a.device!r}; allowed: cuda|cpu", file=sys.stderr)
        return 2
    if a.check:
        res = json.loads(a.check.read_text())
        res["derived"] = derive(res)
        res["model_check"] = model_check(res)
        a.check.write_text(json.dumps(res, indent=1, default=str) + "\n")   # provenance kept
        a.check.with_suffix(".md").write_text(render(a.check.stem, res))
        summary = {k: {m: v for m, v in d.items() if m != "points"}
                   for k, d in res["model_check"].items()}
        print(json.dumps(summary, indent=1))
        return 0
    from yatt.profiling import gpu_probe as gp

    if a.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            print("error: --device cuda: no CUDA device is visible; use --device cpu --quick",
                  file=sys.stderr)
            return 2
    z = sizes(a.quick)
    skip = set(filter(None, a.skip.split(",")))
    res: dict = {"errors": {}, "section_s": {}}
    if a.merge:
        res = json.loads(a.merge.read_text())

    def save() -> None:
        res["derived"] = derive(res)
        res["model_check"] = model_check(res)
        write_result(a.out, res, host=gpu_host(res.get("env") or {}))

    def train() -> list[dict]:
        from yatt.exec.hf_model import build_hf_model
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            path = build_hf_model(z["train_model"], Path(d) / "m", seed=0)
            return _rows(gp.megatron_train(z["train_model"], str(path), a.device,
                                           z["train_points"], gp.device_precisions(a.device)))

    def decode() -> dict:
        return {m.name: _rows(gp.hf_decode(m, a.device, z["batches"], z["context"],
                                           steps=z["steps"],
                                           dtype="bfloat16" if a.device == "cuda" else "float32"))
                for m in z["decode_models"]}

    def kernels() -> dict:
        dt = "bfloat16" if a.device == "cuda" else "float32"
        return {f"{m.name} ctx{c}": _rows(gp.decode_kernels(m, a.device, z["kernel_batches"], c,
                                                             dtype=dt))
                for m in z["decode_models"] for c in z["kernel_contexts"]}

    sections = [
        ("env", lambda: env_info(a.device)),
        ("matmul", lambda: _rows(gp.matmul(a.device, z["shapes"],
                                           "bfloat16" if a.device == "cuda" else "float32"))),
        ("memory", lambda: _rows(gp.memory(a.device, z["mem"]))),
        ("host", lambda: _rows(gp.host_link(a.device, z["host"]))),
        ("train", train),
        ("decode", decode),
        ("kernels", kernels),
    ]
    res["train_model"] = dataclasses.asdict(z["train_model"])
    if a.quick:
        res["note"] = "--quick: tiny sizes, a smoke test, not a measurement"
    for name, fn in sections:
        if name in skip:
            continue
        t0 = time.perf_counter()
        print(f"[gpu_probe] {name} ...", flush=True)
        try:
            res[name] = fn()
        except Exception as e:  # one failed section must not lose the others
            res["errors"][name] = f"{type(e).__name__}: {e}"
            res["errors"][name + "_trace"] = traceback.format_exc()[-3000:]
            print(f"[gpu_probe] {name} FAILED: {type(e).__name__}: {e}", flush=True)
        res["section_s"][name] = round(time.perf_counter() - t0, 2)
        res.setdefault("section_date", {})[name] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        save()
        print(f"[gpu_probe] {name} done in {res['section_s'][name]} s", flush=True)
    print(json.dumps(res["derived"], indent=1, default=str))
    return 1 if res["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
