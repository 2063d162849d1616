"""Data layer: the built-in corpus, tokenizers, splits by document, packing and the memmap cache."""

from __future__ import annotations

import collections
import hashlib
import json
import multiprocessing
import os
import re

import numpy as np
import pytest

from cem_core.config import DataConfig, RunConfig, resolve, tokenizer_vocab_size
from cem_core.data import PackedData, prepare_data, split_of
from cem_core.data import tokenizer as tokmod
from cem_core.data.builtin_corpus import _extract, corpus_sha256, load_builtin_corpus
from cem_core.data.tokenizer import ByteTokenizer, build_tokenizer
from cem_core.errors import ConfigError

SAMPLE = "The quick brown fox jumps over the lazy dog.\nÜnïcödé — naïve café, 東京 ✓\n\n  indented()  "


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cemctl-cache")


@pytest.fixture(scope="session")
def byte_data(shared_cache) -> PackedData:
    return prepare_data(DataConfig(tokenizer="byte", cache_dir=str(shared_cache)))


@pytest.fixture(scope="session")
def bpe_data(shared_cache) -> PackedData:
    return prepare_data(DataConfig(tokenizer="bpe", bpe_vocab_size=4096, cache_dir=str(shared_cache)))


# -- the built-in corpus ------------------------------------------------------


def test_builtin_corpus_is_two_megabytes_of_english():
    corpus = load_builtin_corpus()
    assert corpus.num_bytes >= 2_000_000
    assert len(corpus.documents) >= 500
    text = "\n".join(d.text for d in corpus.documents)
    letters_or_space = sum(1 for ch in text if ch == " " or ("a" <= ch.lower() <= "z"))
    assert letters_or_space / len(text) > 0.8
    words = collections.Counter(re.findall(r"[a-z]+", text.lower()))
    top = [w for w, _ in words.most_common(10)]
    assert "the" in top[:3] and {"of", "to", "and", "is", "a"} & set(top)
    ids = [d.doc_id for d in corpus.documents]
    assert len(set(ids)) == len(ids), "document ids are unique"


@pytest.mark.slow
def test_builtin_corpus_is_deterministic():
    again = _extract()  # a fresh extraction, bypassing the per-process cache
    corpus = load_builtin_corpus()
    assert [d.doc_id for d in again] == [d.doc_id for d in corpus.documents]
    assert corpus_sha256(again) == corpus.sha256


def test_splits_are_disjoint_by_document_and_large_enough(byte_data):
    corpus = load_builtin_corpus()
    by_split = collections.defaultdict(list)
    for d in corpus.documents:
        by_split[split_of(d.doc_id)].append(d)
    assert set(by_split) == {"train", "val", "test"}
    # Every document is in exactly one split; the packed arrays hold exactly those documents.
    for split, docs in by_split.items():
        expected = b"".join(d.text.encode("utf-8") + b"\x00" for d in docs)
        toks = np.asarray(byte_data.tokens(split))
        assert toks.size == len(expected) == byte_data.meta["splits"][split]["tokens"]
        assert int((toks == 256).sum()) == len(docs)
        as_bytes = np.where(toks == 256, 0, toks).astype(np.uint8).tobytes()
        assert as_bytes == expected
    # The trainer's default budgets fit with the byte tokenizer.
    assert byte_data.num_tokens("val") > 65536 and byte_data.num_tokens("test") > 262144
    assert byte_data.corpus_hash == corpus.sha256


def test_split_rule_is_stable():
    assert split_of("stdlib/json/decoder.py") == split_of("stdlib/json/decoder.py")
    counts = collections.Counter(split_of(f"doc-{i}") for i in range(20000))
    assert 0.15 < counts["test"] / 20000 < 0.21 and 0.035 < counts["val"] / 20000 < 0.065


# -- tokenizers ----------------------------------------------------------------


def test_byte_tokenizer_round_trips():
    tok = ByteTokenizer()
    ids = tok.encode(SAMPLE)
    assert ids.max() < 256 and tok.eod_id == 256 and tok.vocab_size == 257
    assert tok.decode(list(ids) + [tok.eod_id]) == SAMPLE


