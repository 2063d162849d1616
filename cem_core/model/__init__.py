"""The model library: Llama baseline and every CEM variant (`cemctl launch` trains them).

    from cem_core.model import build_model
    model = build_model(resolved_run_config.model)
    logits, loss = model(idx, targets)
"""

from cem_core.model.attention import CEMAttention, LlamaAttention, ReuseAttention
from cem_core.model.mlp import CEMMLP, LlamaMLP, ReuseMLP
from cem_core.variants import ATTENTION, MLPS, PRECONDITIONERS
from cem_core.model.transformer import Block, CEMTransformer, build_model, count_params_meta

__all__ = [
    "ATTENTION", "MLPS", "PRECONDITIONERS", "Block", "CEMTransformer", "build_model", "count_params_meta",
    "CEMAttention", "LlamaAttention", "ReuseAttention", "CEMMLP", "LlamaMLP", "ReuseMLP",
]
