"""What every config key is: its type, default, allowed values or range, meaning and the variants that read it
(`cemctl keys`, the field catalogue of `cemctl.records`, error suggestions).

    key_docs()               -> [KeyDoc(key="model.attn_steps", kind="int", default=1, allowed="1..64", ...), ...]
    documented_keys()        -> ["model.attention", ...]: the keys that have an entry here

Types and defaults come from the config dataclasses, allowed names from the registries
(`cem_core.variants`; a plugin's names too once it is loaded), the variants that read a
key from the specs' `uses`; the meaning and the range are written here, once. The tests
check that every key the dataclasses accept has an entry here (and no other), and that
each range is the one `cem_core.config.validate` enforces (a value at each bound is
accepted, one beyond it refused), so this page cannot fall behind the code. Torch-free.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any

from cem_core import variants as V
from cem_core.config import DataConfig, GPConfig, ModelConfig, RunConfig, TrainConfig
from cem_core.sizes import SIZES

# key -> (meaning, range of a number or "" (names come from the registries), unit)
_DOCS: dict[str, tuple[str, str, str]] = {
    "task": ("what is trained: language modelling, or the synthetic GP regression study", "", ""),
    "plugins": ("plugin modules imported before the names are checked (comma-separated)", "", ""),
    "model.size": ("a size preset: sets d_model, n_layers, n_heads, d_mlp and context_len (cem_core.sizes)", "", ""),
    "model.d_model": ("residual stream width (0: from model.size)", "0..1000000", ""),
    "model.n_layers": ("number of layers (0: from model.size)", "0..1000000", ""),
    "model.n_heads": ("attention heads; must divide d_model (0: from model.size)", "0..1000000", ""),
    "model.d_mlp": ("MLP hidden width (0: from model.size)", "0..1000000", ""),
    "model.context_len": ("sequence length in tokens (0: from model.size)", "0..1000000", "tokens"),
    "model.vocab_size": ("vocabulary size (0: from the tokenizer)", "0..1000000", ""),
    "model.attention": ("the attention sublayer", "", ""),
    "model.mlp": ("the MLP sublayer", "", ""),
    "model.attn_steps": ("recursion steps T of the attention sublayer (gradient steps on its energy)", "1..64", ""),
    "model.mlp_steps": ("recursion steps T of the MLP sublayer", "1..64", ""),
    "model.attn_step_size": ("step size eta of each attention recursion step", "> 0", ""),
    "model.mlp_step_size": ("step size eta of each MLP recursion step", "> 0", ""),
    "model.attn_precond": ("the learned preconditioner of the attention steps", "", ""),
    "model.mlp_precond": ("the learned preconditioner of the MLP steps", "", ""),
    "model.attn_precond_rank": ("rank of the low-rank part of a diag+low-rank attention preconditioner", "1..4096", ""),
    "model.mlp_precond_rank": ("rank of the low-rank part of a diag+low-rank MLP preconditioner", "1..4096", ""),
    "model.kq_diagonal": ("the KQ diagonal term of CEM attention", "", ""),
    "model.cem_position": ("the position encoding of CEM attention", "", ""),
    "model.attn_start": ("where CEM attention's descent starts (x_0)", "", ""),
    "model.param_match_factor": ("width multiplier of the parameter-matched CEM MLP", "> 0", ""),
    "model.rope_theta": ("RoPE base of the Llama attention", "> 0", ""),
    "model.norm_eps": ("epsilon of RMSNorm", "> 0", ""),
    "model.init_std": ("standard deviation of the weight initialisation", "> 0", ""),
    "data.corpus": ("where the text comes from", "", ""),
    "data.path": ("a local file (corpus=jsonl) or a glob of .jsonl/.parquet/.txt files (corpus=files)", "", ""),
    "data.hf_dataset": ("the Hugging Face dataset (corpus=hf)", "", ""),
    "data.tokenizer": ("the tokenizer", "", ""),
    "data.bpe_vocab_size": ("vocabulary size of the BPE tokenizer trained on the corpus", "257..1000000", ""),
    "data.hf_tokenizer": ("the Hugging Face tokenizer (tokenizer=hf)", "", ""),
    "data.tokenizer_path": ("a local tokenizer file (tokenizer=hf)", "", ""),
    "data.cache_dir": ("the tokenized-corpus cache ('': ~/.cache/cemctl or $CEMCTL_CACHE)", "", ""),
    "train.lr": ("peak learning rate (AdamW)", "> 0", ""),
    "train.beta1": ("AdamW beta1", "[0, 1)", ""),
    "train.beta2": ("AdamW beta2", "[0, 1)", ""),
    "train.adam_eps": ("AdamW epsilon", "> 0", ""),
    "train.weight_decay": ("AdamW weight decay on projection matrices and the output head", ">= 0", ""),
    "train.decay_cem_extras": ("also decay KQ diagonals, preconditioners and position biases", "", ""),
    "train.grad_clip": ("gradient-norm clipping (0: off)", ">= 0", ""),
    "train.warmup_frac": ("fraction of the steps spent warming the learning rate up", "[0, 1]", ""),
    "train.final_lr_frac": ("final learning rate as a fraction of the peak (cosine decay)", "[0, 1]", ""),
    "train.batch_seqs": ("effective batch in sequences (all devices, all micro-steps)", ">= 1", "sequences"),
    "train.micro_batch_seqs": ("sequences per device per forward pass; must divide batch_seqs", ">= 1", "sequences"),
    "train.tokens_per_param": ("Chinchilla budget: tokens per parameter of the same-dims Llama", "> 0", ""),
    "train.max_tokens": ("explicit token budget (0: Chinchilla)", ">= 0", "tokens"),
    "train.max_steps": ("explicit step budget; wins over tokens when > 0", ">= 0", "steps"),
    "train.eval_every_steps": ("validation every N steps (0: 10 evaluations per run)", ">= 0", "steps"),
    "train.val_tokens": ("validation tokens per evaluation", ">= 1", "tokens"),
    "train.test_tokens": ("fixed held-out tokens of the test perplexity", ">= 1", "tokens"),
    "train.ckpt_every_steps": ("checkpoint every N steps (0: 10 per run)", ">= 0", "steps"),
    "train.ckpt_keep": ("checkpoints kept", ">= 1", ""),
    "train.log_every_steps": ("a metrics line every N steps", ">= 1", "steps"),
    "train.seed": ("random seed (a nuisance key: runs differing only in it form one arm)", ">= 0", ""),
    "train.compile": ("torch.compile: auto (on CUDA, eager fallback), on or off", "", ""),
    "train.activation_checkpointing": ("recompute each block's activations in the backward pass", "", ""),
    "train.precision": ("auto (bf16 autocast on CUDA, fp32 on CPU), bf16 or fp32", "", ""),
    "train.system_every_s": ("sample CPU/GPU use and memory every N seconds into metrics.jsonl (0: off)",
                             "", "s"),
    "train.energy_layers": ("energy diagnostics at each evaluation: '' off, 'all', or layer indices '0,3'", "", ""),
    "gp.kernel": ("the GP kernel (task=gp)", "", ""),
    "gp.input_dim": ("input dimension of the GP regression (task=gp)", "1..100000", ""),
    "gp.n_train": ("training examples (task=gp)", "1..100000", "examples"),
    "gp.n_test": ("test examples (task=gp)", "1..100000", "examples"),
    "gp.lengthscale": ("kernel lengthscale (task=gp)", "> 0", ""),
    "gp.noise_std": ("observation noise standard deviation (task=gp)", ">= 0", ""),
    "gp.data_seed": ("seed of the GP sample, fixed across model seeds (task=gp)", ">= 0", ""),
}


@dataclass(frozen=True)
class KeyDoc:
    key: str
    kind: str  # int | float | str | bool
    default: Any
    help: str
    allowed: str  # "cem, llama, reuse" (registry names), "1..64", "> 0", "[0, 1)", or ""
    unit: str = ""
    readers: tuple[str, ...] = ()  # "attention=cem": the variants whose spec reads the key ("" = every run)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _registries() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for reg in vars(V).values():
        if type(reg).__name__ == "Registry":
            out[reg.key] = reg
    out["model.mlp_precond"] = V.PRECONDITIONERS  # one registry serves both preconditioner keys
    return out


def _readers() -> dict[str, list[str]]:
    """key -> ["attention=cem", ...] from the variant specs' `uses`."""
    out: dict[str, list[str]] = {}
    for reg in (V.ATTENTION, V.MLPS, V.TASKS):
        for name in reg.names():
            try:
                spec = reg.spec(name)
            except Exception:  # noqa: BLE001 - a registered name without a spec
                continue
            for used in getattr(spec, "uses", ()) or ():
                key = used if "." in used else f"model.{used}"
                out.setdefault(key, []).append(f"{reg.key.split('.')[-1]}={name}")
    return out


