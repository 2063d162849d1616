"""`cemctl keys`: every config key cem_core accepts and every run field, checked against the code so the list cannot
fall behind (dataclass fields, registries, the ranges `validate` enforces, the variants' `uses`)."""

from __future__ import annotations

import json
import re

import pytest

from cem_core.config import RunConfig, field_names, resolve
from cem_core.errors import ConfigError
from cem_core.keydoc import documented_keys, key_docs
from tests.helpers import assert_clean_error, cli, on_screen


def _listing(tmp_path, *args: str) -> dict:
    res = cli(None, "keys", "--json", *args, cwd=tmp_path)
    assert res.returncode == 0, res.output
    return json.loads(res.stdout)


def test_every_key_the_config_accepts_is_listed_with_a_meaning(tmp_path):
    listed = {r["key"]: r for r in _listing(tmp_path)["config"]}
    assert list(listed) == field_names()  # the dataclasses' keys, in their order, nothing more
    assert set(documented_keys()) == set(field_names())
    for key, row in listed.items():
        assert row["meaning"], key
        section, _, name = key.rpartition(".")
        klass = dict(model=RunConfig().model, data=RunConfig().data, train=RunConfig().train, gp=RunConfig().gp).get(section, RunConfig())
        assert row["default"] == getattr(klass, name), key
        assert row["type"] == type(getattr(klass, name)).__name__, key


def test_allowed_names_are_the_registries_and_readers_are_the_specs(tmp_path):
    from cem_core import variants as V

    listed = {r["key"]: r for r in _listing(tmp_path)["config"]}
    assert listed["model.attention"]["allowed"].split(", ") == list(V.ATTENTION.names())
    assert listed["model.mlp_precond"]["allowed"].split(", ") == list(V.PRECONDITIONERS.names())
    assert listed["data.tokenizer"]["allowed"].split(", ") == list(V.TOKENIZERS.names())
    assert listed["model.attn_precond_rank"]["read_by"] == ["attention=cem"]
    assert "mlp=cem_param_matched" in listed["model.param_match_factor"]["read_by"]
    for key, row in listed.items():  # every key a spec says it uses names that spec
        for reader in row["read_by"]:
            kind, _, name = reader.partition("=")
            reg = {"attention": V.ATTENTION, "mlp": V.MLPS, "task": V.TASKS}[kind]
            assert key.split(".")[-1] in reg.spec(name).uses, (key, reader)


def _probe(key: str, value) -> bool:
    """Whether `validate` accepts the key at `value` (on a config where nothing else is wrong)."""
    base = {"task": "gp", "train.max_steps": 10} if key.startswith("gp.") else {}
    base.update({"model.attn_steps": {"model.attention": "cem"}, "model.mlp_steps": {"model.mlp": "cem"},
                 "train.batch_seqs": {"train.micro_batch_seqs": 1}}.get(key, {}))  # what the key's rules need
    try:
        resolve(RunConfig.from_dict({**base, key: value}))
        return True
    except ConfigError as e:
        assert e.key == key, f"probing {key}={value} tripped another rule: {e}"
        return False


def _bounds(text: str):
    """(low, high, low_open, high_open) of a range as keydoc writes it."""
    if m := re.fullmatch(r"(-?[\d.e+-]+)\.\.(-?[\d.e+-]+)", text):
        return float(m[1]), float(m[2]), False, False
    if m := re.fullmatch(r"([\[(])(-?[\d.]+), (-?[\d.]+)([\])])", text):
        return float(m[2]), float(m[3]), m[1] == "(", m[4] == ")"
    if m := re.fullmatch(r"(>=|>) (-?[\d.]+)", text):
        return float(m[2]), None, m[1] == ">", False
    raise AssertionError(f"unreadable range {text!r}")


@pytest.mark.parametrize("doc", [d for d in key_docs() if d.allowed and d.allowed[0] in "0123456789[(>-"],
                         ids=lambda d: d.key)
