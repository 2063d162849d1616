"""The Hugging Face `datasets` path (the paper's SlimPajama streaming), run offline on local JSONL files."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cem_core.config import DataConfig
from cem_core.data import prepare_data, split_of
from cem_core.errors import CemError, ConfigError

pytest.importorskip("datasets")

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def _docs(n: int) -> list[str]:
    rng = np.random.default_rng(0)
    return [f"Doc {i}: " + " ".join(rng.choice(WORDS, size=int(rng.integers(5, 60)))) + " é" for i in range(n)]


def _write_jsonl(path, docs, extra=None):
    with open(path, "w", encoding="utf-8") as f:
        for d in docs:
            row = {"text": d, "meta": {"source": "test"}}
            f.write(json.dumps(row) + "\n")
        if extra is not None:
            f.write(json.dumps(extra) + "\n")
    return path


def _expected(docs, split):
    out = []
    for d in docs:
        if split_of(hashlib.sha1(d.encode("utf-8")).hexdigest()) == split:
            out += list(d.encode("utf-8")) + [256]
    return np.array(out, dtype=np.int64)


def test_jsonl_through_datasets_is_tokenized_and_packed_with_eod(tmp_path):
    docs = _docs(120)
    path = _write_jsonl(tmp_path / "corpus.jsonl", docs)
    pd = prepare_data(DataConfig(corpus="jsonl", path=str(path), tokenizer="byte", cache_dir=str(tmp_path / "c")))
    assert pd.meta["complete"] and pd.meta["corpus"] == "jsonl"
    total_docs = 0
    for split in ("train", "val", "test"):
        flat = np.asarray(pd.tokens(split)).astype(np.int64)
        assert np.array_equal(flat, _expected(docs, split)), split
        total_docs += pd.meta["splits"][split]["documents"]
    assert total_docs == len(docs)
    seq_len = 16
    n = pd.num_sequences("train", seq_len)
    assert n == (pd.num_tokens("train") - 1) // seq_len > 3
    seqs = pd.sequences("train", seq_len, np.arange(n))
    flat = np.asarray(pd.tokens("train")).astype(np.int64)
    assert np.array_equal(seqs[:, :-1].reshape(-1), flat[: n * seq_len])
    assert np.array_equal(seqs[:, 1:].reshape(-1)[seq_len - 1 :: seq_len], flat[seq_len : n * seq_len + 1 : seq_len])


def test_jsonl_bpe_pads_its_vocab_to_the_configured_size(tmp_path):
    docs = _docs(80)
    path = _write_jsonl(tmp_path / "small.jsonl", docs)
    cfg = DataConfig(corpus="jsonl", path=str(path), tokenizer="bpe", bpe_vocab_size=3000, cache_dir=str(tmp_path / "c"))
    pd = prepare_data(cfg)
    assert pd.meta["tokenizer_ids"] < 3000  # too little text to learn 3000 ids ...
    assert pd.vocab_size == 3000  # ... but the model's vocab is still the configured size
    train = np.asarray(pd.tokens("train"))
    assert int(train.max()) < pd.meta["tokenizer_ids"]
    assert int((train == pd.eod_id).sum()) == pd.meta["splits"]["train"]["documents"]


def test_streamed_corpus_reads_only_the_budget_and_extends_it(tmp_path):
    """The slimpajama code path (`load_dataset(name, streaming=True)`) on a local dataset folder."""
    folder = tmp_path / "fake_hub_dataset"
    folder.mkdir()
    docs = _docs(400)
    _write_jsonl(folder / "train.jsonl", docs)
    cfg = DataConfig(corpus="slimpajama", hf_dataset=str(folder), tokenizer="byte", cache_dir=str(tmp_path / "c"))
    small = prepare_data(cfg, min_train_tokens=1000, val_tokens=200, test_tokens=300)
    assert not small.meta["complete"] and small.meta["documents_read"] < len(docs)
    assert small.num_tokens("train") >= 1001 and small.num_tokens("val") >= 201 and small.num_tokens("test") >= 301
    assert small.num_tokens("train") < 1001 + 200  # stopped right after the budget (one document at most over)
    val = np.asarray(small.tokens("val")).copy()
    test = np.asarray(small.tokens("test")).copy()
    # Enough already: the same cache is returned.
    assert prepare_data(cfg, min_train_tokens=500, val_tokens=200, test_tokens=300).path == small.path
    # More train tokens: a new generation, the same val/test, the old generation removed.
    big = prepare_data(cfg, min_train_tokens=5000, val_tokens=200, test_tokens=300)
    assert big.path != small.path and big.path.name == "g1" and not small.path.exists()
    assert big.num_tokens("train") >= 5001
    assert np.array_equal(np.asarray(big.tokens("val")), val) and np.array_equal(np.asarray(big.tokens("test")), test)
    # The train prefix is the same documents in the same order.
    assert np.array_equal(np.asarray(big.tokens("train"))[:1000], np.asarray(_expected(docs, "train")[:1000], dtype=np.uint16))


def test_bad_jsonl_input_is_a_one_line_error(tmp_path):
    with pytest.raises(ConfigError) as e:
        prepare_data(DataConfig(corpus="jsonl", path=str(tmp_path / "missing.jsonl"), tokenizer="byte", cache_dir=str(tmp_path / "c")))
    assert "data.path" in str(e.value) and "missing.jsonl" in str(e.value)
    path = _write_jsonl(tmp_path / "bad.jsonl", ["fine"], extra={"body": "no text field"})
    with pytest.raises(ConfigError) as e:
        prepare_data(DataConfig(corpus="jsonl", path=str(path), tokenizer="byte", cache_dir=str(tmp_path / "c")))
    msg = str(e.value)
    assert "bad.jsonl" in msg and "'text'" in msg and "body" in msg and "\n" not in msg
    packed = tmp_path / "c" / "packed"
    assert not packed.exists() or not any(p.name.startswith("g") for d in packed.iterdir() if d.is_dir() for p in d.iterdir())


OFFLINE_SCRIPT = """
import sys
from cem_core.config import DataConfig
from cem_core.data import prepare_data
from cem_core.errors import CemError
for cfg in (DataConfig(corpus="slimpajama", tokenizer="byte", cache_dir=sys.argv[1]),
            DataConfig(corpus="jsonl", path=sys.argv[2], tokenizer="hf", cache_dir=sys.argv[1])):
    try:
        prepare_data(cfg)
    except CemError as e:
        print("ERR", type(e).__name__, str(e))
    else:
        print("NO ERROR")
