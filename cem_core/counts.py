"""Exact parameter and FLOP counts from a ModelConfig, without torch (`cemctl plan`).

Parameters are counted tensor by tensor as `cem_core.model` allocates them
(tests compare with the real module built on the meta device). FLOPs are the
matmul FLOPs (2 * m * n * k per product) of one forward pass, counted from the
products the model actually runs: tied weights count each time they are used,
T recursive steps repeat the per-step work, and attention scores are counted
as the dense L x L products that `scaled_dot_product_attention` computes
(FlopCounterMode counts the same). Element-wise work (norms, softmax, SiLU,
diagonal preconditioners, biases) is not counted. Training FLOPs = 3 x forward.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from cem_core.config import ModelConfig, RunConfig


def mlp_width(m: "ModelConfig") -> int:
    """Hidden width of the MLP actually built (1.5x for the parameter-matched CEM MLP)."""
    if m.mlp == "cem_param_matched":
        return int(round(m.d_mlp * m.param_match_factor))
    return m.d_mlp


def _precond_params(kind: str, n: int, width: int, rank: int) -> int:
    if kind == "identity":
        return 0
    if kind == "diag":
        return n * width
    return n * (width + 2 * width * rank)  # diag_lowrank: p, U, V


def attention_params(m: "ModelConfig") -> int:
    d, k = m.d_model, m.n_heads
    if m.attention in ("llama", "reuse"):
        return 4 * d * d
    n = 2 * d * d  # W_Q (also the output), W_K (also the values)
    if m.cem_position == "alibi":
        n += 2 * k  # learned self / non-self biases per head
    if m.kq_diagonal == "shared":
        n += d
    elif m.kq_diagonal == "per_head":
        n += k * d
    n += _precond_params(m.attn_precond, k, d, m.attn_precond_rank)
    return n


def mlp_params(m: "ModelConfig") -> int:
    d, w = m.d_model, mlp_width(m)
    if m.mlp in ("llama", "reuse"):
        return 3 * d * w
    return 2 * d * w + _precond_params(m.mlp_precond, 1, d, m.mlp_precond_rank)


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
        attn_precond="identity", mlp_precond="identity", kq_diagonal="none",
    )


def baseline_params(m: "ModelConfig") -> int:
    return param_counts(baseline_config(m))["total"]


def _attention_flops(m: "ModelConfig", seq_len: int) -> tuple[int, int]:
    """(per-token FLOPs, per-forward weight-side FLOPs) of one attention sublayer."""
    d, k, dh = m.d_model, m.n_heads, m.d_model // m.n_heads
    scores = 2 * 2 * seq_len * d  # Q K^T and A V over all heads: 2 * L * d each
    if m.attention == "llama":
        return 8 * d * d + scores, 0
    if m.attention == "reuse":
        return m.attn_steps * (8 * d * d + scores), 0
    t = m.attn_steps
    per_step = 2 * d * d + scores + 2 * d * d  # q = W_Q u, scores, W_Q^T o
    if m.kq_diagonal == "shared":
        per_step += 2 * seq_len * d  # one (u * D) h^T matrix shared by all heads
    elif m.kq_diagonal == "per_head":
        per_step += 2 * seq_len * d * k  # each head scores against the d-wide h
    weight_side = 0
    if m.attn_precond == "diag_lowrank":
        r = m.attn_precond_rank
        per_step += 2 * (2 * dh * r * k) + 2 * (2 * k * r * d)  # o_k @ (W_Q[k] V_k), (W_Q[k] U_k); then U, V
        weight_side = t * 2 * (2 * dh * d * r * k)  # W_Q[k] V_k and W_Q[k] U_k, once per step
    return 2 * d * d + t * per_step, weight_side


def _mlp_flops(m: "ModelConfig") -> int:
    d, w = m.d_model, mlp_width(m)
    if m.mlp == "llama":
        return 6 * d * w
    if m.mlp == "reuse":
        return m.mlp_steps * 6 * d * w
    per_step = 4 * d * w  # V u and V^T g
    if m.mlp_precond == "diag_lowrank":
        per_step += 8 * d * m.mlp_precond_rank  # U (V^T y) + V (U^T y)
    return 2 * d * w + m.mlp_steps * per_step  # gamma = W h once


def forward_flops(m: "ModelConfig", batch: int, seq_len: int) -> int:
    """Exact matmul FLOPs of one forward pass on a [batch, seq_len] input."""
    attn_tok, attn_weight = _attention_flops(m, seq_len)
    per_token = m.n_layers * (attn_tok + _mlp_flops(m)) + 2 * m.d_model * m.vocab_size
    return batch * seq_len * per_token + m.n_layers * attn_weight


def flops_per_token(m: "ModelConfig") -> int:
    """Forward matmul FLOPs per token at the model's context length (weight-side terms amortised away)."""
    attn_tok, _ = _attention_flops(m, m.context_len)
    return m.n_layers * (attn_tok + _mlp_flops(m)) + 2 * m.d_model * m.vocab_size


def train_flops_per_token(m: "ModelConfig") -> int:
    return 3 * flops_per_token(m)


def run_counts(cfg: "RunConfig") -> dict[str, int]:
    """{'params_total', 'params_non_embedding', 'flops_per_token'} of a resolved run config, any task.

    For task "gp" a "token" is one regression example (`cem_core.gp.counts`).
    """
    if cfg.task == "gp":
        from cem_core.gp.counts import gp_flops_per_example, gp_param_counts

        counts, fpt = gp_param_counts(cfg.model, cfg.gp), gp_flops_per_example(cfg.model, cfg.gp)
    else:
        counts, fpt = param_counts(cfg.model), flops_per_token(cfg.model)
    return {"params_total": counts["total"], "params_non_embedding": counts["non_embedding"], "flops_per_token": fpt}
