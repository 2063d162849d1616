"""Data preparation speed (`python -m bench --only data`): `cemctl data prepare` on a >= 200 MB local corpus.

The corpus is generated once (cached in the bench cache folder) from the built-in corpus, offline: each
document is a built-in document whose paragraphs are shuffled and which gets a numbered header, written as
JSON lines until the files hold `corpus_mb` MB. It is prepared as `data.corpus = "files"` with the BPE
tokenizer, in a fresh `python -m cemctl.cli data prepare` process per worker count:

- 1 worker: trains the BPE on the train split (timed apart: `tokenizer_s` in the cache's meta.json) and
  tokenizes; its trained tokenizer is then copied into the other caches, so N workers time tokenization only;
- 2 workers (and more on bigger machines): the same corpus, a fresh cache;
- the caches must be byte-identical (the test suite checks this too; here on the full corpus);
- bytes on disk per token (the packed splits) and bytes of text per token;
- opening the prepared cache as a run does (`cem_core.data.data_for_run` in a fresh process, with the cache
  lookup, the memmaps and one batch of sequences), median of 5.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.env import REPO_ROOT
from bench.settings import Settings
from bench.table import Section, Target
from bench.timing import median

SPEEDUP_TARGET = 1.7  # 2 workers vs 1
OPEN_TARGET_S = 1.0


def make_corpus(folder: Path, target_mb: float, *, files: int = 8, seed: int = 0) -> dict[str, Any]:
    """JSON-lines files holding >= target_mb MB of shuffled built-in documents (reused when already there)."""
    from cem_core.data.builtin_corpus import load_builtin_corpus

    stamp = folder / "corpus.json"
    want = {"target_mb": target_mb, "files": files, "seed": seed, "version": 1}
    if stamp.exists() and json.loads(stamp.read_text()).get("recipe") == want:
        return json.loads(stamp.read_text())
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    docs = [d.text if hasattr(d, "text") else d for d in load_builtin_corpus().documents]
    rng = random.Random(seed)
    target = int(target_mb * 1e6)
    written, n = 0, 0
    handles = [open(folder / f"part-{i:03d}.jsonl", "w", encoding="utf-8") for i in range(files)]
    try:
        while written < target:
            paragraphs = [p for p in rng.choice(docs).split("\n\n") if p.strip()]
            rng.shuffle(paragraphs)
            text = f"[{n}]\n" + "\n\n".join(paragraphs)
            line = json.dumps({"text": text}) + "\n"
            handles[n % files].write(line)
            written += len(line.encode("utf-8"))
            n += 1
    finally:
        for h in handles:
            h.close()
    info = {"recipe": want, "documents": n, "bytes": written}
    stamp.write_text(json.dumps(info))
    return info


def _grid(corpus: Path, cache: Path) -> str:
    return f"""[experiment]
name = "bench-data"
figure = "curves"

[base]
"model.size" = "nano"
"data.corpus" = "files"
"data.path" = "{corpus}/*.jsonl"
"data.tokenizer" = "bpe"
"data.cache_dir" = "{cache}"
"train.max_steps" = 10
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    for key in ("CEMCTL_DB", "CEMCTL_RUNS"):
        env.pop(key, None)
    return env


def _prepare(work: Path, corpus: Path, cache: Path, workers: int) -> dict[str, Any]:
    grid = work / f"grid-{cache.name}.toml"
    grid.write_text(_grid(corpus, cache))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "cemctl.cli", "data", "prepare", str(grid), "--workers", str(workers),
                           "--json", "--db", str(work / "results.db")], cwd=work, env=_env(), capture_output=True,
                          text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"data prepare --workers {workers} failed: {proc.stderr.strip()[-300:]}")
    (row,) = json.loads(proc.stdout)["caches"]
    meta = json.loads((Path(row["cache"]) / "meta.json").read_text())
    return {"wall_s": wall, "path": Path(row["cache"]), "meta": meta, "size_bytes": row["size_bytes"]}


_OPEN = """
import json, sys, time
t0 = time.perf_counter()
from cem_core.config import RunConfig, resolve
from cem_core.data import data_for_run
import numpy as np
cfg = resolve(RunConfig.from_dict(json.loads(sys.argv[1])))
t1 = time.perf_counter()
data = data_for_run(cfg)
batch = np.asarray(data.sequences("train", 256, np.arange(8)))
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "open_s": t2 - t1, "total_s": t2 - t0, "tokens": int(batch.size)}))
"""


