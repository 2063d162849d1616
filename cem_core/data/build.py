"""Tokenizing a corpus in parallel, resumably, with a result that does not depend on the worker count.

    splits = build_splits(source, tok_spec, out_dir, dtype=..., eod_id=..., budgets=None, workers=4,
                          shard_dir=base / ".shards", progress=callback)

Used by `prepare_data` (`cemctl data prepare`, and a run's first use of its data).
The document stream is cut into chunks of `CHUNK_DOCS` documents, in stream
order. Workers (processes) tokenize whole chunks into per-chunk split files in
`shard_dir`; the coordinator reads the stream, keeps at most a few chunks in
flight, and accounts for finished chunks strictly in order. The output splits
are the concatenation of the chunks' split files in chunk order, so they are
the same bytes for any number of workers (and, for a finite corpus, the same
bytes as tokenizing the documents one by one). With budgets (a streamed
corpus), the splits end at the first chunk whose prefix holds every budget.

A finished chunk's files are kept (its `.json` written last marks it complete,
with each split file's size and sha256): an interrupted build resumes from them;
once the generation is published, `remove_shards` deletes the files those records
prove are the build's (anything else in `shard_dir` is kept and reported). Each worker runs the tokenizer on one core
(`TOKENIZERS_PARALLELISM=false`), so N workers use N cores.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from cem_core.config import DataConfig
from cem_core.data.tokenizer import build_tokenizer
from cem_core.runfiles.files import RunFileError, atomic_write_bytes, atomic_write_json, read_bytes, test_write_pause
from cem_core.runfiles.manifest import FileEntry, file_digest, listing

CHUNK_DOCS = 1024
SPLITS = ("train", "val", "test")
MANIFEST = "manifest.json"

Progress = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class TokenizerSpec:
    """What a worker needs to rebuild the tokenizer (a trained BPE must already be cached)."""

    data_cfg_json: str  # the DataConfig as JSON (hashable: workers keep one tokenizer per spec)
    cache_root: str
    corpus_identity: str

    def build(self) -> Any:
        return build_tokenizer(DataConfig(**json.loads(self.data_cfg_json)), Path(self.cache_root),
                               self.corpus_identity)


_WORKER_TOKENIZERS: dict[TokenizerSpec, Any] = {}


def _worker_init() -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one core per worker


def _chunk_name(index: int) -> str:
    return f"chunk_{index:07d}"


def tokenize_chunk(job: tuple[TokenizerSpec, int, list[tuple[str, str, str]], str, str, int, str]) -> dict[str, Any]:
    """Tokenize one chunk [(doc_id, split, text)] into `<shard_dir>/chunk_N.<split>.bin`; returns its record."""
    spec, index, docs, shard_dir, dtype_name, eod_id, digest = job
    tok = _WORKER_TOKENIZERS.get(spec)
    if tok is None:
        tok = _WORKER_TOKENIZERS[spec] = spec.build()
    dtype = np.dtype(dtype_name).newbyteorder("<")
    eod = np.array([eod_id], dtype=dtype)
    limit = np.iinfo(dtype).max
    parts: dict[str, list[bytes]] = {s: [] for s in SPLITS}
    tokens = {s: 0 for s in SPLITS}
    doc_tokens: list[int] = []  # per document, in stream order (a budget may cut the last chunk)
    ids_list = tok.encode_batch([t for _, _, t in docs]) if docs else []
    for (_, split, _), ids in zip(docs, ids_list):
        arr = np.asarray(ids)
        if arr.size and (arr.min() < 0 or arr.max() > limit):
            raise ValueError(f"token id out of range for {dtype}")
        parts[split].append(arr.astype(dtype, copy=False).tobytes() + eod.tobytes())
        tokens[split] += int(arr.size) + 1
        doc_tokens.append(int(arr.size) + 1)
    base = Path(shard_dir) / _chunk_name(index)
    files = {}
    for split in SPLITS:
        data = b"".join(parts[split])
        atomic_write_bytes(base.with_name(f"{base.name}.{split}.bin"), data, durable=False, pause=False)
        files[f"{base.name}.{split}.bin"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    test_write_pause()  # tests: a kill lands between a chunk's split files and its record
    record = {"index": index, "tokens": tokens, "digest": digest,
              "doc_splits": "".join(str(SPLITS.index(split)) for _, split, _ in docs), "doc_tokens": doc_tokens,
              "files": files}
    atomic_write_bytes(base.with_name(f"{base.name}.json"), json.dumps(record).encode(), durable=False,
                       pause=False)  # last: the chunk is complete
    return record


def _copy_prefix(src: Any, dst: Any, n_bytes: int) -> None:
    while n_bytes > 0:
        block = src.read(min(n_bytes, 1 << 22))
        if not block:
            raise OSError(f"{src.name}: shorter than its record")
        dst.write(block)
        n_bytes -= len(block)


def _finished_chunk(shard_dir: Path, index: int, itemsize: int, digest: str) -> dict[str, Any] | None:
    """The record of a chunk a previous (interrupted) build finished, if it holds the same documents and is whole."""
    base = shard_dir / _chunk_name(index)
    try:
        record = json.loads(base.with_name(f"{base.name}.json").read_text())
        if record.get("digest") != digest:
            return None
        for split in SPLITS:
            if base.with_name(f"{base.name}.{split}.bin").stat().st_size != record["tokens"][split] * itemsize:
                return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return record


def _open_shard_dir(shard_dir: Path, manifest: dict[str, Any]) -> None:
    """Keep the finished chunks of an interrupted build of the same recipe; start over otherwise."""
    path = shard_dir / MANIFEST
    try:
        same = json.loads(path.read_text()) == manifest
    except (OSError, ValueError):
        same = False
    if not same and shard_dir.exists():
        remove_shards(shard_dir)  # another recipe's chunks: only what their records prove is the build's
    shard_dir.mkdir(parents=True, exist_ok=True)
    for p in shard_dir.glob(".chunk_*.tmp"):  # half-written files of a killed worker
        p.unlink(missing_ok=True)
    atomic_write_json(path, manifest, indent=1)  # read back whole or not at all


_RECIPE_KEYS = {"identity", "chunk_docs", "dtype", "eod_id"}


def remove_shards(shard_dir: Path) -> list[str]:
    """Delete what a build wrote into `shard_dir`, by proof: the recipe file, the chunk records, and each chunk's
    split files whose size and sha256 are those its record lists; then the folder once empty. Returns what was
    kept (a file the user put there, a split file that is not what the build wrote, a record of an older cemctl
    without hashes and its files)."""
    shard_dir = Path(shard_dir)
    if not shard_dir.is_dir() or shard_dir.is_symlink():
        return [str(shard_dir)] if os.path.lexists(shard_dir) else []
    present = listing(shard_dir)
    proven: dict[str, FileEntry] = {}
    records: list[str] = []
    for rel in present:
        if "/" in rel or not (rel.startswith("chunk_") and rel.endswith(".json")):
            continue
        try:
            record = json.loads(read_bytes(shard_dir / rel)) if not (shard_dir / rel).is_symlink() else None
        except (OSError, ValueError, RunFileError):
            continue
        files = record.get("files") if isinstance(record, dict) else None
        if not isinstance(files, dict) or not {"index", "digest", "tokens"} <= set(record):  # type: ignore[arg-type]
            continue
        records.append(rel)
        for name, entry in files.items():
            if isinstance(entry, dict) and isinstance(entry.get("size"), int) and isinstance(entry.get("sha256"), str):
                proven[name] = FileEntry(entry["size"], entry["sha256"])
    owned = set(records)
    recipe = shard_dir / MANIFEST
    if MANIFEST in present and not recipe.is_symlink():
        try:
            if set(json.loads(read_bytes(recipe))) == _RECIPE_KEYS:
                owned.add(MANIFEST)
        except (OSError, ValueError, TypeError, RunFileError):
            pass
    for rel, entry in proven.items():
        if rel in present:
            try:
                if file_digest(shard_dir / rel) == entry:
                    owned.add(rel)
            except (OSError, RunFileError):
                pass
    for rel in sorted(owned):
        if rel.endswith(".json") and rel.startswith("chunk_"):
            continue  # the records last: they are what proves the split files
        (shard_dir / rel).unlink(missing_ok=True)
    for rel in records:
        (shard_dir / rel).unlink(missing_ok=True)
    try:
        shard_dir.rmdir()
    except OSError:
        pass
    return [rel for rel in present if rel not in owned]


def _chunks(documents: Iterator[tuple[str, str]], split_of: Callable[[str], str], size: int,
            content: "hashlib._Hash | None") -> Iterator[list[tuple[str, str, str]]]:
    chunk: list[tuple[str, str, str]] = []
    for doc_id, text in documents:
        if content is not None:
            content.update(doc_id.encode("utf-8") + b"\0" + text.encode("utf-8") + b"\0")
        chunk.append((doc_id, split_of(doc_id), text))
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def build_splits(documents: Iterator[tuple[str, str]], split_of: Callable[[str], str], spec: TokenizerSpec,
                 out_dir: Path, shard_dir: Path, *, dtype: np.dtype, eod_id: int, identity: str,
                 budgets: dict[str, int] | None = None, workers: int = 1, chunk_docs: int = CHUNK_DOCS,
                 progress: Progress | None = None, total_bytes: int | None = None) -> dict[str, Any]:
    """Tokenize `documents` into `<out_dir>/<split>.bin` (see the module docstring); returns the counts.

    Result: {"splits": {split: {"tokens", "documents"}}, "documents_read", "complete" (the stream ended
    before the budgets), "corpus_hash", "chunks", "resumed_chunks"}.
    """
    # A chunk's tokens depend on the corpus, the tokenizer, the chunking and the dtype, not on the budgets:
    # a longer prefix of the same stream reuses the chunks of a shorter, interrupted one.
    _open_shard_dir(shard_dir, {"identity": identity, "chunk_docs": chunk_docs, "dtype": np.dtype(dtype).name,
                                "eod_id": eod_id})
    content = hashlib.sha256() if budgets is None else None  # a finite corpus: the hash of every document
    chunk_digests = hashlib.sha256()
    totals = {s: 0 for s in SPLITS}
    docs_done = {s: 0 for s in SPLITS}
    state = {"read": 0, "bytes": 0, "resumed": 0, "t0": time.perf_counter(), "tokens": 0, "stream_docs": 0}
    records: dict[int, dict[str, Any]] = {}
    takes: list[dict[str, int]] = []  # per accounted chunk: tokens taken from each split file
    kept = 0  # chunks accounted for (in order)
    done = False

    def enough() -> bool:
        return budgets is not None and all(totals[s] >= budgets[s] for s in SPLITS)

    def account() -> None:
        """Take finished chunks in order; with budgets, a split takes documents only until it is full."""
        nonlocal kept, done
        while not done and kept in records:
            rec = records.pop(kept)
            take = {s: 0 for s in SPLITS}  # tokens of this chunk's split files that go into the output
            for digit, n in zip(rec["doc_splits"], rec["doc_tokens"]):
                split = SPLITS[int(digit)]
                state["stream_docs"] += 1
                if budgets is None or totals[split] < budgets[split]:
                    totals[split] += n
                    take[split] += n
                    docs_done[split] += 1
                    state["tokens"] += n
                    if enough():
                        break
            takes.append(take)
            chunk_digests.update(rec["digest"].encode())
            kept += 1
            done = enough()
        if progress is not None:
            progress({"documents": state["read"], "tokens": state["tokens"], "chunks": kept, "resumed": state["resumed"],
                      "elapsed_s": time.perf_counter() - state["t0"], "bytes": state["bytes"],
                      "total_bytes": total_bytes, "budget_tokens": sum(budgets.values()) if budgets else None})

    pool = None  # started at the second chunk: a corpus of one chunk is not worth the processes
    in_flight: deque[tuple[int, Any]] = deque()  # (chunk index, async result)
    index = -1
    parallelism = os.environ.get("TOKENIZERS_PARALLELISM")
    _worker_init()  # chunks tokenized here use one core too: N workers means N cores
    finished = False
    try:
        for index, chunk in enumerate(_chunks(documents, split_of, chunk_docs, content)):
            state["read"] += len(chunk)
            state["bytes"] += sum(len(t) for _, _, t in chunk)
            digest = hashlib.sha256(b"".join(d.encode() + b"\0" + t.encode() + b"\0" for d, _, t in chunk)).hexdigest()
            kept_before = _finished_chunk(shard_dir, index, np.dtype(dtype).itemsize, digest)
            if kept_before is not None:
                state["resumed"] += 1
                records[index] = kept_before
            else:
                job = (spec, index, chunk, str(shard_dir), np.dtype(dtype).name, eod_id, digest)
                if pool is None and workers > 1 and index > 0:
                    pool = mp.get_context("spawn").Pool(workers, initializer=_worker_init)
                if pool is None:
                    records[index] = tokenize_chunk(job)
                else:
                    in_flight.append((index, pool.apply_async(tokenize_chunk, (job,))))
            while in_flight and (len(in_flight) > 2 * workers or in_flight[0][1].ready()):
                i, res = in_flight.popleft()
                records[i] = res.get()
            account()
            if done:
                break
        while in_flight and not done:
            i, res = in_flight.popleft()
            records[i] = res.get()
            account()
        finished = True
    finally:
        if pool is not None:  # interrupted or budgets met: drop the chunks in flight
            pool.close() if finished and not done else pool.terminate()
            pool.join()
        if parallelism is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = parallelism
    n_chunks = kept
    out_dir.mkdir(parents=True, exist_ok=True)
    itemsize = np.dtype(dtype).itemsize
    for split in SPLITS:  # the taken prefix of each chunk's split file, in chunk order
        with open(out_dir / f"{split}.bin", "wb") as out:
            for i in range(n_chunks):
                with open(shard_dir / f"{_chunk_name(i)}.{split}.bin", "rb") as f:
                    _copy_prefix(f, out, takes[i][split] * itemsize)
    return {
        "splits": {s: {"tokens": totals[s], "documents": docs_done[s]} for s in SPLITS},
        "documents_read": state["stream_docs"],
        "complete": not done,
        "corpus_hash": content.hexdigest() if content is not None else chunk_digests.hexdigest(),
        "chunks": n_chunks,
        "resumed_chunks": state["resumed"],
    }
