"""Learned preconditioners P for CEM updates (`model.attn_precond`, `model.mlp_precond`).

identity:      P = I
diag:          P = diag(softplus(d)),                  d = sqrt(width) * p
diag_lowrank:  P = diag(softplus(d)) + U V^T + V U^T,  U, V in R^{width x R}

Initialisation (paper App. C.4): p = 1/sqrt(width) so d starts at 1; U ~ N(0, 0.02),
V = 0 (LoRA-style: the low-rank part starts at zero). P is symmetric; the
diagonal is positive.

One module holds `n` preconditioners of the same kind: the MLP has one, CEM
attention one per head, each acting on the model width (P_k is d x d). For
attention the head sum  sum_k P_k W_Q[k]^T o_k  is computed without forming a
[B, L, K, d] tensor: the diagonal is folded into the weight and the low-rank
part goes through rank-R bottlenecks.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from cem_core.variants import PRECONDITIONERS  # names -> these classes, lazily (torch-free validation)



class Preconditioner(nn.Module):
    """Identity; the base class of every preconditioner."""

    param_roles = {"p": "preconditioner", "U": "preconditioner", "V": "preconditioner"}  # cem_core/model/roles.py

    def __init__(self, n: int, width: int, rank: int = 0) -> None:
        super().__init__()
        self.n, self.width, self.rank = n, width, rank

    def matrix(self) -> torch.Tensor:
        """Dense [n, width, width] (for tests and diagnostics)."""
        return torch.eye(self.width).expand(self.n, self.width, self.width).clone()

    def apply(self, y: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """P y for y [..., width] (n == 1)."""
        return y

    def project_heads(self, o: torch.Tensor, w_q: torch.Tensor) -> torch.Tensor:
        """sum_k P_k W_Q[k]^T o_k for o [B, L, K, Dh], w_q [K*Dh, width] -> [B, L, width]."""
        B, L, K, Dh = o.shape
        return o.reshape(B, L, K * Dh) @ w_q


class DiagPreconditioner(Preconditioner):
    def __init__(self, n: int, width: int, rank: int = 0) -> None:
        super().__init__(n, width, rank)
        self.p = nn.Parameter(torch.full((n, width), 1.0 / math.sqrt(width)))

    def diagonal(self) -> torch.Tensor:
        """softplus(d), d = sqrt(width) * p: [n, width], strictly positive."""
        return F.softplus(math.sqrt(self.width) * self.p)

    def matrix(self) -> torch.Tensor:
        return torch.diag_embed(self.diagonal())

    def apply(self, y: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return y * self.diagonal()[0].to(y.dtype)

    def project_heads(self, o: torch.Tensor, w_q: torch.Tensor) -> torch.Tensor:
        B, L, K, Dh = o.shape
        # diag(s_k) W_Q[k]^T = (W_Q[k] diag(s_k))^T: scale the weight's columns per head.
        scaled = (w_q.view(K, Dh, self.width) * self.diagonal()[:, None, :].to(w_q.dtype)).reshape(K * Dh, self.width)
        return o.reshape(B, L, K * Dh) @ scaled


class DiagLowRankPreconditioner(DiagPreconditioner):
    def __init__(self, n: int, width: int, rank: int) -> None:
        super().__init__(n, width, rank)
        self.U = nn.Parameter(torch.randn(n, width, rank) * 0.02)
        self.V = nn.Parameter(torch.zeros(n, width, rank))

    def matrix(self) -> torch.Tensor:
        lowrank = self.U @ self.V.transpose(1, 2)
        return super().matrix() + lowrank + lowrank.transpose(1, 2)

    def apply(self, y: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        U, V = self.U[0].to(y.dtype), self.V[0].to(y.dtype)
        return super().apply(y) + (y @ V) @ U.T + (y @ U) @ V.T

    def project_heads(self, o: torch.Tensor, w_q: torch.Tensor) -> torch.Tensor:
        B, L, K, Dh = o.shape
        R = self.rank
        U, V = self.U.to(w_q.dtype), self.V.to(w_q.dtype)
        w = w_q.view(K, Dh, self.width)
        # (U V^T + V U^T) W_Q[k]^T o_k = U (W_Q[k] V)^T o_k + V (W_Q[k] U)^T o_k
        wv = torch.einsum("khd,kdr->khr", w, V)  # [K, Dh, R]
        wu = torch.einsum("khd,kdr->khr", w, U)
        zv = torch.einsum("blkh,khr->blkr", o, wv).reshape(B, L, K * R)  # [B, L, K*R]
        zu = torch.einsum("blkh,khr->blkr", o, wu).reshape(B, L, K * R)
        u_flat = U.transpose(1, 2).reshape(K * R, self.width)  # rows: (k, r) -> U_k[:, r]
        v_flat = V.transpose(1, 2).reshape(K * R, self.width)
        return super().project_heads(o, w_q) + zv @ u_flat + zu @ v_flat


def build_preconditioner(kind: str, n: int, width: int, rank: int, key: str) -> Preconditioner:
    return PRECONDITIONERS.get(kind, key=key)(n, width, rank)
