"""`prepare_data`: tokenize, pack and cache a corpus once; every run opens the memmaps (`cemctl launch`).

Cache layout under `data.cache_dir`, else `$CEMCTL_CACHE`, else `~/.cache/cemctl`:

    tokenizers/bpe-<vocab>-<key>.json           trained BPE tokenizers
    packed/<corpus>-<tokenizer>-<key>/g<N>/     meta.json + train.bin, val.bin, test.bin, and the manifest
                                                .cemctl-manifest.json (each file's size and sha256)
    packed/<corpus>-<tokenizer>-<key>.lock      fcntl lock of the builders

The key hashes the corpus identity, the tokenizer identity, the split rule and
(for streamed corpora) the val/test budgets. A generation directory `g<N>` is
built under a temporary name and renamed into place when complete, so a reader
that sees it sees all of it. Finite corpora (builtin, jsonl) are tokenized
whole, once. A streamed corpus (slimpajama) is read only until train holds
`min_train_tokens` (default `DEFAULT_STREAM_TRAIN_TOKENS`) and val/test hold
their budgets; a later call that needs more train tokens builds generation N+1
from a longer prefix of the same stream (val/test unchanged: they are the first
documents of the stream that hash into them) and removes the older one: only the
files its manifest proves are the build's (`cem_core.runfiles.manifest`; a
file the user put there, or a generation an older cemctl built without a
manifest, is kept). `cemctl data clean` removes caches by the same proof.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from cem_core.config import DataConfig, RunConfig, TrainConfig, tokenizer_vocab_size, tokens_per_step, total_steps
from cem_core.errors import CemError, ConfigError
from cem_core.data.build import CHUNK_DOCS, Progress, TokenizerSpec, build_splits, remove_shards
from cem_core.data.cache import make_temp_dir, publish_dir, remove_dir
from cem_core.runfiles.files import atomic_write_json
from cem_core.runfiles.lock import file_lock
from cem_core.runfiles.manifest import ManifestError, read_manifest, remove_owned, write_manifest
from cem_core.variants import CORPORA, TOKENIZERS
from cem_core.data.packing import FORMAT_VERSION, META_FILE, PackedData, token_dtype
from cem_core.data.sources import TEST_FRACTION, VAL_FRACTION, Source, make_source, split_of
from cem_core.data.tokenizer import build_tokenizer, default_cache_root, tokenizer_identity

log = logging.getLogger(__name__)

DEFAULT_VAL_TOKENS = TrainConfig.val_tokens
DEFAULT_TEST_TOKENS = TrainConfig.test_tokens
DEFAULT_STREAM_TRAIN_TOKENS = 1 << 24  # streamed corpora, when the caller names no budget
BPE_TRAIN_MAX_BYTES = 256 << 20  # streamed corpora: BPE learns from at most this much train text
SHARDS = ".shards"  # the finished chunks of a build in progress (kept across an interrupt)
CACHE_MANIFEST_WHAT = "data prepare"  # the purpose a generation's manifest names


def remove_generation(gen: Path) -> list[str]:
    """Delete a generation folder's files that its manifest proves the build wrote; returns what was kept."""
    try:
        manifest = read_manifest(gen, what=CACHE_MANIFEST_WHAT)
    except ManifestError as e:
        log.warning("kept %s: %s", gen, e)
        return [gen.name]
    audit = remove_owned(gen, manifest)
    for rel in audit.kept:
        log.warning("kept %s/%s: not a file the build wrote", gen, rel)
    return [f"{gen.name}/{rel}" for rel in audit.kept]


def _check_names(data_cfg: DataConfig) -> None:
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


@dataclass(frozen=True)
class CacheKey:
    """Where the prepared data of a data config lives, and how much of a stream a run needs."""

    base: Path  # <cache root>/packed/<corpus>-<tokenizer>-<key>
    train_needed: int  # tokens of a streamed corpus's train split (0: a finite corpus, read whole)
    streaming: bool


def cache_key(data_cfg: DataConfig, min_train_tokens: int = 0, *, val_tokens: int = DEFAULT_VAL_TOKENS,
              test_tokens: int = DEFAULT_TEST_TOKENS) -> tuple[CacheKey, Source]:
    _check_names(data_cfg)
    root = default_cache_root(data_cfg)
    source = make_source(data_cfg)
    tok_id = tokenizer_identity(data_cfg, source.identity)
    base = root / "packed" / _cache_name(data_cfg, source, tok_id, val_tokens, test_tokens)
    train_needed = (max(min_train_tokens, 0) or DEFAULT_STREAM_TRAIN_TOKENS) + 1 if source.streaming else 0
    return CacheKey(base, train_needed, source.streaming), source


