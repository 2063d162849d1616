"""The FlexAttention path of CEM attention (`cem_core/model/flex.py`), checked on the CPU.

FlexAttention has no backward on the CPU, so here: its forward pass (eager, the reference implementation of
the same score modification that runs compiled on CUDA) against the SDPA path for every bias combination, the
log-sum-exp convention the analytic gradient relies on, and that analytic gradient of the self/non-self bias
against autograd through the dense bias. tests/gpu/ repeats the comparison with gradients on a GPU.
"""

from __future__ import annotations

import pytest
import torch

from cem_core.config import ModelConfig
from cem_core.model import flex
from cem_core.model.attention import CEMAttention

pytestmark = pytest.mark.skipif(not flex.flex_importable(), reason="this torch has no FlexAttention")


def _cfg(**kw) -> ModelConfig:  # noqa: ANN003
    base = dict(attention="cem", d_model=32, n_heads=4, n_layers=1, d_mlp=64, context_len=24, vocab_size=64,
                attn_steps=2, cem_position="alibi", kq_diagonal="none")
    base.update(kw)
    return ModelConfig(**base)


def _randomise(m: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)


@pytest.mark.parametrize("position", ["alibi", "none"])
@pytest.mark.parametrize("diagonal", ["none", "shared", "per_head"])
def test_flex_forward_equals_the_sdpa_path(position, diagonal, monkeypatch):
    if position == "none" and diagonal == "none":
        pytest.skip("no bias: plain causal SDPA, FlexAttention is not used")
    torch.manual_seed(0)
    m = CEMAttention(_cfg(cem_position=position, kq_diagonal=diagonal))
    _randomise(m, 1)
    h = torch.randn(2, 24, 32)
    with torch.no_grad():
        monkeypatch.setenv(flex.KERNEL_ENV, "sdpa")
        ref = m(h)
        monkeypatch.setenv(flex.KERNEL_ENV, "flex")
        monkeypatch.setattr(flex, "_flex", lambda: __import__("torch.nn.attention.flex_attention",
                                                              fromlist=["flex_attention"]).flex_attention)
        out = m(h)
    assert flex.attention_kernel(h.device) == "flex"
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_flex_returns_the_natural_log_sum_exp_of_the_biased_scores():
    """The analytic gradient uses P_ii = exp(s_ii - lse_i): the kernel's lse must be the natural one."""
    from torch.nn.attention.flex_attention import flex_attention

    torch.manual_seed(0)
    B, K, L, D = 2, 3, 16, 8
    q, k, v = (torch.randn(B, K, L, D) for _ in range(3))
    slopes, delta, extra = torch.rand(K), torch.randn(K), torch.randn(B, L, L)
    i = torch.arange(L)
    scores = 0.5 * q @ k.transpose(-1, -2) - slopes[:, None, None] * (i[:, None] - i[None, :])
    scores = scores + torch.eye(L) * delta[:, None, None] + extra[:, None] + torch.full((L, L), float("-inf")).triu(1)

    def score_mod(s, b, h, qi, kj):  # noqa: ANN001, ANN202
        return s - slopes[h] * (qi - kj) + torch.where(qi == kj, delta[h], 0.0) + extra[b, qi, kj]

    _, lse = flex_attention(q, k, v, scale=0.5, score_mod=score_mod, return_lse=True,
                            block_mask=flex.causal_block_mask(L, q.device))
    torch.testing.assert_close(lse, torch.logsumexp(scores, -1), rtol=1e-5, atol=1e-5)
    out = flex.cem_flex_attention(q, k, v, scale=0.5, slopes=slopes, delta=delta, extra=extra, compiled=False)
    torch.testing.assert_close(out, torch.softmax(scores, -1) @ v, rtol=1e-5, atol=1e-5)


