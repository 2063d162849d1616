"""Document sources by name (`data.corpus`): builtin, jsonl, files, slimpajama. Used by `prepare_data`.

A source yields `(doc_id, text)` pairs in a deterministic order. Every document
goes to exactly one split, chosen from the hash of its id (`split_of`), so the
train / val / test splits are disjoint by document and do not depend on the
order or on how much of a stream was read.

- `builtin`: the CPython prose corpus of `builtin_corpus` (no network).
- `jsonl`: a local JSON-lines file (`data.path`, one `{"text": ...}` per line),
  read through the same Hugging Face `datasets` streaming code as SlimPajama
  (`load_dataset("json", data_files=..., streaming=True)`); finite, read whole.
- `files`: local files matching a glob (`data.path`, e.g. "/data/slimpajama/*.jsonl"), in sorted
  order: JSON lines (`.jsonl`, `.json`, `.jsonl.gz`: one `{"text": ...}` per line), Parquet
  (`.parquet`, a `text` column, read with pyarrow in record batches) and plain text (`.txt`,
  one document per file). Finite; its identity is the names, sizes and mtimes of the files.
- `slimpajama`: the paper's corpus streamed from the hub
  (`load_dataset(data.hf_dataset, split="train", streaming=True)`); endless for
  our purposes, so `prepare_data` reads only as many documents as the token
  budgets need. Needs the optional extra `pip install .[hf]`.

Document ids of the two `datasets` sources are the sha1 of the text (duplicate
documents land in the same split).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from cem_core.config import DataConfig
from cem_core.errors import CemError, ConfigError
from cem_core.data.builtin_corpus import fingerprint, load_builtin_corpus
from cem_core.data.tokenizer import hub_error

SPLITS = ("train", "val", "test")
# Split by document: share of documents (by id hash) in validation and test; the rest trains.
VAL_FRACTION = 0.05
TEST_FRACTION = 0.18
TEXT_FIELD = "text"
_HASH_SPACE = float(1 << 64)


def split_of(doc_id: str) -> str:
    """The split of a document: a deterministic function of its id."""
    u = int.from_bytes(hashlib.sha256(doc_id.encode("utf-8")).digest()[:8], "big") / _HASH_SPACE
    if u < TEST_FRACTION:
        return "test"
    if u < TEST_FRACTION + VAL_FRACTION:
        return "val"
    return "train"


@dataclass
class Source:
    name: str  # corpus kind
    identity: str  # cheap identity used in cache keys
    streaming: bool  # True: read only up to the token budgets
    documents: Callable[[], Iterator[tuple[str, str]]]
    info: dict = field(default_factory=dict)  # recorded in the cache meta


def builtin_source(data_cfg: DataConfig) -> Source:
    def documents() -> Iterator[tuple[str, str]]:
        for d in load_builtin_corpus().documents:
            yield d.doc_id, d.text

    return Source("builtin", f"builtin-{fingerprint()}", False, documents, {"builtin": "cpython-stdlib-prose"})


def _datasets():
    try:
        import datasets
    except ImportError:
        raise CemError(
            "data.corpus needs the Hugging Face 'datasets' package (pip install '.[hf]'); "
            "or set data.corpus='builtin' to use the built-in corpus"
        ) from None
    return datasets


def _text_docs(rows, where: str, on_error: Callable[[Exception], Exception] | None) -> Iterator[tuple[str, str]]:
    it = iter(rows)
    n = 0
    while True:
        try:
            row = next(it)
        except StopIteration:
            return
        except Exception as exc:
            if on_error is None:
                raise CemError(f"{where}: cannot read record {n + 1}: {' '.join(str(exc).split())[:200]}") from None
            raise on_error(exc) from None
        n += 1
        text = row.get(TEXT_FIELD) if isinstance(row, dict) else None
        if not isinstance(text, str):
            raise ConfigError(
                "data.path" if on_error is None else "data.hf_dataset",
                f"record {n} has no string field {TEXT_FIELD!r} (fields: {', '.join(map(str, row)) if isinstance(row, dict) else type(row).__name__})",
                source=where,
            )
        if text:
            yield hashlib.sha1(text.encode("utf-8")).hexdigest(), text


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def jsonl_source(data_cfg: DataConfig) -> Source:
    path = Path(data_cfg.path).expanduser()
    if not data_cfg.path:
        raise ConfigError("data.path", "is required when data.corpus='jsonl'")
    if not path.is_file():
        raise ConfigError("data.path", f"file not found: {path}", value=str(path))
    sha = _file_sha256(path)

    def documents() -> Iterator[tuple[str, str]]:
        datasets = _datasets()
        try:
            rows = datasets.load_dataset("json", data_files=str(path), split="train", streaming=True)
        except Exception as exc:
            raise CemError(f"{path}: cannot read as JSON lines: {' '.join(str(exc).split())[:200]}") from None
        yield from _text_docs(rows, str(path), None)

    return Source("jsonl", f"jsonl-{sha[:16]}", False, documents, {"path": str(path.resolve()), "file_sha256": sha})


FILE_KINDS = (".jsonl", ".json", ".jsonl.gz", ".parquet", ".txt")


def _file_kind(path: Path) -> str:
    name = path.name.lower()
    for suffix in FILE_KINDS:
        if name.endswith(suffix):
            return suffix
    raise ConfigError("data.path", f"{path}: unknown file kind", value=str(path), allowed=FILE_KINDS)


def _read_errors(path: Path, docs: Iterator[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """`docs` with every read failure (a truncated .gz, invalid UTF-8, a damaged Parquet file, an I/O error)
    turned into one line naming the file: never "interrupted" (click reads EOFError as Ctrl-D) or an internal
    error."""
    import zlib

    try:
        yield from docs
    except CemError:
        raise
    except EOFError:
        raise CemError(f"{path}: the file ends early (truncated: a compressed file cut before its end)") from None
    except UnicodeDecodeError as e:
        raise CemError(f"{path}: not valid UTF-8 text (byte {e.start}: {e.reason})") from None
    except (OSError, zlib.error) as e:
        raise CemError(f"{path}: cannot be read ({' '.join(str(getattr(e, 'strerror', None) or e).split())[:200]})") from None
    except Exception as e:  # noqa: BLE001 - pyarrow and friends: any failure to read is this file's
        raise CemError(f"{path}: cannot be read ({type(e).__name__}: {' '.join(str(e).split())[:200]})") from None


def _jsonl_docs(path: Path) -> Iterator[tuple[str, str]]:
    import gzip
    import json

    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                raise CemError(f"{path}: line {n} is not JSON ({e})") from None
            text = row.get(TEXT_FIELD) if isinstance(row, dict) else None
            if not isinstance(text, str):
                raise ConfigError("data.path", f"line {n} has no string field {TEXT_FIELD!r}", source=str(path))
            if text:
                yield hashlib.sha1(text.encode("utf-8")).hexdigest(), text


def _parquet_docs(path: Path) -> Iterator[tuple[str, str]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise CemError("data.corpus='files' with Parquet files needs pyarrow (pip install '.[hf]')") from None
    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # noqa: BLE001 - not Parquet, damaged
        raise CemError(f"{path}: cannot read as Parquet: {' '.join(str(e).split())[:200]}") from None
    if TEXT_FIELD not in pf.schema_arrow.names:
        raise ConfigError("data.path", f"has no {TEXT_FIELD!r} column (columns: {', '.join(pf.schema_arrow.names)})",
                          source=str(path))
    for batch in pf.iter_batches(columns=[TEXT_FIELD], batch_size=1024):
        for text in batch.column(0).to_pylist():
            if isinstance(text, str) and text:
                yield hashlib.sha1(text.encode("utf-8")).hexdigest(), text


def _text_file_docs(path: Path) -> Iterator[tuple[str, str]]:
    text = path.read_text(encoding="utf-8", errors="replace")
    if text:
        yield hashlib.sha1(text.encode("utf-8")).hexdigest(), text


MAX_GLOB_ENTRIES = 2_000_000  # entries a `**` walk may visit before it stops with an error naming the pattern


def _magic(part: str) -> bool:
    return any(ch in part for ch in "*?[")


def _match_parts(parts: list[str], pats: list[str]) -> bool:
    """Whether a relative path's components match glob components ('**' = zero or more folders, not hidden)."""
    import fnmatch

    if not pats:
        return not parts
    if pats[0] == "**":
        for i in range(len(parts)):
            if _match_parts(parts[i:], pats[1:]):
                return True
            if parts[i].startswith("."):
                return False
        return _match_parts([], pats[1:])
    if not parts or (parts[0].startswith(".") and not pats[0].startswith(".")):
        return False
    return fnmatch.fnmatchcase(parts[0], pats[0]) and _match_parts(parts[1:], pats[1:])


