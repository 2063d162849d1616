"""The run configuration's types: `RunConfig` (model, data, train, gp) and the dict helpers (`cem_core.config`).

    cfg = RunConfig.from_dict({"model.attention": "cem", "train": {"lr": 0.004}})  # strict: ConfigError
    cfg.override({"model.attn_steps": 2}); cfg.to_dict(); flatten(cfg.to_dict())

Plain data types only: building one checks keys and types (`cem_core.convert`), nothing
more. Whether the values go together, plugins, resolution and the run id are
`cem_core.config`'s (which re-exports every name here); the specs (`cem_core.spec`),
the counts and the run files (`cem_core.runfiles`, which reads config.json into a
`RunConfig`) are typed against these classes and import them from here, below
everything that checks or uses a config. Torch-free.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field, fields
from typing import Any

from cem_core.identity import flatten  # noqa: F401 - re-exported (the config's dotted items)
from cem_core.convert import from_plain
from cem_core.errors import ConfigError
from cem_core.plugin_context import canonical


@dataclass(frozen=True)
class ModelConfig:
    size: str = "micro"
    # Dims: 0 means "take it from `size`".
    d_model: int = 0
    n_layers: int = 0
    n_heads: int = 0
    d_mlp: int = 0
    context_len: int = 0
    vocab_size: int = 0  # 0 means "take it from the tokenizer"
    # Component swaps
    attention: str = "llama"
    mlp: str = "llama"
    # Recursion steps T and step sizes eta
    attn_steps: int = 1
    mlp_steps: int = 1
    attn_step_size: float = 1.0
    mlp_step_size: float = 1.0
    # CEM specifics
    attn_precond: str = "identity"
    mlp_precond: str = "identity"
    attn_precond_rank: int = 4
    mlp_precond_rank: int = 16
    kq_diagonal: str = "none"
    cem_position: str = "alibi"
    attn_start: str = "h"  # CEM attention's x_0: h (the residual stream) or norm (RMSNorm(h), Alg. 1 read literally)
    param_match_factor: float = 1.5  # width multiplier of cem_param_matched
    # Llama specifics and shared
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6
    init_std: float = 0.02


@dataclass(frozen=True)
class DataConfig:
    corpus: str = "builtin"
    path: str = ""  # corpus=jsonl: a local file; corpus=files: a glob of .jsonl / .parquet / .txt files
    hf_dataset: str = "gmongaras/SlimPajama-627B_Reupload"
    tokenizer: str = "bpe"
    bpe_vocab_size: int = 4096
    hf_tokenizer: str = "hf-internal-testing/llama-tokenizer"
    tokenizer_path: str = ""  # a local tokenizer file (HF tokenizer.json or SentencePiece .model) for tokenizer="hf"
    cache_dir: str = ""  # "" means the default cache (~/.cache/cemctl or $CEMCTL_CACHE)


@dataclass(frozen=True)
class TrainConfig:
    lr: float = 0.002
    beta1: float = 0.9
    beta2: float = 0.95
    adam_eps: float = 1e-9
    weight_decay: float = 0.1  # on projection matrices and the output head (cem_core/model/roles.py)
    decay_cem_extras: bool = False  # also decay KQ diagonals, preconditioners, position biases (paper: silent)
    grad_clip: float = 1.0
    warmup_frac: float = 0.05
    final_lr_frac: float = 0.1
    batch_seqs: int = 128  # effective batch in sequences (all devices, all micro-steps)
    micro_batch_seqs: int = 8  # per device per forward pass
    tokens_per_param: float = 20.0  # Chinchilla budget of the Llama baseline of the same dims
    max_tokens: int = 0  # explicit token budget; 0 means Chinchilla
    max_steps: int = 0  # explicit step budget; overrides tokens when > 0
    eval_every_steps: int = 0  # 0 means 10 evaluations per run
    val_tokens: int = 65536
    test_tokens: int = 262144  # fixed held-out tokens for test perplexity
    ckpt_every_steps: int = 0  # 0 means 10 checkpoints per run
    ckpt_keep: int = 2
    log_every_steps: int = 1
    seed: int = 0
    compile: str = "auto"  # auto: torch.compile on CUDA (eager fallback with a logged reason), eager on CPU; on | off
    activation_checkpointing: bool = False  # recompute each block's activations in backward (memory for time)
    precision: str = "auto"  # auto: bf16 autocast on CUDA, fp32 on CPU
    energy_layers: str = ""  # energy diagnostics at each evaluation: "" off, "all", or "0,3" (layer indices)
    system_every_s: float = 30.0  # CPU/GPU utilisation and memory sampled into metrics.jsonl every N s; 0: off


@dataclass(frozen=True)
class GPConfig:
    """The synthetic Gaussian-process regression study (task = "gp"; see cem_core/gp)."""

    kernel: str = "rbf"  # rbf | gibbs (non-stationary, input-dependent lengthscale)
    input_dim: int = 10
    n_train: int = 2048
    n_test: int = 512
    lengthscale: float = 2.0  # RBF lengthscale; the Gibbs kernel's base lengthscale
    noise_std: float = 0.05  # observation noise added to the sampled function
    data_seed: int = 0  # the GP sample (fixed across model seeds)


@dataclass(frozen=True)
class RunConfig:
    task: str = "lm"
    plugins: str = ""  # plugin modules to import first, comma-separated (cem_core.plugins)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    gp: GPConfig = field(default_factory=GPConfig)

    # -- construction -------------------------------------------------------
    @classmethod
    def from_dict(cls, d: dict[str, Any] | None = None) -> "RunConfig":
        """Build from nested (`{"model": {"attention": "cem"}}`) or dotted keys."""
        return _build(cls, nest(d or {}), prefix="")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def override(self, updates: dict[str, Any]) -> "RunConfig":
        """A copy with dotted or nested keys replaced (unknown keys rejected)."""
        merged = deep_merge(self.to_dict(), nest(updates))
        return RunConfig.from_dict(merged)


# ---------------------------------------------------------------------------
# Dict helpers


def nest(d: dict[str, Any]) -> dict[str, Any]:
    """Turn dotted keys ('model.attention') into nested dicts; nested input passes through."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(str(key), "keys must be non-empty strings")
        parts = key.split(".")
        node = out
        for i, part in enumerate(parts[:-1]):
            existing = node.setdefault(part, {})
            if not isinstance(existing, dict):
                raise ConfigError(".".join(parts[: i + 1]), "is a value, not a section")
            node = existing
        last = parts[-1]
        if isinstance(value, dict):
            value = nest(value)
            if isinstance(node.get(last), dict):
                value = deep_merge(node[last], value)
        node[last] = value
    return out


