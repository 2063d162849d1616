"""Every named choice of a run's config, each declared once (`cemctl plan` validates with them, torch-free).

The model variants are specs (`cem_core.spec`): each attention, MLP and preconditioner kind
and each task declares here its module (imported only when a model is built), its parameter
and FLOP counts, its label, whether it recurses, the keys it reads and the combination rules
it needs. `cem_core.config.validate`, `cem_core.counts`, the recursion evaluation, `cemctl
plan` and `cemctl report` read the specs; a plugin adds its own with `cem_core.spec.register`.
The other choices (KQ diagonals, positions, corpora, tokenizers, ...) are plain registry
entries. Error messages list the registered names.

Counts follow `cem_core.model` tensor by tensor (tests compare them with the modules built on
the meta device); FLOPs are the matmul FLOPs (2 m n k per product) of one forward pass, tied
weights counted each time they are used, T recursive steps repeating the per-step work,
attention scores as the dense L x L products SDPA computes. Element-wise work is not counted.
"""

from __future__ import annotations

from cem_core.registry import Registry
from cem_core.schema import ModelConfig
from cem_core.spec import (  # the variant registries are the spec module's (re-exported here)
    ATTENTION,
    MLPS,
    PRECONDITIONERS,
    TASKS,
    AttentionSpec,
    MlpSpec,
    PreconditionerSpec,
    TaskSpec,
)


# ---------------------------------------------------------------------------------------------- preconditioners

def _lowrank_attention_flops(m: "ModelConfig") -> tuple[int, int]:
    d, k, r = m.d_model, m.n_heads, m.attn_precond_rank
    dh = d // k
    # o_k @ (W_Q[k] V_k), (W_Q[k] U_k); then U, V per step and token; W_Q[k] V_k and W_Q[k] U_k once per step
    return 2 * (2 * dh * r * k) + 2 * (2 * k * r * d), 2 * (2 * dh * d * r * k)


for _spec in (
    PreconditionerSpec("identity", "cem_core.model.precond:Preconditioner", "P = I", "no precond.",
                       params=lambda n, width, rank: 0, reads_rank=False),
    PreconditionerSpec("diag", "cem_core.model.precond:DiagPreconditioner", "P = diag(softplus(d))", "diag",
                       params=lambda n, width, rank: n * width, reads_rank=False),
    PreconditionerSpec("diag_lowrank", "cem_core.model.precond:DiagLowRankPreconditioner",
                       "P = diag(softplus(d)) + U V^T + V U^T", "diag+low-rank",
                       params=lambda n, width, rank: n * (width + 2 * width * rank),
                       attention_flops=_lowrank_attention_flops,
                       mlp_flops=lambda m: 8 * m.d_model * m.mlp_precond_rank),  # U (V^T y) + V (U^T y)
):
    PRECONDITIONERS.register_spec(_spec)


def precond_spec(name: str, key: str) -> PreconditionerSpec:
    return PRECONDITIONERS.spec(name, key=key)


# ---------------------------------------------------------------------------------------------- attention

def _llama_attention_params(m: "ModelConfig") -> int:
    return 4 * m.d_model * m.d_model


def _scores(m: "ModelConfig", seq_len: int) -> int:
    return 2 * 2 * seq_len * m.d_model  # Q K^T and A V over all heads: 2 * L * d each


def _cem_attention_params(m: "ModelConfig") -> int:
    d, k = m.d_model, m.n_heads
    n = 2 * d * d  # W_Q (also the output), W_K (also the values)
    if m.cem_position == "alibi":
        n += 2 * k  # learned self / non-self biases per head
    if m.kq_diagonal == "shared":
        n += d
    elif m.kq_diagonal == "per_head":
        n += k * d
    return n + precond_spec(m.attn_precond, "model.attn_precond").params(k, d, m.attn_precond_rank)


def _cem_attention_flops(m: "ModelConfig", seq_len: int) -> tuple[int, int]:
    d, k, t = m.d_model, m.n_heads, m.attn_steps
    per_step = 2 * d * d + _scores(m, seq_len) + 2 * d * d  # q = W_Q u, scores, W_Q^T o
    if m.kq_diagonal == "shared":
        per_step += 2 * seq_len * d  # one (u * D) h^T matrix shared by all heads
    elif m.kq_diagonal == "per_head":
        per_step += 2 * seq_len * d * k  # each head scores against the d-wide h
    extra, weight_side = precond_spec(m.attn_precond, "model.attn_precond").attention_flops(m)
    return 2 * d * d + t * (per_step + extra), t * weight_side  # keys W_K n once per layer


