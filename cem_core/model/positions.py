"""Position encodings: RoPE for Llama attention, ALiBi (+ learned self/non-self biases) for CEM.

RoPE makes the key-query matrix depend on both positions and breaks the energy
view, so CEM attention uses additive biases instead. ALiBi here is a distance
*penalty*: bias_k(i, j) = -m_k * (i - j) for j <= i (the paper writes it
without the minus sign), with the standard geometric slopes of Press et al.
"""

from __future__ import annotations

import math

import torch


def rope_cache(seq_len: int, head_dim: int, theta: float, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape [seq_len, head_dim // 2]."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    t = torch.arange(seq_len, device=device, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    return freqs.cos(), freqs.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (first half, second half) of x: [B, H, L, Dh] with cos/sin [L, Dh/2]."""
    x1, x2 = x.float().chunk(2, dim=-1)
    cos, sin = cos[None, None], sin[None, None]
    out = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.to(x.dtype)


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """Geometric ALiBi slopes (Press et al. 2022), interpolated for non-powers of two."""

    def power_of_2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n_heads).is_integer():
        slopes = power_of_2(n_heads)
    else:
        closest = 2 ** math.floor(math.log2(n_heads))
        slopes = power_of_2(closest) + power_of_2(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32)


def causal_mask_bias(seq_len: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """[L, L] additive mask: 0 on and below the diagonal, -inf above."""
    return torch.full((seq_len, seq_len), float("-inf"), device=device, dtype=dtype).triu(1)


def alibi_bias(
    slopes: torch.Tensor, self_bias: torch.Tensor, other_bias: torch.Tensor, seq_len: int
) -> torch.Tensor:
    """[K, L, L] scores bias: -m_k (i - j) + b_self[k] (i == j) + b_other[k] (i != j), causal -inf above.

    Differentiable in the learned per-head scalars `self_bias`, `other_bias` ([K]).
    """
    device = slopes.device
    pos = torch.arange(seq_len, device=device)
    dist = (pos[:, None] - pos[None, :]).float()  # i - j
    eye = torch.eye(seq_len, device=device, dtype=torch.float32)
    bias = -slopes.float()[:, None, None] * dist[None]
    bias = bias + self_bias.float()[:, None, None] * eye + other_bias.float()[:, None, None] * (1 - eye)
    return bias + causal_mask_bias(seq_len, device=device)[None]
