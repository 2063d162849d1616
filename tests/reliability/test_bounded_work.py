"""Family 7 of issue 24: no hang, no unbounded work.

A `**` glob over a tree whose symlinks loop used to walk forever in `data prepare`, then in `data info`
and `data clean` (they resolve the caches of recorded runs); a corpus with one long document without
whitespace kept the BPE trainer busy for minutes with no progress shown. Each case runs the real command
under a time limit and failed on the main of 526f40c (by that limit).
"""

from __future__ import annotations

import json
import os
import random
import string

import pytest

from tests.helpers import cli, tiny_grid


@pytest.fixture
def looping_tree(tmp_path):
    """corpus/ with a real JSONL file and two symlinks that loop back up (2^depth paths for a naive `**`)."""
    tree = tmp_path / "corpus"
    (tree / "a").mkdir(parents=True)
    (tree / "a" / "docs.jsonl").write_text("".join(json.dumps({"text": f"document {i}: some words"}) + "\n"
                                                   for i in range(60)))
    os.symlink("..", tree / "a" / "up1")
    os.symlink("..", tree / "a" / "up2")
    return tree


def _grid(tmp_path, pattern: str, tokenizer: str = "byte", name: str = "looped") -> str:
    text = tiny_grid(name, seeds="[0]", cache_dir=str(tmp_path / "cache"),
                     extra=f'"data.corpus" = "files"\n"data.path" = "{pattern}"\n')
    return text.replace('"data.tokenizer" = "byte"', f'"data.tokenizer" = "{tokenizer}"')


def test_data_prepare_of_a_glob_over_looping_links_finishes(tmp_path, looping_tree):
    (tmp_path / "g.toml").write_text(_grid(tmp_path, f"{looping_tree}/**/*.jsonl"))
    res = cli(tmp_path, "data", "prepare", str(tmp_path / "g.toml"), "--workers", "1", "--json", subprocess=True,
              timeout=60)
    assert res.returncode == 0, res.output
    (cache,) = json.loads(res.stdout)["caches"]
    assert cache["tokens"]["train"] > 0


@pytest.mark.parametrize("command", [("data", "info"), ("data", "clean")])
def test_data_info_and_clean_finish_with_a_recorded_glob_over_looping_links(tmp_path, looping_tree, command):
    """The links appear after the run was planned (planning walks the glob too)."""
    links = [looping_tree / "a" / "up1", looping_tree / "a" / "up2"]
    for link in links:
        link.unlink()
    (tmp_path / "g.toml").write_text(_grid(tmp_path, f"{looping_tree}/**/*.jsonl"))
    assert cli(tmp_path, "plan", str(tmp_path / "g.toml")).returncode == 0
    for link in links:
        os.symlink("..", link)
    res = cli(None, *command, "--db", str(tmp_path / "results.db"), subprocess=True, timeout=60)
    assert res.returncode == 0, res.output


def _one_long_document(tmp_path, n_chars: int = 600_000):
    rng = random.Random(0)
    text = "".join(rng.choice(string.ascii_letters) for _ in range(n_chars))  # letters only: one pre-token
    path = tmp_path / "blob.jsonl"
    path.write_text(json.dumps({"text": text}) + "\n" + "".join(json.dumps({"text": f"short doc {i}"}) + "\n"
                                                                for i in range(40)))
    return path


def test_bpe_on_a_document_without_whitespace_finishes(tmp_path):
    """600,000 characters in one word: the trainer learns from it cut into words of bounded length."""
    path = _one_long_document(tmp_path)
    (tmp_path / "g.toml").write_text(_grid(tmp_path, str(path), tokenizer="bpe", name="blob"))
    res = cli(tmp_path, "data", "prepare", str(tmp_path / "g.toml"), "--workers", "1", subprocess=True, timeout=90)
    assert res.returncode == 0, res.output


def test_training_the_bpe_tokenizer_reports_progress(tmp_path):
    from cem_core.config import DataConfig
    from cem_core.data import prepare_data

    path = _one_long_document(tmp_path, 20_000)
    seen: list[dict] = []
    prepare_data(DataConfig(corpus="files", path=str(path), tokenizer="bpe", bpe_vocab_size=300,
                            cache_dir=str(tmp_path / "cache")), progress=seen.append)
    phases = [e.get("phase") for e in seen]
    assert "merges" in phases and phases.index("merges") < len(phases) - 1  # before the corpus is tokenized
    merges = seen[phases.index("merges")]
    assert merges["documents"] >= 1 and merges["bytes"] >= 20_000
