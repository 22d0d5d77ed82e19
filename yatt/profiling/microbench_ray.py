"""Micro-benchmarks that need a Ray session: the executor's process layout.

Why: some costs exist only between processes -- an actor round trip, a state dict through
the object store, (on CPU) several "devices" of one host slowing each other down, and a
trainer group's collectives. These run in a local Ray session with actors laid out as the
executor lays them out (one actor per device, num_cpus=0, Ray's daemons alongside). The
in-process benchmarks stay in `microbench`; those of the executor's engine actors are in
`microbench_engines`. Imports core only at import time; ray/torch/vllm inside the functions.
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
    # workers at the driver's priority, as the executor runs them (exec/env.py); the raylet
    # reads this when the session starts, and every benchmark shares the session
    os.environ.setdefault("RAY_worker_niceness", "0")
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


# ---- host contention -----------------------------------------------------------------------
CONTENTION_OPS = ("offload", "reload", "decode", "logprob", "train")


class ContentionWorker:
    """One 'device' of the contention benchmark: a Ray actor (like the executor's engine and
    trainer actors, num_cpus=0, one thread) holding an engine, a Megatron trainer and a
    reference model, that runs one of CONTENTION_OPS on request and returns its seconds."""

    def __init__(self, spec: ModelSpec, hf_path: str, device: str, mbt: int, seed: int):
        import numpy as np

        from yatt.exec.rollout import EngineCore
        from yatt.exec.workers import ReferenceWorker

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
    import ray

    counts = tuple(sorted({int(n) for n in counts}))
    if not counts or counts[0] < 1:
        raise ValueError(f"counts must be >= 1, got {counts}")
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


# ---- tensor- and data-parallel training -----------------------------------------------------
class GroupRank:
    """One rank of a TP x DP trainer group for the benchmark: a Ray actor holding a
    MegatronTrainer."""

    def __init__(self, spec: ModelSpec, hf_path: str, device: str, mbt: int, tp: int,
                 rank: int, dp: int = 1) -> None:
        prepare(device)
        self.args = (spec, hf_path, device, mbt, tp, rank, dp)
        self.dp_rank = rank // tp   # Megatron's rank order puts TP innermost
        self.tb: Optional[TrainBench] = None

    def address(self) -> int:
        from .microbench import _free_port

        return _free_port()

    def setup(self, port: int) -> None:
        spec, hf_path, device, mbt, tp, rank, dp = self.args
        self.tb = TrainBench(spec, hf_path, device, mbt, tp=tp, rank=rank, port=port, dp=dp)

    def step_time(self, batch: int, seq: int, reps: int, seed: int) -> float:
        import numpy as np

        # the TP ranks of one DP rank see the same batch; DP ranks see different batches of
        # the same shape, as in a real step
        return self.tb.step_time(batch, seq, reps,
                                 np.random.default_rng(seed + 7919 * self.dp_rank))

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
