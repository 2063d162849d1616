"""Typed run configuration: defaults < grid file < command line (`cemctl plan`, `cemctl launch`).

A run is fully described by a `RunConfig` (model, data, train). This module is
torch-free so the CLI can plan and hash runs without importing torch.

- `RunConfig.from_dict(d)` builds a config from nested or dotted keys, rejecting
  unknown keys and wrong types with a `ConfigError` naming the dotted key.
- `validate(cfg)` is the one place every value and combination is checked.
- `resolve(cfg)` fills what is derived (dims from `model.size`, vocab from the
  tokenizer, the token budget) and validates; the resolved config is what is
  saved with a run and hashed into its id (`run_id`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field, fields
from typing import Any

from cem_core.errors import ConfigError
from cem_core.sizes import SIZES
from cem_core.spec import check_rules

from cem_core import variants as V  # every named choice: one registry each (torch-free)

BYTE_VOCAB_SIZE = 257  # 256 bytes + end-of-document
LLAMA_VOCAB_SIZE = 32000


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


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dict to dotted keys."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out.update(flatten(v, key))
        else:
            out[key] = v
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
        from cem_core.plugins import canonical

        d["plugins"] = canonical(d["plugins"])
    return d


def _build(klass: type, d: Any, prefix: str) -> Any:
    """Typed config from nested plain data by the one converter's strict rules (`cem_core.convert`)."""
    from cem_core.convert import from_plain

    return from_plain(klass, _normalized(d), prefix=prefix)


def _positive(key: str, value: float, *, allow_zero: bool = False) -> None:
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(key, f"must be {'>= 0' if allow_zero else '> 0'}, got {value}", value=value)