def deep_merge(base: dict[str, Any], updates: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in updates.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def field_names(section: str | None = None) -> list[str]:
    """Every addressable dotted key (for error messages and grid axes)."""
    names = ["task", "plugins"] if section is None else []
    for sec, klass in (("model", ModelConfig), ("data", DataConfig), ("train", TrainConfig), ("gp", GPConfig)):
        if section in (None, sec):
            names += [f"{sec}.{f.name}" for f in fields(klass)]
    return names


def _normalized(d: Any) -> Any:
    """The two keys with a friendlier spelling: `train.compile = true` reads as "on", `plugins` as a list or a
    comma-separated string reads as "a,b" (sorted, unique)."""
    if not isinstance(d, dict):
        return d
    d = dict(d)
    train = d.get("train")
    if isinstance(train, dict) and isinstance(train.get("compile"), bool):
        d["train"] = {**train, "compile": "on" if train["compile"] else "off"}
    if "plugins" in d:
        d["plugins"] = canonical(d["plugins"])
    return d


def _build(klass: type, d: Any, prefix: str) -> Any:
    """Typed config from nested plain data by the one converter's strict rules (`cem_core.convert`)."""
    return from_plain(klass, _normalized(d), prefix=prefix)


def canonical_json(d: dict[str, Any]) -> str:
    return json.dumps(d, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
