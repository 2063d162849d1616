"""`prepare_data`: tokenize, pack and cache a corpus once; every run opens the memmaps (`cemctl launch`).

Cache layout under `data.cache_dir`, else `$CEMCTL_CACHE`, else `~/.cache/cemctl`:

    tokenizers/bpe-<vocab>-<key>.json           trained BPE tokenizers
    packed/<corpus>-<tokenizer>-<key>/g<N>/     meta.json + train.bin, val.bin, test.bin
    packed/<corpus>-<tokenizer>-<key>.lock      fcntl lock of the builders

The key hashes the corpus identity, the tokenizer identity, the split rule and
(for streamed corpora) the val/test budgets. A generation directory `g<N>` is
built under a temporary name and renamed into place when complete, so a reader
that sees it sees all of it. Finite corpora (builtin, jsonl) are tokenized
whole, once. A streamed corpus (slimpajama) is read only until train holds
`min_train_tokens` (default `DEFAULT_STREAM_TRAIN_TOKENS`) and val/test hold
their budgets; a later call that needs more train tokens builds generation N+1
from a longer prefix of the same stream (val/test unchanged: they are the first
documents of the stream that hash into them) and removes the older one.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import time
from pathlib import Path
from typing import Iterator

from cem_core.config import DataConfig, TrainConfig, tokenizer_vocab_size
from cem_core.errors import CemError
from cem_core.data.cache import atomic_write_json, file_lock, make_temp_dir, publish_dir, remove_dir
from cem_core.data.packing import FORMAT_VERSION, META_FILE, PackedData, SplitWriter, token_dtype
from cem_core.data.sources import SPLITS, TEST_FRACTION, VAL_FRACTION, Source, make_source, split_of
from cem_core.data.tokenizer import build_tokenizer, default_cache_root, tokenizer_identity

log = logging.getLogger(__name__)

DEFAULT_VAL_TOKENS = TrainConfig.val_tokens
DEFAULT_TEST_TOKENS = TrainConfig.test_tokens
DEFAULT_STREAM_TRAIN_TOKENS = 1 << 24  # streamed corpora, when the caller names no budget
BPE_TRAIN_MAX_BYTES = 256 << 20  # streamed corpora: BPE learns from at most this much train text
BATCH_DOCS = 256


def _check_names(data_cfg: DataConfig) -> None:
    from cem_core.variants import CORPORA, TOKENIZERS

    CORPORA.check(data_cfg.corpus)
    TOKENIZERS.check(data_cfg.tokenizer)


def _cache_name(data_cfg: DataConfig, source: Source, tok_identity: str, val_tokens: int, test_tokens: int) -> str:
    parts = [f"format{FORMAT_VERSION}", source.identity, tok_identity, f"split{VAL_FRACTION}/{TEST_FRACTION}"]
    if source.streaming:
        parts.append(f"val{val_tokens}/test{test_tokens}")
    key = hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]
    return f"{source.name}-{data_cfg.tokenizer}-{key}"


def _generations(base: Path) -> list[tuple[int, Path]]:
    if not base.is_dir():
        return []
    gens = []
    for p in base.iterdir():
        if p.name.startswith("g") and p.name[1:].isdigit() and (p / META_FILE).is_file():
            gens.append((int(p.name[1:]), p))
    return sorted(gens)


def _usable(gen: Path, train_needed: int) -> PackedData | None:
    """The generation's data if it is complete enough for `train_needed` tokens, else None."""
    try:
        meta = json.loads((gen / META_FILE).read_text())
        if meta.get("format") != FORMAT_VERSION:
            return None
        if not meta["complete"] and meta["splits"]["train"]["tokens"] < train_needed:
            return None
        return PackedData(gen, meta)
    except (OSError, ValueError, KeyError):  # removed by a newer generation meanwhile, or foreign
        return None


