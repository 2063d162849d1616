"""FlexAttention for CEM attention on CUDA (chosen by device for every run `cemctl launch` puts on a GPU).

    kernel = attention_kernel(device)              # "flex" on CUDA, "sdpa" elsewhere ($CEMCTL_ATTENTION_KERNEL)
    o = cem_flex_attention(q, k, v, scale=s, slopes=m, delta=self_bias - other_bias, extra=None)  # [B, K, L, Dh]

SDPA with a float mask that requires grad leaves the flash kernel and materialises
the bias gradient densely, [B, K, L, L] per call. FlexAttention computes the same
scores block by block and skips the blocks above the diagonal (a cached causal
`BlockMask`):

    s_kij = scale q_ki . k_kj - m_k (i - j) + [i == j] delta_k + extra_bij,   j <= i

- `slopes` m_k (ALiBi) are constants.
- `delta` = self_k - other_k: other_k adds the same amount to a whole causal row,
  which softmax ignores, so only the difference enters. Its gradient is computed
  analytically from the log-sum-exp the kernel returns (`_DiagonalBiasGrad`):
      dL/d delta_k = sum_{b,i} P_kii (dO_ki . (v_ki - o_ki)),  P_kii = exp(s_kii - lse_ki),
  O(B K L Dh) work instead of a dense score gradient.
- `extra` [B, L, L] (the shared KQ diagonal, one matrix per step for all heads) is
  read by the score modification; FlexAttention's backward accumulates its
  gradient itself (a captured buffer that requires grad).
- A per-head KQ diagonal arrives as wider q/k (width Dh + d), like the SDPA path.

Outside a compiled model the call goes through `torch.compile(flex_attention)`
(compiled once; static shapes). If FlexAttention fails on a call shape (an
unsupported head width, an old driver), `disable_flex(key, why)` records the
reason for that shape (`call_key`: query/key width, value width, whether a
score matrix is read) and the SDPA path runs for that shape from then on; other
shapes keep FlexAttention (a per-head KQ diagonal widens q and k to Dh + d,
which one model may not support while the rest of the process does). The
run's log says which path ran.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable

import torch

log = logging.getLogger(__name__)

KERNEL_ENV = "CEMCTL_ATTENTION_KERNEL"  # auto (default) | flex | sdpa: for benchmarks and diagnosis
KERNELS = ("auto", "flex", "sdpa")
_disabled: dict[tuple[int, int, bool], str] = {}  # call_key -> why FlexAttention failed on that call shape
_compiled: Callable[..., Any] | None = None
_block_masks: dict[tuple[int, str], Any] = {}


def flex_importable() -> bool:
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def attention_kernel(device: torch.device) -> str:
    """"flex" or "sdpa" for CEM attention with a bias on `device` ($CEMCTL_ATTENTION_KERNEL, else by device)."""
    choice = os.environ.get(KERNEL_ENV, "auto").strip().lower() or "auto"
    if choice not in KERNELS:
        from cem_core.errors import ConfigError

        raise ConfigError(KERNEL_ENV, f"unknown attention kernel {choice!r}", allowed=KERNELS)
    if choice == "sdpa" or not flex_importable():
        return "sdpa"
    if choice == "flex":
        return "flex"
    return "flex" if device.type == "cuda" else "sdpa"


def describe_kernel(device: torch.device) -> str:
    """One line for the run's log: which CEM attention path runs here, and why."""
    kernel = attention_kernel(device)
    why = os.environ.get(KERNEL_ENV) and f"${KERNEL_ENV}={os.environ[KERNEL_ENV]}" or f"auto, {device.type}"
    line = f"CEM attention with a bias: {'FlexAttention' if kernel == 'flex' else 'SDPA with a float mask'} ({why})"
    if kernel == "flex" and _disabled:
        line += "; SDPA where FlexAttention failed: " + "; ".join(
            f"{_describe_key(k)} ({why})" for k, why in _disabled.items())
    return line


def call_key(q: torch.Tensor, v: torch.Tensor, extra: torch.Tensor | None) -> tuple[int, int, bool]:
    """What decides whether FlexAttention supports a call: q/k width, v width, whether a score matrix is read."""
    return (int(q.shape[-1]), int(v.shape[-1]), extra is not None)


def _describe_key(key: tuple[int, int, bool]) -> str:
    qk, v, extra = key
    return f"query/key width {qk}, value width {v}" + (", with a score matrix" if extra else "")


def failed_shapes() -> dict[tuple[int, int, bool], str]:
    """The call shapes FlexAttention failed on in this process, with why (a copy; `describe_kernel` words them)."""
    return dict(_disabled)


def flex_failed(key: tuple[int, int, bool]) -> bool:
    """FlexAttention failed on this call shape earlier in this process (`disable_flex`)."""
    return key in _disabled