def test_each_range_is_the_one_validate_enforces(doc):
    low, high, low_open, high_open = _bounds(doc.allowed)
    cast = int if doc.kind == "int" else float
    step = 1 if doc.kind == "int" else 1e-9
    if doc.key in ("model.d_model", "model.n_heads", "model.n_layers", "model.d_mlp", "model.context_len",
                   "model.vocab_size"):
        pytest.skip("dims: the upper bound is a sanity check, and n_heads must divide d_model (checked elsewhere)")
    if low_open:
        assert not _probe(doc.key, cast(low)), f"{doc.key} accepts {low}"
        assert _probe(doc.key, cast(low + (step if doc.kind == "int" else max(step, abs(low) * 1e-6 + 1e-6)))), doc.key
    else:
        assert _probe(doc.key, cast(low)), f"{doc.key} refuses {low}"
        assert not _probe(doc.key, cast(low - (1 if doc.kind == "int" else 1e-3))), f"{doc.key} accepts below {low}"
    if high is not None:
        if high_open:
            assert not _probe(doc.key, cast(high)), f"{doc.key} accepts {high}"
            assert _probe(doc.key, cast(high - (1 if doc.kind == "int" else 1e-3))), doc.key
        else:
            assert _probe(doc.key, cast(high)), f"{doc.key} refuses {high}"
            assert not _probe(doc.key, cast(high + (1 if doc.kind == "int" else 1e-3))), f"{doc.key} accepts above {high}"


def test_every_run_field_is_listed(tmp_path):
    from cemctl.records.fields import RUN_FIELDS

    listed = [r["field"] for r in _listing(tmp_path)["fields"]]
    assert listed == [f.name for f in RUN_FIELDS] + ["tag.NAME"]


def test_a_pattern_narrows_and_a_typo_names_the_closest_keys(tmp_path):
    rank = _listing(tmp_path, "precond_rank")
    assert [r["key"] for r in rank["config"]] == ["model.attn_precond_rank", "model.mlp_precond_rank"]
    assert rank["fields"] == []
    res = cli(None, "keys", "attn_precond_rnk", cwd=tmp_path)
    assert_clean_error(res, contains="did you mean model.attn_precond_rank")


@pytest.mark.parametrize("terminal", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["columns", "pty"])
@pytest.mark.parametrize("cols", [80, 120])
def test_keys_on_a_terminal_fit_its_width(tmp_path, cols, terminal):
    screen = on_screen(["keys"], cols=cols, rows=50, cwd=tmp_path, terminal=terminal)
    assert screen.returncode == 0
    screen.assert_fits()
    text = screen.text
    assert "model.attn_precond_rank  int = 4  (1..4096)" in text and "read by attention=cem" in text.replace("\n    ", " ")
    assert "test_loss loss [nats/token (nats/byte with the byte tokenizer; squared error for the GP task)] from " \
        "result" in " ".join(text.split())


def test_a_losss_unit_says_it_follows_the_tokenizer(tmp_path):
    """Issue 32: the catalogue gave test_loss the unit nats/token, also for a grid of byte-tokenizer runs."""
    from cemctl.records.fields import RUN_FIELDS, unit_of

    units = {r["field"]: r["unit"] for r in _listing(tmp_path)["fields"]}
    losses = [f.name for f in RUN_FIELDS if f.kind == "loss"]
    assert {"test_loss", "val_loss", "train_loss", "previous_test_loss"} <= set(losses)
    for name in losses:
        assert "nats/byte with the byte tokenizer" in units[name], (name, units[name])
        assert unit_of(name, ["byte"]) == "nats/byte" and unit_of(name, ["bpe"]) == "nats/token"
        assert unit_of(name, ["byte", "bpe"]) == "nats/token" and unit_of(name, [], "gp") == "squared error"
    assert unit_of("tokens", ["byte"]) == "tokens"  # any other field: its catalogue unit


def test_a_plugins_names_are_listed_once_it_is_loaded(tmp_path):
    """In a process of its own: a loaded plugin stays registered for the life of the process."""
    import os
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    path = os.pathsep.join([str(root / "examples" / "plugin"), str(root), os.environ.get("PYTHONPATH", "")])
    res = cli(None, "keys", "--json", "--plugins", "scalar_precond", subprocess=True, cwd=tmp_path,
              env={"PYTHONPATH": path})
    assert res.returncode == 0, res.stderr
    rows = {r["key"]: r for r in json.loads(res.stdout)["config"]}
    assert "scalar" in rows["model.attn_precond"]["allowed"].split(", ")



def test_keys_lists_the_sizes_a_model_size_takes(tmp_path):
    """main listed no allowed values for model.size (only a wrong value's error named the sizes)."""
    from cem_core.sizes import SIZES

    res = cli(None, "keys", "model.size", cwd=tmp_path)
    line = next(ln for ln in res.stdout.splitlines() if ln.strip().startswith("model.size"))
    assert all(size in line for size in SIZES), line