def test_bpe_has_configured_vocab_round_trips_and_matches_config(bpe_data, shared_cache):
    cfg = DataConfig(tokenizer="bpe", bpe_vocab_size=4096, cache_dir=str(shared_cache))
    tok = build_tokenizer(cfg, shared_cache, bpe_data.meta["corpus_identity"], train_texts=lambda: iter(()))
    assert tok.tok.get_vocab_size() == 4096 == tok.vocab_size
    ids = tok.encode(SAMPLE)
    assert tok.decode(ids) == SAMPLE
    assert len(ids) < len(SAMPLE.encode("utf-8"))  # it compresses
    assert bpe_data.vocab_size == tokenizer_vocab_size(cfg) == 4096
    train = np.asarray(bpe_data.tokens("train"))
    assert train.dtype == np.uint16 and int(train.max()) < 4096
    assert int((train == bpe_data.eod_id).sum()) == bpe_data.meta["splits"]["train"]["documents"]
    # The model is built with the same vocab.
    run = resolve(RunConfig.from_dict({"data.tokenizer": "bpe", "data.bpe_vocab_size": 4096, "model.size": "nano"}))
    assert run.model.vocab_size == bpe_data.vocab_size


def test_byte_vocab_matches_config(byte_data):
    assert byte_data.vocab_size == tokenizer_vocab_size(DataConfig(tokenizer="byte")) == 257
    assert byte_data.eod_id == 256
    assert resolve(RunConfig.from_dict({"data.tokenizer": "byte", "model.size": "nano"})).model.vocab_size == 257


def test_bpe_is_trained_once_and_cached(bpe_data, shared_cache):
    cfg = DataConfig(tokenizer="bpe", bpe_vocab_size=4096, cache_dir=str(shared_cache))
    tok_files = list((shared_cache / "tokenizers").glob("bpe-4096-*.json"))
    assert len(tok_files) == 1
    mtime = tok_files[0].stat().st_mtime_ns
    calls = tokmod.BPE_TRAIN_CALLS
    before = np.asarray(bpe_data.tokens("val")).copy()
    # Drop the packed arrays: re-packing must reuse the cached tokenizer, not retrain it.
    import shutil

    shutil.rmtree(bpe_data.path.parent)
    again = prepare_data(cfg)
    assert tokmod.BPE_TRAIN_CALLS == calls
    assert tok_files[0].stat().st_mtime_ns == mtime
    assert np.array_equal(np.asarray(again.tokens("val")), before)


def test_unknown_names_are_rejected_with_the_known_ones(tmp_path):
    with pytest.raises(ConfigError) as e:
        prepare_data(DataConfig(tokenizer="wordpiece", cache_dir=str(tmp_path)))
    assert "data.tokenizer" in str(e.value) and "byte, bpe, hf" in str(e.value)
    with pytest.raises(ConfigError) as e:
        prepare_data(DataConfig(corpus="wikipedia", cache_dir=str(tmp_path)))
    assert "data.corpus" in str(e.value) and "builtin, jsonl, files, slimpajama" in str(e.value)
    assert not list(tmp_path.iterdir()), "nothing written for bad input"


# -- packing and the cache -----------------------------------------------------


def test_sequences_are_windows_of_the_flat_array(byte_data):
    flat = np.asarray(byte_data.tokens("val"))
    seq_len = 128
    n = byte_data.num_sequences("val", seq_len)
    assert n == (flat.size - 1) // seq_len
    idx = np.array([0, 1, n - 1, 7, 7])
    seqs = byte_data.sequences("val", seq_len, idx)
    assert seqs.shape == (5, seq_len + 1) and seqs.dtype == np.int64
    for row, i in zip(seqs, idx):
        assert np.array_equal(row, flat[i * seq_len : (i + 1) * seq_len + 1])
    assert np.array_equal(seqs[0, -1], seqs[1, 0])  # consecutive windows share one token
    with pytest.raises(IndexError):
        byte_data.sequences("val", seq_len, [n])
    assert byte_data.sequences("val", seq_len, []).shape == (0, seq_len + 1)


