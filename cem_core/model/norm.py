"""RMSNorm (used by every sublayer; `cemctl launch` trains models built from it)."""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    """x / rms(x) * weight: computed in float32 for half-precision input, in float64 for float64 input.

    float64 matters for the energy tests (exactness to ~1e-15 through the model's
    own norm); bf16/fp16 inputs are upcast to float32 for stability.
    """

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x if x.dtype == torch.float64 else x.float()
        out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return out.to(x.dtype) * self.weight
