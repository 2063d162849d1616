"""The scalar preconditioner's module (imported only when a model is built): P_k = softplus(c_k) I."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from cem_core.model.precond import Preconditioner


class ScalarPreconditioner(Preconditioner):
    """n learned scalars; c starts at log(e - 1) so that softplus(c) = 1 (P = I at initialisation)."""

    def __init__(self, n: int, width: int, rank: int = 0) -> None:
        super().__init__(n, width, rank)
        self.p = nn.Parameter(torch.full((n,), math.log(math.e - 1.0)))  # "p": a preconditioner parameter

    def scale(self) -> torch.Tensor:
        return F.softplus(self.p)  # [n], strictly positive

    def matrix(self) -> torch.Tensor:
        return self.scale()[:, None, None] * torch.eye(self.width)  # [n, width, width]

    def apply(self, y: torch.Tensor) -> torch.Tensor:
        return y * self.scale()[0].to(y.dtype)  # y [..., width]

    def project_heads(self, o: torch.Tensor, w_q: torch.Tensor) -> torch.Tensor:
        B, L, K, Dh = o.shape  # o [B, L, K, Dh], w_q [K*Dh, width]
        scaled = o * self.scale().to(o.dtype)[None, None, :, None]  # head k scaled by its s_k
        return scaled.reshape(B, L, K * Dh) @ w_q  # [B, L, width]
