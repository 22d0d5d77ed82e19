"""Tolerances derived from fp32 arithmetic and the optimizer, not measured on one host.

Two computations of the same quantity that differ only in the order of their floating
point operations (TP-sharded against whole matrices, a batch against one sequence at a
time, another library's kernels, another CPU's SIMD width) agree up to rounding:

- Rounding. fp32 rounds each operation to a relative error of at most u = 2**-24. A
  reduction of n terms, in any order, is then off by at most gamma(n) = n*u/(1 - n*u)
  times the sum of the terms' magnitudes (Higham, "Accuracy and Stability of Numerical
  Algorithms", 3.1). A forward pass chains such reductions; the relative bounds add
  along the chain, so its factor is the sum of the reduction lengths on the path
  (`forward_terms`). The magnitude is taken as that of the compared values (at least 1),
  i.e. the terms are assumed not to cancel much more than the values themselves do.
- Adam. One step moves a weight by lr * m_hat / (sqrt(v_hat) + eps), at most lr * R_t
  with R_t from Cauchy-Schwarz (`adam_step_ratio`; R_1 = 1, about 1.01 at t = 4). Where
  a gradient is as small as its rounding error (a key bias's gradient is zero exactly:
  softmax ignores a constant shift), two runs can move that weight in any directions, so
  their weights differ by up to 2 * lr * sum(R_t): the rounding of the gradient does
  not shrink the bound there. Losses and gradients do not see this to first order: such
  a weight changes the loss by its (rounding-sized) gradient times <= lr per step.
"""
from __future__ import annotations

import math

U32 = 2.0 ** -24   # fp32 unit roundoff (torch.finfo(torch.float32).eps / 2)
U16 = 2.0 ** -8    # bf16 unit roundoff (8 significant bits: torch.finfo(torch.bfloat16).eps / 2)
ADAM_BETAS = (0.9, 0.999)   # Megatron OptimizerConfig's adam_beta1/adam_beta2 defaults


def gamma(n: int, u: float = U32) -> float:
    """Relative error bound of an n-term fp32 reduction."""
    assert n * u < 1
    return n * u / (1 - n * u)


def forward_terms(spec, seq_len: int, log_softmax: bool = True) -> int:
    """Sum of the reduction lengths along a decoder forward pass, embeddings to
    log-probs (Qwen2/Llama block: RMSNorm, QKV, scores, softmax, attention-weighted V,
    output projection, RMSNorm, gate/up, down; then the final norm and the LM head)."""
    d = spec.dim_head
    block = (spec.hidden            # RMSNorm before attention
             + spec.hidden          # q/k/v projections
             + d                    # q . k
             + seq_len              # softmax denominator
             + seq_len              # probabilities . V
             + spec.heads * d       # output projection
             + spec.hidden          # RMSNorm before the MLP
             + spec.hidden          # gate/up projections
             + spec.intermediate)   # down projection
    return spec.layers * block + spec.hidden + spec.hidden + (spec.vocab if log_softmax else 0)


def logit_tol(spec, seq_len: int, scale: float) -> float:
    """|a - b| bound for one logit computed two ways."""
    return gamma(forward_terms(spec, seq_len, log_softmax=False)) * max(1.0, scale)


def logprob_tol(spec, seq_len: int, scale: float) -> float:
    """|a - b| bound for one token log-prob computed two ways: the logit's forward error
    plus the log-sum-exp's."""
    return 2 * gamma(forward_terms(spec, seq_len)) * max(1.0, scale)


def loss_tol(spec, seq_len: int, lp_scale: float, tokens: int, adv_max: float,
             clip_eps: float = 0.2) -> float:
    """|a - b| bound for a PPO-clip token-mean loss: each token's term A * r moves by
    |A| * r * (the log-prob's error + the behaviour log-prob's error), r <= 1 + clip_eps
    where the term depends on the log-prob (a few lr-sized steps from the behaviour
    policy), plus the token mean's own rounding."""
    r = 1 + clip_eps
    return adv_max * r * (2 * logprob_tol(spec, seq_len, lp_scale) + gamma(tokens))


def grad_norm_rel_tol(spec, seq_len: int, tokens: int, params: int) -> float:
    """Relative bound for the gradient norm: the backward pass reduces over the forward's
    lengths again plus over the tokens of the batch (weight gradients), and the norm sums
    the squares of `params` entries blockwise (pairwise: log2 depth)."""
    return gamma(2 * forward_terms(spec, seq_len) + tokens) + gamma(math.ceil(math.log2(params)) + 1)


def adam_step_ratio(t: int, betas: tuple[float, float] = ADAM_BETAS) -> float:
    """max |m_hat_t| / sqrt(v_hat_t) over all gradient sequences (Cauchy-Schwarz)."""
    b1, b2 = betas
    s = sum((b1 * b1 / b2) ** j for j in range(t))
    return (1 - b1) / (1 - b1 ** t) * math.sqrt((1 - b2 ** t) / (1 - b2) * s)


def adam_weight_tol(lr: float, steps: int, weight_scale: float, slack: float = 0.01) -> float:
    """|w_a - w_b| bound after `steps` Adam steps from the same weights, when the two runs'
    gradients differ by rounding: each may move a weight up to lr * R_t per step in its
    own direction, and each update's own fp32 subtraction rounds by <= u * |w|."""
    moves = 2 * lr * sum(adam_step_ratio(t) for t in range(1, steps + 1))
    return moves * (1 + slack) + 2 * steps * U32 * max(1.0, weight_scale)


def bf16_weight_tol(lr: float, steps: int, w0: float, w1: float) -> float:
    """|w_bf16 - w_fp32| bound for one weight trained in bf16 (bf16 weights, fp32 main
    parameters) and in fp32 from the same fp32 start `w0`, ending near `w1`: the main
    parameter starts as the bf16 rounding of w0 (<= U16 * |w0|), Adam moves it as in
    `adam_weight_tol`, and the bf16 weight read at the end rounds it once more (<= U16 * |w1|)."""
    return U16 * (abs(w0) + abs(w1)) + adam_weight_tol(lr, steps, max(abs(w0), abs(w1)))