def train_tokens_needed(cfg: RunConfig) -> int:
    """Train tokens a (resolved) run reads over its whole schedule: how much of a streamed corpus to prepare."""
    return total_steps(cfg) * tokens_per_step(cfg)


REQUIRE_PREPARED_ENV = "CEMCTL_REQUIRE_PREPARED"  # set by `cemctl launch` for its jobs: they never tokenize


class DataNotPrepared(CemError):
    """A job that must not tokenize (a launched GPU or cluster job) found no prepared cache."""


def data_for_run(cfg: RunConfig) -> PackedData:
    """The prepared data of a (resolved) run: opened if cached; else prepared here, unless this process is a
    launched job (`CEMCTL_REQUIRE_PREPARED=1`), which fails with the command that prepares it instead."""
    need = train_tokens_needed(cfg)
    if os.environ.get(REQUIRE_PREPARED_ENV) == "1":
        found = find_prepared(cfg.data, need)
        if found is None:
            key, _ = cache_key(cfg.data, need)
            raise DataNotPrepared(f"data not prepared: corpus {cfg.data.corpus!r} with tokenizer {cfg.data.tokenizer!r} "
                                  f"has no usable cache at {key.base}; run `cemctl data prepare EXPERIMENT` on a CPU node")
        return found
    return prepare_data(cfg.data, min_train_tokens=need)


def find_prepared(data_cfg: DataConfig, min_train_tokens: int = 0) -> PackedData | None:
    """The prepared data if a usable cache exists (no lock, no tokenizer, nothing written), else None."""
    key, _ = cache_key(data_cfg, min_train_tokens)
    for _, gen in reversed(_generations(key.base)):
        found = _usable(gen, key.train_needed)
        if found is not None:
            return found
    return None


def prepare_data(
    data_cfg: DataConfig,
    *,
    min_train_tokens: int = 0,
    val_tokens: int = DEFAULT_VAL_TOKENS,
    test_tokens: int = DEFAULT_TEST_TOKENS,
    workers: int = 1,
    progress: Progress | None = None,
) -> PackedData:
    """Tokenized, packed train/val/test splits of `data_cfg`'s corpus, built once and cached.

    `min_train_tokens`, `val_tokens`, `test_tokens` only bound how much of a
    streamed corpus is read; finite corpora are always prepared whole. `workers`
    processes tokenize in parallel (the result is the same for any number);
    `progress` is called with counters as the build goes (`cemctl data prepare`).
    """
    key, source = cache_key(data_cfg, min_train_tokens, val_tokens=val_tokens, test_tokens=test_tokens)
    base, train_needed = key.base, key.train_needed
    root = default_cache_root(data_cfg)

    for _, gen in reversed(_generations(base)):  # fast path: no lock, no tokenizer
        found = _usable(gen, train_needed)
        if found is not None:
            return found
    with file_lock(base.with_name(base.name + ".lock"), make_parents=True):
        gens = _generations(base)
        for _, gen in reversed(gens):  # another process may have built it while we waited
            found = _usable(gen, train_needed)
            if found is not None:
                return found
        # Holding the lock, no other builder of this key is running: temporary
        # directories are leftovers of a crashed one. A g<N> without meta is not
        # a generation (never published by a build): its number is skipped, it is left alone.
        numbers = [-1]
        for p in base.iterdir() if base.is_dir() else ():
            if p.name.startswith(".g") and p.name.endswith(".tmp"):
                remove_dir(p)
            elif p.name.startswith("g") and p.name[1:].isdigit():
                numbers.append(int(p.name[1:]))
        number = max(numbers) + 1
        budgets = None
        if source.streaming:
            budgets = {"train": train_needed, "val": val_tokens + 1, "test": test_tokens + 1}
        packed = _build(data_cfg, source, root, base, number, budgets, workers=workers, progress=progress)
        for _, old in gens:
            remove_generation(old)
        return packed


def _train_texts(source: Source) -> Iterator[str]:
    total = 0
    for doc_id, text in source.documents():
        if split_of(doc_id) == "train":
            yield text
            total += len(text)
            if source.streaming and total >= BPE_TRAIN_MAX_BYTES:
                return


def _reported(texts: Iterator[str], progress: Progress | None, total_bytes: int | None) -> Iterator[str]:
    """The BPE trainer's texts, with progress reported as it reads them (phase "tokenizer"), then once more when
    it has read them all and learns its merges (phase "merges")."""
    t0 = time.perf_counter()
    docs = read = 0
    last = 0.0
    for text in texts:
        docs += 1
        read += len(text)
        now = time.perf_counter()
        if progress is not None and now - last > 0.2:
            last = now
            progress({"phase": "tokenizer", "documents": docs, "bytes": read, "total_bytes": total_bytes,
                      "tokens": 0, "elapsed_s": now - t0, "chunks": 0, "resumed": 0, "budget_tokens": None})
        yield text
    if progress is not None:
        progress({"phase": "merges", "documents": docs, "bytes": read, "total_bytes": total_bytes, "tokens": 0,
                  "elapsed_s": time.perf_counter() - t0, "chunks": 0, "resumed": 0, "budget_tokens": None})


