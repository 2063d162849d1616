"""Exact parameter and FLOP counts of a `GPRegressor`, torch-free (`cemctl plan`, the GP report table).

Counted the way `cem_core.counts` counts the language model: parameters tensor by
tensor as `cem_core.gp.model` allocates them; FLOPs are the matmul FLOPs (2 m n k
per product) of one forward pass per example, T recursive steps repeating the
per-step work of the MLP sublayer (`cem_core.counts` supplies the sublayer's
numbers). Biases, norms and element-wise work are not counted. Training = 3x.

    input projection  Linear(D -> d, bias)    D d + d params, 2 D d FLOPs
    n_layers x MLP sublayer (own RMSNorm)     mlp_params + d,  per-token MLP FLOPs
    final RMSNorm, head Linear(d -> 1, bias)  d + d + 1,       2 d FLOPs
"""

from __future__ import annotations

from cem_core.counts import mlp_flops, mlp_params
from cem_core.schema import GPConfig, ModelConfig, RunConfig


def gp_param_counts(m: "ModelConfig", gp: "GPConfig") -> dict[str, int]:
    """{'total', 'non_embedding', 'mlp'}: 'non_embedding' leaves out the input projection and the head."""
    d = m.d_model
    inp = gp.input_dim * d + d
    head = d + 1
    blocks = m.n_layers * (mlp_params(m) + d)  # each sublayer owns its RMSNorm
    non_embedding = blocks + d  # + final RMSNorm
    return {"total": inp + non_embedding + head, "non_embedding": non_embedding, "mlp": m.n_layers * mlp_params(m)}


def gp_flops_per_example(m: "ModelConfig", gp: "GPConfig") -> int:
    """Forward matmul FLOPs for one input vector."""
    d = m.d_model
    return 2 * gp.input_dim * d + m.n_layers * mlp_flops(m, 1) + 2 * d


def gp_task_counts(cfg: "RunConfig") -> tuple[dict[str, int], int]:
    """The GP task's counts (its spec's `counts`): parameter counts and forward FLOPs per example."""
    return gp_param_counts(cfg.model, cfg.gp), gp_flops_per_example(cfg.model, cfg.gp)


def gp_train_flops_per_example(m: "ModelConfig", gp: "GPConfig") -> int:
    return 3 * gp_flops_per_example(m, gp)
