"""Micro-benchmarks of the executor's engine actors through Ray: what in-process engine
tables (bare engine steps, timed in the profiling process) cannot see.

Why: between an engine's steps and a real step sit the actor around it. This measures, on
the executor's own actor classes (`EngineServer`, `GenRMServer`) in a local Ray session:
what streaming a batch to a queue costs the rollout engine, what one call costs beyond the
engine steps it causes, a weight sync from a trainer actor to n engine actors at once, and a
GenRM engine's own slow-down with several on one host. Imports core only at import time;
ray/torch/vllm inside the functions.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional, Sequence

from yatt.core.specs import ModelSpec

from .microbench import Tick, _add, _drain, _engine_config, _ids, _median, prepare
from .microbench_ray import GroupRank, local_ray


# ---- streaming hand-off --------------------------------------------------------------------
def handoff_time(hf_path: str, vocab: int, reps: int, requests: int = 32, seed: int = 0,
                 tick: Optional[Tick] = None) -> float:
    """Seconds one streamed batch costs the rollout engine that hands it off (per put).

    In partial colocate the executor's rollout engine puts each engine step's finished
    results on a `StreamQueue` (`EngineServer.generate(..., sink=queue)`) while it steps on; the
    put does not block it, but serialising and sending it runs in the engine's process, on
    the engine's core. Measured as the executor runs it: one engine actor generates the same
    `requests` (13-token prompts, 4-16 new tokens) alone and streaming to a queue that a
    second actor drains, paired and alternating, `reps` times; the result is the median over
    pairs of (streaming - alone) / puts. Starts and stops a local Ray session."""
    import numpy as np
    import ray

    from yatt.exec.rollout import EngineServer, GenRequest, engine_actor_class
    from yatt.exec.stream_queue import StreamQueue

    with local_ray():
        @ray.remote(num_cpus=0)
        class _Drain:
            async def run(self, queue, n: int) -> int:
                got = puts = 0
                while got < n:
                    batches = await queue.get_all_async()
                    got += sum(len(b) for b in batches)
                    puts += len(batches)
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

        warm = StreamQueue()   # warm-up: the engine, the drain actor and the streaming path
        ray.get([eng.generate.remote(batch(0), sink=warm), drain.run.remote(warm, requests)])
        ray.kill(warm.actor)
        per = []
        for k in range(1, reps + 1):
            reqs = batch(k)
            queue = StreamQueue()
            queue.qsize()   # the queue actor is up before timing
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


# ---- a GenRM's own contention ----------------------------------------------------------
# a judge-like batch for a GenRM's own contention ratio: prefill-heavy, a few new tokens
JUDGE_REQUESTS, JUDGE_PROMPT, JUDGE_NEW = 32, 40, 4


class EngineWorker:
    """One 'device' running only an engine of one model (a GenRM's contention benchmark)."""

    def __init__(self, spec: ModelSpec, hf_path: str, device: str, max_num_seqs: int,
                 seed: int) -> None:
        import numpy as np

        from yatt.exec.rollout import EngineCore

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
    import ray

    counts = tuple(sorted({1} | {int(n) for n in counts}))
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

    from yatt.exec.rollout import EngineServer, engine_actor_class

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


@dataclass(frozen=True)
class JudgeSetup:
    """What a GenRM's judge call needs besides the GenRM: the actor whose results it judges
    (its tokenizer decodes them) and the judge's token budget."""

    actor_path: str
    actor_vocab: int
    max_tokens: int


class _StepsOnly:
    """Mixin for the executor's engine actor bodies: run requests through the bare engine,
    timing only its steps (what the engine tables time), in the same process."""

    def steps_only(self, reqs: list) -> float:
        for r in reqs:
            self.core.add(f"s{next(self._ids)}", r)
        return sum(_drain(self.core))

    def judged_steps_only(self, results: list) -> float:
        return self.steps_only([self._request(r) for r in results])


@dataclass(frozen=True)
class CallJob:
    """One engine whose call overhead is timed: its model and weights, the engine's
    `max_num_seqs` and, for a GenRM, what its judge call needs (None: a rollout engine)."""

    spec: ModelSpec
    hf_path: str
    max_num_seqs: int
    judge: Optional[JudgeSetup] = None


def call_overhead_times(spec: ModelSpec, hf_path: str, device: str, reps: int,
                        max_num_seqs: int, judge: Optional[JudgeSetup] = None,
                        sizes: Sequence[int] = CALL_SIZES, seed: int = 0,
                        tick: Optional[Tick] = None) -> list[tuple[int, float]]:
    """(requests, s) per call size: what one call handing an engine actor n requests costs
    beyond that engine's steps, on the executor's path (`call_overhead_tables` of one job)."""
    return call_overhead_tables([CallJob(spec, hf_path, max_num_seqs, judge)], device, reps,
                                sizes, seed, tick)[0]


def call_overhead_tables(jobs: Sequence[CallJob], device: str, reps: int,
                         sizes: Sequence[int] = CALL_SIZES, seed: int = 0,
                         tick: Optional[Tick] = None) -> list[list[tuple[int, float]]]:
    """Per job, (requests, s) per call size: what one call handing its engine actor n
    requests costs beyond that engine's steps, on the executor's path. The driver calls the
    executor's actor (`EngineServer.generate` with rollout-like requests, or for a job with
    `judge`, `GenRMServer.judge` on rollout results of the judge's actor) and times the
    call; the same actor then runs the same requests through the bare engine timing only
    its steps; the difference is the call's round trip, building and adding the requests (a
    GenRM's template and tokenizers), the server's step loop and returning the results.
    Median over `reps` per size, sizes interleaved. Every job's actor starts at once (each
    imports vLLM and starts its engine: most of the time, spread over the host's cores),
    then each is timed alone while the others idle. Starts and stops Ray."""
    import ray

    from yatt.exec.genrm import GenRMServer, JudgeConfig
    from yatt.exec.rollout import EngineServer

    class _TimedEngine(_StepsOnly, EngineServer):
        pass

    class _TimedJudge(_StepsOnly, GenRMServer):
        pass

    def start(job: CallJob):
        cfg = _engine_config(job.hf_path, device == "cpu", job.max_num_seqs, 0.5)
        if job.judge:
            return ray.remote(num_cpus=0)(_TimedJudge).remote(
                cfg, JudgeConfig(job.judge.actor_path, job.hf_path,
                                 max_tokens=job.judge.max_tokens))
        return ray.remote(num_cpus=0)(_TimedEngine).remote(cfg)

    prepare(device)
    with local_ray():
        actors = [start(j) for j in jobs]
        try:
            ray.get([a.acquire.remote() for a in actors])
            out = []
            for a, job in zip(actors, jobs):
                out.append(_call_times(a, job, reps, sizes, seed))
                if tick:
                    tick(f"{job.spec.name}: engine call overhead")
            return out
        finally:
            for a in actors:
                ray.kill(a)


def _call_times(a, job: CallJob, reps: int, sizes: Sequence[int], seed: int
                ) -> list[tuple[int, float]]:
    """(requests, s) per call size of one started actor (`call_overhead_tables`)."""
    import numpy as np
    import ray

    from yatt.exec.rollout import GenRequest, GenResult

    rng = np.random.default_rng(seed)
    keys = iter(range(10 ** 9))
    judge = job.judge

    def work(n: int) -> list:
        if judge:   # rollout results: 13 prompt tokens, 10 response tokens
            v = judge.actor_vocab
            return [GenResult(next(keys), _ids(13, v, rng), _ids(10, v, rng), (),
                              "stop", 0.0) for _ in range(n)]
        return [GenRequest(next(keys), _ids(13, job.spec.vocab, rng), 8, 1.0,
                           int(rng.integers(1 << 30)), False) for _ in range(n)]

    def once(n: int) -> float:
        items = work(n)
        t0 = time.perf_counter()
        ray.get(a.judge.remote(items) if judge else a.generate.remote(items))
        call = time.perf_counter() - t0
        # the same items again: seeded (rollout) or greedy (judge), so the same outputs and
        # the same steps
        steps = ray.get(a.judged_steps_only.remote(items) if judge
                        else a.steps_only.remote(items))
        return call - steps

    once(max(sizes))   # warm-up
    got: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(max(1, reps)):
        for n in sizes:
            got[n].append(once(n))
    return [(n, max(0.0, _median(got[n]))) for n in sizes]