def _open_times(corpus: Path, cache: Path, repeats: int) -> dict[str, float]:
    cfg = {"model": {"size": "nano"}, "train": {"max_steps": 10},
           "data": {"corpus": "files", "path": f"{corpus}/*.jsonl", "tokenizer": "bpe", "cache_dir": str(cache)}}
    rows = []
    env = _env()
    env["CEMCTL_REQUIRE_PREPARED"] = "1"  # as a launched job: open, never build
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", _OPEN, json.dumps(cfg)], env=env, capture_output=True, text=True,
                             check=True)
        rows.append(json.loads(out.stdout))
    return {k: median([r[k] for r in rows]) for k in ("import_s", "open_s", "total_s")}


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    for split in ("train", "val", "test"):
        with open(path / f"{split}.bin", "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
    return h.hexdigest()


def run(s: Settings) -> Section:
    title = "Data preparation: `cemctl data prepare` on a local JSON-lines corpus (BPE 4096, files corpus)"
    corpus_mb = 4.0 if s.quick else 200.0
    work = Path(s.cache_dir) / "data-prepare"
    corpus = work / f"corpus-{int(corpus_mb)}mb"
    info = make_corpus(corpus, corpus_mb)
    runs_dir = work / "runs"
    shutil.rmtree(runs_dir, ignore_errors=True)
    runs_dir.mkdir(parents=True)
    worker_counts = [1, 2] + ([os.cpu_count()] if (os.cpu_count() or 1) > 2 else [])
    results = {}
    tokenizers = None
    for n in worker_counts:
        cache = runs_dir / f"cache-w{n}"
        if tokenizers is not None:  # the BPE trained by the 1-worker build: time tokenization alone
            shutil.copytree(tokenizers, cache / "tokenizers")
        results[n] = _prepare(runs_dir, corpus, cache, n)
        if tokenizers is None:
            tokenizers = cache / "tokenizers"
    digests = {n: _digest(r["path"]) for n, r in results.items()}
    rows = []
    base_tok_s = None
    for n, r in results.items():
        m = r["meta"]
        tokens = sum(v["tokens"] for v in m["splits"].values())
        tokenize_s = m["build_s"] - m["tokenizer_s"]
        tok_per_s = tokens / tokenize_s
        base_tok_s = base_tok_s or tok_per_s
        rows.append({
            "workers": n, "documents": m["documents_read"], "tokens": tokens, "BPE training s": m["tokenizer_s"],
            "tokenize s": round(tokenize_s, 2), "tokens/s": tok_per_s, "speed-up": tok_per_s / base_tok_s,
            "MB/s of text": info["bytes"] / 1e6 / tokenize_s, "command wall s": round(r["wall_s"], 2),
            "identical to 1 worker": digests[n] == digests[1],
        })
    one = results[1]
    tokens = sum(v["tokens"] for v in one["meta"]["splits"].values())
    opened = _open_times(corpus, runs_dir / "cache-w1", 2 if s.quick else 5)
    speedup = rows[1]["speed-up"]
    section = Section("data_prepare", title, columns=list(rows[0].keys()), rows=rows)
    section.targets = [
        Target("2 workers vs 1, tokenize tokens/s", f">= {SPEEDUP_TARGET}x", f"{speedup:.2f}x",
               speedup >= SPEEDUP_TARGET if not s.quick else None,
               "" if not s.quick else "quick mode: corpus too small to judge"),
        Target("a run opens the prepared cache", f"< {OPEN_TARGET_S:.0f} s", f"{opened['open_s']:.3f} s "
               f"(+ {opened['import_s']:.2f} s imports)", opened["open_s"] < OPEN_TARGET_S),
        Target("caches identical for 1 and 2 workers", "byte for byte",
               "identical" if rows[1]["identical to 1 worker"] else "DIFFERENT", rows[1]["identical to 1 worker"]),
    ]
    section.notes = [
        f"Corpus: {info['documents']:,} documents, {info['bytes'] / 1e6:.0f} MB of JSON lines in 8 files "
        f"(shuffled paragraphs of the built-in corpus), split train/val/test by document hash.",
        f"On disk: {one['size_bytes'] / tokens:.2f} bytes per token (uint16 ids; {one['size_bytes'] / 1e6:.0f} MB "
        f"for {tokens / 1e6:.1f} M tokens); {info['bytes'] / tokens:.2f} bytes of JSON text per token.",
        f"Opening it as a run (fresh process, `data_for_run` + one batch): {opened['open_s'] * 1e3:.0f} ms "
        f"(median; imports {opened['import_s']:.2f} s come before).",
        "Tokenize time = build time minus BPE training (`meta.json`: build_s - tokenizer_s); the coordinator "
        "reads and hashes the JSON lines while the workers tokenize, so it shares the cores with them.",
    ]
    return section
