"""Packed token splits as memory-mapped arrays (read by the trainer of every run).

A prepared split is one flat 1-D array of token ids on disk (`<split>.bin`, raw
little-endian `uint16` when the vocab is below 65536, else `uint32`): the
documents of that split, each followed by the end-of-document id, with no
padding. `meta.json` beside it records dtype, lengths, vocab, end-of-document
id, corpus hash and tokenizer. Sequence i of length L is the window
`tokens[i*L : (i+1)*L + 1]` (inputs and targets shifted by one), so consecutive
sequences share one boundary token and every token is predicted once per epoch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

META_FILE = "meta.json"
FORMAT_VERSION = 1


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size < 65536 else np.dtype(np.uint32)


class PackedData:
    """Tokenized, packed splits of one corpus + tokenizer (see `prepare_data`)."""

    def __init__(self, path: Path | str, meta: dict[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.built_here = False  # True when this process's `prepare_data` built it (not found ready)
        if meta is None:
            meta = json.loads((self.path / META_FILE).read_text())
        self.meta = meta
        self.vocab_size: int = int(meta["vocab_size"])
        self.eod_id: int = int(meta["eod_id"])
        self.dtype = np.dtype(meta["dtype"])
        self.corpus_hash: str = meta["corpus_hash"]
        self.tokenizer_name: str = meta["tokenizer"]
        self._arrays: dict[str, np.ndarray] = {}
        for split, info in meta["splits"].items():  # fail now, not mid-run, if a file is short
            size = (self.path / f"{split}.bin").stat().st_size
            if size != int(info["tokens"]) * self.dtype.itemsize:
                raise ValueError(f"{self.path / (split + '.bin')}: {size} bytes, meta says {info['tokens']} tokens")

    def __getstate__(self) -> dict[str, Any]:
        # Pickled into data-loader workers: reopen the memmaps there instead of copying the arrays.
        state = dict(self.__dict__)
        state["_arrays"] = {}
        return state

    def __repr__(self) -> str:
        counts = ", ".join(f"{s}={i['tokens']}" for s, i in self.meta["splits"].items())
        return f"PackedData({self.meta['corpus']}, {self.tokenizer_name}, vocab={self.vocab_size}, {counts})"

    def _check_split(self, split: str) -> None:
        if split not in self.meta["splits"]:
            raise KeyError(f"unknown split {split!r} (known: {', '.join(self.meta['splits'])})")

    def tokens(self, split: str) -> np.ndarray:
        """The split's flat token ids (read-only `np.memmap`; an empty array for an empty split)."""
        self._check_split(split)
        if split not in self._arrays:
            n = int(self.meta["splits"][split]["tokens"])
            if n == 0:
                self._arrays[split] = np.zeros(0, dtype=self.dtype)
            else:
                self._arrays[split] = np.memmap(self.path / f"{split}.bin", dtype=self.dtype.newbyteorder("<"), mode="r", shape=(n,))
        return self._arrays[split]

    def num_tokens(self, split: str) -> int:
        self._check_split(split)
        return int(self.meta["splits"][split]["tokens"])

    def num_sequences(self, split: str, seq_len: int) -> int:
        """Full windows of `seq_len + 1` tokens: (len(tokens) - 1) // seq_len."""
        if seq_len < 1:
            raise ValueError(f"seq_len must be >= 1, got {seq_len}")
        return max(0, (self.num_tokens(split) - 1) // seq_len)

    def sequences(self, split: str, seq_len: int, indices: np.ndarray | list[int]) -> np.ndarray:
        """int64 [n, seq_len + 1]: row k = tokens[i*seq_len : (i+1)*seq_len + 1] for i = indices[k]."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = self.num_sequences(split, seq_len)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise IndexError(f"sequence index out of range [0, {n}) for split {split!r} at seq_len={seq_len}")
        toks = self.tokens(split)
        if idx.size == 0:
            return np.zeros((0, seq_len + 1), dtype=np.int64)
        out = np.empty((idx.size, seq_len + 1), dtype=np.int64)
        for k, i in enumerate(idx):  # contiguous slices: much faster than fancy indexing a memmap
            start = int(i) * seq_len
            out[k] = toks[start : start + seq_len + 1]
        return out
