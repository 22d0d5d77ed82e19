"""MegatronTrainer: one rank of the actor's Megatron-Core training (GRPO/PPO-clip).

Why: the executor trains the actor with real Megatron-Core (TP x DP over gloo on CPU,
NCCL on GPU) and must hand HF-named weights back to vLLM after each step. One instance
runs per rank and owns its process group, so Ray actors (or plain processes) can wrap it.

Data contract: every rank receives its DP rank's `TrainBatch`; the TP ranks of one DP
group must receive the *same* batch (they compute one model together). All public
methods are collectives: every rank must call them in the same order.
The loss is a token mean over *all* DP ranks' response tokens. Snapshots and checkpoints
of a rank's whole state live in `trainer_state.TrainerState`.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from yatt.core.balance import group_consecutive
from yatt.core.errors import InputError
from yatt.core.jobspec import Dtype
from yatt.core.specs import AlgoSpec, ModelSpec

from . import faults, megatron_shim
from .algo import (KL_ESTIMATORS, accept_sequences, acceptance_fraction, clipped_tokens,
                   micro_batches_by_length, ppo_clip_loss, total_token_loss)
from .trainer_state import TrainerState


@dataclass(frozen=True)
class TrainBatch:
    """One DP rank's share of a step."""

    input_ids: tuple[tuple[int, ...], ...]            # prompt + response tokens per sequence
    prompt_lens: tuple[int, ...]                      # loss only on response tokens
    advantages: tuple[float, ...]                     # one per sequence (GRPO)
    old_logprobs: Optional[tuple[tuple[float, ...], ...]] = None  # behaviour policy, per response token
    ref_logprobs: Optional[tuple[tuple[float, ...], ...]] = None  # reference policy, per response token

    def __post_init__(self) -> None:
        n = len(self.input_ids)
        if len(self.prompt_lens) != n or len(self.advantages) != n:
            raise InputError("input_ids, prompt_lens and advantages must have equal length")
        for name in ("old_logprobs", "ref_logprobs"):
            lp = getattr(self, name)
            if lp is None:
                continue
            if len(lp) != n or any(len(x) != len(ids) - p
                                   for x, ids, p in zip(lp, self.input_ids, self.prompt_lens)):
                raise InputError(f"{name} must hold one value per response token", field=name)
        if any(not 1 <= p < len(ids) for p, ids in zip(self.prompt_lens, self.input_ids)):
            raise InputError("each sequence needs 1 <= prompt_len < len(input_ids)", field="prompt_lens")


def micro_batches(lengths: Sequence[int], micro_batch_tokens: int) -> list[list[int]]:
    """Consecutive index groups whose padded size (count x longest) fits the token budget."""
    return group_consecutive(lengths, lambda count, longest: count * longest <= micro_batch_tokens)


