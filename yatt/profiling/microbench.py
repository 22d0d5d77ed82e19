"""Micro-benchmarks of the executor's real components, for `yatt profile`.

Why: the profiled cost model must be fed by the same code the executor runs, on the local
hardware: Megatron training steps (`trainer.MegatronTrainer`), reference log-probs
(`workers.ReferenceWorker`, HF forward), vLLM prefill/decode steps, engine
create/teardown (`rollout.EngineCore`, exactly what `ReleaseAction.TEARDOWN` does) and the
weight update (`MegatronTrainer.hf_state_dict` -> `EngineCore.update_weights`).
Everything here runs in-process (no Ray; `microbench_ray` and `microbench_engines` have the
benchmarks that need a Ray session), one thread on CPU, with the executor's own
environment settings (`env.apply_local_env`). This module imports core only at import
time; torch/vllm/megatron are imported inside the functions.

Results are plain tuples of numbers; `yatt.profiling.profile` turns them into tables.
Timings are medians over `reps` repetitions after one untimed warm-up. With `passes` > 1
every point is measured once per pass over the whole point list and the median is taken
over passes: a shared VM's vCPUs flip between a fast and a ~1.45x slower state every few
seconds (bench/results/host_speed.json), and back-to-back repetitions of one point can all
land in the rarer fast state.

GPU (`device="cuda"`): the same calls with `cpu=False` engines and a CUDA trainer. The
trainer half ran on an H200 (`tests/exec/test_trainer.py::test_cuda_trainer_matches_cpu`,
`bench/gpu_probe.py`); the engine half has never run on a GPU (the GPU machine has no
vLLM) and is marked `# GPU path`. CI has no GPU.
"""
from __future__ import annotations

import dataclasses
import socket
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from yatt.core.jobspec import Dtype
from yatt.core.specs import AlgoSpec, ModelSpec

Tick = Callable[[str], None]
# the second KV cache size an engine's re-create is timed at: one 128-token block a sequence
SMALL_KV_LEN = 128


@dataclass(frozen=True)
class EngineBench:
    """One model's engine measurements."""

    start_s: float                                  # create (imports warm): re-create cost
    stop_s: float                                   # teardown (EngineCore.stop)
    decode: tuple[tuple[int, int, float], ...]      # (batch, mean context, s per decode step)
    prefill: tuple[tuple[int, int, float], ...]     # (requests, prompt tokens each, s for the step)
    # (running, new, prompt tokens each, s): a step admitting `new` requests into `running`
    # decoding ones, minus the plain step right after it (all of them decoding)
    join: tuple[tuple[int, int, int, float], ...] = ()
    # (KV cache bytes, re-create s, teardown s), medians at each cache size (CPU)
    restart: tuple[tuple[int, float, float], ...] = ()


def _median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs)) if xs else 0.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prepare(device: str) -> bool:
    """Executor environment for in-process benchmarks; returns True on CPU."""
    from yatt.exec.env import apply_local_env

    cpu = device == "cpu"
    apply_local_env(cpu)
    if cpu:
        import torch
        torch.set_num_threads(1)
    return cpu


def python_loop_time(n: int) -> float:
    """Seconds of `n` pure-Python additions (a host-speed probe)."""
    t0, s = time.perf_counter(), 0
    for i in range(n):
        s += i
    return time.perf_counter() - t0


def matmul_loop_time(x, k: int) -> float:
    """Seconds of `k` products `x @ x` (a host-speed probe; one thread after `prepare`)."""
    t0 = time.perf_counter()
    for _ in range(k):
        x @ x
    return time.perf_counter() - t0


def host_probe_parts_once() -> tuple[float, float]:
    """(interpreter s, matmul s) of one fixed CPU workload: 100k pure-Python additions, then
    30 fp32 256x256 matmuls (one thread after `prepare`). The same code at profile time and
    at plan time tells how much faster or slower the host is now than when it was profiled;
    the two parts apart tell interpreter speed from large-matmul speed (the host rescale
    follows the first: `yatt.planner.hostscale`)."""
    import torch

    return python_loop_time(100_000), matmul_loop_time(torch.ones(256, 256), 30)


def host_probe_once() -> float:
    """Seconds of `host_probe_parts_once`, both parts together."""
    return sum(host_probe_parts_once())