def test_the_analytic_self_bias_gradient_equals_autograd_through_the_dense_bias():
    """d loss / d delta from P_ii (dO_i . (v_i - o_i)) with the log-sum-exp, as `_DiagonalBiasGrad` computes it."""
    torch.manual_seed(0)
    B, K, L, D, scale = 2, 4, 12, 8, 0.35
    q, k, v = (torch.randn(B, K, L, D) for _ in range(3))
    slopes, extra = torch.rand(K), torch.randn(B, L, L)
    delta = torch.randn(K, requires_grad=True)
    i = torch.arange(L)
    scores = scale * q @ k.transpose(-1, -2) - slopes[:, None, None] * (i[:, None] - i[None, :])
    scores = scores + torch.eye(L) * delta[:, None, None] + extra[:, None] + torch.full((L, L), float("-inf")).triu(1)
    o_ref = torch.softmax(scores, -1) @ v
    d_o = torch.randn_like(o_ref)
    (o_ref * d_o).sum().backward()
    with torch.no_grad():
        lse = torch.logsumexp(scores, -1)
        s_diag = scale * (q * k).sum(-1) + delta[None, :, None] + extra.diagonal(dim1=-2, dim2=-1)[:, None]
    o = o_ref.detach().requires_grad_()
    d2 = delta.detach().clone().requires_grad_()
    out = flex._DiagonalBiasGrad.apply(o, d2, s_diag, lse, v)
    (out * d_o).sum().backward()
    torch.testing.assert_close(d2.grad, delta.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(o.grad, d_o)  # the output's own gradient passes through unchanged


def test_the_kernel_is_chosen_by_device_and_env(monkeypatch):
    monkeypatch.delenv(flex.KERNEL_ENV, raising=False)
    assert flex.attention_kernel(torch.device("cpu")) == "sdpa"
    assert flex.attention_kernel(torch.device("cuda")) == "flex"
    monkeypatch.setenv(flex.KERNEL_ENV, "sdpa")
    assert flex.attention_kernel(torch.device("cuda")) == "sdpa" and "SDPA" in flex.describe_kernel(torch.device("cuda"))
    monkeypatch.setenv(flex.KERNEL_ENV, "triton-magic")
    from cem_core.errors import ConfigError

    with pytest.raises(ConfigError, match="CEMCTL_ATTENTION_KERNEL.*auto, flex, sdpa"):
        flex.attention_kernel(torch.device("cpu"))


def test_a_flex_failure_falls_back_to_sdpa_with_the_reason(monkeypatch, caplog):
    torch.manual_seed(0)
    m = CEMAttention(_cfg(kq_diagonal="shared"))
    _randomise(m, 2)
    h = torch.randn(1, 24, 32)
    monkeypatch.setenv(flex.KERNEL_ENV, "sdpa")
    ref = m(h).detach()
    monkeypatch.setenv(flex.KERNEL_ENV, "flex")
    monkeypatch.setattr(flex, "_disabled", {})

    def broken(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise RuntimeError("head dim 40 unsupported")

    monkeypatch.setattr(flex, "_flex", lambda: broken)
    with caplog.at_level("WARNING"):
        out = m(h)
    torch.testing.assert_close(out.detach(), ref)
    assert "head dim 40 unsupported" in caplog.text
    assert "SDPA where FlexAttention failed: query/key width 8" in flex.describe_kernel(h.device)


def test_a_flex_failure_on_one_call_shape_leaves_flex_on_for_the_others(monkeypatch, caplog):
    """On an H200, FlexAttention failed for the per-head KQ diagonal at 134M dims (q/k 64 + 768 wide) and the old
    process-wide switch then sent every later model of the process to SDPA. Only the failing shape falls back."""
    from torch.nn.attention.flex_attention import flex_attention

    torch.manual_seed(0)
    wide = CEMAttention(_cfg(kq_diagonal="per_head"))  # q/k width Dh + d = 8 + 32
    narrow = CEMAttention(_cfg(kq_diagonal="shared"))  # q/k width 8
    _randomise(wide, 3)
    _randomise(narrow, 4)
    h = torch.randn(1, 24, 32)
    monkeypatch.setenv(flex.KERNEL_ENV, "sdpa")
    ref_wide, ref_narrow = wide(h).detach(), narrow(h).detach()
    monkeypatch.setenv(flex.KERNEL_ENV, "flex")
    monkeypatch.setattr(flex, "_disabled", {})
    widths = []

    def flex_up_to_32(q, k, v, **kw):  # noqa: ANN001, ANN003, ANN202
        widths.append(q.shape[-1])
        if q.shape[-1] > 32:
            raise RuntimeError(f"head dim {q.shape[-1]} unsupported")
        return flex_attention(q, k, v, **kw)  # eager: the CPU reference of the same scores

    monkeypatch.setattr(flex, "_flex", lambda: flex_up_to_32)
    with caplog.at_level("WARNING"), torch.no_grad():  # FlexAttention has no backward on the CPU
        torch.testing.assert_close(wide(h).detach(), ref_wide)  # fails on flex, falls back
        torch.testing.assert_close(wide(h).detach(), ref_wide)  # not tried again
        torch.testing.assert_close(narrow(h).detach(), ref_narrow, atol=1e-5, rtol=1e-4)
    assert widths[0] == 40 and widths[1:] and set(widths[1:]) == {8}  # tried once; the narrow model still on flex
    assert caplog.text.count("FlexAttention failed") == 1 and "query/key width 40" in caplog.text
    assert flex.attention_kernel(h.device) == "flex"