_NO_CEM_ATTENTION = {"model.kq_diagonal": ("none",), "model.attn_precond": ("identity",), "model.attn_start": ("h",)}
for _spec in (  # type: ignore[assignment]
    AttentionSpec("llama", "cem_core.model.attention:LlamaAttention", "multi-head attention with RoPE (the Llama baseline)",
                  label="Llama attention", family="baseline", params=_llama_attention_params,
                  flops=lambda m, L: (8 * m.d_model * m.d_model + _scores(m, L), 0),
                  requires={**_NO_CEM_ATTENTION, "model.attn_steps": (1,)}),
    AttentionSpec("cem", "cem_core.model.attention:CEMAttention",
                  "T gradient steps on the interaction energy (W_V = W_K, W_O = W_Q^T)", label="CEM attention",
                  family="cem", recurses=True, params=_cem_attention_params, flops=_cem_attention_flops,
                  uses=("attn_steps", "attn_step_size", "attn_precond", "attn_precond_rank", "kq_diagonal",
                        "cem_position", "attn_start")),
    AttentionSpec("reuse", "cem_core.model.attention:ReuseAttention",
                  "the Llama attention sublayer applied T times (plain reuse)", label="Llama attention reused",
                  family="reuse", reuses=True, params=_llama_attention_params,
                  flops=lambda m, L: (m.attn_steps * (8 * m.d_model * m.d_model + _scores(m, L)), 0),
                  uses=("attn_steps",), requires=_NO_CEM_ATTENTION),
):
    ATTENTION.register_spec(_spec)


# ---------------------------------------------------------------------------------------------- MLPs

def _cem_width(m: "ModelConfig") -> int:
    return m.d_mlp


def _matched_width(m: "ModelConfig") -> int:
    return int(round(m.d_mlp * m.param_match_factor))


def _gated_params(m: "ModelConfig") -> int:
    return 3 * m.d_model * m.d_mlp


def _cem_mlp(width):  # noqa: ANN001, ANN202 - (ModelConfig -> int) -> (params, flops) of a CEM MLP of that width
    def params(m: "ModelConfig") -> int:
        return 2 * m.d_model * width(m) + precond_spec(m.mlp_precond, "model.mlp_precond").params(
            1, m.d_model, m.mlp_precond_rank)

    def flops(m: "ModelConfig", seq_len: int) -> tuple[int, int]:
        per_step = 4 * m.d_model * width(m) + precond_spec(m.mlp_precond, "model.mlp_precond").mlp_flops(m)
        return 2 * m.d_model * width(m) + m.mlp_steps * per_step, 0  # gamma = W h once; V u and V^T g per step

    return params, flops


_NO_CEM_MLP = {"model.mlp_precond": ("identity",)}
for _spec in (  # type: ignore[assignment]
    MlpSpec("llama", "cem_core.model.mlp:LlamaMLP", "gated SiLU MLP (the Llama baseline)", label="gated MLP",
            family="baseline", params=_gated_params, flops=lambda m, L: (6 * m.d_model * m.d_mlp, 0),
            width=_cem_width, requires={**_NO_CEM_MLP, "model.mlp_steps": (1,)}),
    MlpSpec("cem", "cem_core.model.mlp:CEMMLP", "T gradient steps on the element-wise energy (2/3 of the parameters)",
            label="CEM MLP", family="cem", recurses=True, params=_cem_mlp(_cem_width)[0],
            flops=_cem_mlp(_cem_width)[1], width=_cem_width,
            uses=("mlp_steps", "mlp_step_size", "mlp_precond", "mlp_precond_rank")),
    MlpSpec("cem_param_matched", "cem_core.model.mlp:CEMMLP",
            "the CEM MLP with width x model.param_match_factor (the gated MLP's parameters)",
            label="CEM MLP, param-matched", family="cem", recurses=True, params=_cem_mlp(_matched_width)[0],
            flops=_cem_mlp(_matched_width)[1], width=_matched_width,
            uses=("mlp_steps", "mlp_step_size", "mlp_precond", "mlp_precond_rank", "param_match_factor")),
    MlpSpec("reuse", "cem_core.model.mlp:ReuseMLP", "the gated MLP sublayer applied T times (plain reuse)",
            label="gated MLP reused", family="reuse", reuses=True, params=_gated_params,
            flops=lambda m, L: (m.mlp_steps * 6 * m.d_model * m.d_mlp, 0), width=_cem_width,
            uses=("mlp_steps",), requires=_NO_CEM_MLP),
):
    MLPS.register_spec(_spec)


