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


def phi(z: torch.Tensor, nodes: int = 48, chunk: int = 1 << 18) -> torch.Tensor:
    """phi(z) = int_0^z SiLU(t) dt, element-wise, by Gauss-Legendre quadrature on [0, z].

    Evaluated in chunks of `chunk` elements so large activations do not need nodes x memory.
    """
    x, w = _gauss_legendre(nodes)
    x = torch.as_tensor(x, dtype=z.dtype, device=z.device)  # type: ignore[assignment]
    w = torch.as_tensor(w, dtype=z.dtype, device=z.device)  # type: ignore[assignment]
    flat = z.reshape(-1)
    parts = []
    for start in range(0, max(flat.numel(), 1), chunk):
        zc = flat[start : start + chunk]
        t = zc[:, None] * (x + 1) / 2  # nodes mapped to [0, z]
        parts.append((zc / 2) * (F.silu(t) * w).sum(-1))  # type: ignore[arg-type]
    return torch.cat(parts).reshape(z.shape)


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
    return [energy(layer, layer.norm(x), n) for x in layer.iterate(h)]  # type: ignore[arg-type]


@torch.no_grad()
def energy_diagnostics(model, idx: torch.Tensor, layers: list[int]) -> list[dict]:
    """Energy before and after each recursive step of the CEM sublayers of `layers`.

    Runs the model on idx [B, L]; for every chosen layer with a CEM attention or
    MLP sublayer, returns one row per step t = 0..T: {"layer", "sublayer",
    "step", "energy" (mean over tokens), "descent_frac" (share of tokens whose
    energy fell in the step leading here; None at t = 0)}. Models without CEM
    sublayers give [].
    """
    rows: list[dict] = []
    h = model.embed(idx)
    for i, block in enumerate(model.blocks):
        for name, sub in (("attention", block.attn), ("mlp", block.mlp)):
            if i in layers and isinstance(sub, (CEMAttention, CEMMLP)):
                energies = [e.float() for e in energy_trajectory(sub, h)]
                for t, e in enumerate(energies):
                    descent = None if t == 0 else float((e < energies[t - 1]).float().mean())
                    rows.append({"layer": i, "sublayer": name, "step": t, "energy": float(e.mean()), "descent_frac": descent})
            h = sub(h)
    return rows
