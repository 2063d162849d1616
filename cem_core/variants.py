"""Every named choice of a run's config, in one place (`cemctl plan` validates with them, torch-free).

Each is a `cem_core.registry.Registry` whose entries point lazily at their
implementation ("module:attribute"), so listing and validating names never
imports torch; `get(name)` imports the implementation when a run is built.
`cem_core.config.validate` checks every choice through these registries, and
error messages list the registered names.
"""

from __future__ import annotations

from cem_core.registry import Registry

ATTENTION: Registry = Registry("attention", "model.attention")
ATTENTION.register_lazy("llama", "cem_core.model.attention:LlamaAttention",
                        "multi-head attention with RoPE (the Llama baseline)")
ATTENTION.register_lazy("cem", "cem_core.model.attention:CEMAttention",
                        "T gradient steps on the interaction energy (W_V = W_K, W_O = W_Q^T)")
ATTENTION.register_lazy("reuse", "cem_core.model.attention:ReuseAttention",
                        "the Llama attention sublayer applied T times (plain reuse)")

MLPS: Registry = Registry("MLP", "model.mlp")
MLPS.register_lazy("llama", "cem_core.model.mlp:LlamaMLP", "gated SiLU MLP (the Llama baseline)")
MLPS.register_lazy("cem", "cem_core.model.mlp:CEMMLP", "T gradient steps on the element-wise energy (2/3 of the parameters)")
MLPS.register_lazy("cem_param_matched", "cem_core.model.mlp:CEMMLP",
                   "the CEM MLP with width x model.param_match_factor (the gated MLP's parameters)")
MLPS.register_lazy("reuse", "cem_core.model.mlp:ReuseMLP", "the gated MLP sublayer applied T times (plain reuse)")

PRECONDITIONERS: Registry = Registry("preconditioner", "model.attn_precond")
PRECONDITIONERS.register_lazy("identity", "cem_core.model.precond:Preconditioner", "P = I")
PRECONDITIONERS.register_lazy("diag", "cem_core.model.precond:DiagPreconditioner", "P = diag(softplus(d))")
PRECONDITIONERS.register_lazy("diag_lowrank", "cem_core.model.precond:DiagLowRankPreconditioner",
                              "P = diag(softplus(d)) + U V^T + V U^T")

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

TASKS: Registry = Registry("task", "task")
TASKS.register_lazy("lm", "cem_core.train.tasks:LMTask", "language modelling")
TASKS.register_lazy("gp", "cem_core.gp.task:GPTask", "the synthetic Gaussian-process regression study")

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
