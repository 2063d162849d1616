"""Run identity: which config values a run's id hashes, so that ids stay the same across releases.

    run_id(cfg) == config_hash(flatten(resolve(cfg).to_dict()))   # cem_core.config.run_id

A run's id (12 hex of the sha256 of canonical JSON) is what a relaunch compares: a run
whose id has a result never trains again. The scheme is frozen at release 0.2.0:

- `V1_DEFAULTS`: every field 0.2.0 had, with its default. All of them are hashed, as
  0.2.0 hashed them, so every id 0.2.0 computed is computed again (tests pin 61 of them).
- `ADDED_FIELDS`: every field added since, with the value that leaves ids unchanged
  (its default). A field at that value is left out of the hash, so an upgrade that adds
  a field never orphans a finished run; set to anything else, it is hashed and the run
  is a new one, as it should be.
- Defaults never change (tests compare every default with these tables): a new
  behaviour gets a new value, chosen explicitly in a grid, never a silent change of
  what old runs would compute.

Adding a field: give it a default that reproduces the old behaviour, add it to
`ADDED_FIELDS` with that value. Torch-free.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping

# The fields of release 0.2.0 and their defaults (frozen: never edit).
V1_DEFAULTS: dict[str, Any] = {
    'task': 'lm',
    'model.size': 'micro',
    'model.d_model': 0,
    'model.n_layers': 0,
    'model.n_heads': 0,
    'model.d_mlp': 0,
    'model.context_len': 0,
    'model.vocab_size': 0,
    'model.attention': 'llama',
    'model.mlp': 'llama',
    'model.attn_steps': 1,
    'model.mlp_steps': 1,
    'model.attn_step_size': 1.0,
    'model.mlp_step_size': 1.0,
    'model.attn_precond': 'identity',
    'model.mlp_precond': 'identity',
    'model.attn_precond_rank': 4,
    'model.mlp_precond_rank': 16,
    'model.kq_diagonal': 'none',
    'model.cem_position': 'alibi',
    'model.param_match_factor': 1.5,
    'model.rope_theta': 10000.0,
    'model.norm_eps': 1e-06,
    'model.init_std': 0.02,
    'data.corpus': 'builtin',
    'data.path': '',
    'data.hf_dataset': 'gmongaras/SlimPajama-627B_Reupload',
    'data.tokenizer': 'bpe',
    'data.bpe_vocab_size': 4096,
    'data.hf_tokenizer': 'hf-internal-testing/llama-tokenizer',
    'data.tokenizer_path': '',
    'data.cache_dir': '',
    'train.lr': 0.002,
    'train.beta1': 0.9,
    'train.beta2': 0.95,
    'train.adam_eps': 1e-09,
    'train.weight_decay': 0.1,
    'train.decay_cem_extras': False,
    'train.grad_clip': 1.0,
    'train.warmup_frac': 0.05,
    'train.final_lr_frac': 0.1,
    'train.batch_seqs': 128,
    'train.micro_batch_seqs': 8,
    'train.tokens_per_param': 20.0,
    'train.max_tokens': 0,
    'train.max_steps': 0,
    'train.eval_every_steps': 0,
    'train.val_tokens': 65536,
    'train.test_tokens': 262144,
    'train.ckpt_every_steps': 0,
    'train.ckpt_keep': 2,
    'train.log_every_steps': 1,
    'train.seed': 0,
    'train.compile': 'auto',
    'train.activation_checkpointing': False,
    'train.precision': 'auto',
    'train.energy_layers': '',
    'gp.kernel': 'rbf',
    'gp.input_dim': 10,
    'gp.n_train': 2048,
    'gp.n_test': 512,
    'gp.lengthscale': 2.0,
    'gp.noise_std': 0.05,
    'gp.data_seed': 0,
}

# Fields added since 0.2.0: dotted key -> the value at which the field is left out of the hash.
ADDED_FIELDS: dict[str, Any] = {
    "model.attn_start": "h",  # 0.3: CEM attention may start at RMSNorm(h) (the T=2 ablation)
    "plugins": "",  # 0.3: plugin modules that register variants (cem_core.plugins)
    "train.system_every_s": 30.0,  # 0.3: the interval of the trainer's system samples (metrics kind "system")
}


def identity_items(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The (dotted key, value) pairs a run's id hashes: every field but the added ones at their neutral value."""
    return {k: v for k, v in flat.items() if not (k in ADDED_FIELDS and v == ADDED_FIELDS[k])}


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def config_hash(flat: Mapping[str, Any]) -> str:
    """12 hex characters of the sha256 of the canonical JSON of the identity items (nested as the config is)."""
    text = json.dumps(_nest(identity_items(flat)), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dict to dotted keys (a config's items, as run ids and arms hash them)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else k
        if not isinstance(v, dict):
            out[key] = v
            continue
        for k2, v2 in v.items():  # a config's section (one level deeper only where there is one)
            if isinstance(v2, dict):
                out.update(flatten(v2, f"{key}.{k2}"))
            else:
                out[f"{key}.{k2}"] = v2
    return out
