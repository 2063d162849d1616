"""Attention sublayers (`model.attention`): llama | cem | reuse. Used by `cemctl launch` runs.

Every sublayer maps the residual stream h [B, L, d] to the new stream (the
residual is part of the layer, since CEM absorbs it into the recursion).

- llama: h + W_O attn(RoPE(W_Q n), RoPE(W_K n), W_V n), n = RMSNorm(h).
- reuse: the llama sublayer applied T times (x <- x + attn(RMSNorm(x))): the ablation.
- cem:   T gradient steps on the interaction energy (SPEC 1, paper Alg. 1):
         keys = values = W_K n computed once from n = RMSNorm(h); x_0 = h;
         u = RMSNorm(x_t); q = W_Q u;
         s_ijk = scale (k_j . q_i + n_j^T D_k u_i) + b_ijk  (b: ALiBi penalty + learned self/non-self)
         x_{t+1} = x_t + eta sum_k P_k W_Q[k]^T softmax_j(s_ijk) v_j.
         scale = 1/sqrt(d_h) of the head (as Llama; the paper writes D_h^{-1/2}).
  The KQ diagonal D follows Alg. 1: it enters the scores only; the value path is
  W_K n (so with a diagonal the update is the energy gradient's low-rank part).
  `shared`: one d-vector for all heads: one extra [B, L, L] score matrix per
  step, added to every head through the attention bias. `per_head`: each head's
  query and key are extended by D_k u and n (one SDPA call, width d_h + d).

Kernels: on CUDA a CEM sublayer with a bias (ALiBi, a KQ diagonal) runs on
FlexAttention (`flex.py`); on the CPU, SDPA (with `_AlibiAttentionCPU` for ALiBi
alone). SDPA is the reference the tests compare FlexAttention with.
"""

from __future__ import annotations

import math
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from cem_core.config import ModelConfig
from cem_core.model.flex import attention_kernel, call_key, cem_flex_attention, disable_flex, flex_failed
from cem_core.model.norm import RMSNorm
from cem_core.model.positions import alibi_bias, alibi_slopes, apply_rope, causal_mask_bias, rope_cache
from cem_core.model.precond import build_preconditioner
from cem_core.model.residual import ResidualSublayer


# The CPU fast path below calls private ATen kernels; other torch builds may lack them.
_HAS_CPU_FLASH = all(
    hasattr(torch.ops.aten, name)
    for name in ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward")
)


class _AlibiAttentionCPU(torch.autograd.Function):
    """SDPA with a fixed additive bias on the CPU flash kernel; the bias diagonal's gradient on the side.

    `F.scaled_dot_product_attention` with a bias that requires grad falls back to
    the math kernel (the whole [B, K, L, L] probability matrix kept for backward).
    The ALiBi bias  -m_k (i - j) + other_k + (self_k - other_k) [i == j]  only
    learns per-head scalars, and `other_k` is a per-row constant that softmax
    ignores, so the only gradient it needs is  sum_{b,i} dS_bkii  for
    delta_k = self_k - other_k (autograd then gives other_k minus that). With
    D_i = dO_i . o_i:  dS_ii = P_ii (dO_i . v_i - D_i),  P_ii = exp(s_ii - lse_i),
    both from tensors the flash kernel returns. `delta` only carries that
    gradient: its value is already in `bias`. (Benchmark: bench/variants.py.)
    """

    @staticmethod
    def forward(ctx, q, k, v, bias, delta, scale):  # noqa: ANN001, ANN205
        mask = bias.to(q.dtype)[None]  # [1, K, L, L]
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=mask, scale=scale)
        ctx.save_for_backward(q, k, v, out, lse, mask)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, d_out):  # noqa: ANN001, ANN205
        q, k, v, out, lse, mask = ctx.saved_tensors
        d_out = d_out.contiguous()
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            d_out, q, k, v, out, lse, 0.0, False, attn_mask=mask, scale=ctx.scale)
        d_delta = None
        if ctx.needs_input_grad[4]:
            s_ii = ctx.scale * (q.float() * k.float()).sum(-1) + mask[0].diagonal(dim1=-2, dim2=-1).float()
            p_ii = torch.exp(s_ii - lse.float())  # [B, K, L]
            d_delta = (p_ii * (d_out.float() * (v.float() - out.float())).sum(-1)).sum(dim=(0, 2))
        return dq, dk, dv, None, d_delta, None