# ---------------------------------------------------------------------------------------------- tasks

# The counts build on the specs above (cem_core.counts imports this module), so a task names its counts lazily.
for _spec in (  # type: ignore[assignment]
    TaskSpec("lm", "cem_core.train.tasks:LMTask", "language modelling", counts="cem_core.counts:lm_task_counts"),
    TaskSpec("gp", "cem_core.gp.task:GPTask", "the synthetic Gaussian-process regression study",
             counts="cem_core.gp.counts:gp_task_counts",
             unit="examples", metric="test_rmse", token_budget=False, uses_corpus=False, recursion_eval=False,
             requires={"model.attention": ("llama",), "model.kq_diagonal": ("none",), "model.attn_steps": (1,)}),
):
    TASKS.register_spec(_spec)


# ---------------------------------------------------------------------------------------------- plain choices

KQ_DIAGONALS: Registry = Registry("KQ diagonal", "model.kq_diagonal")
KQ_DIAGONALS.add("none", "none", "A_k = W_Q[k]^T W_K[k]")
KQ_DIAGONALS.add("shared", "shared", "one diagonal for all heads (one extra [B, L, L] score matrix per step)")
KQ_DIAGONALS.add("per_head", "per_head", "one diagonal per head")

CEM_POSITIONS: Registry = Registry("CEM position encoding", "model.cem_position")
CEM_POSITIONS.add("alibi", "alibi", "ALiBi distance penalty + learned self / non-self biases per head")
CEM_POSITIONS.add("none", "none", "causal mask only")

CEM_STARTS: Registry = Registry("CEM attention start", "model.attn_start")
CEM_STARTS.add("h", "h", "x_0 = h: the residual stream (T=1 is the pre-norm residual block)")
CEM_STARTS.add("norm", "norm", "x_0 = RMSNorm(h): Algorithm 1's 'x_i <- n_i' read literally")

GP_KERNELS: Registry = Registry("GP kernel", "gp.kernel")
GP_KERNELS.register_lazy("rbf", "cem_core.gp.data:rbf_kernel", "stationary RBF kernel")
GP_KERNELS.register_lazy("gibbs", "cem_core.gp.data:gibbs_kernel", "non-stationary Gibbs kernel (input-dependent lengthscale)")

CORPORA: Registry = Registry("corpus", "data.corpus")
CORPORA.register_lazy("builtin", "cem_core.data.sources:builtin_source", "English prose shipped with CPython (offline)")
CORPORA.register_lazy("jsonl", "cem_core.data.sources:jsonl_source", "one local JSONL file (data.path)")
CORPORA.register_lazy("files", "cem_core.data.sources:files_source",
                      "local JSON-lines / Parquet / text files matching a glob (data.path)")
CORPORA.register_lazy("slimpajama", "cem_core.data.sources:slimpajama_source",
                      "SlimPajama-627B streamed from the Hugging Face hub (data.hf_dataset)")

TOKENIZERS: Registry = Registry("tokenizer", "data.tokenizer")
TOKENIZERS.register_lazy("byte", "cem_core.data.tokenizer:byte_tokenizer", "256 bytes + end-of-document (vocab 257)")
TOKENIZERS.register_lazy("bpe", "cem_core.data.tokenizer:bpe_tokenizer", "byte-level BPE trained on the corpus (data.bpe_vocab_size)")
TOKENIZERS.register_lazy("hf", "cem_core.data.tokenizer:hf_tokenizer",
                         "a Hugging Face tokenizer: data.tokenizer_path (local file) or data.hf_tokenizer")

PRECISIONS: Registry = Registry("precision", "train.precision")
PRECISIONS.add("auto", "auto", "bf16 autocast on CUDA, fp32 on the CPU")
PRECISIONS.add("fp32", "fp32", "float32 everywhere")
PRECISIONS.add("bf16", "bf16", "bf16 autocast everywhere")

COMPILE_MODES: Registry = Registry("compile mode", "train.compile")
COMPILE_MODES.add("auto", "auto", "torch.compile on CUDA, eager on the CPU")
COMPILE_MODES.add("on", "on", "torch.compile (eager fallback with a logged reason)")
COMPILE_MODES.add("off", "off", "eager")