def test_cache_is_built_once_and_reused(byte_data, shared_cache):
    train_bin = byte_data.path / "train.bin"
    mtime = train_bin.stat().st_mtime_ns
    again = prepare_data(DataConfig(tokenizer="byte", cache_dir=str(shared_cache)))
    assert again.path == byte_data.path
    assert train_bin.stat().st_mtime_ns == mtime
    assert isinstance(again.tokens("train"), np.memmap)
    # The cache key separates settings: another BPE size is another entry.
    names = {p.name for p in (shared_cache / "packed").iterdir() if p.is_dir()}
    assert any(n.startswith("builtin-byte-") for n in names)


def test_cache_dir_from_environment(monkeypatch, tmp_path, byte_data):
    monkeypatch.setenv("CEMCTL_CACHE", str(tmp_path / "envcache"))
    from cem_core.data.tokenizer import default_cache_root

    assert default_cache_root(DataConfig()) == tmp_path / "envcache"
    assert default_cache_root(DataConfig(cache_dir=str(tmp_path / "x"))) == tmp_path / "x"


def test_leftover_temp_dir_of_a_crashed_builder_is_ignored(tmp_path):
    path = tmp_path / "one.jsonl"
    texts = [f"document {i} alpha beta" for i in range(200)]  # enough that each split gets documents
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    cfg = DataConfig(corpus="jsonl", path=str(path), tokenizer="byte", cache_dir=str(tmp_path / "c"))
    first = prepare_data(cfg)
    import shutil

    shutil.rmtree(first.path)
    junk = first.path.parent / ".g0.crashed.tmp"
    junk.mkdir()
    (junk / "train.bin").write_bytes(b"\x01")
    (first.path.parent / "g3").mkdir()  # a generation without meta.json: not data, and not provably the build's
    again = prepare_data(cfg)
    assert not junk.exists(), "the crashed builder's temporary directory was cleaned up"
    assert again.path.name == "g4" and (first.path.parent / "g3").is_dir()  # skipped, left alone
    assert again.num_tokens("train") + again.num_tokens("val") + again.num_tokens("test") == sum(len(t) + 1 for t in texts)


def _prepare_in_child(args):
    cache_dir, vocab = args
    from cem_core.data import prepare_data as prep
    from cem_core.data import tokenizer as tm

    pd = prep(DataConfig(tokenizer="bpe", bpe_vocab_size=vocab, cache_dir=cache_dir))
    digest = hashlib.sha256(open(pd.path / "train.bin", "rb").read()).hexdigest()
    return str(pd.path), tm.BPE_TRAIN_CALLS, digest, pd.num_tokens("test")


@pytest.mark.slow
def test_two_processes_building_at_once_end_with_one_valid_cache(tmp_path):
    cache_dir = str(tmp_path / "race")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        results = pool.map(_prepare_in_child, [(cache_dir, 600), (cache_dir, 600)])
    paths, trained, digests, tests = zip(*results)
    assert len(set(paths)) == 1 and len(set(digests)) == 1 and len(set(tests)) == 1
    assert sum(trained) == 1, "exactly one process trained the BPE"
    base = tmp_path / "race" / "packed"
    entries = sorted(p.name for p in base.iterdir())
    assert len([e for e in entries if not e.endswith(".lock")]) == 1
    gens = [p.name for p in (base / entries[0] if not entries[0].endswith(".lock") else base / entries[1]).iterdir()]
    assert gens == ["g0"], "no temporary or duplicate generation left behind"
    pd = prepare_data(DataConfig(tokenizer="bpe", bpe_vocab_size=600, cache_dir=cache_dir))
    assert str(pd.path) == paths[0] and pd.vocab_size == 600
    assert hashlib.sha256(open(pd.path / "train.bin", "rb").read()).hexdigest() == digests[0]
    assert os.path.getsize(pd.path / "test.bin") == 2 * tests[0]
