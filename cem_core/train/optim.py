"""The paper's training recipe (Table 2) from a TrainConfig (`python -m cem_core.train RUN_DIR`).

- AdamW with `train.beta1`, `train.beta2`, `train.adam_eps` (1e-9) and `train.lr`.
- Weight decay `train.weight_decay` (0.1) on weight MATRICES only. The rule:
  a parameter is decayed iff it has >= 2 dimensions and does not belong to an
  `nn.Embedding`. So no decay on norm gains, biases, the input embedding, and
  the CEM small vectors (preconditioner diagonals, KQ diagonals, position
  biases, which are all 1-D); the output head IS decayed (an ordinary untied
  projection, as in Llama-style recipes), and so are the CEM low-rank
  preconditioner factors U, V (matrices). `decay_split(model)` lists both sets.
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


def decay_split(model: nn.Module) -> tuple[list[str], list[str]]:
    """(names decayed, names not decayed) by the rule in the module docstring."""
    embedding_params = set()
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            embedding_params.update(id(p) for p in module.parameters(recurse=False))
    decay, no_decay = [], []
    seen: set[int] = set()
    for name, p in model.named_parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        if p.ndim >= 2 and id(p) not in embedding_params:
            decay.append(name)
        else:
            no_decay.append(name)
    return decay, no_decay


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    decay, no_decay = decay_split(model)
    params = dict(model.named_parameters())
    groups = [{"params": [params[n] for n in decay], "weight_decay": weight_decay, "name": "decay"},
              {"params": [params[n] for n in no_decay], "weight_decay": 0.0, "name": "no_decay"}]
    return [g for g in groups if g["params"]]


def build_optimizer(model: nn.Module, t: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    kwargs = {}
    if device.type == "cuda":
        kwargs["fused"] = True
    return torch.optim.AdamW(param_groups(model, t.weight_decay), lr=t.lr, betas=(t.beta1, t.beta2),
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