def glob_files(pattern: str, *, max_entries: int = MAX_GLOB_ENTRIES) -> list[Path]:
    """The regular files `pattern` matches, sorted (a glob, `~` expanded; `**` recurses).

    `**` descends only into real folders: a symlinked folder below it is never followed, so links that loop
    (`a/up -> ..`) cannot make it run forever, and the walk stops with a ConfigError after `max_entries`
    entries. The components before the first `**` are expanded like any glob (a link named there is followed).
    """
    import glob as _glob

    pattern = os.path.expanduser(pattern)
    parts = pattern.split("/")
    if "**" not in parts:
        return [p for p in sorted(Path(x) for x in _glob.glob(pattern)) if p.is_file()]
    cut = parts.index("**")
    head, tail = "/".join(parts[:cut]) or ("/" if pattern.startswith("/") else "."), parts[cut:]
    bases = sorted(_glob.glob(head)) if _magic(head) else [head]
    found: list[Path] = []
    visited = 0
    for base in bases:
        if not os.path.isdir(base):
            continue
        for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
            dirnames.sort()
            visited += len(dirnames) + len(filenames)
            if visited > max_entries:
                raise ConfigError("data.path", f"{pattern}: the '**' walk under {base} passed {max_entries} entries; "
                                  "narrow the glob", value=pattern)
            rel_dir = os.path.relpath(dirpath, base)
            prefix = [] if rel_dir == "." else rel_dir.split(os.sep)
            for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                if _match_parts(prefix + [name], tail):
                    path = Path(dirpath) / name
                    if path.is_file():
                        found.append(path if base != "." or pattern.startswith("./") else Path(os.path.relpath(path)))
    return sorted(found)


