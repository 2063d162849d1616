"""The energies that CEM sublayers descend (tests; `train.energy_log` diagnostics).

Interaction energy (attention), per position i, as a function of the query
input u_i = RMSNorm(x_i) with keys from n = RMSNorm(h):

    E(u_i) = -tau sum_k log sum_{j<=i} exp(s_ijk),   tau = 1 / scale,
    s_ijk  = scale (k_j^k . W_Q[k] u_i + n_j^T D_k u_i) + b_ijk.

Element-wise energy (MLP): xi(u_i) = -gamma_i^T phi(V u_i), gamma = W n,
phi(z) = int_0^z SiLU(t) dt (Gauss-Legendre quadrature, exact to float64
rounding for the smooth integrand).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F

from cem_core.model.attention import CEMAttention
from cem_core.model.mlp import CEMMLP


@lru_cache(maxsize=4)
def _gauss_legendre(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.polynomial.legendre.leggauss(n)


def phi(z: torch.Tensor, nodes: int = 48) -> torch.Tensor:
    """phi(z) = int_0^z SiLU(t) dt, element-wise, by Gauss-Legendre quadrature on [0, z]."""
    x, w = _gauss_legendre(nodes)
    x = torch.as_tensor(x, dtype=z.dtype, device=z.device)
    w = torch.as_tensor(w, dtype=z.dtype, device=z.device)
    t = z[..., None] * (x + 1) / 2  # nodes mapped to [0, z]
    return (z / 2) * (F.silu(t) * w).sum(-1)


def attention_energy(attn: CEMAttention, u: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """E(u_i) for every position: u, n [B, L, d] -> [B, L]."""
    B, L, d = u.shape
    K, Dh = attn.n_heads, attn.head_dim
    q = attn.w_q(u).view(B, L, K, Dh).transpose(1, 2)  # [B, K, L, Dh]
    k = attn.keys(n)
    scores = torch.matmul(q, k.transpose(-1, -2))  # [B, K, L, L]
    if attn.kq_diagonal == "shared":
        scores = scores + torch.matmul(u * attn.diag, n.transpose(1, 2))[:, None]
    elif attn.kq_diagonal == "per_head":
        du = u[:, None] * attn.diag[None, :, None, :]  # [B, K, L, d]
        scores = scores + torch.matmul(du, n[:, None].transpose(-1, -2))
    scores = attn.scale * scores
    bias = attn.position_bias(L)
    if bias is None:
        from cem_core.model.positions import causal_mask_bias

        bias = causal_mask_bias(L, device=u.device)[None]
    scores = scores + bias.to(scores.dtype)
    tau = 1.0 / attn.scale
    return -tau * torch.logsumexp(scores, dim=-1).sum(1)  # [B, L]


def mlp_energy(mlp: CEMMLP, u: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """xi(u_i) for every position: u, n [B, L, d] -> [B, L]."""
    gamma = mlp.w(n)
    return -(gamma * phi(mlp.v(u))).sum(-1)


def energy_trajectory(layer: CEMAttention | CEMMLP, h: torch.Tensor) -> list[torch.Tensor]:
    """Energies [B, L] of RMSNorm(x_t) for t = 0..T along the layer's own recursion."""
    n = layer.norm(h)
    energy = attention_energy if isinstance(layer, CEMAttention) else mlp_energy
    return [energy(layer, layer.norm(x), n) for x in layer.iterate(h)]
