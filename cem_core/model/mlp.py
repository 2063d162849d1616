"""MLP sublayers (`model.mlp`): llama | cem | cem_param_matched | reuse. Used by `cemctl launch` runs.

- llama: h + W_down(SiLU(W_gate n) * W_up n), n = RMSNorm(h) (SwiGLU, no biases).
- reuse: the llama sublayer applied T times.
- cem:   T gradient steps on the element-wise energy xi(u) = -gamma^T phi(V u),
         phi' = SiLU, gamma = W n fixed (n = RMSNorm(h)), x_0 = h, u = RMSNorm(x_t):
         x_{t+1} = x_t + eta P V^T (gamma * SiLU(V u)).
         V is both the up projection and (transposed) the down projection; W is the
         gate: two thirds of the gated MLP's parameters at the same width.
- cem_param_matched: the cem MLP with width x `param_match_factor` (1.5), which
         restores the gated MLP's parameter count.
"""

from __future__ import annotations

from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from cem_core.config import ModelConfig
from cem_core.counts import mlp_width
from cem_core.model.norm import RMSNorm
from cem_core.model.precond import build_preconditioner
from cem_core.model.residual import ResidualSublayer



class LlamaMLP(ResidualSublayer):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d, m = cfg.d_model, cfg.d_mlp
        self.norm = RMSNorm(d, cfg.norm_eps)
        self.gate = nn.Linear(d, m, bias=False)
        self.up = nn.Linear(d, m, bias=False)
        self.down = nn.Linear(m, d, bias=False)

    def delta(self, n: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(n)) * self.up(n))


class ReuseMLP(LlamaMLP):
    """Plain layer reuse: the ordinary residual gated MLP applied T times."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.steps = cfg.mlp_steps


class CEMMLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d, m = cfg.d_model, mlp_width(cfg)
        self.width = m
        self.steps, self.step_size = cfg.mlp_steps, cfg.mlp_step_size
        self.norm = RMSNorm(d, cfg.norm_eps)
        self.w = nn.Linear(d, m, bias=False)  # gate: gamma = W n
        self.v = nn.Linear(d, m, bias=False)  # up V, and down V^T
        self.precond = build_preconditioner(cfg.mlp_precond, 1, d, cfg.mlp_precond_rank, "model.mlp_precond")

    def iterate(self, h: torch.Tensor) -> Iterator[torch.Tensor]:
        """Yields x_0 = h, x_1, ..., x_T (gamma fixed; only x moves)."""
        n = self.norm(h)
        gamma = self.w(n)  # [B, L, m]
        x = h
        yield x
        for t in range(self.steps):
            u = n if t == 0 else self.norm(x)
            g = gamma * F.silu(self.v(u))  # [B, L, m]
            x = x + self.step_size * self.precond.apply(g @ self.v.weight)  # V^T g: [B, L, d]
            yield x

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        for x in self.iterate(h):
            pass
        return x