class LlamaAttention(ResidualSublayer):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d, self.n_heads = cfg.d_model, cfg.n_heads
        self.head_dim = d // cfg.n_heads
        self.rope_theta = cfg.rope_theta
        self.norm = RMSNorm(d, cfg.norm_eps)
        self.wq = nn.Linear(d, d, bias=False)
        self.wk = nn.Linear(d, d, bias=False)
        self.wv = nn.Linear(d, d, bias=False)
        self.wo = nn.Linear(d, d, bias=False)
        # The rotation table for the configured context, made once: buffers follow the model to its device, and
        # a compiled model sees the same tensors at every call (a table filled at the first call changed what
        # the compiled graph had guarded on, so the whole model compiled twice). Not in the state dict.
        cos, sin = rope_cache(cfg.context_len, self.head_dim, self.rope_theta)  # [context, Dh/2] each
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def _rope_for(self, L: int) -> tuple[torch.Tensor, torch.Tensor]:
        if L > self.rope_cos.shape[0]:  # type: ignore[index]  # longer than the configured context: made for this call
            return rope_cache(L, self.head_dim, self.rope_theta, device=self.rope_cos.device)
        return self.rope_cos[:L], self.rope_sin[:L]  # type: ignore[index]

    def delta(self, n: torch.Tensor) -> torch.Tensor:
        """The attention output for normed input n [B, L, d] (no residual)."""
        B, L, d = n.shape
        H, Dh = self.n_heads, self.head_dim
        q = self.wq(n).view(B, L, H, Dh).transpose(1, 2)  # [B, H, L, Dh]
        k = self.wk(n).view(B, L, H, Dh).transpose(1, 2)
        v = self.wv(n).view(B, L, H, Dh).transpose(1, 2)
        cos, sin = self._rope_for(L)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [B, H, L, Dh]
        return self.wo(o.transpose(1, 2).reshape(B, L, d))


