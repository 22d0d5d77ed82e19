"""MegatronTrainer: one rank of the actor's Megatron-Core training (GRPO/PPO-clip).

Why: the executor trains the actor with real Megatron-Core (TP x PP x DP over gloo on CPU,
NCCL on GPU) and must hand HF-named weights back to vLLM after each step. One instance
runs per rank and owns its process group, so Ray actors (or plain processes) can wrap it.

Rank layout (megatron order tp-pp-dp): rank = t + tp * (p + pp * d). One model replica
(DP rank d) is the tp*pp consecutive ranks [d*tp*pp, (d+1)*tp*pp), its PP stage p the tp
consecutive ranks inside it, so `RolePlacement.groups()` of the plan are the replicas and
a TP group is tp consecutive devices (which the Plan keeps inside one node).

Data contract: every rank receives its DP rank's `TrainBatch`; all tp*pp ranks of one
replica must receive the *same* batch (they compute one model together; every stage
packs the same micro-batches). All public methods are collectives: every rank must call
them in the same order. Forward and backward passes run through megatron's schedule
(`get_forward_backward_func`: no pipelining at PP=1, 1F1B at PP>1, stage-to-stage
send/recv); the loss, log-probs and statistics exist on the last stage and are
broadcast to the other stages.

A step: `algo.ppo_epochs` epochs over the batch, each split into `algo.mini_batches`
mini-batches, one optimizer step each. The loss is a token mean over the mini-batch's
response tokens on *all* DP ranks. The PPO ratio's old log-probs are `batch.old_logprobs`
when given; else, with `algo.old_logprobs = recompute`, one forward pass over the whole
batch before the first update; else (reuse) each sequence's first forward in training.
Snapshots and checkpoints of a rank's whole state live in `trainer_state.TrainerState`.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch

from yatt.core.balance import mini_batches
from yatt.core.errors import InputError
from yatt.core.jobspec import Dtype
from yatt.core.specs import AlgoSpec, ModelSpec, OldLogprobs

from . import faults, megatron_shim
from .algo import (KL_ESTIMATORS, accept_sequences, acceptance_fraction, behaviour_weight,
                   clipped_tokens, micro_batches_by_length, ppo_clip_loss, total_token_loss)
from .train_batch import TrainBatch, micro_batches
from .trainer_state import TrainerState


@dataclass(frozen=True)
class _Micro:
    """One packed micro-batch: `seqs` are indices into the step's batch."""

    seqs: tuple[int, ...]
    ids: torch.Tensor          # [b, s] right-padded tokens
    labels: torch.Tensor       # [b, s] next token
    pos: torch.Tensor          # [b, s] positions
    mask: torch.Tensor         # [b, s] 1 where a position predicts a response token
    key: tuple[int, int] = (0, 0)   # (mini-batch, micro-batch): the reuse cache's key