def validate(cfg: RunConfig) -> RunConfig:
    """Check every value and combination; raises `ConfigError` on the first problem."""
    if cfg.plugins:  # their variants must be registered before the names are checked
        from cem_core.plugins import load_plugins

        load_plugins(cfg.plugins)
    V.TASKS.check(cfg.task)
    m, dt, t = cfg.model, cfg.data, cfg.train
    if m.size not in SIZES:
        raise ConfigError("model.size", f"unknown size {m.size!r}", value=m.size, allowed=tuple(SIZES))
    V.ATTENTION.check(m.attention)
    V.MLPS.check(m.mlp)
    V.PRECONDITIONERS.check(m.attn_precond, key="model.attn_precond")
    V.PRECONDITIONERS.check(m.mlp_precond, key="model.mlp_precond")
    V.KQ_DIAGONALS.check(m.kq_diagonal)
    V.CEM_POSITIONS.check(m.cem_position)
    V.CEM_STARTS.check(m.attn_start)
    for key in ("d_model", "n_layers", "n_heads", "d_mlp", "context_len", "vocab_size"):
        value = getattr(m, key)
        if value < 0:
            raise ConfigError(f"model.{key}", f"must be >= 0 (0 means from size/tokenizer), got {value}", value=value)
        if value > 1_000_000:
            raise ConfigError(f"model.{key}", f"is implausibly large ({value})", value=value)
    for key in ("attn_steps", "mlp_steps"):
        value = getattr(m, key)
        if not 1 <= value <= 64:
            raise ConfigError(f"model.{key}", f"must be between 1 and 64, got {value}", value=value)
    for key in ("attn_step_size", "mlp_step_size", "rope_theta", "norm_eps", "init_std", "param_match_factor"):
        _positive(f"model.{key}", getattr(m, key))
    for key in ("attn_precond_rank", "mlp_precond_rank"):
        if not 1 <= getattr(m, key) <= 4096:
            raise ConfigError(f"model.{key}", f"must be between 1 and 4096, got {getattr(m, key)}")
    d_model = m.d_model or SIZES[m.size].d_model
    n_heads = m.n_heads or SIZES[m.size].n_heads
    if d_model % n_heads:
        raise ConfigError("model.n_heads", f"must divide model.d_model={d_model}, got {n_heads}", value=n_heads)
    # Combinations: each chosen variant's rules (its spec in cem_core.variants: the values other keys must have)
    flat = flatten(dataclasses.asdict(m), "model")
    for registry, name in ((V.ATTENTION, m.attention), (V.MLPS, m.mlp)):
        check_rules(registry.spec(name), flat, f"{registry.key}={name!r}")
    # Data
    V.CORPORA.check(dt.corpus)
    V.TOKENIZERS.check(dt.tokenizer)
    if dt.tokenizer_path and dt.tokenizer != "hf":
        raise ConfigError("data.tokenizer_path", f"needs data.tokenizer='hf' (got {dt.tokenizer!r})", allowed=("hf",))
    if dt.corpus in ("jsonl", "files") and not dt.path:
        raise ConfigError("data.path", f"is required when data.corpus={dt.corpus!r}"
                          + (" (a glob of .jsonl / .parquet / .txt files)" if dt.corpus == "files" else ""))
    if not 256 < dt.bpe_vocab_size <= 1_000_000:
        raise ConfigError("data.bpe_vocab_size", f"must be in (256, 1000000], got {dt.bpe_vocab_size}")
    if ".." in dt.cache_dir.split("/") and dt.cache_dir:
        raise ConfigError("data.cache_dir", "must not contain '..'", value=dt.cache_dir)
    # Train
    V.PRECISIONS.check(t.precision)
    V.COMPILE_MODES.check(t.compile)
    for key in ("lr", "adam_eps", "tokens_per_param"):
        _positive(f"train.{key}", getattr(t, key))
    for key in ("beta1", "beta2"):
        if not 0 <= getattr(t, key) < 1:
            raise ConfigError(f"train.{key}", f"must be in [0, 1), got {getattr(t, key)}")
    for key in ("weight_decay", "grad_clip"):
        _positive(f"train.{key}", getattr(t, key), allow_zero=True)
    for key in ("warmup_frac", "final_lr_frac"):
        if not 0 <= getattr(t, key) <= 1:
            raise ConfigError(f"train.{key}", f"must be in [0, 1], got {getattr(t, key)}")
    for key in ("batch_seqs", "micro_batch_seqs", "val_tokens", "test_tokens", "ckpt_keep", "log_every_steps"):
        if getattr(t, key) < 1:
            raise ConfigError(f"train.{key}", f"must be >= 1, got {getattr(t, key)}")
    for key in ("max_tokens", "max_steps", "eval_every_steps", "ckpt_every_steps", "seed"):
        if getattr(t, key) < 0:
            raise ConfigError(f"train.{key}", f"must be >= 0, got {getattr(t, key)}")
    if t.batch_seqs % t.micro_batch_seqs:
        raise ConfigError("train.batch_seqs", f"must be a multiple of train.micro_batch_seqs={t.micro_batch_seqs}, got {t.batch_seqs}")
    if not (t.system_every_s == 0 or 0.01 <= t.system_every_s <= 86400):
        raise ConfigError("train.system_every_s", f"must be 0 (off) or between 0.01 and 86400 seconds, got {t.system_every_s}")
    energy_layers(cfg)  # raises on a malformed train.energy_layers
    # GP study
    g = cfg.gp
    V.GP_KERNELS.check(g.kernel)
    for key in ("input_dim", "n_train", "n_test"):
        if not 1 <= getattr(g, key) <= 100_000:
            raise ConfigError(f"gp.{key}", f"must be between 1 and 100000, got {getattr(g, key)}")
    _positive("gp.lengthscale", g.lengthscale)
    _positive("gp.noise_std", g.noise_std, allow_zero=True)
    _positive("gp.data_seed", g.data_seed, allow_zero=True)
    task = V.TASKS.spec(cfg.task)
    check_rules(task, {**flat, "task": cfg.task}, f"task={cfg.task!r}")
    if not task.token_budget and t.max_steps == 0:
        raise ConfigError("train.max_steps", f"must be set (> 0) for task={cfg.task!r} (there is no token budget)")
    return cfg