def prepare_data(
    data_cfg: DataConfig,
    *,
    min_train_tokens: int = 0,
    val_tokens: int = DEFAULT_VAL_TOKENS,
    test_tokens: int = DEFAULT_TEST_TOKENS,
) -> PackedData:
    """Tokenized, packed train/val/test splits of `data_cfg`'s corpus, built once and cached.

    `min_train_tokens`, `val_tokens`, `test_tokens` only bound how much of a
    streamed corpus is read; finite corpora are always prepared whole.
    """
    _check_names(data_cfg)
    root = default_cache_root(data_cfg)
    source = make_source(data_cfg)
    tok_id = tokenizer_identity(data_cfg, source.identity)
    base = root / "packed" / _cache_name(data_cfg, source, tok_id, val_tokens, test_tokens)
    train_needed = (max(min_train_tokens, 0) or DEFAULT_STREAM_TRAIN_TOKENS) + 1 if source.streaming else 0

    for _, gen in reversed(_generations(base)):  # fast path: no lock, no tokenizer
        found = _usable(gen, train_needed)
        if found is not None:
            return found
    with file_lock(base.with_name(base.name + ".lock")):
        gens = _generations(base)
        for _, gen in reversed(gens):  # another process may have built it while we waited
            found = _usable(gen, train_needed)
            if found is not None:
                return found
        # Holding the lock, no other builder of this key is running: temporary
        # directories are leftovers of a crashed one, and a g<N> without meta is junk.
        numbers = [-1]
        for p in base.iterdir() if base.is_dir() else ():
            if p.name.startswith(".g") and p.name.endswith(".tmp"):
                remove_dir(p)
            elif p.name.startswith("g") and p.name[1:].isdigit():
                numbers.append(int(p.name[1:]))
                if not (p / META_FILE).is_file():
                    remove_dir(p)
        number = max(numbers) + 1
        budgets = None
        if source.streaming:
            budgets = {"train": train_needed, "val": val_tokens + 1, "test": test_tokens + 1}
        packed = _build(data_cfg, source, root, base, number, budgets)
        for _, old in gens:
            remove_dir(old)
        return packed


def _train_texts(source: Source) -> Iterator[str]:
    total = 0
    for doc_id, text in source.documents():
        if split_of(doc_id) == "train":
            yield text
            total += len(text)
            if source.streaming and total >= BPE_TRAIN_MAX_BYTES:
                return


def _build(data_cfg: DataConfig, source: Source, root: Path, base: Path, number: int, budgets: dict[str, int] | None) -> PackedData:
    t0 = time.perf_counter()
    tok = build_tokenizer(data_cfg, root, source.identity, train_texts=lambda: _train_texts(source))
    vocab_size = tokenizer_vocab_size(data_cfg)
    if tok.num_ids > vocab_size:
        raise CemError(
            f"data.hf_tokenizer: {data_cfg.hf_tokenizer!r} has {tok.num_ids} ids but models are built with {vocab_size} "
            "(cem_core.config.tokenizer_vocab_size)"
        )
    t_tok = time.perf_counter() - t0
    dtype = token_dtype(vocab_size)
    tmp = make_temp_dir(base, f"g{number}")
    try:
        writers = {s: SplitWriter(tmp / f"{s}.bin", dtype, tok.eod_id) for s in SPLITS}
        content = hashlib.sha256()
        docs_read = 0
        exhausted = True
        stream = source.documents()
        while True:
            batch = list(itertools.islice(stream, BATCH_DOCS))
            if not batch:
                break
            keep: list[tuple[str, str, str]] = []
            for doc_id, text in batch:
                docs_read += 1
                split = split_of(doc_id)
                if budgets is None or writers[split].tokens < budgets[split]:  # full splits: not tokenized
                    keep.append((doc_id, split, text))
            for (doc_id, split, text), ids in zip(keep, tok.encode_batch([t for _, _, t in keep])):
                if budgets is not None and writers[split].tokens >= budgets[split]:
                    continue  # filled by an earlier document of this batch
                content.update(doc_id.encode("utf-8") + b"\0" + text.encode("utf-8") + b"\0")
                writers[split].add(ids)
            if budgets is not None and all(writers[s].tokens >= budgets[s] for s in SPLITS):
                exhausted = False
                break
        for w in writers.values():
            w.close()
        corpus_hash = content.hexdigest()  # builtin: equals load_builtin_corpus().sha256
        meta = {
            "format": FORMAT_VERSION,
            "corpus": source.name,
            "corpus_identity": source.identity,
            "corpus_hash": corpus_hash,
            "source": source.info,
            "tokenizer": tok.identity,
            "tokenizer_kind": data_cfg.tokenizer,
            "vocab_size": vocab_size,
            "tokenizer_ids": tok.num_ids,
            "eod_id": tok.eod_id,
            "dtype": dtype.name,
            "split_rule": {"by": "sha256(doc_id)", "val_fraction": VAL_FRACTION, "test_fraction": TEST_FRACTION},
            "splits": {s: {"tokens": w.tokens, "documents": w.documents} for s, w in writers.items()},
            "budgets": budgets,
            "complete": exhausted,
            "documents_read": docs_read,
            "tokenizer_s": round(t_tok, 3),
            "build_s": round(time.perf_counter() - t0, 3),
            "created": time.time(),
        }
        atomic_write_json(tmp / META_FILE, meta)
        final = base / f"g{number}"
        publish_dir(tmp, final)
    except BaseException:
        remove_dir(tmp)
        raise
    log.info("prepared %s in %.1fs", final, meta["build_s"])
    return PackedData(final, meta)


__all__ = ["prepare_data", "PackedData"]