"""


def test_offline_hub_is_one_line_naming_the_builtin_corpus(tmp_path):
    path = _write_jsonl(tmp_path / "c.jsonl", ["some text"])
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf_home"))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run(
        [sys.executable, "-c", OFFLINE_SCRIPT, str(tmp_path / "cache"), str(path)],
        capture_output=True, text=True, env=env, cwd=root, timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    assert len(lines) == 2, out.stdout  # exactly one line per failure
    for line in lines:
        assert line.startswith("ERR HubUnavailable"), line
        assert "Hugging Face hub" in line and "built-in corpus" in line and "data.corpus='builtin'" in line
    assert "SlimPajama" in lines[0] and "llama-tokenizer" in lines[1]
    assert not (tmp_path / "cache" / "packed").exists() or not any((tmp_path / "cache" / "packed").rglob("*.bin"))


def test_hub_error_is_a_cem_error():
    from cem_core.data import HubUnavailable

    assert issubclass(HubUnavailable, CemError)


def test_hf_tokenizer_from_a_local_file_packs_with_the_llama_vocab(tmp_path):
    """The `hf` path with a tokenizer.json on disk (no hub): EOS is the end-of-document id."""
    from cem_core.config import LLAMA_VOCAB_SIZE, tokenizer_vocab_size
    from cem_core.data.tokenizer import train_bpe

    docs = _docs(60)
    tok = train_bpe(lambda: iter(docs), 500)
    tok_dir = tmp_path / "tok"
    tok_dir.mkdir()
    tok.save(str(tok_dir / "tokenizer.json"))
    path = _write_jsonl(tmp_path / "c.jsonl", docs)
    cfg = DataConfig(corpus="jsonl", path=str(path), tokenizer="hf", hf_tokenizer=str(tok_dir), cache_dir=str(tmp_path / "c"))
    pd = prepare_data(cfg)
    assert pd.vocab_size == tokenizer_vocab_size(cfg) == LLAMA_VOCAB_SIZE
    assert pd.eod_id == tok.token_to_id("<|endoftext|>")
    train = np.asarray(pd.tokens("train")).astype(np.int64)
    expected = []
    for d in docs:
        if split_of(hashlib.sha1(d.encode("utf-8")).hexdigest()) == "train":
            expected += tok.encode(d, add_special_tokens=False).ids + [pd.eod_id]
    assert np.array_equal(train, np.array(expected))
