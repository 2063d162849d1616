"""The GP study's regressor: stacked (recursive) MLP sublayers on a vector input (task = "gp", `cemctl launch`).

    x [N, D] -> Linear(D -> d) -> n_layers x MLP sublayer -> RMSNorm -> Linear(d -> 1) -> pred [N]

The MLP sublayer is the language model's own, chosen by `model.mlp` from
`cem_core.model.mlp.MLPS` (cem: T = `model.mlp_steps` gradient steps on the
element-wise energy; llama / reuse for comparison). Each example is fed to the
sublayers as a length-1 sequence ([N, 1, d]), the layout they are written for.
Weights are initialised as in the language model (N(0, init_std) for every
matrix, norms at 1, CEM extras keep their own init); biases start at 0.
Counts: `cem_core.gp.counts` (tests check them against this module).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from cem_core.config import GPConfig, ModelConfig
from cem_core.variants import MLPS
from cem_core.model.norm import RMSNorm


class GPRegressor(nn.Module):
    param_roles = {"head.weight": "output_head"}  # cem_core/model/roles.py; `inp` is a projection

    def __init__(self, model_cfg: ModelConfig, gp_cfg: GPConfig) -> None:
        super().__init__()
        d = model_cfg.d_model
        if d < 1 or model_cfg.n_layers < 1 or model_cfg.d_mlp < 1:
            raise ValueError("GPRegressor needs a resolved ModelConfig (d_model, n_layers, d_mlp > 0)")
        self.cfg, self.gp_cfg = model_cfg, gp_cfg
        self.inp = nn.Linear(gp_cfg.input_dim, d, bias=True)
        self.blocks = nn.ModuleList(MLPS.get(model_cfg.mlp)(model_cfg) for _ in range(model_cfg.n_layers))
        self.norm = RMSNorm(d, model_cfg.norm_eps)
        self.head = nn.Linear(d, 1, bias=True)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear) and module.weight.device.type != "meta":
                nn.init.normal_(module.weight, mean=0.0, std=self.cfg.init_std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The residual stream after the last sublayer: [N, D] -> [N, 1, d]."""
        h = self.inp(x)[:, None, :]
        for block in self.blocks:
            h = block(h)
        return h

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x [N, D] float, y [N] | None -> (pred [N], mean squared error | None)."""
        if x.ndim != 2 or x.shape[1] != self.gp_cfg.input_dim:
            raise ValueError(f"expected inputs [N, {self.gp_cfg.input_dim}], got {tuple(x.shape)}")
        pred = self.head(self.norm(self.features(x)))[:, 0, 0]
        loss = None
        if y is not None:
            loss = F.mse_loss(pred.float(), y.float())
        return pred, loss

    def num_params(self, non_embedding: bool = False) -> int:
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= sum(p.numel() for p in (*self.inp.parameters(), *self.head.parameters()))
        return n


def build_gp_model(model_cfg: ModelConfig, gp_cfg: GPConfig, device: str | torch.device | None = None) -> GPRegressor:
    """A GPRegressor of a resolved model config (on `device`, default CPU)."""
    if device is None:
        return GPRegressor(model_cfg, gp_cfg)
    with torch.device(device):
        return GPRegressor(model_cfg, gp_cfg)
