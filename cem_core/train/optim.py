"""The paper's training recipe (Table 2) from a TrainConfig (`python -m cem_core.train RUN_DIR`).

- AdamW with `train.beta1`, `train.beta2`, `train.adam_eps` (1e-9) and `train.lr`.
- Weight decay `train.weight_decay` (0.1) chosen by what a parameter IS
  (`cem_core.model.roles`), not by its shape: projection matrices and the
  output head are decayed; the embedding, norm gains and biases never are; the
  CEM extras (KQ diagonals, shared or per head alike, preconditioner p, U, V and
  the learned position biases) are not, unless `train.decay_cem_extras = true`.
  So no CEM extra is pulled toward zero (a decayed preconditioner would drift
  to softplus(0)), and a parameter without a role stops the run before it trains.
  `decay_split(model, decay_cem_extras=...)` lists both sets.
- Cosine schedule: linear warmup over the first `round(warmup_frac * steps)`
  optimizer steps up to the peak lr (step w of W has lr = peak * w / W), then a
  cosine from the peak down to `final_lr_frac * peak`, reached exactly at the
  last step (W >= 1 when warmup_frac > 0; a run no longer than W never decays). Steps are 1-based: `lr_multiplier(1, ...)` is the first step's lr.
- Gradient clipping at `train.grad_clip` (in the loop).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from cem_core.config import TrainConfig
from cem_core.model.roles import is_decayed, param_roles


def decay_split(model: nn.Module, *, decay_cem_extras: bool = False) -> tuple[list[str], list[str]]:
    """(names decayed, names not decayed) by role (`cem_core.model.roles`); an unknown role raises."""
    decay, no_decay = [], []  # type: ignore[var-annotated]
    for name, role in param_roles(model).items():
        (decay if is_decayed(role, decay_cem_extras=decay_cem_extras) else no_decay).append(name)
    return decay, no_decay


def param_groups(model: nn.Module, weight_decay: float, *, decay_cem_extras: bool = False) -> list[dict]:
    decay, no_decay = decay_split(model, decay_cem_extras=decay_cem_extras)
    params = dict(model.named_parameters())
    groups = [{"params": [params[n] for n in decay], "weight_decay": weight_decay, "name": "decay"},
              {"params": [params[n] for n in no_decay], "weight_decay": 0.0, "name": "no_decay"}]
    return [g for g in groups if g["params"]]


def build_optimizer(model: nn.Module, t: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    kwargs = {}
    if device.type == "cuda":
        kwargs["fused"] = True
    return torch.optim.AdamW(param_groups(model, t.weight_decay, decay_cem_extras=t.decay_cem_extras), lr=t.lr, betas=(t.beta1, t.beta2),
                             eps=t.adam_eps, **kwargs)


def warmup_steps(total_steps: int, warmup_frac: float) -> int:
    """round(warmup_frac * steps), at least 1 when warmup_frac > 0 (so step 1 is at the peak in short runs)."""
    if warmup_frac <= 0:
        return 0
    return min(total_steps, max(1, int(round(warmup_frac * total_steps))))


def lr_multiplier(step: int, total_steps: int, warmup_frac: float, final_lr_frac: float) -> float:
    """Multiplier of the peak lr at 1-based optimizer step `step` of `total_steps`."""
    w = warmup_steps(total_steps, warmup_frac)
    if w > 0 and step <= w:
        return step / w
    progress = min(1.0, max(0.0, (step - w) / (total_steps - w)))
    # progress runs from 1/(T-w) at the first cosine step to exactly 1 at the last step.
    return final_lr_frac + (1.0 - final_lr_frac) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_scheduler(optimizer: torch.optim.Optimizer, t: TrainConfig, total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """LambdaLR whose k-th value (k = 0, 1, ...) is the lr of optimizer step k + 1."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda k: lr_multiplier(k + 1, total_steps, t.warmup_frac, t.final_lr_frac))