def host_probe_parts(seconds: float) -> list[tuple[float, float]]:
    """`host_probe_parts_once` repeated for about `seconds` (at least 3 samples)."""
    out: list[tuple[float, float]] = []
    end = time.perf_counter() + seconds
    while len(out) < 3 or time.perf_counter() < end:
        out.append(host_probe_parts_once())
    return out


def host_probe(seconds: float) -> list[float]:
    """`host_probe_once` repeated for about `seconds` (at least 3 samples)."""
    return [a + b for a, b in host_probe_parts(seconds)]


def model_path(spec: ModelSpec, seed: int = 0) -> str:
    from yatt.exec.models import resolve_model

    return str(resolve_model(spec, seed))


def _ids(n: int, vocab: int, rng) -> tuple[int, ...]:
    # avoid the special ids 0..2 (pad/bos/eos in the demo tokenizers)
    return tuple(int(x) for x in rng.integers(3, max(4, vocab), size=n))


# ---- training ------------------------------------------------------------------------------
def bench_algo(micro_batch_tokens: int) -> AlgoSpec:
    """The algorithm a timed train step runs: the PPO-clip loss without KL or entropy terms
    (the batches carry no reference log-probs), one epoch, a replicated Adam optimizer."""
    return AlgoSpec(lr=1e-5, micro_batch_tokens=micro_batch_tokens, kl_coef=0.0,
                    entropy_coef=0.0, distributed_optimizer=False)