def _sections() -> list[tuple[str, type]]:
    return [("", RunConfig), ("model", ModelConfig), ("data", DataConfig), ("train", TrainConfig), ("gp", GPConfig)]


def key_docs() -> list[KeyDoc]:
    """Every config key, in dataclass order (task, plugins, model.*, data.*, train.*, gp.*)."""
    regs, readers = _registries(), _readers()
    out: list[KeyDoc] = []
    for section, klass in _sections():
        hints = typing.get_type_hints(klass)
        for f in dataclasses.fields(klass):
            if dataclasses.is_dataclass(hints.get(f.name)):
                continue  # a section, not a key
            key = f"{section}.{f.name}" if section else f.name
            kind = getattr(hints.get(f.name), "__name__", "str")
            default = f.default if f.default is not dataclasses.MISSING else None
            help_, rng, unit = _DOCS.get(key, ("", "", ""))
            allowed = ", ".join(regs[key].names()) if key in regs else _sizes() if key == "model.size" else rng
            out.append(KeyDoc(key, kind, default, help_, allowed, unit, tuple(readers.get(key, ()))))
    return out


def _sizes() -> str:
    """The size presets (`cem_core.sizes.SIZES`), as a wrong value's error lists them."""
    return ", ".join(SIZES)


def documented_keys() -> list[str]:
    return list(_DOCS)
