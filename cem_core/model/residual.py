"""The ordinary residual sublayer, and its plain reuse (`model.attention` / `model.mlp` = llama or reuse).

`ResidualSublayer` is the one implementation of `x <- x + delta(RMSNorm(x))`
applied `steps` times: steps = 1 is the Llama sublayer, steps = T its plain
reuse (the paper's ablation of within-layer recursion). Subclasses provide
`norm` and `delta(n)`.
"""

from __future__ import annotations

import torch
from torch import nn


class ResidualSublayer(nn.Module):
    steps: int = 1

    def delta(self, n: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        x = h
        for _ in range(self.steps):
            x = x + self.delta(self.norm(x))  # type: ignore[operator]
        return x