def disable_flex(key: tuple[int, int, bool], reason: str) -> None:
    """Use SDPA for this call shape from now on (other shapes keep FlexAttention)."""
    if key not in _disabled:
        log.warning("FlexAttention failed for %s (%s); those calls use SDPA from now on", _describe_key(key), reason)
        _disabled[key] = reason


def _lse_request() -> dict[str, Any]:
    """How to ask flex_attention for the log-sum-exp: `return_aux` where PyTorch has it (`return_lse` is deprecated
    there, and its warn-once table, filled while dynamo traced the first call, made the second recompile)."""
    try:
        from torch.nn.attention.flex_attention import AuxRequest
    except ImportError:
        return {"return_lse": True}
    return {"return_aux": AuxRequest(lse=True)}


_LSE: dict[str, Any] = _lse_request()


def _causal(b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202
    return q_idx >= kv_idx


def causal_block_mask(L: int, device: torch.device) -> Any:
    """The causal BlockMask for length L: cached per (L, device) for eager callers; inside a compiled model made in
    the graph, never cached (filling the cache during tracing changed what the graph had guarded on, so every
    model with CEM attention compiled twice: at its first call and again at its second)."""
    from torch.nn.attention.flex_attention import create_block_mask

    if torch.compiler.is_compiling():
        return create_block_mask(_causal, B=None, H=None, Q_LEN=L, KV_LEN=L, device=device)
    key = (L, str(device))
    if key not in _block_masks:
        _block_masks[key] = create_block_mask(_causal, B=None, H=None, Q_LEN=L, KV_LEN=L, device=device)
    return _block_masks[key]


def _flex() -> Callable[..., Any]:
    """flex_attention, compiled once for eager callers on CUDA; inside a compiled model the plain function."""
    global _compiled
    from torch.nn.attention.flex_attention import flex_attention

    if torch.compiler.is_compiling():
        return flex_attention
    if _compiled is None:
        _compiled = torch.compile(flex_attention, dynamic=False)
    return _compiled


class _DiagonalBiasGrad(torch.autograd.Function):
    """Identity on the attention output o [B, K, L, Dh]; its backward also returns d delta [K] (module doc)."""

    @staticmethod
    def forward(ctx, o, delta, s_diag, lse, v):  # noqa: ANN001, ANN205
        ctx.save_for_backward(o, s_diag, lse, v)
        ctx.delta_dtype = delta.dtype
        return o.view_as(o)

    @staticmethod
    def backward(ctx, d_o):  # noqa: ANN001, ANN205
        o, s_diag, lse, v = ctx.saved_tensors
        p_ii = torch.exp(s_diag.float() - lse.float())  # [B, K, L]
        d_delta = (p_ii * (d_o.float() * (v.float() - o.float())).sum(-1)).sum(dim=(0, 2))  # [K]
        return d_o, d_delta.to(ctx.delta_dtype), None, None, None


def cem_flex_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float,
                       slopes: torch.Tensor | None = None, delta: torch.Tensor | None = None,
                       extra: torch.Tensor | None = None, compiled: bool = True) -> torch.Tensor:
    """Causal attention of q, k [B, K, L, Dq] and v [B, K, L, Dh] with the CEM biases (module doc); [B, K, L, Dh].

    `compiled=False` runs FlexAttention eagerly (the slow reference; CPU tests of the forward pass).
    """
    from torch.nn.attention.flex_attention import flex_attention

    B, K, L, _ = q.shape
    slopes_f = slopes.float() if slopes is not None else None
    delta_c = delta.detach().float() if delta is not None else None  # its gradient: _DiagonalBiasGrad

    def score_mod(score, b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202
        if slopes_f is not None:
            score = score - slopes_f[h] * (q_idx - kv_idx).to(torch.float32)
        if delta_c is not None:
            score = score + torch.where(q_idx == kv_idx, delta_c[h], 0.0)
        if extra is not None:
            score = score + extra[b, q_idx, kv_idx].to(torch.float32)
        return score

    fn = _flex() if compiled else flex_attention
    out, lse = fn(q, k, v, score_mod=score_mod, block_mask=causal_block_mask(L, q.device), scale=scale,  # type: ignore[operator]
                  **_LSE)
    lse = getattr(lse, "lse", lse)  # return_aux gives an AuxOutput, return_lse the tensor [B, K, L]
    if delta is not None and delta.requires_grad and torch.is_grad_enabled():
        with torch.no_grad():
            s_diag = scale * (q.float() * k.float()).sum(-1) + delta_c[None, :, None]  # type: ignore[index]  # [B, K, L]
            if extra is not None:
                s_diag = s_diag + extra.diagonal(dim1=-2, dim2=-1).float()[:, None]
        out = _DiagonalBiasGrad.apply(out, delta, s_diag, lse.detach(), v.detach())
    return out