class ReuseAttention(LlamaAttention):
    """Plain layer reuse: the ordinary residual attention sublayer applied T times."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.steps = cfg.attn_steps


class CEMAttention(nn.Module):
    # Weight-decay roles of the CEM extras (cem_core/model/roles.py); w_q, w_k are projections.
    param_roles = {"self_bias": "position_bias", "other_bias": "position_bias", "diag": "kq_diagonal"}

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d, K = cfg.d_model, cfg.n_heads
        self.d_model, self.n_heads, self.head_dim = d, K, d // K
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.steps, self.step_size = cfg.attn_steps, cfg.attn_step_size
        self.start = cfg.attn_start  # x_0: "h" or "norm" (RMSNorm(h))
        self.norm = RMSNorm(d, cfg.norm_eps)
        self.w_q = nn.Linear(d, d, bias=False)  # weight [K*Dh, d]: queries, and (transposed) the output
        self.w_k = nn.Linear(d, d, bias=False)  # keys, and the values
        self.position = cfg.cem_position
        if self.position == "alibi":
            self.register_buffer("slopes", alibi_slopes(K), persistent=False)
            self.self_bias = nn.Parameter(torch.zeros(K))
            self.other_bias = nn.Parameter(torch.zeros(K))
        self.kq_diagonal = cfg.kq_diagonal
        if self.kq_diagonal == "shared":
            self.diag = nn.Parameter(torch.zeros(d))
        elif self.kq_diagonal == "per_head":
            self.diag = nn.Parameter(torch.zeros(K, d))
        self.precond = build_preconditioner(cfg.attn_precond, K, d, cfg.attn_precond_rank, "model.attn_precond")

    def position_bias(self, L: int) -> torch.Tensor | None:
        """[K, L, L] additive scores bias with the causal mask, or None (pure causal)."""
        if self.position != "alibi":
            return None
        return alibi_bias(self.slopes, self.self_bias, self.other_bias, L)  # type: ignore[arg-type]

    def keys(self, n: torch.Tensor) -> torch.Tensor:
        B, L, _ = n.shape
        return self.w_k(n).view(B, L, self.n_heads, self.head_dim).transpose(1, 2)  # [B, K, L, Dh]

    def attend(self, u: torch.Tensor, n: torch.Tensor, k: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """Per-head attention outputs o [B, L, K, Dh] for queries from u [B, L, d]."""
        B, L, d = u.shape
        K, Dh = self.n_heads, self.head_dim
        q = self.w_q(u).view(B, L, K, Dh).transpose(1, 2)  # [B, K, L, Dh]
        qk, kk, mask, extra = q, k, bias, None
        if self.kq_diagonal == "shared":
            # One [B, L, L] matrix (u * D) n^T shared by every head: a score term of FlexAttention, or in the SDPA bias.
            extra = self.scale * torch.matmul(u * self.diag.to(u.dtype), n.transpose(1, 2))  # [B, L, L]
        elif self.kq_diagonal == "per_head":
            du = u[:, None] * self.diag.to(u.dtype)[None, :, None, :]  # [B, K, L, d]
            qk = torch.cat([q, du], dim=-1)  # [B, K, L, Dh + d]
            kk = torch.cat([k, n[:, None].expand(B, K, L, d)], dim=-1)
        if ((bias is not None or extra is not None) and attention_kernel(u.device) == "flex"
                and not flex_failed(call_key(qk, k, extra))):
            o = self._attend_flex(qk, kk, k, extra)
            if o is not None:
                return o.transpose(1, 2)  # [B, L, K, Dh]
        if extra is not None:
            base = bias if bias is not None else causal_mask_bias(L, device=u.device)[None]
            mask = extra[:, None] + base.to(extra.dtype)[None]  # [B, K or 1, L, L]
        if mask is None:
            o = F.scaled_dot_product_attention(qk, kk, k, is_causal=True, scale=self.scale)
        elif self._alibi_fast_path(qk):
            o = _AlibiAttentionCPU.apply(qk, kk, k, mask.detach(), self.self_bias - self.other_bias, self.scale)
        else:
            o = F.scaled_dot_product_attention(qk, kk, k, attn_mask=mask.to(qk.dtype), scale=self.scale)
        return o.transpose(1, 2)  # [B, L, K, Dh]

    def _attend_flex(self, qk: torch.Tensor, kk: torch.Tensor, v: torch.Tensor,
                     extra: torch.Tensor | None) -> torch.Tensor | None:
        """FlexAttention (`cem_core/model/flex.py`): o [B, K, L, Dh], or None after a failure outside compilation
        (then the SDPA path runs, and from then on for calls of this shape)."""
        alibi = self.position == "alibi"
        try:
            return cem_flex_attention(qk, kk, v, scale=self.scale, slopes=self.slopes if alibi else None,  # type: ignore[arg-type]
                                      delta=self.self_bias - self.other_bias if alibi else None, extra=extra)
        except Exception as e:  # noqa: BLE001 - the SDPA path computes the same function
            if torch.compiler.is_compiling():
                raise  # the trainer's compile probe falls back to eager, which lands here
            disable_flex(call_key(qk, v, extra), f"{type(e).__name__}: {' '.join(str(e).split())[:200]}")
            return None

    def _alibi_fast_path(self, qk: torch.Tensor) -> bool:
        """ALiBi bias, no KQ diagonal, CPU, eager, flash SDPA allowed: `_AlibiAttentionCPU` (first-order gradients)."""
        return (_HAS_CPU_FLASH and self.position == "alibi" and self.kq_diagonal == "none" and qk.device.type == "cpu"
                and qk.dtype in (torch.float32, torch.bfloat16) and torch.backends.cuda.flash_sdp_enabled()
                and not torch.compiler.is_compiling())

    def iterate(self, h: torch.Tensor) -> Iterator[torch.Tensor]:
        """Yields x_0 (h, or RMSNorm(h) for attn_start='norm'), x_1, ..., x_T (keys, values and biases fixed;
        only x moves)."""
        n = self.norm(h)
        k = self.keys(n)
        bias = self.position_bias(h.shape[1])
        x = n if self.start == "norm" else h
        yield x
        for t in range(self.steps):
            u = n if t == 0 else self.norm(x)
            o = self.attend(u, n, k, bias)
            x = x + self.step_size * self.precond.project_heads(o, self.w_q.weight)
            yield x

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        for x in self.iterate(h):
            pass
        return x