# ---------------------------------------------------------------------------
# Resolution


def tokenizer_vocab_size(data: DataConfig) -> int:
    if data.tokenizer == "byte":
        return BYTE_VOCAB_SIZE
    if data.tokenizer == "bpe":
        return data.bpe_vocab_size
    return LLAMA_VOCAB_SIZE


def resolve(cfg: RunConfig) -> RunConfig:
    """Validate, then fill derived values. Idempotent: resolve(resolve(c)) == resolve(c)."""
    validate(cfg)
    m = cfg.model
    preset = SIZES[m.size]
    m = dataclasses.replace(
        m,
        d_model=m.d_model or preset.d_model,
        n_layers=m.n_layers or preset.n_layers,
        n_heads=m.n_heads or preset.n_heads,
        d_mlp=m.d_mlp or preset.d_mlp,
        context_len=m.context_len or preset.context_len,
        vocab_size=m.vocab_size or tokenizer_vocab_size(cfg.data),
    )
    t = cfg.train
    if t.max_steps == 0 and t.max_tokens == 0:
        from cem_core.counts import baseline_params

        budget = int(round(t.tokens_per_param * baseline_params(m)))
        t = dataclasses.replace(t, max_tokens=budget)
    cfg = dataclasses.replace(cfg, model=m, train=t)
    validate(cfg)
    return cfg


def total_steps(cfg: RunConfig) -> int:
    """Optimizer steps of a resolved config (max_steps wins over max_tokens)."""
    t = cfg.train
    if t.max_steps:
        return t.max_steps
    tokens_per_step = t.batch_seqs * cfg.model.context_len
    return max(1, math.ceil(t.max_tokens / tokens_per_step))


def tokens_per_step(cfg: RunConfig) -> int:
    return cfg.train.batch_seqs * cfg.model.context_len


def energy_layers(cfg: RunConfig) -> list[int]:
    """Layer indices whose CEM sublayers log energies (`train.energy_layers`)."""
    spec = cfg.train.energy_layers.strip()
    n_layers = cfg.model.n_layers or SIZES[cfg.model.size].n_layers
    if not spec:
        return []
    if spec == "all":
        return list(range(n_layers))
    try:
        layers = sorted({int(p) for p in spec.split(",")})
    except ValueError:
        raise ConfigError("train.energy_layers", f"must be '', 'all' or comma-separated layer indices, got {spec!r}") from None
    if layers[0] < 0 or layers[-1] >= n_layers:
        raise ConfigError("train.energy_layers", f"layer indices must be in [0, {n_layers - 1}], got {spec!r}")
    return layers


def canonical_json(d: dict[str, Any]) -> str:
    return json.dumps(d, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def run_id(cfg: RunConfig) -> str:
    """Content hash of the resolved config: the run's identity (12 hex chars), stable across releases
    (`cem_core.identity`: fields added since 0.2.0 count only when set away from their default)."""
    from cem_core.identity import config_hash

    return config_hash(flatten(resolve(cfg).to_dict()))


def load_run_config(path: str) -> RunConfig:
    """Read a saved config.json (a run directory's) back into a RunConfig.

    Only a regular file is read (never blocking on a FIFO, never past the size cap);
    anything else, bad JSON or a non-object raises `ConfigError` naming the file.
    """
    from cem_core.runfiles.files import RunFileError, read_bytes

    try:
        d = json.loads(read_bytes(path))
    except RunFileError as e:
        raise ConfigError("config.json", str(e).split(": ", 1)[-1], source=path) from None
    except ValueError as e:
        raise ConfigError("config.json", f"is not valid JSON ({e})", source=path) from None
    if not isinstance(d, dict):
        raise ConfigError("config.json", f"must be a JSON object, got {type(d).__name__}", source=path)
    try:
        return RunConfig.from_dict(d)
    except ConfigError as e:
        raise e.with_source(path) from None
