"""Code fingerprints (`cem_core.fingerprint`): what the model and training code computes, not how it reads."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from cem_core import fingerprint as fp

CORE = Path(fp.__file__).resolve().parent


@pytest.fixture
def core(tmp_path, monkeypatch):
    monkeypatch.setenv("CEMCTL_CACHE", str(tmp_path / "cache"))
    copy = tmp_path / "cem_core"
    shutil.copytree(CORE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def test_docstrings_comments_and_layout_do_not_count(core):
    before = fp.code_fingerprint(root=core)
    assert before == fp.code_fingerprint(root=CORE)  # the copy is the same code
    attn = core / "model" / "attention.py"
    _edit(attn, '"""Yields x_0', '"""Yields (reworded) x_0')  # a docstring
    _edit(attn, "        n = self.norm(h)\n", "        n = self.norm(h)  # a new comment\n\n")  # a comment, a blank line
    assert fp.code_fingerprint(root=core) == before


@pytest.mark.parametrize("path,old,new", [
    ("model/attention.py", "x = x + self.step_size *", "x = x - self.step_size *"),  # a sign
    ("train/optim.py", "weight_decay", "weight_decay "),  # layout only: no change
    ("data/tokenizer.py", "eod_id = 256", "eod_id = 255"),  # a constant
    ("gp/model.py", "def ", "def  "),  # layout only
])
def test_a_change_to_what_the_code_computes_counts(core, path, old, new):
    before = fp.code_fingerprint(root=core)
    _edit(core / path, old, new)
    changed = old.strip() != new.strip() and old.replace(" ", "") != new.replace(" ", "")
    assert (fp.code_fingerprint(root=core) != before) == changed


def test_code_outside_the_model_and_training_code_does_not_count(core):
    before = fp.code_fingerprint(root=core)
    _edit(core / "config.py", "BYTE_VOCAB_SIZE = 257", "BYTE_VOCAB_SIZE = 257\nUNUSED = 1")
    _edit(core / "train" / "console.py", "FORMAT =", "UNUSED = 2\nFORMAT =")
    assert fp.code_fingerprint(root=core) == before


def test_plugins_count(tmp_path, monkeypatch):
    monkeypatch.setenv("CEMCTL_CACHE", str(tmp_path / "cache"))
    (tmp_path / "my_layer.py").write_text("SCALE = 2.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("my_layer", None)
    with_plugin = fp.code_fingerprint(plugins=["my_layer"])
    assert with_plugin != fp.code_fingerprint()
    (tmp_path / "my_layer.py").write_text('"""A docstring."""\nSCALE = 2.0\n')
    assert fp.code_fingerprint(plugins=["my_layer"]) == with_plugin
    (tmp_path / "my_layer.py").write_text("SCALE = 3.0\n")
    assert fp.code_fingerprint(plugins=["my_layer"]) != with_plugin