class MegatronTrainer(TrainerState):
    """One rank of actor training. See module docstring for the collective contract.

    `algo` holds every algorithm setting (loss coefficients, clipping, epochs, batching,
    learning rate, optimizer sharding); the keywords are this rank's runtime facts."""

    def __init__(self, spec: ModelSpec, hf_path: str, algo: AlgoSpec, *, tp: int, dp: int,
                 rank: int, master_addr: str, master_port: int, seed: int = 0,
                 device: str = "cpu", clip_grad: float = 1.0, pad_id: int = 0,
                 dtype: Dtype = Dtype.FLOAT32) -> None:
        from megatron.core import parallel_state as ps
        from megatron.core import tensor_parallel

        from .hf_convert import load_into_megatron
        from .megatron_model import HfMeta, build_gpt_model, check_spec_matches

        if device == "cpu":
            torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        megatron_shim.install(device)
        self.spec, self.algo, self.tp, self.dp, self.rank = spec, algo, tp, dp, rank
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
        if not torch.distributed.is_initialized():
            torch.distributed.init_process_group(
                "nccl" if device.startswith("cuda") else "gloo",
                init_method=f"tcp://{master_addr}:{master_port}", rank=rank, world_size=tp * dp)
        ps.initialize_model_parallel(tp, 1)
        tensor_parallel.model_parallel_cuda_manual_seed(seed, inference_rng_tracker=True)
        self.tp_rank = ps.get_tensor_model_parallel_rank()
        model = build_gpt_model(spec, self.meta, tp, device=str(self.device), bf16=self.bf16)
        load_into_megatron(model, hf_path, spec, self.meta.arch, tp, self.tp_rank)
        self.model = model
        self.ddp, self.optimizer = self._wrap(model, algo.lr, algo.distributed_optimizer, clip_grad)
        self.steps = 0
        self.world = tp * dp
        self.fault = faults.hook("trainer", rank)
        self._ckpt_queue = None            # megatron AsyncCallsQueue, made on first async save
        self._ckpt_pending: dict[int, str] = {}   # async call index -> checkpoint dir

    def _wrap(self, model, lr: float, distributed_optimizer: bool, clip_grad: float):
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
        ddp_cfg = DistributedDataParallelConfig(
            grad_reduce_in_fp32=True, overlap_grad_reduce=False,
            use_distributed_optimizer=distributed_optimizer)
        inner = model
        if self.bf16:
            from megatron.core.transformer.module import Float16Module
            inner = Float16Module(model.config, model)
        ddp = DistributedDataParallel(model.config, ddp_cfg, inner)
        opt_cfg = OptimizerConfig(optimizer="adam", lr=lr, weight_decay=0.0, clip_grad=clip_grad,
                                  bf16=self.bf16, fp16=False,
                                  params_dtype=torch.bfloat16 if self.bf16 else torch.float32,
                                  use_distributed_optimizer=distributed_optimizer)
        return ddp, get_megatron_optimizer(opt_cfg, [ddp])

    # ---------------------------------------------------------------- forward helpers
    def _pack(self, seqs: Sequence[Sequence[int]]):
        """Right-padded ids, labels (next token) and positions for one micro-batch."""
        n, s = len(seqs), max(len(x) for x in seqs)
        ids = torch.full((n, s), self.pad_id, dtype=torch.long)
        for i, x in enumerate(seqs):
            ids[i, :len(x)] = torch.tensor(x, dtype=torch.long)
        labels = torch.roll(ids, -1, dims=1)
        labels[:, -1] = self.pad_id
        pos = torch.arange(s).unsqueeze(0).expand(n, s)
        d = self.device
        return ids.to(d), labels.to(d), pos.to(d)

    def _response_mask(self, seqs, prompt_lens, s: int) -> torch.Tensor:
        """mask[i, t] = 1 where position t predicts a response token of sequence i."""
        mask = torch.zeros(len(seqs), s)
        for i, (x, p) in enumerate(zip(seqs, prompt_lens)):
            mask[i, p - 1:len(x) - 1] = 1.0
        return mask.to(self.device)

    def _per_token(self, rows: Sequence[Sequence[float]], prompt_lens, seqs, s: int) -> torch.Tensor:
        out = torch.zeros(len(seqs), s)
        for i, (r, p) in enumerate(zip(rows, prompt_lens)):
            out[i, p - 1:p - 1 + len(r)] = torch.tensor(r, dtype=torch.float32)
        return out.to(self.device)

    def _logits(self, ids, pos):
        return self.ddp(ids, pos, None)  # causal mask built inside; [b, s, v/tp]

    # ---------------------------------------------------------------- public API
    @megatron_shim.on_any_thread
    @torch.no_grad()
    def logprobs(self, input_ids: Sequence[Sequence[int]], prompt_lens: Sequence[int]) -> list[list[float]]:
        """log p of each response token under the current weights (collective over TP)."""
        from .megatron_loss import token_logprobs
        self.ddp.eval()
        out: list[list[float]] = [[] for _ in input_ids]
        for group in self._groups(input_ids):
            seqs = [input_ids[i] for i in group]
            ids, labels, pos = self._pack(seqs)
            lp = token_logprobs(self._logits(ids, pos), labels).cpu()
            for j, i in enumerate(group):
                p, n = prompt_lens[i], len(input_ids[i])
                out[i] = lp[j, p - 1:n - 1].tolist()
        return out

    def _groups(self, seqs: Sequence[Sequence[int]]) -> list[list[int]]:
        lens = [len(x) for x in seqs]
        return (micro_batches_by_length(lens) if self.algo.seq_len_batching
                else micro_batches(lens, self.algo.micro_batch_tokens))

    def set_lr(self, lr: float) -> None:
        for g in self.optimizer.param_groups:
            g["lr"] = lr

    @megatron_shim.on_any_thread
    def train_step(self, batch: TrainBatch, lr: Optional[float] = None) -> dict[str, float]:
        """`ppo_epochs` optimizer steps on this rank's batch; returns global (all-DP) metrics.

        loss/kl/entropy are from the first epoch (on-policy); clip_frac/accept_frac from the
        last. old log-probs: `batch.old_logprobs` if given, else the first epoch's own
        (detached) log-probs. Non-finite loss or gradients skip that optimizer step on every
        rank (counted in `skipped` and the running `nonfinite_steps`)."""
        from megatron.core import parallel_state as ps

        from .megatron_loss import token_entropy, token_logprobs
        t0 = time.perf_counter()
        if self.fault is not None:
            self.fault.tick()
        poison = self.fault is not None and self.fault.fires("nan")
        if lr is not None:
            self.set_lr(lr)
        dp_group = ps.get_data_parallel_group()
        groups = self._groups(batch.input_ids)
        resp = [len(x) - p for x, p in zip(batch.input_ids, batch.prompt_lens)]
        old_cache: dict[int, torch.Tensor] = {}
        metrics: dict[str, float] = {}
        skipped, accept, clip_frac = 0, 1.0, 0.0
        for epoch in range(self.algo.ppo_epochs):
            keep = [1.0] * len(resp)
            if self.algo.adaptive_accept and epoch > 0:
                accept, keep = self._accept(batch, groups, old_cache, dp_group)
            n_local = float(sum(n * k for n, k in zip(resp, keep)))
            tot_d = torch.tensor([n_local], device=self.device)
            torch.distributed.all_reduce(tot_d, group=dp_group)
            n_global = float(tot_d.item())
            if n_global == 0:   # e.g. dynamic sampling dropped every group this step
                metrics.update(loss=0.0, kl=0.0, entropy=0.0, tokens=0.0)
                break
            out, bad = self._epoch(batch, groups, keep, n_global, epoch, old_cache, dp_group,
                                   token_logprobs, token_entropy, poison)
            clip_frac = out.pop("clip_frac")
            if epoch == 0:
                metrics.update(out)
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
        metrics.setdefault("grad_norm", float("nan"))
        metrics.update(skipped=float(skipped), clip_frac=clip_frac, accept_frac=accept,
                       nonfinite_steps=float(self.nonfinite_steps),
                       lr=float(self.optimizer.param_groups[0]["lr"]),
                       step_time_s=time.perf_counter() - t0)
        return metrics

    def _epoch(self, batch: TrainBatch, groups, keep, n_global: float, epoch: int, old_cache,
               dp_group, token_logprobs, token_entropy,
               poison: bool = False) -> tuple[dict[str, float], bool]:
        """Forward + backward over all micro-batches; returns global metrics, non-finite flag.
        `poison` (fault injection, faults.py) turns the loss into NaN."""
        self.ddp.train()
        self.ddp.zero_grad_buffer()
        self.optimizer.zero_grad()
        # sums over local tokens: loss, kl, entropy, bad (non-finite loss), clipped tokens
        sums = torch.zeros(5, device=self.device)
        for gi, group in enumerate(groups):
            seqs = [batch.input_ids[i] for i in group]
            plens = [batch.prompt_lens[i] for i in group]
            ids, labels, pos = self._pack(seqs)
            s = ids.shape[1]
            w = torch.tensor([keep[i] for i in group], device=self.device)[:, None]
            mask = self._response_mask(seqs, plens, s) * w
            logits = self._logits(ids, pos)
            logp = token_logprobs(logits, labels)
            if batch.old_logprobs is not None:
                old = self._per_token([batch.old_logprobs[i] for i in group], plens, seqs, s)
            else:
                if epoch == 0:
                    old_cache[gi] = logp.detach()
                old = old_cache[gi]
            adv = torch.tensor([batch.advantages[i] for i in group], device=self.device)[:, None]
            pg = ppo_clip_loss(logp, old, adv, self.algo.clip_eps, self.algo.dual_clip)
            kl = torch.zeros_like(logp)
            if batch.ref_logprobs is not None:
                ref = self._per_token([batch.ref_logprobs[i] for i in group], plens, seqs, s)
                kl = self.kl_fn(logp, ref)
            if self.algo.entropy_coef:
                ent = token_entropy(logits)
            else:
                with torch.no_grad():
                    ent = token_entropy(logits.detach())
            tok_loss = total_token_loss(pg, kl, ent, self.algo.kl_coef, self.algo.entropy_coef)
            loss_sum = (tok_loss * mask).sum()
            if poison:
                loss_sum = loss_sum * float("nan")
            # DDP averages grads over DP; * dp turns that into a sum of per-rank token sums.
            (loss_sum * (self.dp / n_global)).backward()
            with torch.no_grad():
                clipped = clipped_tokens(logp.detach(), old, adv, self.algo.clip_eps).float()
                sums += torch.stack([loss_sum.detach(), (kl * mask).sum(), (ent * mask).sum(),
                                     (~torch.isfinite(loss_sum.detach())).float(),
                                     (clipped * mask).sum()])
        if self.fault is not None:
            self.fault.maybe_exit()   # injected crash: peers are about to wait in a collective
        self.ddp.finish_grad_sync()
        torch.distributed.all_reduce(sums, group=dp_group)
        bad = torch.tensor([float(sums[3] > 0) + float(not self._grads_finite())], device=self.device)
        torch.distributed.all_reduce(bad)  # whole world: TP peers and DP peers agree
        return ({"loss": sums[0].item() / n_global, "kl": sums[1].item() / n_global,
                 "entropy": sums[2].item() / n_global, "tokens": n_global,
                 "clip_frac": sums[4].item() / n_global}, bad.item() > 0)

    @torch.no_grad()
    def _accept(self, batch: TrainBatch, groups, old_cache, dp_group) -> tuple[float, list[float]]:
        """Adaptive acceptance (before an epoch > 0): the global clipped-token ratio under
        the current weights picks the kept fraction (`algo.acceptance_fraction`); this rank
        keeps that fraction of its sequences, least-clipped first (`algo.accept_sequences`)."""
        from .megatron_loss import token_logprobs

        per_seq = [0.0] * len(batch.input_ids)
        stats = torch.zeros(2, device=self.device)   # clipped tokens, tokens
        self.ddp.eval()
        for gi, group in enumerate(groups):
            seqs = [batch.input_ids[i] for i in group]
            plens = [batch.prompt_lens[i] for i in group]
            ids, labels, pos = self._pack(seqs)
            mask = self._response_mask(seqs, plens, ids.shape[1])
            logp = token_logprobs(self._logits(ids, pos), labels)
            old = (self._per_token([batch.old_logprobs[i] for i in group], plens, seqs, ids.shape[1])
                   if batch.old_logprobs is not None else old_cache[gi])
            adv = torch.tensor([batch.advantages[i] for i in group], device=self.device)[:, None]
            c = clipped_tokens(logp, old, adv, self.algo.clip_eps).float() * mask
            for j, i in enumerate(group):
                per_seq[i] = float(c[j].sum() / mask[j].sum().clamp(min=1))
            stats += torch.stack([c.sum(), mask.sum()])
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
        """Full HF-named fp32 CPU weights, gathered over TP. Collective; every rank returns them."""
        from megatron.core import parallel_state as ps

        from .hf_convert import megatron_to_hf, unshard
        local = {n: p.detach() for n, p in self.model.named_parameters()}
        if self.tp > 1:
            group = ps.get_tensor_model_parallel_group()
            parts: list[dict[str, torch.Tensor]] = [{} for _ in range(self.tp)]
            for n, t in local.items():
                bufs = [torch.empty_like(t) for _ in range(self.tp)]
                torch.distributed.all_gather(bufs, t.contiguous(), group=group)
                for r in range(self.tp):
                    parts[r][n] = bufs[r]
            full = unshard(parts)
        else:
            full = local
        return {k: v.cpu().clone() for k, v in megatron_to_hf(full, self.spec, self.meta.arch).items()}

    def param_checksum(self) -> float:
        """Sum of |params| of this rank's shard (cheap cross-rank consistency check)."""
        return float(sum(p.detach().double().abs().sum().item() for p in self.model.parameters()))

    def shutdown(self) -> None:
        """Tear down model-parallel state and the process group (idempotent)."""
        from megatron.core import parallel_state as ps
        ps.destroy_model_parallel()
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
