"""Named model sizes (`cemctl plan` shows them; grids select them with `model.size`).

The paper's Table 1 sizes train at context 2048 with the 32k Llama tokenizer. The
256M size is not given in the paper's text; we chose d=1024, 15 layers, 16 heads
(head width 64) and m=2752 (about 8/3 d, a multiple of 64, the rule Table 1
follows), which gives 255.3M parameters for the Llama baseline with vocab 32,000.

The small sizes (`nano`, `micro`, `mini`) train in minutes on a 2-core CPU with
the built-in corpus (context 128); they are what the demo grid, the `tiny` and
`cpu` scales of every experiment and the tests use. `20M` and `40M` (context
1024, d_head 64, m about 8/3 d) are the `gpu` scale's: a figure in about two
H100-hours at Chinchilla budgets.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SizePreset:
    d_model: int
    n_layers: int
    n_heads: int
    d_mlp: int
    context_len: int
    note: str = ""


SIZES: dict[str, SizePreset] = {
    # CPU sizes (demo, CI, tiny scale)
    "nano": SizePreset(d_model=64, n_layers=2, n_heads=4, d_mlp=176, context_len=64, note="tests"),
    "micro": SizePreset(d_model=96, n_layers=3, n_heads=4, d_mlp=256, context_len=128, note="CPU demo"),
    "mini": SizePreset(d_model=128, n_layers=4, n_heads=4, d_mlp=352, context_len=128, note="CPU"),
    "small": SizePreset(d_model=192, n_layers=4, n_heads=6, d_mlp=512, context_len=256, note="CPU, slow"),
    # The `gpu` scale: one GPU in an afternoon (context 1024; with the 32k Llama tokenizer
    # 21.2M and 38.7M parameters, embedding and head included)
    "20M": SizePreset(d_model=256, n_layers=6, n_heads=4, d_mlp=704, context_len=1024, note="gpu scale"),
    "40M": SizePreset(d_model=384, n_layers=8, n_heads=6, d_mlp=1024, context_len=1024, note="gpu scale"),
    # The paper's Table 1
    "86M": SizePreset(d_model=672, n_layers=8, n_heads=8, d_mlp=1792, context_len=2048, note="Table 1"),
    "108M": SizePreset(d_model=672, n_layers=12, n_heads=12, d_mlp=1792, context_len=2048, note="Table 1"),
    "134M": SizePreset(d_model=768, n_layers=12, n_heads=12, d_mlp=2048, context_len=2048, note="Table 1"),
    "162M": SizePreset(d_model=864, n_layers=12, n_heads=12, d_mlp=2304, context_len=2048, note="Table 1"),
    # Our choice for the arXiv version's 256M (see module docstring)
    "256M": SizePreset(d_model=1024, n_layers=15, n_heads=16, d_mlp=2752, context_len=2048, note="ours"),
}

PAPER_SIZES = ("86M", "108M", "134M", "162M")
GPU_SCALE_SIZES = ("20M", "40M")
