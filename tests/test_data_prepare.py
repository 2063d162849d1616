"""`cemctl data prepare|info|clean` and the launch data check: parallel, resumable, locked, never on a GPU job.

Real files, real worker processes, real `python -m cemctl.cli` processes where a kill or a race is the point.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess as sp
import sys
from pathlib import Path

import numpy as np
import pytest

from cem_core.config import DataConfig, RunConfig, resolve
from cem_core.data import DataNotPrepared, data_for_run, find_prepared, prepare_data, split_of
from cem_core.errors import ConfigError
from helpers import assert_clean_error, cli, finish_run, subprocess_env, tiny_grid, wait_for

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def _docs(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [f"doc {i}: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 40))) + (" é" if i % 7 == 0 else "")
            for i in range(n)]


def _write_jsonl(path: Path, docs: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    return path


def _files_grid(name: str, pattern: str, cache: Path, tokenizer: str = "byte") -> str:
    return tiny_grid(name, seeds="[0]", cache_dir=str(cache),
                     extra=f'"data.corpus" = "files"\n"data.path" = "{pattern}"\n').replace(
        '"data.tokenizer" = "byte"', f'"data.tokenizer" = "{tokenizer}"')


def _split_bytes(packed) -> dict[str, bytes]:  # noqa: ANN001
    return {s: (packed.path / f"{s}.bin").read_bytes() for s in ("train", "val", "test")}


def test_one_and_two_workers_build_byte_identical_caches(tmp_path):
    """3 chunks of documents, BPE (each worker reloads the trained tokenizer): the same bytes for 1 and 2 workers,
    and the same as tokenizing the documents one by one."""
    docs = _docs(2600)
    _write_jsonl(tmp_path / "a.jsonl", docs[:1300])
    _write_jsonl(tmp_path / "b.jsonl", docs[1300:])
    pattern = str(tmp_path / "*.jsonl")
    one = prepare_data(DataConfig(corpus="files", path=pattern, tokenizer="bpe", bpe_vocab_size=300,
                                  cache_dir=str(tmp_path / "c1")), workers=1)
    two = prepare_data(DataConfig(corpus="files", path=pattern, tokenizer="bpe", bpe_vocab_size=300,
                                  cache_dir=str(tmp_path / "c2")), workers=2)
    assert one.meta["chunks"] == two.meta["chunks"] == 3
    assert _split_bytes(one) == _split_bytes(two)
    assert one.meta["splits"] == two.meta["splits"] and one.corpus_hash == two.corpus_hash
    from cem_core.data import build_tokenizer

    tok = build_tokenizer(DataConfig(corpus="files", path=pattern, tokenizer="bpe", bpe_vocab_size=300),
                          tmp_path / "c1", one.meta["corpus_identity"])
    expected: list[int] = []
    for d in docs:
        if split_of(hashlib.sha1(d.encode()).hexdigest()) == "val":
            expected += list(tok.encode(d)) + [one.eod_id]
    assert np.array_equal(np.asarray(one.tokens("val")).astype(np.int64), np.array(expected))


def test_a_streamed_budget_cuts_at_a_document_for_any_worker_count(tmp_path):
    """A streamed corpus is read until each split holds its budget: the cut is at a document, not a chunk,
    so 1 and 2 workers (and any chunking) keep the same documents."""
    folder = tmp_path / "hub"
    folder.mkdir()
    _write_jsonl(folder / "train.jsonl", _docs(3000, seed=1))
    out = []
    for workers in (1, 2):
        cfg = DataConfig(corpus="slimpajama", hf_dataset=str(folder), tokenizer="byte",
                         cache_dir=str(tmp_path / f"c{workers}"))
        out.append(prepare_data(cfg, min_train_tokens=30_000, val_tokens=2_000, test_tokens=3_000, workers=workers))
    a, b = out
    assert not a.meta["complete"] and a.meta["documents_read"] < 3000
    assert _split_bytes(a) == _split_bytes(b) and a.meta["documents_read"] == b.meta["documents_read"]
    for split, budget in (("train", 30_001), ("val", 2_001), ("test", 3_001)):
        assert a.meta["splits"][split]["tokens"] >= budget
        assert a.meta["splits"][split]["tokens"] - budget < 400  # at most one document past the budget


def test_an_interrupted_prepare_resumes_from_its_finished_chunks(tmp_path):
    """Kill -9 in the middle of `cemctl data prepare`; the next prepare keeps the finished chunks and
    produces the same bytes as an uninterrupted build."""
    docs = _docs(1024 * 6, seed=2)
    _write_jsonl(tmp_path / "corpus.jsonl", docs)
    cache = tmp_path / "cache"
    (tmp_path / "g.toml").write_text(_files_grid("prep", str(tmp_path / "*.jsonl"), cache))
    argv = [sys.executable, "-m", "cemctl.cli", "data", "prepare", str(tmp_path / "g.toml"), "--workers", "1",
            "--db", str(tmp_path / "results.db")]
    proc = sp.Popen(argv, env=subprocess_env(CEMCTL_TEST_WRITE_PAUSE_S="0.4"), stdout=sp.PIPE, stderr=sp.PIPE)
    try:
        wait_for(lambda: list(cache.glob("packed/*/.shards/chunk_0000001.json")), timeout_s=120,
                 what="two finished chunks")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    base = next(cache.glob("packed/files-*"))
    assert not list(base.glob("g*")), "an interrupted prepare must publish nothing"
    res = cli(tmp_path, "data", "prepare", str(tmp_path / "g.toml"), "--workers", "1", "--json", subprocess=True)
    assert res.returncode == 0, res.output
    (row,) = json.loads(res.stdout)["caches"]
    meta = json.loads((Path(row["cache"]) / "meta.json").read_text())
    assert meta["resumed_chunks"] >= 2 and meta["chunks"] == 6
    assert not (base / ".shards").exists()  # removed once published
    fresh = prepare_data(DataConfig(corpus="files", path=str(tmp_path / "*.jsonl"), tokenizer="byte",
                                    cache_dir=str(tmp_path / "fresh")))
    assert {s: (Path(row["cache"]) / f"{s}.bin").read_bytes() for s in ("train", "val", "test")} == _split_bytes(fresh)


def test_two_prepares_at_once_build_the_cache_once(tmp_path):
    _write_jsonl(tmp_path / "corpus.jsonl", _docs(2500, seed=3))
    cache = tmp_path / "cache"
    (tmp_path / "g.toml").write_text(_files_grid("race", str(tmp_path / "*.jsonl"), cache, tokenizer="bpe"))
    argv = [sys.executable, "-m", "cemctl.cli", "data", "prepare", str(tmp_path / "g.toml"), "--json",
            "--db", str(tmp_path / "results.db")]
    procs = [sp.Popen(argv + ["--workers", str(w)], env=subprocess_env(), stdout=sp.PIPE, stderr=sp.PIPE, text=True)
             for w in (1, 2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    rows = [json.loads(o)["caches"][0] for o, _ in outs]
    assert rows[0]["cache"] == rows[1]["cache"]
    assert sorted(r["built"] for r in rows) == [False, True]  # one built it, the other found it
    base = Path(rows[0]["cache"]).parent
    assert sorted(p.name for p in base.iterdir()) == ["g0"]  # no second generation, no leftovers
    assert len(list((cache / "tokenizers").glob("*.json"))) == 1  # the BPE was trained once


def test_files_corpus_reads_jsonl_gzip_parquet_and_text(tmp_path):
    import gzip

    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    docs = _docs(40, seed=4)
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    _write_jsonl(data / "a.jsonl", docs[:10])
    with gzip.open(data / "b.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write("".join(json.dumps({"text": d, "meta": 1}) + "\n" for d in docs[10:20]))
    pq.write_table(pa.table({"text": docs[20:30], "id": list(range(10))}), data / "c.parquet")
    for i, d in enumerate(docs[30:]):
        (data / "sub" / f"d{i}.txt").write_text(d, encoding="utf-8")
    pd = prepare_data(DataConfig(corpus="files", path=str(data / "**" / "*"), tokenizer="byte",
                                 cache_dir=str(tmp_path / "c")))
    assert pd.meta["documents_read"] == 40 and pd.meta["source"]["files"] == 13
    total = sum(v["tokens"] for v in pd.meta["splits"].values())
    assert total == sum(len(d.encode("utf-8")) + 1 for d in docs)  # every document once, with its EOD
    with pytest.raises(ConfigError, match="data.path.*matches no file"):
        prepare_data(DataConfig(corpus="files", path=str(tmp_path / "nothing" / "*.jsonl"), cache_dir=str(tmp_path / "c")))
    (data / "e.csv").write_text("text\nx\n")
    with pytest.raises(ConfigError, match=r"unknown file kind.*\.jsonl, \.json, \.jsonl\.gz, \.parquet, \.txt"):
        prepare_data(DataConfig(corpus="files", path=str(data / "*"), cache_dir=str(tmp_path / "c")))
    pq.write_table(pa.table({"body": ["x"]}), data / "sub" / "bad.parquet")
    with pytest.raises(ConfigError, match="has no 'text' column"):
        prepare_data(DataConfig(corpus="files", path=str(data / "sub" / "*.parquet"), tokenizer="byte",
                                cache_dir=str(tmp_path / "c")))


def test_a_sentencepiece_model_on_disk_is_the_tokenizer(tmp_path):
    spm = pytest.importorskip("sentencepiece")
    docs = _docs(300, seed=5)
    (tmp_path / "train.txt").write_text("\n".join(docs), encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(tmp_path / "train.txt"), model_prefix=str(tmp_path / "sp"),
                                   vocab_size=120, model_type="bpe", eos_id=2, bos_id=1, unk_id=0, pad_id=-1,
                                   minloglevel=2)
    _write_jsonl(tmp_path / "c.jsonl", docs)
    cfg = DataConfig(corpus="files", path=str(tmp_path / "c.jsonl"), tokenizer="hf",
                     tokenizer_path=str(tmp_path / "sp.model"), cache_dir=str(tmp_path / "cache"))
    pd = prepare_data(cfg)
    sp_model = spm.SentencePieceProcessor(model_file=str(tmp_path / "sp.model"))
    assert pd.eod_id == sp_model.eos_id() == 2
    expected: list[int] = []
    for d in docs:
        if split_of(hashlib.sha1(d.encode()).hexdigest()) == "test":
            expected += sp_model.encode(d) + [2]
    assert np.array_equal(np.asarray(pd.tokens("test")).astype(np.int64), np.array(expected))
    with pytest.raises(ConfigError, match="data.tokenizer_path"):
        prepare_data(DataConfig(corpus="files", path=str(tmp_path / "c.jsonl"), tokenizer="hf",
                                tokenizer_path=str(tmp_path / "missing.model"), cache_dir=str(tmp_path / "cache")))


def test_a_launched_job_never_tokenizes(tmp_path, monkeypatch):
    """With CEMCTL_REQUIRE_PREPARED=1 (set by `cemctl launch` for its jobs) a missing cache is one line naming
    `cemctl data prepare`, and nothing is built; a prepared cache is opened."""
    cfg = resolve(RunConfig.from_dict({"model": {"size": "nano", "context_len": 32},
                                       "data": {"tokenizer": "byte", "cache_dir": str(tmp_path / "c")},
                                       "train": {"max_steps": 3, "batch_seqs": 2, "micro_batch_seqs": 2}}))
    monkeypatch.setenv("CEMCTL_REQUIRE_PREPARED", "1")
    with pytest.raises(DataNotPrepared, match="cemctl data prepare"):
        data_for_run(cfg)
    assert not (tmp_path / "c" / "packed").exists() or not list((tmp_path / "c" / "packed").glob("*/g*"))
    monkeypatch.delenv("CEMCTL_REQUIRE_PREPARED")
    built = data_for_run(cfg)
    monkeypatch.setenv("CEMCTL_REQUIRE_PREPARED", "1")
    assert data_for_run(cfg).path == built.path == find_prepared(cfg.data).path


def test_slurm_launch_refuses_missing_data_naming_the_prepare_command(tmp_path):
    from cemctl.services.data import check_launch_data, data_needs, target_configs

    cache = tmp_path / "cache"
    (tmp_path / "g.toml").write_text(tiny_grid("clustered", seeds="[0, 1]", cache_dir=str(cache)))
    res = cli(tmp_path, "launch", str(tmp_path / "g.toml"), "--executor", "slurm", "--scale", "tiny")
    line = assert_clean_error(res, contains="cemctl data prepare clustered --scale tiny")
    assert "--prepare" in line and "2 run(s)" in line
    assert not (tmp_path / "runs" / ".slurm").exists()  # nothing submitted
    assert not list(cache.glob("packed/*/g*"))  # and nothing tokenized
    name, configs = target_configs(str(tmp_path / "g.toml"), scale="tiny", overrides={},
                                   db_url=f"sqlite:///{tmp_path / 'results.db'}", runs_root=tmp_path / "runs")
    assert [len(n.run_ids) for n in data_needs(configs)] == [2]  # two seeds, one cache
    res = cli(tmp_path, "data", "prepare", "clustered", "--scale", "tiny", "--workers", "1")  # the recorded experiment
    assert res.returncode == 0 and "train" in res.stdout, res.output
    assert check_launch_data(configs, may_prepare=False, experiment=name, scale="tiny") == []  # now it passes


@pytest.mark.slow
def test_local_launch_prepares_before_the_first_job(tmp_path):
    cache = tmp_path / "cache"
    (tmp_path / "g.toml").write_text(tiny_grid("localprep", seeds="[0]", steps=2, cache_dir=str(cache)))
    res = cli(tmp_path, "launch", str(tmp_path / "g.toml"), "--workers", "1", subprocess=True)
    assert res.returncode == 0, res.output
    assert "preparing data for 1 runs" in res.stdout and "prepared builtin / byte" in res.stdout
    meta = json.loads(next(cache.glob("packed/*/g0/meta.json")).read_text())
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
    log = (run_dir / "train.log").read_text() if (run_dir / "train.log").exists() else ""
    assert "prepared" not in log  # the job opened the cache, it did not build one
    result = json.loads((run_dir / "result.json").read_text())
    assert result["state"] == "done" and meta["created"] < os.stat(run_dir / "config.json").st_mtime + 600


def test_info_lists_caches_and_clean_removes_only_those_whose_runs_are_finished(tmp_path, monkeypatch):
    """clean removes a cache only finished runs of this database read; one a planned run needs stays, one no run
    of this database reads stays unless --include-unknown (another project may share the folder), and a cache
    folder holding a file cemctl did not write, or a folder cemctl never built, is never touched."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("CEMCTL_CACHE", str(tmp_path / "default-root"))
    (tmp_path / "need.toml").write_text(tiny_grid("needed", seeds="[0]", cache_dir=str(cache)))
    (tmp_path / "fin.toml").write_text(tiny_grid("finished", seeds="[0]", cache_dir=str(cache),
                                                 extra='"data.tokenizer" = "bpe"\n"data.bpe_vocab_size" = 300\n')
                                       .replace('"data.tokenizer" = "byte"\n', ""))
    for grid in ("need.toml", "fin.toml"):
        assert cli(tmp_path, "plan", str(tmp_path / grid)).returncode == 0
        res = cli(tmp_path, "data", "prepare", str(tmp_path / grid), "--workers", "1")
        assert res.returncode == 0, res.output
    (fin_run,) = json.loads(cli(tmp_path, "status", "finished", "--json").stdout)["experiments"][0]["runs"]
    finish_run(tmp_path / "runs" / fin_run["run_id"])
    assert cli(tmp_path, "sync").returncode == 0
    _write_jsonl(tmp_path / "x.jsonl", _docs(50))
    orphan = prepare_data(DataConfig(corpus="files", path=str(tmp_path / "x.jsonl"), tokenizer="byte",
                                     cache_dir=str(cache))).path.parent
    (needed,) = [p for p in cache.glob("packed/builtin-byte-*") if p.is_dir()]
    (done_only,) = [p for p in cache.glob("packed/builtin-bpe-*") if p.is_dir()]
    stranger = cache / "packed" / "someone-elses"
    stranger.mkdir()
    (stranger / "data.bin").write_bytes(b"x")

    db = ("--db", str(tmp_path / "results.db"))
    res = cli(None, "data", "info", "--cache-dir", str(cache), "--json", *db)
    info = {Path(c["cache"]).name: c for c in json.loads(res.stdout)}
    assert set(info) == {orphan.name, needed.name, done_only.name}
    assert info[needed.name]["experiments"] == ["needed"] and info[needed.name]["unfinished_runs"] == 1
    assert info[done_only.name]["experiments"] == ["finished"] and info[done_only.name]["unfinished_runs"] == 0
    assert info[needed.name]["tokens"]["train"] > 0 and info[orphan.name]["runs"] == 0

    dry = cli(None, "data", "clean", "--cache-dir", str(cache), *db)
    assert dry.returncode == 0 and f"would remove {done_only}" in dry.stdout and "--yes" in dry.stdout
    assert done_only.exists()
    (done_only / "notes.txt").write_text("mine")  # a user's file inside a cache folder
    res = cli(None, "data", "clean", "--cache-dir", str(cache), "--yes", *db)
    assert res.returncode == 0 and "did not create" in res.stdout and "--include-unknown" in res.stdout, res.output
    # What the build wrote (its manifest proves it) is gone; the user's file is kept, and so are the others.
    assert sorted(os.listdir(done_only)) == ["notes.txt"] and (done_only / "notes.txt").read_text() == "mine"
    assert orphan.exists() and needed.exists()
    res = cli(None, "data", "clean", "--cache-dir", str(cache), "--yes", "--include-unknown", *db)
    assert res.returncode == 0, res.output
    assert not orphan.exists() and (done_only / "notes.txt").read_text() == "mine"
    assert needed.exists() and (stranger / "data.bin").exists()
    assert find_prepared(DataConfig(tokenizer="byte", cache_dir=str(cache))) is not None  # a planned run needs it


def test_data_commands_never_import_torch(tmp_path):
    (tmp_path / "g.toml").write_text(tiny_grid("notorch", seeds="[0]", cache_dir=str(tmp_path / "cache")))
    assert cli(tmp_path, "plan", str(tmp_path / "g.toml")).returncode == 0
    code = ("import sys; from cemctl.cli import main\n"
            "grid, db = sys.argv[1:3]\n"
            "for argv in (['data', 'prepare', grid, '--workers', '1'], ['data', 'info'], ['data', 'clean']):\n"
            "    sys.argv = ['cemctl', *argv, '--db', db]\n"
            "    try:\n        main()\n    except SystemExit as e:\n        assert not e.code, (argv, e.code)\n"
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')")
    out = sp.run([sys.executable, "-c", code, str(tmp_path / "g.toml"), str(tmp_path / "results.db")],
                 env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "NO-TORCH"
