"""Exact parameter and FLOP counts from a ModelConfig, without torch (`cemctl plan`, reports, the trainer's result).

Each sublayer kind counts itself (its spec in `cem_core.variants`: `params(m)` and
`flops(m, seq_len)`); this module adds the rest of the model: the embedding and the
untied head, the RMSNorm gains (one per sublayer and the final one) and the head's
matmul. An unknown kind is an error here as everywhere (`ConfigError` listing the
registered names). FLOPs are the matmul FLOPs of one forward pass; training = 3x.
"""

from __future__ import annotations

import dataclasses

from cem_core.schema import ModelConfig, RunConfig
from cem_core.spec import AttentionSpec, MlpSpec
from cem_core.variants import ATTENTION, MLPS, TASKS


def attention_spec(m: "ModelConfig") -> AttentionSpec:
    return ATTENTION.spec(m.attention)


def mlp_spec(m: "ModelConfig") -> MlpSpec:
    return MLPS.spec(m.mlp)


def mlp_width(m: "ModelConfig") -> int:
    """Hidden width of the MLP actually built (1.5x for the parameter-matched CEM MLP)."""
    spec = mlp_spec(m)
    return spec.width(m) if spec.width is not None else m.d_mlp


def attention_params(m: "ModelConfig") -> int:
    return attention_spec(m).params(m)


def mlp_params(m: "ModelConfig") -> int:
    return mlp_spec(m).params(m)


def mlp_flops(m: "ModelConfig", seq_len: int = 0) -> int:
    """Forward matmul FLOPs per token of one MLP sublayer."""
    return mlp_spec(m).flops(m, seq_len or m.context_len)[0]


def param_counts(m: "ModelConfig") -> dict[str, int]:
    """{'total', 'non_embedding', 'embedding', 'attention', 'mlp'} of a resolved ModelConfig.

    'non_embedding' excludes the input embedding and the output head.
    """
    d, v, n_layers = m.d_model, m.vocab_size, m.n_layers
    attn, mlp = attention_params(m), mlp_params(m)
    norms = n_layers * 2 * d + d
    embedding = 2 * v * d  # untied input embedding and output head
    non_embedding = n_layers * (attn + mlp) + norms
    return {
        "total": embedding + non_embedding,
        "non_embedding": non_embedding,
        "embedding": embedding,
        "attention": n_layers * attn,
        "mlp": n_layers * mlp,
    }


def baseline_config(m: "ModelConfig") -> "ModelConfig":
    """The Llama baseline of the same dims (the one whose Chinchilla budget a run gets)."""
    return dataclasses.replace(
        m, attention="llama", mlp="llama", attn_steps=1, mlp_steps=1,
        attn_precond="identity", mlp_precond="identity", kq_diagonal="none", attn_start="h",
    )


def baseline_params(m: "ModelConfig") -> int:
    return param_counts(baseline_config(m))["total"]


def forward_flops(m: "ModelConfig", batch: int, seq_len: int) -> int:
    """Exact matmul FLOPs of one forward pass on a [batch, seq_len] input."""
    attn_tok, attn_weight = attention_spec(m).flops(m, seq_len)
    per_token = m.n_layers * (attn_tok + mlp_spec(m).flops(m, seq_len)[0]) + 2 * m.d_model * m.vocab_size
    return batch * seq_len * per_token + m.n_layers * attn_weight


def flops_per_token(m: "ModelConfig") -> int:
    """Forward matmul FLOPs per token at the model's context length (weight-side terms amortised away)."""
    attn_tok, _ = attention_spec(m).flops(m, m.context_len)
    return m.n_layers * (attn_tok + mlp_flops(m)) + 2 * m.d_model * m.vocab_size


def train_flops_per_token(m: "ModelConfig") -> int:
    return 3 * flops_per_token(m)


def lm_task_counts(cfg: "RunConfig") -> tuple[dict[str, int], int]:
    """The language-modelling task's counts (its spec's `counts`): parameter counts and forward FLOPs per token."""
    return param_counts(cfg.model), flops_per_token(cfg.model)


def run_counts(cfg: "RunConfig") -> dict[str, int]:
    """{'params_total', 'params_non_embedding', 'flops_per_token'} of a resolved run config, any task
    (the task's spec counts: for task "gp" a "token" is one regression example)."""
    counts, fpt = TASKS.spec(cfg.task).count(cfg)
    return {"params_total": counts["total"], "params_non_embedding": counts["non_embedding"], "flops_per_token": fpt}
