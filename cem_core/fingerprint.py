"""Which code trained a run: a fingerprint of the model and training code (`cemctl launch`, `status`, `report`, `claims`).

    code_fingerprint()                      -> "9f3a61c0b2d4" (this installation's cem_core)
    code_fingerprint(plugins=["my_layer"])  -> the same, with the plugin modules a grid loads

What counts as model code is what decides the numbers a run produces: the model
(`cem_core/model/`), the training step, optimizer, schedule, sampling and evaluation
(`cem_core/train/`: loop, optim, tasks, sampler, evaluate), the token stream
(`cem_core/data/`: sources, tokenizer, packing, the built-in corpus), the GP task
(`cem_core/gp/`: model, task, data) and any plugin module of the grid. Not counted:
configuration, validation and the counts (a config is hashed into the run id already;
counts are bookkeeping), logging, checkpoint files,
the orchestration in `cemctl/`, recursion evaluation after training.

Bookkeeping (how an attempt's result, events and heartbeat are written: `train/attempt.py`,
`train/preempt.py`) is not model code: a fix there never outdates a finished run.

Each file counts by what it computes, not how it reads: its syntax tree with every
docstring removed (comments and layout are not in the tree), so editing a docstring,
a comment or the formatting keeps the fingerprint, while any change to a statement,
an expression or a constant changes it. The fingerprint is 12 hex characters of the
sha256 over the sorted (file, tree) pairs. Torch-free: it reads source files only.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from cem_core.runfiles import RunFileError, atomic_write_bytes, read_bytes
from cem_core.runfiles.lock import file_lock

CORE = Path(__file__).resolve().parent
MAX_CACHE_BYTES = 64 << 20  # a larger cache is ignored (and rewritten with what this process parsed)
# Relative to the cem_core package: folders (every .py file in them) and single files.
MODEL_CODE: tuple[str, ...] = (
    "model",
    "train/loop.py", "train/optim.py", "train/tasks.py", "train/sampler.py", "train/evaluate.py",
    "data/sources.py", "data/tokenizer.py", "data/packing.py", "data/builtin_corpus.py",
    "gp/model.py", "gp/task.py", "gp/data.py",
)


# A fingerprint recorded by code that computes what a later code computes, shown by retraining archived runs with
# the later code (evidence: docs/code-equivalence.md): a run recorded with the key is current while this
# installation's fingerprint is the value, or what the value leads to in turn (`equivalent`). An entry is added
# only with its evidence, never to relabel runs silently.
EQUIVALENT: dict[str, str] = {
    "6529dbaa6e58": "0664f622f66e",  # train/loop.py's bookkeeping moved to train/attempt.py and train/preempt.py
    "0664f622f66e": "bd240f845b5b",  # data/packing.py's SplitWriter, which nothing called, deleted
}


def _chain(code: str) -> list[str]:
    """`code`, then the fingerprints it leads to through `EQUIVALENT`, each once (a cycle ends)."""
    chain = [code]
    while chain[-1] in EQUIVALENT and EQUIVALENT[chain[-1]] not in chain:
        chain.append(EQUIVALENT[chain[-1]])
    return chain


def canonical(code: str) -> str:
    """The last fingerprint `code` leads to through `EQUIVALENT`: runs whose fingerprints have one canonical
    fingerprint were trained by code that computes the same."""
    return _chain(code)[-1]


def equivalent(recorded: str, current: str) -> bool:
    """Code that recorded `recorded` computes what code with fingerprint `current` computes: the same fingerprint,
    or a chain of `EQUIVALENT` entries from one to the other."""
    return current in _chain(recorded)


def normalized(source: str) -> str:
    """The syntax tree of `source` without docstrings, as text (comments and layout are not in a tree)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


def model_code_files(root: Path = CORE) -> list[Path]:
    files: list[Path] = []
    for item in MODEL_CODE:
        path = root / item
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return [f for f in files if f.is_file() and "__pycache__" not in f.parts]


def plugin_files(plugins: Iterable[str]) -> list[Path]:
    """The source files of plugin modules (a package: every .py file in it)."""
    out: list[Path] = []
    for name in plugins:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        origin = Path(spec.origin)
        if spec.submodule_search_locations:
            for location in spec.submodule_search_locations:
                out += sorted(Path(location).rglob("*.py"))
        elif origin.suffix == ".py":
            out.append(origin)
    return out


def _file_digest(path: Path, cache: dict[str, list]) -> str:
    """sha256 of the file's normalized tree; `cache` maps a path to [mtime_ns, size, digest] (parsing is the cost)."""
    st = path.stat()
    key = str(path)
    hit = cache.get(key)
    if isinstance(hit, list) and len(hit) == 3 and hit[0] == st.st_mtime_ns and hit[1] == st.st_size:
        return str(hit[2])
    digest = hashlib.sha256(normalized(path.read_text(encoding="utf-8")).encode()).hexdigest()
    cache[key] = [st.st_mtime_ns, st.st_size, digest]
    return digest


def _cache_path() -> Path:
    base = os.environ.get("CEMCTL_CACHE") or str(Path.home() / ".cache" / "cemctl")
    return Path(base) / "code-fingerprints.json"


def _read_cache(path: Path) -> dict[str, Any]:
    """The cache as a table ({} when missing, unreadable, not a regular file or not a table: it is only a cache)."""
    try:
        cache = json.loads(read_bytes(path, max_bytes=MAX_CACHE_BYTES))
    except (OSError, ValueError, RecursionError, RunFileError):
        return {}
    return cache if isinstance(cache, dict) else {}


def _write_cache(path: Path, cache: dict[str, Any]) -> None:
    """Merge `cache` into the file under the one lock and atomic write of `cem_core.runfiles`; best effort (a cache
    that cannot be written only costs the parsing next time, and a process holding the lock is writing it now)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(path.with_name(f".{path.name}.lock"), blocking=False) as held:
            if held:
                merged = {**_read_cache(path), **cache}
                atomic_write_bytes(path, json.dumps(merged).encode(), durable=False, pause=False)
    except (OSError, RunFileError):
        pass


def fingerprint_of(files: Sequence[tuple[str, Path]]) -> str:
    path = _cache_path()
    cache = _read_cache(path)
    before = dict(cache)
    h = hashlib.sha256()
    for name, file in sorted(files, key=lambda item: item[0]):
        h.update(name.encode() + b"\0" + _file_digest(file, cache).encode() + b"\0")
    if cache != before:
        _write_cache(path, {k: v for k, v in cache.items() if before.get(k) != v})
    return h.hexdigest()[:12]


def code_fingerprint(plugins: Sequence[str] = (), root: Path = CORE) -> str:
    """The fingerprint of the model and training code under `root` (a cem_core folder) and the plugins."""
    files = [(str(p.relative_to(root)), p) for p in model_code_files(root)]
    files += [(f"plugin:{p.name}", p) for p in plugin_files(plugins)]
    return fingerprint_of(files)
