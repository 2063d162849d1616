"""The models `python -m bench` trains: ours (cem_core.model) and the Hugging Face reference Llama.

Both are trained by the same step function: forward to logits, the same
cross-entropy, backward, and the same `torch.optim.AdamW` (default foreach
implementation, one parameter group) so that only the model code differs.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from cem_core.config import ModelConfig, RunConfig, resolve

IMPLS = ("ours", "hf")


def model_config(size: str, **overrides: Any) -> ModelConfig:
    """Resolved ModelConfig of a named size (BPE-4096 vocab, the CPU default) with overrides."""
    updates = {"model.size": size, **{f"model.{k}": v for k, v in overrides.items()}}
    return resolve(RunConfig.from_dict(updates)).model


def build_ours(m: ModelConfig) -> nn.Module:
    from cem_core.model import build_model

    return build_model(m)


def hf_llama_config(m: ModelConfig) -> Any:
    """A `transformers.LlamaConfig` with our dims: untied, no biases, eps and theta as ours, SDPA."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=m.vocab_size,
        hidden_size=m.d_model,
        intermediate_size=m.d_mlp,
        num_hidden_layers=m.n_layers,
        num_attention_heads=m.n_heads,
        num_key_value_heads=m.n_heads,
        head_dim=m.d_model // m.n_heads,
        max_position_embeddings=m.context_len,
        rms_norm_eps=m.norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": m.rope_theta},
        tie_word_embeddings=False,
        attention_bias=False,
        mlp_bias=False,
        hidden_act="silu",
        use_cache=False,
        attn_implementation="sdpa",
    )


def build_hf(m: ModelConfig) -> nn.Module:
    if m.attention != "llama" or m.mlp != "llama":
        raise ValueError("the Hugging Face reference exists only for the Llama baseline")
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM(hf_llama_config(m))
    impl = model.config._attn_implementation
    if impl != "sdpa":
        raise RuntimeError(f"Hugging Face Llama uses attention {impl!r}, expected 'sdpa'")
    return model


def build(impl: str, m: ModelConfig) -> nn.Module:
    if impl == "ours":
        return build_ours(m)
    if impl == "hf":
        return build_hf(m)
    raise ValueError(f"unknown implementation {impl!r} (known: {', '.join(IMPLS)})")


def logits_fn(impl: str, model: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    if impl == "hf":
        return lambda idx: model(input_ids=idx, use_cache=False).logits
    return lambda idx: model(idx)[0]


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@dataclasses.dataclass
class TrainStep:
    """One optimizer step (forward, loss, backward, AdamW) on a fixed random batch."""

    impl: str
    model: nn.Module
    batch_seqs: int
    seq_len: int
    vocab_size: int
    device: str = "cpu"
    autocast_dtype: torch.dtype | None = None
    compile: bool = False

    def __post_init__(self) -> None:
        gen = torch.Generator().manual_seed(0)
        shape = (self.batch_seqs, self.seq_len)
        self.idx = torch.randint(0, self.vocab_size, shape, generator=gen).to(self.device)
        self.targets = torch.randint(0, self.vocab_size, shape, generator=gen).to(self.device)
        self.model.to(self.device).train()
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-9, weight_decay=0.1,
            fused=self.device.startswith("cuda") or None)
        forward = logits_fn(self.impl, self.model)
        self._forward = torch.compile(forward) if self.compile else forward

    @property
    def tokens(self) -> int:
        return self.batch_seqs * self.seq_len

    def loss(self) -> torch.Tensor:
        if self.autocast_dtype is not None:
            with torch.autocast(device_type=self.device.split(":")[0], dtype=self.autocast_dtype):
                logits = self._forward(self.idx)
        else:
            logits = self._forward(self.idx)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), self.targets.view(-1))

    def __call__(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self.loss().backward()
        self.optimizer.step()


def make_step(impl: str, m: ModelConfig, batch_seqs: int, seed: int = 0, **kwargs: Any) -> TrainStep:
    torch.manual_seed(seed)
    model = build(impl, m)
    return TrainStep(impl, model, batch_seqs, m.context_len, m.vocab_size, **kwargs)