class TrainBench:
    """A Megatron trainer rank kept alive for several measurements: TP=DP=1 alone by
    default, or rank `rank` of a TP x DP group whose rank 0 listens on `port`
    (`microbench_ray`)."""

    def __init__(self, spec: ModelSpec, hf_path: str, device: str, micro_batch_tokens: int,
                 tp: int = 1, rank: int = 0, port: int = 0, dp: int = 1,
                 dtype: Dtype = Dtype.FLOAT32):
        from yatt.exec.trainer import MegatronTrainer

        self.spec = spec
        self.trainer = MegatronTrainer(spec, hf_path, bench_algo(micro_batch_tokens), tp=tp,
                                       dp=dp, rank=rank, master_addr="127.0.0.1",
                                       master_port=port or _free_port(), device=device,
                                       dtype=dtype)

    def step_time(self, batch: int, seq: int, reps: int, rng) -> float:
        """Seconds of one `train_step` on `batch` sequences of `seq` tokens (half prompt)."""
        from yatt.exec.train_batch import TrainBatch

        p = max(1, seq // 2)
        times = []
        for r in range(reps + 1):
            ids = tuple(_ids(seq, self.spec.vocab, rng) for _ in range(batch))
            b = TrainBatch(ids, (p,) * batch, tuple(float(x) for x in rng.normal(size=batch)))
            t0 = time.perf_counter()
            self.trainer.train_step(b)
            if r:  # the first repetition warms up
                times.append(time.perf_counter() - t0)
        return _median(times)

    def state_dict_time(self, reps: int) -> tuple[float, dict]:
        times, sd = [], {}
        for _ in range(reps):
            t0 = time.perf_counter()
            sd = self.trainer.hf_state_dict()
            times.append(time.perf_counter() - t0)
        return _median(times), sd

    def close(self) -> None:
        self.trainer.shutdown()


def over_passes(points: Sequence, measure: Callable, passes: int) -> list[float]:
    """measure(point) for every point, `passes` times over the whole list (spread in time);
    per point the median over passes."""
    got: list[list[float]] = [[] for _ in points]
    for _ in range(max(1, passes)):
        for i, p in enumerate(points):
            got[i].append(measure(p))
    return [_median(x) for x in got]


def logprob_times(hf_path: str, device: str, points: Sequence[tuple[int, int]], vocab: int,
                  reps: int, rng, tick: Tick, passes: int = 1) -> list[tuple[int, int, float]]:
    """Reference log-probs (`ReferenceWorker.logprobs`, the executor's reference) per point."""
    from yatt.exec.workers import ReferenceWorker

    ref = ReferenceWorker(hf_path, device)

    def one(point: tuple[int, int]) -> float:
        batch, seq = point
        times = []
        for r in range(reps + 1):
            ids = [list(_ids(seq, vocab, rng)) for _ in range(batch)]
            t0 = time.perf_counter()
            ref.logprobs(ids, [max(1, seq // 2)] * batch)
            if r:
                times.append(time.perf_counter() - t0)
        return _median(times)

    out = [(b, s, t) for (b, s), t in zip(points, over_passes(points, one, passes))]
    tick(f"reference logprob: {len(points)} points x {passes} passes")
    return out


# ---- inference engines ---------------------------------------------------------------------
def _engine_config(hf_path: str, cpu: bool, max_num_seqs: int, mem_util: float):
    from yatt.core.release import resolve_release
    from yatt.core.roles import ReleasePolicy, Role
    from yatt.exec.rollout import EngineConfig

    # an engine released as the default policy releases it on this device (CPU: teardown,
    # GPU: sleep mode)
    return EngineConfig(hf_path, max_model_len=512, max_num_seqs=max_num_seqs,
                        gpu_memory_utilization=mem_util, cpu=cpu,
                        release=resolve_release(ReleasePolicy.OFFLOAD, Role.ROLLOUT, cpu=cpu))


def _add(core, rid: str, prompt: Sequence[int], max_tokens: int) -> None:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    # as the executor asks (controller.ControllerConfig.behaviour_logprobs is off; GenRM
    # never asks): no per-token log-probs, which cost ~10-20% of a rollout step here
    sp = SamplingParams(n=1, temperature=1.0, max_tokens=max_tokens, ignore_eos=True,
                        logprobs=None, detokenize=False, seed=1)
    core.engine.add_request(rid, TokensPrompt(prompt_token_ids=list(prompt)), sp)


def _drain(core) -> list[float]:
    """Step the engine until idle; wall seconds of each step."""
    out = []
    while core.has_unfinished():
        t0 = time.perf_counter()
        core.engine.step()
        out.append(time.perf_counter() - t0)
    return out


def engine_bench(spec: ModelSpec, hf_path: str, device: str, *, max_num_seqs: int,
                 mem_util: float, decode_points: Sequence[tuple[int, int]],
                 prefill_points: Sequence[tuple[int, int]], decode_steps: int, reps: int,
                 restarts: int, rng, tick: Tick, keep: bool = False, passes: int = 1,
                 join_points: Sequence[tuple[int, int, int]] = ()):
    """Create/teardown times, decode step, prefill and join times of one model's engine.

    Join: streamed requests (a GenRM fed by rollouts, a rollout engine refilling its batch)
    enter an engine that is already decoding, one to a few at a time, so their prefill
    rides in a mixed prefill+decode step. Measured directly (the mixed step minus the plain
    step after it) rather than inferred from the idle-engine prefill points.

    Returns (EngineBench, core): `core` is the live engine when `keep` (for the weight-sync
    benchmark), else None."""
    from yatt.exec.rollout import EngineCore, cpu_kv_bytes

    cpu = device == "cpu"
    cfg = _engine_config(hf_path, cpu, max_num_seqs, mem_util)
    core = EngineCore(cfg)
    core.start()  # first start pays imports and one-off initialisation: not a re-create
    tick(f"{spec.name}: engine up")
    # CPU: the executor sizes each engine's KV cache to its job, and allocating it is the
    # part of a re-create that grows with the size, so a second engine with a one-block
    # cache per sequence is re-created in turn with the first (same minutes, two sizes)
    small = EngineCore(dataclasses.replace(cfg, max_model_len=SMALL_KV_LEN)) if cpu else None
    starts, stops, small_starts, small_stops = [], [], [], []
    for _ in range(restarts):
        stops.append(core.stop())
        if small is not None:
            small_starts.append(small.start())
            small_stops.append(small.stop())
        starts.append(core.start())
        tick(f"{spec.name}: teardown + re-create")
    restart = ()
    if small is not None and restarts:
        restart = ((cpu_kv_bytes(small.cfg), _median(small_starts), _median(small_stops)),
                   (cpu_kv_bytes(cfg), _median(starts), _median(stops)))
    for r in range(1):  # warm-up request
        _add(core, f"w{r}", _ids(16, spec.vocab, rng), 4)
        _drain(core)
    n = [0]

    def dec(point: tuple[int, int]) -> float:
        batch, ctx = point
        per = []
        for _ in range(reps):
            for j in range(batch):
                _add(core, f"d{n[0]}", _ids(ctx, spec.vocab, rng), decode_steps + 1)
                n[0] += 1
            steps = _drain(core)
            # step 0 prefills every prompt (and samples the first token); the rest decode
            per.append(_median(steps[1:]) if len(steps) > 1 else steps[0])
        return _median(per)

    def pre(point: tuple[int, int]) -> float:
        batch, plen = point
        per = []
        for _ in range(reps):
            for j in range(batch):
                _add(core, f"p{n[0]}", _ids(plen, spec.vocab, rng), 1)
                n[0] += 1
            per.append(sum(_drain(core)))
        return _median(per)

    def join(point: tuple[int, int, int]) -> float:
        running, new, plen = point
        per = []
        for _ in range(reps):
            rids = []
            for j in range(running):
                rids.append(f"j{n[0]}")
                _add(core, rids[-1], _ids(16, spec.vocab, rng), 64)
                n[0] += 1
            core.engine.step()      # prefills the running batch
            core.engine.step()      # a plain decode step: now they are decoding
            for j in range(new):
                rids.append(f"j{n[0]}")
                _add(core, rids[-1], _ids(plen, spec.vocab, rng), 64)
                n[0] += 1
            t0 = time.perf_counter()
            core.engine.step()      # the mixed step
            t1 = time.perf_counter()
            core.engine.step()      # the plain step of all of them
            t2 = time.perf_counter()
            per.append((t1 - t0) - (t2 - t1))
            core.engine.abort_request(rids)
            _drain(core)
        return _median(per)

    decode = [(b, c + decode_steps // 2, t) for (b, c), t in
              zip(decode_points, over_passes(decode_points, dec, passes))]
    tick(f"{spec.name}: decode, {len(decode_points)} points x {passes} passes")
    prefill = [(b, p, t) for (b, p), t in zip(prefill_points, over_passes(prefill_points, pre, passes))]
    tick(f"{spec.name}: prefill, {len(prefill_points)} points x {passes} passes")
    joined = [(r, k, p, t) for (r, k, p), t in zip(join_points, over_passes(join_points, join, passes))]
    bench = EngineBench(_median(starts), _median(stops), tuple(decode), tuple(prefill),
                        tuple(joined), restart)
    if keep:
        return bench, core
    core.stop()
    return bench, None


def stop_lengths(hf_path: str, device: str, workload, cap: int, samples: int, seed: int,
                 tick: Tick) -> tuple[int, ...]:
    """Where the model's responses end when EOS may end them: `samples` responses to the
    executor's own task prompts (`task.step_prompts`, encoded as the controller encodes
    them), temperature 1 and per-request seeds as in a rollout, budget `cap` tokens. A
    length equal to `cap` means the budget ended it (the model had not stopped)."""
    from transformers import AutoTokenizer

    from yatt.exec.rollout import EngineCore, GenRequest
    from yatt.exec.task import step_prompts

    tok = AutoTokenizer.from_pretrained(hf_path)
    bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    core = EngineCore(_engine_config(hf_path, device == "cpu", 64, 0.5))
    core.start()
    try:
        lengths: list[int] = []
        step = 0
        while len(lengths) < samples:
            rids = {}
            for p in step_prompts(seed, 10_000 + step, workload):
                ids = tuple([bos] + tok.encode(p.text, add_special_tokens=False))
                for j in range(workload.samples_per_prompt):
                    n = len(lengths) + len(rids)
                    if n >= samples:
                        break
                    rid = f"s{n}"
                    rids[rid] = n
                    core.add(rid, GenRequest(n, ids, cap, seed=seed * 1_000_003 + n,
                                             logprobs=False))
            got = {}
            while core.has_unfinished():
                for o in core.step():
                    got[rids[o.request_id]] = len(o.outputs[0].token_ids)
            lengths.extend(got[i] for i in sorted(got))
            step += 1
        tick(f"stop lengths: {len(lengths)} responses")
        return tuple(lengths[:samples])
    finally:
        core.stop()


def weight_update_time(core, state: dict, reps: int) -> float:
    """`EngineCore.update_weights` with a trainer's HF-named state (what weight sync runs)."""
    times = []
    for _ in range(reps):
        times.append(core.update_weights(state.items()))
    return _median(times)
