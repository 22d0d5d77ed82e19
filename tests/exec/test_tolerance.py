"""The derived tolerances of _tolerance hold where they can be checked directly."""
from __future__ import annotations

import numpy as np
import pytest

from tests.exec._tolerance import U32, adam_step_ratio, adam_weight_tol, gamma


def test_fp32_sums_in_any_order_stay_within_gamma_n():
    rng = np.random.default_rng(0)
    for n in (16, 384, 4096):
        x = rng.standard_normal(n).astype(np.float32)
        exact = float(np.sum(x.astype(np.float64)))
        bound = gamma(n) * float(np.abs(x.astype(np.float64)).sum())
        for order in (x, x[::-1], rng.permutation(x)):
            seq = np.float32(0)
            for v in order:           # the worst-case order: one long chain
                seq = np.float32(seq + v)
            assert abs(float(seq) - exact) <= bound
            assert abs(float(order.sum(dtype=np.float32)) - exact) <= bound
    assert U32 == np.finfo(np.float32).eps / 2


def test_adam_moves_a_weight_by_at_most_lr_times_r_t():
    torch = pytest.importorskip("torch")
    lr, steps = 3e-4, 6
    assert adam_step_ratio(1) == pytest.approx(1.0)
    gen = torch.Generator().manual_seed(0)
    # gradients of every scale and sign, including rounding-sized ones; the first few grow
    # like (beta2/beta1)^t, the sequence for which Cauchy-Schwarz is an equality
    g = torch.randn(steps, 4096, generator=gen) * torch.logspace(-12, 2, 4096)
    g[:, :8] = torch.tensor([(0.999 / 0.9) ** t for t in range(steps)])[:, None]
    w = torch.zeros(4096, requires_grad=True)
    opt = torch.optim.AdamW([w], lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    before = w.detach().clone()
    for t in range(steps):
        w.grad = g[t].clone()
        opt.step()
        step = (w.detach() - before).abs().max().item()
        assert step <= lr * adam_step_ratio(t + 1) * (1 + 1e-5), (t, step / lr)
        assert step >= lr * adam_step_ratio(t + 1) * (1 - 1e-3), (t, step / lr)   # and tight
        before = w.detach().clone()
    # two runs whose gradients differ in sign can end up 2 * lr * sum(R_t) apart
    assert adam_weight_tol(lr, steps, 0.0) >= 2 * lr * steps