def _build(data_cfg: DataConfig, source: Source, root: Path, base: Path, number: int, budgets: dict[str, int] | None,
           *, workers: int = 1, progress: Progress | None = None) -> PackedData:
    t0 = time.perf_counter()
    tok = build_tokenizer(data_cfg, root, source.identity, train_texts=lambda: _reported(_train_texts(source), progress,
                                                                                          source.info.get("bytes")))
    vocab_size = tokenizer_vocab_size(data_cfg)
    if tok.num_ids > vocab_size:
        raise CemError(
            f"data.hf_tokenizer: {data_cfg.hf_tokenizer!r} has {tok.num_ids} ids but models are built with {vocab_size} "
            "(cem_core.config.tokenizer_vocab_size)"
        )
    t_tok = time.perf_counter() - t0
    dtype = token_dtype(vocab_size)
    spec = TokenizerSpec(json.dumps(dataclasses.asdict(data_cfg), sort_keys=True), str(root), source.identity)
    tmp = make_temp_dir(base, f"g{number}")
    shard_dir = base / SHARDS
    try:
        built = build_splits(source.documents(), split_of, spec, tmp, shard_dir, dtype=dtype, eod_id=tok.eod_id,
                             identity=f"{source.identity}|{tok.identity}", budgets=budgets, workers=workers,
                             progress=progress, total_bytes=source.info.get("bytes"))
        if not built["documents_read"]:  # nothing to train on: never a cache of 0 tokens
            what = data_cfg.path or data_cfg.corpus
            raise ConfigError("data.path" if data_cfg.path else "data.corpus",
                              f"the corpus has no text: {what} holds no non-empty document", value=what)
        empty = [s for s in ("val", "test") if not built["splits"].get(s, {}).get("tokens")]
        if empty:  # a run would train its whole budget and fail at the end: refused now, before any run
            what = data_cfg.path or data_cfg.corpus
            n = built["documents_read"]
            raise ConfigError("data.path" if data_cfg.path else "data.corpus",
                              f"the corpus's {' and '.join(empty)} split{'s are' if len(empty) > 1 else ' is'} empty: "
                              f"{what} has {n} document{'s' if n != 1 else ''}, and each goes to validation "
                              f"(~{VAL_FRACTION:.0%}) or test (~{TEST_FRACTION:.0%}) by the hash of its id; give more "
                              "documents (split long texts into several lines)", value=what)
        meta = {
            "format": FORMAT_VERSION,
            "corpus": source.name,
            "corpus_identity": source.identity,
            "corpus_hash": built["corpus_hash"],  # a finite corpus (builtin): equals load_builtin_corpus().sha256
            "source": source.info,
            "tokenizer": tok.identity,
            "tokenizer_kind": data_cfg.tokenizer,
            "vocab_size": vocab_size,
            "tokenizer_ids": tok.num_ids,
            "eod_id": tok.eod_id,
            "dtype": dtype.name,
            "split_rule": {"by": "sha256(doc_id)", "val_fraction": VAL_FRACTION, "test_fraction": TEST_FRACTION},
            "splits": built["splits"],
            "budgets": budgets,
            "complete": built["complete"],
            "documents_read": built["documents_read"],
            "chunks": built["chunks"],
            "resumed_chunks": built["resumed_chunks"],  # kept from an interrupted build of the same recipe
            "chunk_docs": CHUNK_DOCS,
            "workers": workers,
            "tokenizer_s": round(t_tok, 3),
            "build_s": round(time.perf_counter() - t0, 3),
            "created": time.time(),
        }
        atomic_write_json(tmp / META_FILE, meta, indent=1)
        write_manifest(tmp, what=CACHE_MANIFEST_WHAT)  # the proof `data clean` and a newer generation remove by
        final = base / f"g{number}"
        publish_dir(tmp, final)
    except BaseException:
        remove_dir(tmp)  # the finished chunks in base/.shards stay: the next build resumes from them
        raise
    remove_shards(shard_dir)
    log.info("prepared %s in %.1fs (%d chunks, %d resumed)", final, meta["build_s"], built["chunks"],
             built["resumed_chunks"])
    packed = PackedData(final, meta)
    packed.built_here = True
    return packed


__all__ = ["prepare_data", "data_for_run", "DataNotPrepared", "find_prepared", "cache_key", "train_tokens_needed", "PackedData"]
