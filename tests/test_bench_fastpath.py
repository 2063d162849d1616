"""The CPU fast path of CEM attention with ALiBi (cem_core/model/attention.py, `_AlibiAttentionCPU`)
gives the same outputs and gradients as the generic SDPA path it replaces (found by bench/variants.py)."""

from __future__ import annotations

import pytest
import torch

from cem_core.config import RunConfig, resolve
from cem_core.model.attention import CEMAttention


def _layer(**overrides) -> CEMAttention:
    m = resolve(RunConfig.from_dict({"model.size": "nano", "model.attention": "cem", **{f"model.{k}": v for k, v in overrides.items()}})).model
    torch.manual_seed(0)
    layer = CEMAttention(m)
    with torch.no_grad():  # non-trivial learned biases and preconditioner
        layer.self_bias.copy_(torch.randn(m.n_heads))
        layer.other_bias.copy_(torch.randn(m.n_heads))
    return layer


@pytest.mark.parametrize("overrides", [{}, {"attn_steps": 3}, {"attn_precond": "diag_lowrank", "attn_steps": 2}])
def test_fast_path_matches_the_generic_path(overrides, monkeypatch: pytest.MonkeyPatch) -> None:
    layer = _layer(**overrides)
    h = torch.randn(3, 17, layer.d_model, requires_grad=True)
    g = torch.randn(3, 17, layer.d_model)
    assert layer._alibi_fast_path(h)

    def run() -> tuple[torch.Tensor, list[torch.Tensor]]:
        out = layer(h)
        params = [h, *layer.parameters()]
        return out, list(torch.autograd.grad(out, params, g, allow_unused=True))

    fast_out, fast_grads = run()
    monkeypatch.setattr(CEMAttention, "_alibi_fast_path", lambda self, qk: False)
    ref_out, ref_grads = run()
    torch.testing.assert_close(fast_out, ref_out, rtol=1e-5, atol=1e-5)
    names = ["h", *[n for n, _ in layer.named_parameters()]]
    for name, a, b in zip(names, fast_grads, ref_grads):
        assert (a is None) == (b is None), name
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")
    # The learned biases do receive gradient (self - other: opposite, non-zero).
    i_self, i_other = names.index("self_bias"), names.index("other_bias")
    assert fast_grads[i_self].abs().sum() > 0
    torch.testing.assert_close(fast_grads[i_other], -fast_grads[i_self], rtol=1e-4, atol=1e-6)


def test_fast_path_is_not_used_where_it_does_not_apply() -> None:
    x = torch.zeros(1, 1, 1, 1)
    assert not _layer(kq_diagonal="shared")._alibi_fast_path(x)
    assert not _layer(kq_diagonal="per_head")._alibi_fast_path(x)
    assert not _layer()._alibi_fast_path(x.double())  # float64 (the energy tests) keeps the reference path