def files_source(data_cfg: DataConfig) -> Source:
    if not data_cfg.path:
        raise ConfigError("data.path", "is required when data.corpus='files' (a glob, e.g. /data/*.jsonl)")
    paths = glob_files(data_cfg.path)
    if not paths:
        raise ConfigError("data.path", f"matches no file: {data_cfg.path}", value=data_cfg.path)
    kinds = {p: _file_kind(p) for p in paths}
    ident = hashlib.sha256()
    for p in paths:
        st = p.stat()
        ident.update(f"{p.resolve()}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    readers = {".parquet": _parquet_docs, ".txt": _text_file_docs}

    def documents() -> Iterator[tuple[str, str]]:
        for p in paths:
            yield from _read_errors(p, readers.get(kinds[p], _jsonl_docs)(p))

    info = {"pattern": data_cfg.path, "files": len(paths), "bytes": sum(p.stat().st_size for p in paths)}
    return Source("files", f"files-{ident.hexdigest()[:16]}", False, documents, info)


def slimpajama_source(data_cfg: DataConfig) -> Source:
    name = data_cfg.hf_dataset

    def documents() -> Iterator[tuple[str, str]]:
        datasets = _datasets()
        try:
            rows = datasets.load_dataset(name, split="train", streaming=True)
        except Exception as exc:  # offline, hub down, unknown dataset: one line naming the fix
            raise hub_error(f"dataset {name!r}", exc) from None
        yield from _text_docs(rows, name, lambda exc: hub_error(f"dataset {name!r}", exc))

    return Source("slimpajama", f"hf-{name}", True, documents, {"hf_dataset": name})


def make_source(data_cfg: DataConfig) -> Source:
    """The corpus named by `data.corpus` (`cem_core.variants.CORPORA`; unknown names list the known ones)."""
    from cem_core.variants import CORPORA

    return CORPORA.get(data_cfg.corpus)(data_cfg)
