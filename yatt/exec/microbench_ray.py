"""Micro-benchmarks that need a Ray session: the executor's process layout.

Why: some costs exist only between processes -- an actor round trip, a state dict through
the object store, and (on CPU) several "devices" of one host slowing each other down. These
run in a local Ray session with actors laid out as the executor lays them out (one actor
per device, num_cpus=0, Ray's daemons alongside). The in-process benchmarks stay in
`microbench`. Imports core only at import time; ray/torch/vllm inside the functions.
"""
from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator, Optional, Sequence

from yatt.core.specs import ModelSpec

from .microbench import (Tick, TrainBench, _add, _drain, _engine_config, _ids, _median,
                         prepare)


@contextlib.contextmanager
def local_ray() -> Iterator[None]:
    """A local 2-CPU Ray session for the benchmark (or the one already running, left up)."""
    import os
    import tempfile

    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    tmp = os.environ.get("RAY_TMPDIR") or tempfile.mkdtemp(prefix="yatt-ray-")
    started = False
    try:
        if not ray.is_initialized():
            ray.init(num_cpus=2, include_dashboard=False, _temp_dir=tmp, log_to_driver=False)
            started = True
        yield
    finally:
        if started:
            ray.shutdown()


def ray_times(reps: int, payload_bytes: Sequence[int] = (), tick: Optional[Tick] = None
              ) -> tuple[float, tuple[tuple[int, float], ...]]:
    """(round trip s, ((bytes, s), ...)): one Ray actor method round trip with a small
    payload, and for each size in `payload_bytes` the extra seconds of passing a dict of
    float32 tensors that large (a state dict) through the object store to an actor that
    reads it -- what weight sync adds to the in-process state-dict and reload times.
    Starts and stops a local Ray session."""
    import numpy as np
    import ray
    import torch

    with local_ray():
        @ray.remote(num_cpus=0)
        class _Echo:
            def echo(self, x):
                return x

            def take(self, state):
                return sum(int(v.numel()) for v in state.values())

        a = _Echo.remote()
        payload = list(range(256))
        ray.get(a.echo.remote(payload))
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            ray.get(a.echo.remote(payload))
            times.append(time.perf_counter() - t0)
        rpc = _median(times)
        if tick:
            tick("ray round trip")
        moved = []
        for nbytes in payload_bytes:
            per = max(1, int(nbytes) // 4 // 16)  # 16 float32 tensors, like a state dict
            state = {f"w{i}": torch.from_numpy(np.ones(per, dtype=np.float32)) for i in range(16)}
            ray.get(a.take.remote(state))   # warm-up
            ts = []
            for _ in range(max(3, reps // 5)):
                t0 = time.perf_counter()
                ray.get(a.take.remote(state))
                ts.append(time.perf_counter() - t0)
            moved.append((int(nbytes), max(0.0, _median(ts) - rpc)))
            if tick:
                tick(f"ray transfer {nbytes / 1e6:.1f} MB")
        ray.kill(a)
        return rpc, tuple(moved)


# ---- streaming hand-off --------------------------------------------------------------------
def handoff_time(hf_path: str, vocab: int, reps: int, requests: int = 32, seed: int = 0,
                 tick: Optional[Tick] = None) -> float:
    """Seconds one streamed batch costs the rollout engine that hands it off (per put).

    In partial colocate the executor's rollout engine puts each engine step's finished
    results on a Ray queue (`EngineServer.generate(..., sink=queue)`) while it steps on; the
    put does not block it, but serialising and sending it runs in the engine's process, on
    the engine's core. Measured as the executor runs it: one engine actor generates the same
    `requests` (13-token prompts, 4-16 new tokens) alone and streaming to a queue that a
    second actor drains, paired and alternating, `reps` times; the result is the median over
    pairs of (streaming - alone) / puts. Starts and stops a local Ray session."""
    import numpy as np
    import ray
    from ray.util.queue import Queue

    from .rollout import EngineServer, GenRequest, engine_actor_class

    with local_ray():
        @ray.remote(num_cpus=0)
        class _Drain:
            async def run(self, queue, n: int) -> int:
                got = puts = 0
                while got < n:
                    got += len(await queue.get_async())
                    puts += 1
                return puts

        cfg = _engine_config(hf_path, True, max_num_seqs=max(64, requests), mem_util=0.5)
        eng = engine_actor_class(EngineServer).options(num_cpus=0).remote(cfg)
        drain = _Drain.remote()
        ray.get(eng.acquire.remote())
        rng = np.random.default_rng(seed)

        def batch(k: int) -> list:
            return [GenRequest(key=i, prompt_ids=_ids(13, vocab, rng),
                               max_tokens=int(rng.integers(4, 17)), temperature=1.0,
                               seed=10_000 * k + i) for i in range(requests)]

        warm = Queue()   # warm-up: the engine, the drain actor's process and the streaming path
        ray.get([eng.generate.remote(batch(0), sink=warm), drain.run.remote(warm, requests)])
        ray.kill(warm.actor)
        per = []
        for k in range(1, reps + 1):
            reqs = batch(k)
            queue = Queue()
            ray.get(queue.actor.qsize.remote())   # the queue actor is up before timing
            t0 = time.perf_counter()
            ray.get(eng.generate.remote(reqs))
            alone = time.perf_counter() - t0
            t0 = time.perf_counter()
            _, puts = ray.get([eng.generate.remote(reqs, sink=queue), drain.run.remote(queue, requests)])
            streaming = time.perf_counter() - t0
            per.append((streaming - alone) / max(1, puts))
            ray.kill(queue.actor)
        ray.kill(eng)
        ray.kill(drain)
        if tick:
            tick("stream hand-off")
        return max(0.0, _median(per))


# ---- host contention -----------------------------------------------------------------------
CONTENTION_OPS = ("offload", "reload", "decode", "logprob", "train")


class ContentionWorker:
    """One 'device' of the contention benchmark: a Ray actor (like the executor's engine and
    trainer actors, num_cpus=0, one thread) holding an engine, a Megatron trainer and a
    reference model, that runs one of CONTENTION_OPS on request and returns its seconds."""

    def __init__(self, spec: ModelSpec, hf_path: str, device: str, mbt: int, seed: int):
        import numpy as np

        from .rollout import EngineCore
        from .workers import ReferenceWorker

        cpu = prepare(device)
        self.spec = spec
        self.rng = np.random.default_rng(seed)
        self.core = EngineCore(_engine_config(hf_path, cpu, 32, 0.5))
        self.core.start()
        self.tb = TrainBench(spec, hf_path, device, mbt)
        self.ref = ReferenceWorker(hf_path, device)
        self.n = 0
        self.ops: dict[str, Callable[[], float]] = {
            "offload": self.core.stop, "reload": self.core.start, "decode": self._decode,
            "logprob": self._logprob, "train": lambda: self.tb.step_time(8, 32, 1, self.rng)}
        self._decode(), self._logprob()  # warm-up: the first pass of each is not representative

    def _decode(self) -> float:
        for _ in range(16):
            _add(self.core, f"c{self.n}", _ids(16, self.spec.vocab, self.rng), 16)
            self.n += 1
        return sum(_drain(self.core))

    def _logprob(self) -> float:
        ids = [list(_ids(32, self.spec.vocab, self.rng)) for _ in range(8)]
        t0 = time.perf_counter()
        self.ref.logprobs(ids, [16] * 8)
        return time.perf_counter() - t0

    def run(self, op: str) -> float:
        return self.ops[op]()

    def close(self) -> None:
        self.core.stop()
        self.tb.close()


def contention_times(spec: ModelSpec, hf_path: str, device: str, counts: Sequence[int],
                     rounds: int, micro_batch_tokens: int = 512, seed: int = 0
                     ) -> dict[int, dict[str, list[float]]]:
    """Seconds of each op in CONTENTION_OPS with n devices running it at the same instant,
    for each n in `counts`, one entry per round: max(counts) worker actors in a local Ray
    session (the executor's process layout: one actor per device, Ray's daemons alongside);
    the driver starts the op on workers 0..n-1 together and waits for the slowest, as the
    executor does. Within a round each op runs at every count back to back, so the counts
    of one op are measured seconds apart (the host's speed drifts over longer spans; compare
    counts round by round)."""
    import os

    import ray

    counts = tuple(sorted({int(n) for n in counts}))
    if not counts or counts[0] < 1:
        raise ValueError(f"counts must be >= 1, got {counts}")
    os.environ.setdefault("RAY_worker_niceness", "0")  # the profile's own priority
    with local_ray():
        cls = ray.remote(num_cpus=0)(ContentionWorker)
        workers = [cls.remote(spec, hf_path, device, micro_batch_tokens, seed + i)
                   for i in range(counts[-1])]
        try:
            ray.get([w.run.remote("logprob") for w in workers])  # all constructed
            times: dict[int, dict[str, list[float]]] = {n: {k: [] for k in CONTENTION_OPS}
                                                        for n in counts}
            # teardown and re-create run as a pair (an engine must be up to be torn down)
            groups = [("offload", "reload")] + [(k,) for k in CONTENTION_OPS
                                                if k not in ("offload", "reload")]
            for _ in range(rounds):
                for group in groups:
                    for n in counts:
                        for k in group:
                            times[n][k].append(
                                max(ray.get([w.run.remote(k) for w in workers[:n]])))
            ray.get([w.close.remote() for w in workers])
            return times
        finally:
            for w in workers:
                ray.kill(w)


# a judge-like batch for a GenRM's own contention ratio: prefill-heavy, a few new tokens
JUDGE_REQUESTS, JUDGE_PROMPT, JUDGE_NEW = 32, 40, 4


class EngineWorker:
    """One 'device' running only an engine of one model (a GenRM's contention benchmark)."""

    def __init__(self, spec: ModelSpec, hf_path: str, device: str, max_num_seqs: int,
                 seed: int) -> None:
        import numpy as np

        from .rollout import EngineCore

        cpu = prepare(device)
        self.spec, self.n = spec, 0
        self.rng = np.random.default_rng(seed)
        self.core = EngineCore(_engine_config(hf_path, cpu, max_num_seqs, 0.5))
        self.core.start()

    def judge_batch(self) -> float:
        """Seconds to generate one judge-like batch to completion."""
        t0 = time.perf_counter()
        for _ in range(JUDGE_REQUESTS):
            _add(self.core, f"j{self.n}", _ids(JUDGE_PROMPT, self.spec.vocab, self.rng), JUDGE_NEW)
            self.n += 1
        _drain(self.core)
        return time.perf_counter() - t0

    def close(self) -> None:
        self.core.stop()


def engine_contention_times(spec: ModelSpec, hf_path: str, device: str, counts: Sequence[int],
                            rounds: int, max_num_seqs: int = 64, seed: int = 0
                            ) -> dict[int, list[float]]:
    """Seconds of a judge-like batch on engines of `spec` with n of them generating at once,
    for each n in `counts` (1 included), one entry per round, the counts interleaved within a
    round (as `contention_times`, for one engine model: a larger model than the actor
    contends for the host's caches and memory bus more than the actor's engine does)."""
    import os

    import ray

    counts = tuple(sorted({1} | {int(n) for n in counts}))
    os.environ.setdefault("RAY_worker_niceness", "0")
    prepare(device)   # the engine actors inherit this environment (vLLM-CPU settings)
    with local_ray():
        cls = ray.remote(num_cpus=0)(EngineWorker)
        workers = [cls.remote(spec, hf_path, device, max_num_seqs, seed + i)
                   for i in range(counts[-1])]
        try:
            ray.get([w.judge_batch.remote() for w in workers])   # warm-up, all constructed
            times: dict[int, list[float]] = {n: [] for n in counts}
            for _ in range(rounds):
                for n in counts:
                    times[n].append(max(ray.get([w.judge_batch.remote() for w in workers[:n]])))
            ray.get([w.close.remote() for w in workers])
            return times
        finally:
            for w in workers:
                ray.kill(w)


# ---- tensor- and data-parallel training -----------------------------------------------------
class GroupRank:
    """One rank of a TP x DP trainer group for the benchmark: a Ray actor holding a
    MegatronTrainer."""

    def __init__(self, spec: ModelSpec, hf_path: str, device: str, mbt: int, tp: int,
                 rank: int, dp: int = 1) -> None:
        prepare(device)
        self.args = (spec, hf_path, device, mbt, tp, rank, dp)
        self.tb: Optional[TrainBench] = None

    def address(self) -> int:
        from .microbench import _free_port

        return _free_port()

    def setup(self, port: int) -> None:
        spec, hf_path, device, mbt, tp, rank, dp = self.args
        self.tb = TrainBench(spec, hf_path, device, mbt, tp=tp, rank=rank, port=port, dp=dp)

    def step_time(self, batch: int, seq: int, reps: int, seed: int) -> float:
        import numpy as np

        # the TP ranks of one DP rank see the same batch (Megatron's rank order puts TP
        # innermost); DP ranks see different batches of the same shape, as in a real step
        tp = self.args[4]
        return self.tb.step_time(batch, seq, reps,
                                 np.random.default_rng(seed + 7919 * (self.args[5] // tp)))

    def hf_state_dict(self) -> dict:
        return self.tb.trainer.hf_state_dict()

    def close(self) -> None:
        self.tb.close()


def group_train_times(spec: ModelSpec, hf_path: str, device: str, tp: int,
                      points: Sequence[tuple[int, int]], reps: int, passes: int,
                      micro_batch_tokens: int = 512, seed: int = 0, dp: int = 1) -> list[float]:
    """Seconds of one `train_step` of a TP=`tp` x DP=`dp` group (the slowest rank) at each
    (batch per DP rank, seq) point: tp*dp Ray actors on this host (one per device, as the
    executor places trainer ranks), so the time holds the group's collectives (TP
    activations, the DP gradient all-reduce and metric reductions) and the waits between
    ranks; median over `passes` passes over the points."""
    import ray

    from .microbench import over_passes

    world = tp * dp
    with local_ray():
        cls = ray.remote(num_cpus=0)(GroupRank)
        ranks = [cls.remote(spec, hf_path, device, micro_batch_tokens, tp, r, dp)
                 for r in range(world)]
        try:
            port = ray.get(ranks[0].address.remote())
            ray.get([r.setup.remote(port) for r in ranks])
            k = [0]

            def one(point: tuple[int, int]) -> float:
                k[0] += 1
                return max(ray.get([r.step_time.remote(point[0], point[1], reps, seed + k[0])
                                    for r in ranks]))

            out = over_passes(points, one, passes)
            ray.get([r.close.remote() for r in ranks])
            return out
        finally:
            for r in ranks:
                ray.kill(r)


# ---- weight sync ---------------------------------------------------------------------------
def sync_times(spec: ModelSpec, hf_path: str, device: str, engines: Sequence[int], reps: int,
               max_num_seqs: int, mem_util: float, micro_batch_tokens: int = 512,
               tick: Optional[Tick] = None) -> list[float]:
    """Seconds of one weight sync to n rollout engines, for each n in `engines`, on the
    executor's path (`schedules.StepRunner.push_weights`): a trainer rank actor's
    `hf_state_dict` goes through the object store to n engine actors (`EngineServer`, one
    per device) that `update_weights` at once, driven from this process as the executor's
    driver drives it. This holds what the in-process gather + update lacks: the round trips,
    the state dict's (de)serialisation in each engine's process, and the engines loading at
    once on one host. Median over `reps`, the counts interleaved. Starts and stops a local
    Ray session."""
    import ray

    from .rollout import EngineServer, engine_actor_class

    counts = tuple(sorted({int(n) for n in engines}))
    if not counts or counts[0] < 1:
        raise ValueError(f"engine counts must be >= 1, got {counts}")
    prepare(device)   # the engine actors inherit this environment (vLLM-CPU settings)
    with local_ray():
        trainer = ray.remote(num_cpus=0)(GroupRank).remote(spec, hf_path, device,
                                                           micro_batch_tokens, 1, 0)
        cfg = _engine_config(hf_path, device == "cpu", max_num_seqs, mem_util)
        engs = [engine_actor_class(EngineServer).options(num_cpus=0).remote(cfg)
                for _ in range(counts[-1])]
        try:
            ray.get(trainer.setup.remote(ray.get(trainer.address.remote())))
            ray.get([e.acquire.remote() for e in engs])

            def push(n: int) -> float:
                t0 = time.perf_counter()
                state = trainer.hf_state_dict.remote()
                ray.get([e.update_weights.remote(state) for e in engs[:n]])
                return time.perf_counter() - t0

            push(counts[-1])   # warm-up: the first update of each engine
            times: dict[int, list[float]] = {n: [] for n in counts}
            for _ in range(max(1, reps)):
                for n in counts:
                    times[n].append(push(n))
            ray.get(trainer.close.remote())
            if tick:
                tick("weight sync through Ray")
            return [_median(times[n]) for n in counts]
        finally:
            for a in [trainer] + engs:
                ray.kill(a)


# ---- engine call overhead ------------------------------------------------------------------
CALL_SIZES = (2, 8, 32)   # requests per call


class _StepsOnly:
    """Mixin for the executor's engine actor bodies: run requests through the bare engine,
    timing only its steps (what the engine tables time), in the same process."""

    def steps_only(self, reqs: list) -> float:
        for r in reqs:
            self.core.add(f"s{next(self._ids)}", r)
        return sum(_drain(self.core))

    def judged_steps_only(self, results: list) -> float:
        return self.steps_only([self._request(r) for r in results])


def call_overhead_times(spec: ModelSpec, hf_path: str, device: str, reps: int,
                        max_num_seqs: int, judge: Optional[tuple[str, str, int]] = None,
                        sizes: Sequence[int] = CALL_SIZES, seed: int = 0,
                        tick: Optional[Tick] = None) -> list[tuple[int, float]]:
    """(requests, s) per call size: what one call handing an engine actor n requests costs
    beyond that engine's steps, on the executor's path. The driver calls the executor's
    actor (`EngineServer.generate` with rollout-like requests, or with `judge` =
    (actor tokenizer, GenRM path, max tokens) `GenRMServer.judge` on rollout results) and
    times the call; the same actor then runs the same requests through the bare engine
    timing only its steps; the difference is the call's round trip, building and adding the
    requests (a GenRM's template and tokenizers), the server's step loop and returning the
    results. Median over `reps` per size, sizes interleaved. Starts and stops Ray."""
    import numpy as np
    import ray

    from .genrm import GenRMServer, JudgeConfig
    from .rollout import EngineServer, GenRequest, GenResult

    prepare(device)
    rng = np.random.default_rng(seed)
    keys = iter(range(10 ** 9))
    body = type("_Timed", (_StepsOnly, GenRMServer if judge else EngineServer), {})
    cfg = _engine_config(hf_path, device == "cpu", max_num_seqs, 0.5)
    with local_ray():
        if judge:
            actor_tok, genrm_path, max_tokens = judge
            cfg = _engine_config(genrm_path, device == "cpu", max_num_seqs, 0.5)
            a = ray.remote(num_cpus=0)(body).remote(cfg, JudgeConfig(actor_tok, genrm_path,
                                                                     max_tokens=max_tokens))
        else:
            a = ray.remote(num_cpus=0)(body).remote(cfg)
        try:
            ray.get(a.acquire.remote())

            def work(n: int) -> list:
                if judge:   # rollout results: 13 prompt tokens, 10 response tokens
                    return [GenResult(next(keys), _ids(13, spec.vocab, rng),
                                      _ids(10, spec.vocab, rng), (), "stop", 0.0)
                            for _ in range(n)]
                return [GenRequest(next(keys), _ids(13, spec.vocab, rng), 8, 1.0,
                                   int(rng.integers(1 << 30)), False) for _ in range(n)]

            def once(n: int) -> float:
                items = work(n)
                t0 = time.perf_counter()
                ray.get(a.judge.remote(items) if judge else a.generate.remote(items))
                call = time.perf_counter() - t0
                # the same items again: seeded (rollout) or greedy (judge), so the same
                # outputs and the same steps
                steps = ray.get(a.judged_steps_only.remote(items) if judge
                                else a.steps_only.remote(items))
                return call - steps

            once(max(sizes))   # warm-up
            got: dict[int, list[float]] = {n: [] for n in sizes}
            for _ in range(max(1, reps)):
                for n in sizes:
                    got[n].append(once(n))
            if tick:
                tick(f"{spec.name}: engine call overhead")
            return [(n, max(0.0, _median(got[n]))) for n in sizes]
        finally:
            ray.kill(a)
