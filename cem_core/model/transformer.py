"""The decoder-only language model: any attention kind paired with any MLP kind (`cemctl launch`).

Token embedding -> n_layers x Block(attention sublayer, MLP sublayer) -> RMSNorm -> head.
Untied embedding and head, no biases, pre-norm (each sublayer owns its RMSNorm).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from cem_core.config import ModelConfig, resolve, RunConfig
from cem_core.variants import ATTENTION, MLPS
from cem_core.model.norm import RMSNorm


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attn = ATTENTION.get(cfg.attention)(cfg)
        self.mlp = MLPS.get(cfg.mlp)(cfg)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.attn(h))


class CEMTransformer(nn.Module):
    param_roles = {"head.weight": "output_head"}  # cem_core/model/roles.py (every other role is its owner's)

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.checkpoint_blocks = False  # `train.activation_checkpointing`: recompute blocks in backward
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """N(0, init_std) for every matrix and the embedding; norms at 1; CEM extras keep their own init."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                if module.weight.device.type != "meta":
                    nn.init.normal_(module.weight, mean=0.0, std=self.cfg.init_std)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx, targets: int64 [B, L] -> logits [B, L, V], mean cross-entropy (targets < 0 ignored)."""
        B, L = idx.shape
        if L > self.cfg.context_len:
            raise ValueError(f"sequence length {L} exceeds model.context_len={self.cfg.context_len}")
        h = self.embed(idx)  # [B, L, d]
        for block in self.blocks:
            if self.checkpoint_blocks and self.training and torch.is_grad_enabled():
                h = checkpoint(block, h, use_reentrant=False)
            else:
                h = block(h)
        logits = self.head(self.norm(h))  # [B, L, V]
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.float().view(B * L, -1), targets.reshape(B * L), ignore_index=-1)
        return logits, loss

    def num_params(self, non_embedding: bool = False) -> int:
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= self.embed.weight.numel() + self.head.weight.numel()
        return n


def build_model(cfg: ModelConfig | RunConfig, device: str | torch.device | None = None) -> CEMTransformer:
    """Build the model of a (resolved) config. A RunConfig or unresolved ModelConfig is resolved first."""
    if isinstance(cfg, RunConfig):
        cfg = resolve(cfg).model
    elif not cfg.d_model or not cfg.vocab_size:
        cfg = resolve(dataclasses.replace(RunConfig(), model=cfg)).model
    if device is None:
        return CEMTransformer(cfg)
    with torch.device(device):
        return CEMTransformer(cfg)


def count_params_meta(cfg: ModelConfig) -> dict[str, int]:
    """Parameter counts from a model built on the meta device (no weights allocated)."""
    model = build_model(cfg, device="meta")
    return {"total": model.num_params(), "non_embedding": model.num_params(non_embedding=True)}