class MegatronTrainer(TrainerState):
    """One rank of actor training. See module docstring for the rank layout and the
    collective contract.

    `algo` holds every algorithm setting (loss coefficients, clipping, epochs, mini-batches,
    old log-probs, batching, learning rate, optimizer sharding); the keywords are this
    rank's runtime facts."""

    def __init__(self, spec: ModelSpec, hf_path: str, algo: AlgoSpec, *, tp: int, dp: int,
                 rank: int, master_addr: str, master_port: int, seed: int = 0,
                 device: str = "cpu", clip_grad: float = 1.0, pad_id: int = 0,
                 pp: int = 1, dtype: Dtype = Dtype.FLOAT32) -> None:
        from megatron.core import parallel_state as ps
        from megatron.core import tensor_parallel

        from .hf_convert import StageSlice, load_into_megatron
        from .megatron_model import HfMeta, build_gpt_model, check_spec_matches, wrap_for_training

        if device == "cpu":
            torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        megatron_shim.install(device)
        with megatron_shim.thread_mode():   # megatron's CUDA calls, on this thread only
            self.spec, self.algo, self.tp, self.pp, self.dp, self.rank = spec, algo, tp, pp, dp, rank
            self.pad_id = pad_id
            # bf16 weights with fp32 main grads and optimizer state, as Megatron trains on GPU;
            # on CPU the job runs float32 (job.prepare_job says so)
            self.bf16 = dtype is Dtype.BFLOAT16 and device.startswith("cuda")
            self.kl_fn = KL_ESTIMATORS[algo.kl_estimator]
            self.nonfinite_steps = 0
            self.device = torch.device(device)
            if device.startswith("cuda"):
                torch.cuda.set_device(rank % torch.cuda.device_count())
                self.device = torch.device("cuda", torch.cuda.current_device())
            check_spec_matches(spec, hf_path)
            self.meta = HfMeta.read(hf_path)
            self.world = tp * pp * dp
            if not torch.distributed.is_initialized():
                torch.distributed.init_process_group(
                    "nccl" if device.startswith("cuda") else "gloo",
                    init_method=f"tcp://{master_addr}:{master_port}", rank=rank, world_size=self.world)
            ps.initialize_model_parallel(tp, pp, order="tp-pp-dp")
            tensor_parallel.model_parallel_cuda_manual_seed(seed, inference_rng_tracker=True)
            self.tp_rank = ps.get_tensor_model_parallel_rank()
            self.pp_rank = ps.get_pipeline_model_parallel_rank()
            self.stage = StageSlice.of(spec.layers, pp, self.pp_rank)
            model = build_gpt_model(spec, self.meta, tp, device=str(self.device), pp=pp,
                                    stage=self.stage, bf16=self.bf16)
            load_into_megatron(model, hf_path, spec, self.meta.arch, tp, self.tp_rank, self.stage)
            self.model = model
            self.ddp, self.optimizer = wrap_for_training(model, algo.lr, algo.distributed_optimizer,
                                                         clip_grad, self.bf16)
            model.config.no_sync_func = self.ddp.no_sync
            model.config.finalize_model_grads_func = self._finalize_grads
            self.steps = 0
            self.fault = faults.hook("trainer", rank)
            self._ckpt_queue = None            # megatron AsyncCallsQueue, made on first async save
            self._ckpt_pending: dict[int, str] = {}   # async call index -> checkpoint dir

    def _finalize_grads(self, models, num_tokens=None, **kw) -> None:
        """The schedule's last act of a backward pass: the DP gradient all-reduce and, at PP
        > 1 with tied embeddings, the sum of the first stage's embedding and the last
        stage's output-layer gradients. `num_tokens` is ignored: the loss is already a
        token mean (`calculate_per_token_loss` only keeps the schedule from rescaling it)."""
        from megatron.core.distributed import finalize_model_grads
        if self.fault is not None:
            self.fault.maybe_exit()   # injected crash: peers are about to wait in a collective
            self.fault.maybe_stall()     # injected hang: its node is taken away (tests)
        finalize_model_grads(models, None, **kw)

    # ---------------------------------------------------------------- forward helpers
    def _pack(self, batch_ids: Sequence[Sequence[int]], prompt_lens: Sequence[int],
              group: Sequence[int], keep: Optional[Sequence[float]] = None,
              key: tuple[int, int] = (0, 0)) -> _Micro:
        """Right-padded ids, labels (next token), positions and response mask (times each
        sequence's `keep` weight) for the sequences `group` of a batch."""
        seqs = [batch_ids[i] for i in group]
        n, s = len(seqs), max(len(x) for x in seqs)
        ids = torch.full((n, s), self.pad_id, dtype=torch.long)
        mask = torch.zeros(n, s)
        for j, (i, x) in enumerate(zip(group, seqs)):
            ids[j, :len(x)] = torch.tensor(x, dtype=torch.long)
            mask[j, prompt_lens[i] - 1:len(x) - 1] = 1.0 if keep is None else keep[i]
        labels = torch.roll(ids, -1, dims=1)
        labels[:, -1] = self.pad_id
        pos = torch.arange(s).unsqueeze(0).expand(n, s)
        d = self.device
        return _Micro(tuple(group), ids.to(d), labels.to(d), pos.to(d), mask.to(d), key)

    def _per_token(self, rows: Sequence[Sequence[float]], mb: _Micro,
                   prompt_lens: Sequence[int]) -> torch.Tensor:
        """Per-response-token values (one row per sequence) laid out like `mb`'s logits."""
        out = torch.zeros(mb.ids.shape)
        for j, i in enumerate(mb.seqs):
            p, r = prompt_lens[i], rows[i]
            out[j, p - 1:p - 1 + len(r)] = torch.tensor(r, dtype=torch.float32)
        return out.to(self.device)

    def _run(self, micros: list[_Micro], on_output: Callable[[_Micro, torch.Tensor], tuple],
             forward_only: bool) -> list[Any]:
        """Megatron's forward(/backward) schedule over `micros`. `on_output(mb, logits)` runs
        on the last PP stage only and returns (loss to backpropagate, data); the data of
        each micro-batch comes back in order on the last stage ([] on the others). A
        training call with no micro-batches (an empty DP rank) still joins the gradient
        all-reduce."""
        from megatron.core.pipeline_parallel import get_forward_backward_func
        if not micros:
            if not forward_only:
                self._finalize_grads([self.ddp])
            return []

        def loss_func(mb: _Micro, output: torch.Tensor):
            loss, data = on_output(mb, output)
            return loss, mb.mask.sum().int(), data

        def forward_step(data_iterator, model):
            mb = next(data_iterator)
            return model(mb.ids, mb.pos, None), functools.partial(loss_func, mb)

        return get_forward_backward_func()(
            forward_step_func=forward_step, data_iterator=iter(micros), model=[self.ddp],
            num_microbatches=len(micros), seq_length=max(m.ids.shape[1] for m in micros),
            micro_batch_size=max(m.ids.shape[0] for m in micros), forward_only=forward_only)

    def _from_last_stage(self, obj: Any) -> Any:
        """The last PP stage's `obj`, on every stage of this replica (identity at PP=1)."""
        from megatron.core import parallel_state as ps
        if self.pp == 1:
            return obj
        box = [obj]
        torch.distributed.broadcast_object_list(
            box, src=ps.get_pipeline_model_parallel_last_rank(),
            group=ps.get_pipeline_model_parallel_group())
        return box[0]

    def _groups(self, seqs: Sequence[Sequence[int]], subset: Optional[Sequence[int]] = None
                ) -> list[list[int]]:
        """Micro-batches (index groups into `seqs`) over `subset` (default: all)."""
        idx = list(range(len(seqs))) if subset is None else list(subset)
        lens = [len(seqs[i]) for i in idx]
        parts = (micro_batches_by_length(lens) if self.algo.seq_len_batching
                 else micro_batches(lens, self.algo.micro_batch_tokens))
        return [[idx[j] for j in g] for g in parts]

    # ---------------------------------------------------------------- public API
    @megatron_shim.on_any_thread
    @torch.no_grad()
    def logprobs(self, input_ids: Sequence[Sequence[int]], prompt_lens: Sequence[int]) -> list[list[float]]:
        """log p of each response token under the current weights (collective over the
        replica; every rank returns them)."""
        from .megatron_loss import token_logprobs
        self.ddp.eval()
        micros = [self._pack(input_ids, prompt_lens, g) for g in self._groups(input_ids)]

        def rows(mb: _Micro, logits: torch.Tensor):
            lp = token_logprobs(logits, mb.labels).cpu()
            return logits.new_zeros(()), [lp[j, prompt_lens[i] - 1:len(input_ids[i]) - 1].tolist()
                                          for j, i in enumerate(mb.seqs)]

        out: list[list[float]] = [[] for _ in input_ids]
        for mb, part in zip(micros, self._from_last_stage(self._run(micros, rows, True))):
            for i, r in zip(mb.seqs, part):
                out[i] = r
        return out

    @megatron_shim.on_any_thread
    @torch.no_grad()
    def logits(self, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Full-vocabulary logits [b, s, vocab] of one batch (ids and positions [b, s])
        through the same schedule as training, gathered over TP and sent from the last PP
        stage (collective over the replica; every rank returns them). `yatt export` checks
        its output against them."""
        from megatron.core import tensor_parallel
        self.ddp.eval()
        d = self.device
        mb = _Micro(tuple(range(ids.shape[0])), ids.to(d), ids.to(d), pos.to(d),
                    torch.ones(ids.shape, device=d))

        def full(_mb: _Micro, out: torch.Tensor):
            lg = tensor_parallel.gather_from_tensor_model_parallel_region(out)
            return out.new_zeros(()), lg.float().cpu()

        return self._from_last_stage(self._run([mb], full, True))[0]

    def set_lr(self, lr: float) -> None:
        for g in self.optimizer.param_groups:
            g["lr"] = lr

    @megatron_shim.on_any_thread
    def train_step(self, batch: TrainBatch, lr: Optional[float] = None) -> dict[str, float]:
        """`ppo_epochs` x `mini_batches` optimizer steps on this rank's batch; returns global
        (all-DP) metrics.

        loss/kl/entropy are token means over the first epoch (its mini-batches in turn, so
        from the second mini-batch on under weights the earlier ones updated);
        clip_frac/accept_frac over the last epoch; grad_norm of the last optimizer step.
        Old log-probs: see the module docstring. Non-finite loss or gradients skip that
        optimizer step on every rank (counted in `skipped` and the running
        `nonfinite_steps`)."""
        from megatron.core import parallel_state as ps

        t0 = time.perf_counter()
        if self.fault is not None:
            self.fault.tick()
        poison = self.fault is not None and self.fault.fires("nan")
        if lr is not None:
            self.set_lr(lr)
        dp_group = ps.get_data_parallel_group()
        if (batch.old_logprobs is None and self.algo.old_logprobs is OldLogprobs.REUSE
                and self.algo.mini_batches > 1):   # core.runnable refuses such plans
            raise InputError(f"mini_batches={self.algo.mini_batches} needs pre-update old "
                             "log-probs; allowed: old_logprobs: recompute, or mini_batches: 1",
                             field="algo.old_logprobs")
        if batch.old_logprobs is None and self.algo.old_logprobs is OldLogprobs.RECOMPUTE:
            batch = dataclasses.replace(batch, old_logprobs=tuple(
                tuple(r) for r in self.logprobs(batch.input_ids, batch.prompt_lens)))
        resp = [len(x) - p for x, p in zip(batch.input_ids, batch.prompt_lens)]
        minis = mini_batches(range(len(resp)), self.algo.mini_batches)
        old_cache: dict[tuple[int, int], torch.Tensor] = {}   # reuse: epoch 0 log-probs
        first = torch.zeros(5, device=self.device)  # epoch 0: loss, kl, entropy, tokens, IS weight
        metrics: dict[str, float] = {}
        skipped, accept = 0, 1.0
        for epoch in range(self.algo.ppo_epochs):
            keep = [1.0] * len(resp)
            if self.algo.adaptive_accept and epoch > 0:
                accept, keep = self._accept(batch, old_cache, dp_group)
            last = torch.zeros(2, device=self.device)   # clipped tokens, tokens
            for m, mini in enumerate(minis):
                n_local = float(sum(resp[i] * keep[i] for i in mini))
                tot_d = torch.tensor([n_local], device=self.device)
                torch.distributed.all_reduce(tot_d, group=dp_group)
                n_global = float(tot_d.item())
                if n_global == 0:   # e.g. dynamic sampling dropped every group this step
                    continue
                sums, bad = self._update(batch, mini, m, keep, n_global, epoch, old_cache,
                                         dp_group, poison)
                last += torch.stack([sums[4], sums[5]])
                if epoch == 0:
                    first += torch.stack([sums[0], sums[1], sums[2], sums[5], sums[6]])
                if bad:
                    self.optimizer.zero_grad()
                    skipped += 1
                    self.nonfinite_steps += 1
                    metrics["grad_norm"] = float("nan")
                    continue
                ok, grad_norm, _ = self.optimizer.step()
                if grad_norm is not None and not math.isfinite(float(grad_norm)):
                    self.nonfinite_steps += 1
                metrics["grad_norm"] = float(grad_norm) if grad_norm is not None else float("nan")
                skipped += 0 if ok else 1
                self.steps += int(ok)
            metrics["clip_frac"] = float(last[0] / last[1].clamp(min=1))
        n0 = float(first[3])
        metrics.update(loss=float(first[0]) / max(n0, 1.0), kl=float(first[1]) / max(n0, 1.0),
                       entropy=float(first[2]) / max(n0, 1.0), tokens=n0,
                       is_weight=float(first[4]) / max(n0, 1.0))
        metrics.setdefault("grad_norm", float("nan"))
        metrics.update(skipped=float(skipped), accept_frac=accept,
                       nonfinite_steps=float(self.nonfinite_steps),
                       lr=float(self.optimizer.param_groups[0]["lr"]),
                       step_time_s=time.perf_counter() - t0)
        return metrics

    def _update(self, batch: TrainBatch, mini: list[int], m: int, keep, n_global: float,
                epoch: int, old_cache, dp_group, poison: bool = False
                ) -> tuple[torch.Tensor, bool]:
        """Forward + backward over one mini-batch's micro-batches. Returns its global sums
        (loss, kl, entropy, non-finite losses, clipped tokens, tokens, the behaviour weight) and whether the
        loss or any gradient is non-finite. `poison` (fault injection, faults.py) turns
        the loss into NaN."""
        from megatron.core import parallel_state as ps

        from .megatron_loss import token_entropy, token_logprobs
        self.ddp.train()
        self.ddp.zero_grad_buffer()
        self.optimizer.zero_grad()
        micros = [self._pack(batch.input_ids, batch.prompt_lens, g, keep, (m, gi))
                  for gi, g in enumerate(self._groups(batch.input_ids, mini))]
        algo, plens = self.algo, batch.prompt_lens

        def loss(mb: _Micro, logits: torch.Tensor):
            logp = token_logprobs(logits, mb.labels)
            if batch.old_logprobs is not None:
                old = self._per_token(batch.old_logprobs, mb, plens)
            else:
                if epoch == 0:
                    old_cache[mb.key] = logp.detach()
                old = old_cache[mb.key]
            adv = torch.tensor([batch.advantages[i] for i in mb.seqs], device=self.device)[:, None]
            pg = ppo_clip_loss(logp, old, adv, algo.clip_eps, algo.dual_clip)
            w = torch.ones_like(logp)
            if batch.behav_logprobs is not None:
                w = behaviour_weight(old, self._per_token(batch.behav_logprobs, mb, plens),
                                     algo.behaviour_is_cap)
                pg = pg * w
            kl = torch.zeros_like(logp)
            if batch.ref_logprobs is not None:
                kl = self.kl_fn(logp, self._per_token(batch.ref_logprobs, mb, plens))
            if algo.entropy_coef:
                ent = token_entropy(logits)
            else:
                with torch.no_grad():
                    ent = token_entropy(logits.detach())
            tok_loss = total_token_loss(pg, kl, ent, algo.kl_coef, algo.entropy_coef)
            loss_sum = (tok_loss * mb.mask).sum()
            if poison:
                loss_sum = loss_sum * float("nan")
            with torch.no_grad():
                clipped = clipped_tokens(logp.detach(), old, adv, algo.clip_eps).float()
                stats = torch.stack([loss_sum.detach(), (kl * mb.mask).sum(),
                                     (ent * mb.mask).sum(),
                                     (~torch.isfinite(loss_sum.detach())).float(),
                                     (clipped * mb.mask).sum(), mb.mask.sum(),
                                     (w * mb.mask).sum()])
            # Megatron's DDP sums gradients over DP (calculate_per_token_loss), so each rank
            # backpropagates its token sum over the global token count: a global token mean.
            return loss_sum / n_global, stats

        outs = self._run(micros, loss, forward_only=False)
        sums = torch.stack(outs).sum(0) if outs else torch.zeros(7, device=self.device)
        torch.distributed.all_reduce(sums, group=dp_group)
        if self.pp > 1:   # the other stages hold zeros: the sum is the last stage's
            torch.distributed.all_reduce(sums, group=ps.get_pipeline_model_parallel_group())
        bad = torch.tensor([float(sums[3] > 0) + float(not self._grads_finite())], device=self.device)
        torch.distributed.all_reduce(bad)  # whole world: TP, PP and DP peers agree
        return sums, bad.item() > 0

    @torch.no_grad()
    def _accept(self, batch: TrainBatch, old_cache, dp_group) -> tuple[float, list[float]]:
        """Adaptive acceptance (before an epoch > 0): the global clipped-token ratio under
        the current weights picks the kept fraction (`algo.acceptance_fraction`); this rank
        keeps that fraction of its sequences, least-clipped first (`algo.accept_sequences`)."""
        from .megatron_loss import token_logprobs

        self.ddp.eval()
        plens = batch.prompt_lens
        minis = mini_batches(range(len(batch.input_ids)), self.algo.mini_batches)
        micros = [self._pack(batch.input_ids, plens, g, key=(m, gi))
                  for m, mini in enumerate(minis)
                  for gi, g in enumerate(self._groups(batch.input_ids, mini))]

        def clip_stats(mb: _Micro, logits: torch.Tensor):
            logp = token_logprobs(logits, mb.labels)
            old = (self._per_token(batch.old_logprobs, mb, plens)
                   if batch.old_logprobs is not None else old_cache[mb.key])
            adv = torch.tensor([batch.advantages[i] for i in mb.seqs], device=self.device)[:, None]
            c = clipped_tokens(logp, old, adv, self.algo.clip_eps).float() * mb.mask
            per_seq = (c.sum(1) / mb.mask.sum(1).clamp(min=1)).tolist()
            return logits.new_zeros(()), (per_seq, float(c.sum()), float(mb.mask.sum()))

        per_seq = [0.0] * len(batch.input_ids)
        stats = torch.zeros(2, device=self.device)   # clipped tokens, tokens
        for mb, (ps_, c, n) in zip(micros, self._from_last_stage(self._run(micros, clip_stats, True))):
            for i, f in zip(mb.seqs, ps_):
                per_seq[i] = f
            stats += torch.tensor([c, n], device=self.device)
        torch.distributed.all_reduce(stats, group=dp_group)
        frac = acceptance_fraction(float(stats[0] / stats[1].clamp(min=1)))
        kept = set(accept_sequences(per_seq, frac))
        return frac, [1.0 if i in kept else 0.0 for i in range(len(per_seq))]

    def _grads_finite(self) -> bool:
        for buf in self.ddp.buffers:
            if not torch.isfinite(buf.grad_data).all():
                return False
        return True

    @megatron_shim.on_any_thread
    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """Full HF-named fp32 CPU weights, gathered over TP and PP. Collective over the
        replica; every rank returns them."""
        from .hf_convert import gather_hf_weights
        return gather_hf_weights(self.model, self.spec, self.meta.arch, self.stage, self.tp, self.pp)

    @megatron_shim.on_any_thread
    def param_checksum(self) -> float:
        """Sum of |params| of this rank's shard (cheap cross-rank consistency check)."""
        return float(sum(p.detach().double().abs().sum().item() for p in self.model.parameters()))

    @megatron_shim.on_any_thread
    def shutdown(self) -> None:
        """Tear down model-parallel state and the process group (idempotent)."""
        from megatron.core import parallel_state as ps
        ps.destroy_model_parallel()
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
