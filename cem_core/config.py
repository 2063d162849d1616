"""Typed run configuration: defaults < grid file < command line (`cemctl plan`, `cemctl launch`).

A run is fully described by a `RunConfig` (model, data, train). This module is
torch-free so the CLI can plan and hash runs without importing torch.

- `RunConfig.from_dict(d)` builds a config from nested or dotted keys, rejecting
  unknown keys and wrong types with a `ConfigError` naming the dotted key.
- `validate(cfg)` is the one place every value and combination is checked.
- `resolve(cfg)` fills what is derived (dims from `model.size`, vocab from the
  tokenizer, the token budget) and validates; the resolved config is what is
  saved with a run and hashed into its id (`run_id`).
- `load_run_config(path)`: a saved config.json (`cem_core.runfiles.saved_config`, the one reader).

The types themselves live in `cem_core.schema` (re-exported here), below the variant specs,
the counts and the run files, so that none of them imports this module's behaviour.
"""

from __future__ import annotations

import dataclasses
import math

from cem_core import variants as V  # every named choice: one registry each (torch-free)
from cem_core.counts import baseline_params
from cem_core.errors import ConfigError
from cem_core.identity import config_hash
from cem_core.plugins import load_plugins
from cem_core.runfiles.saved_config import read_config_file
from cem_core.schema import (  # the plain types and dict helpers (re-exported: `from cem_core.config import ...`)
    DataConfig,
    GPConfig,
    ModelConfig,
    RunConfig,
    TrainConfig,
    canonical_json,
    deep_merge,
    field_names,
    flatten,
    nest,
)
from cem_core.sizes import SIZES
from cem_core.spec import check_rules

__all__ = [
    "BYTE_VOCAB_SIZE", "LLAMA_VOCAB_SIZE", "DataConfig", "GPConfig", "ModelConfig", "RunConfig", "TrainConfig",
    "canonical_json", "deep_merge", "energy_layers", "field_names", "flatten", "load_run_config", "nest", "resolve",
    "run_id", "saved_run_id", "tokenizer_vocab_size", "tokens_per_step", "total_steps", "validate",
]

BYTE_VOCAB_SIZE = 257  # 256 bytes + end-of-document
LLAMA_VOCAB_SIZE = 32000


def _positive(key: str, value: float, *, allow_zero: bool = False) -> None:
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(key, f"must be {'>= 0' if allow_zero else '> 0'}, got {value}", value=value)


def validate(cfg: RunConfig) -> RunConfig:
    """Check every value and combination; raises `ConfigError` on the first problem."""
    if cfg.plugins:  # their variants must be registered before the names are checked
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


def run_id(cfg: RunConfig) -> str:
    """Content hash of the resolved config: the run's identity (12 hex chars), stable across releases
    (`cem_core.identity`: fields added since 0.2.0 count only when set away from their default)."""
    return config_hash(flatten(resolve(cfg).to_dict()))


def saved_run_id(cfg: RunConfig) -> str:
    """The run id of a config as a run's files saved it (plan saves it resolved), read without running any code
    from elsewhere: a config that names plugins is hashed as saved (`resolve` would import them, and a run folder or
    an archive is data); any other is resolved, which validates it too. Equal to `run_id` for every config plan
    saved."""
    return config_hash(flatten(cfg.to_dict())) if cfg.plugins else run_id(cfg)


def load_run_config(path: str) -> RunConfig:
    """Read a saved config.json (a run directory's, or any file) back into a RunConfig (not resolved).

    The one reader of config.json (`cem_core.runfiles.saved_config`): only a regular file is read (never
    blocking on a FIFO, never past the size cap); bad JSON, a non-object or any key or type a RunConfig does
    not have raises one `ConfigError` line naming the file.
    """
    return read_config_file(path).config
