"""Typed run configs: unknown keys, types, values and combinations are rejected by name."""

import dataclasses

import pytest

from cem_core.config import RunConfig, field_names, resolve, run_id, total_steps, validate
from cem_core.errors import ConfigError


def test_dotted_and_nested_keys_agree():
    a = RunConfig.from_dict({"model.attention": "cem", "train.lr": 0.004})
    b = RunConfig.from_dict({"model": {"attention": "cem"}, "train": {"lr": 0.004}})
    assert a == b
    assert a.model.attention == "cem" and a.train.lr == 0.004


@pytest.mark.parametrize(
    "update, key, allowed",
    [
        ({"model.atention": "cem"}, "model.atention", "model.attention"),
        ({"modle.attention": "cem"}, "modle", "model"),
        ({"model.attention": "cme"}, "model.attention", "llama, cem, reuse"),
        ({"model.mlp": "gelu"}, "model.mlp", "cem_param_matched"),
        ({"model.attn_precond": "full"}, "model.attn_precond", "diag_lowrank"),
        ({"model.kq_diagonal": "both"}, "model.kq_diagonal", "per_head"),
        ({"model.kq_diagonal": "shared"}, "model.kq_diagonal", "none"),  # needs cem attention
        ({"model.size": "1B"}, "model.size", "86M"),
    ],
)
def test_bad_keys_and_values_name_key_and_allowed(update, key, allowed):
    with pytest.raises(ConfigError) as info:
        validate(RunConfig.from_dict(update))
    err = info.value
    assert err.key == key
    assert allowed in (err.allowed or "")
    assert "\n" not in str(err)


@pytest.mark.parametrize(
    "update, key",
    [
        ({"model.attn_steps": 0, "model.attention": "cem"}, "model.attn_steps"),
        ({"model.mlp_steps": -1, "model.mlp": "cem"}, "model.mlp_steps"),
        ({"model.n_heads": 5}, "model.n_heads"),  # does not divide 96
        ({"model.attn_steps": 2}, "model.attn_steps"),  # llama attention cannot recurse
        ({"train.lr": "fast"}, "train.lr"),
        ({"train.lr": float("nan")}, "train.lr"),
        ({"train.seed": True}, "train.seed"),
        ({"train.batch_seqs": 12, "train.micro_batch_seqs": 8}, "train.batch_seqs"),
        ({"data.corpus": "jsonl"}, "data.path"),
    ],
)
def test_bad_numbers_and_combinations(update, key):
    with pytest.raises(ConfigError) as info:
        validate(RunConfig.from_dict(update))
    assert info.value.key == key


def test_resolve_fills_dims_vocab_and_chinchilla_budget():
    cfg = resolve(RunConfig.from_dict({"model.size": "134M", "data.tokenizer": "hf", "model.attention": "cem"}))
    assert (cfg.model.d_model, cfg.model.n_layers, cfg.model.n_heads, cfg.model.d_mlp) == (768, 12, 12, 2048)
    assert cfg.model.vocab_size == 32000 and cfg.model.context_len == 2048
    # CEM variants get the token budget of the Llama baseline of the same dims (20 tokens/param).
    llama = resolve(dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, attention="llama")))
    assert cfg.train.max_tokens == llama.train.max_tokens == round(20 * 134_105_856)
    assert total_steps(cfg) == -(-cfg.train.max_tokens // (128 * 2048))
    assert resolve(cfg) == cfg


def test_run_id_is_content_hash():
    a = RunConfig.from_dict({"model.attention": "cem", "train.max_steps": 10})
    b = RunConfig.from_dict({"train.max_steps": 10, "model.attention": "cem"})
    c = RunConfig.from_dict({"model.attention": "cem", "train.max_steps": 11})
    assert run_id(a) == run_id(b) != run_id(c)
    # Writing a default explicitly does not change identity.
    assert run_id(a) == run_id(a.override({"train.lr": 0.002}))


def test_every_field_is_addressable_by_dotted_name():
    names = field_names()
    assert "model.kq_diagonal" in names and "train.lr" in names and "data.tokenizer" in names
    for name in names:
        with pytest.raises(ConfigError):
            RunConfig.from_dict({name: object()})


def test_plugins_is_a_canonical_list_and_absent_from_the_id_when_empty(tmp_path, monkeypatch):
    for name in ("a_mod", "b_mod"):  # two harmless plugin modules
        (tmp_path / f"{name}.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    base = RunConfig.from_dict({})
    assert base.plugins == "" and run_id(RunConfig.from_dict({"plugins": []})) == run_id(base)
    a = RunConfig.from_dict({"plugins": ["b_mod", "a_mod", "b_mod"]})
    b = RunConfig.from_dict({"plugins": " a_mod , b_mod"})
    assert a.plugins == b.plugins == "a_mod,b_mod"
    assert run_id(a) == run_id(b) != run_id(base)  # a plugin is part of what the run is


def test_a_plugin_that_cannot_load_is_one_line_naming_it(tmp_path, monkeypatch):
    from cem_core import plugins

    (tmp_path / "broken_layer.py").write_text("import numpy\nraise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name, reason in (("broken_layer", "RuntimeError: boom"), ("no_such_layer_xyz", "no such module")):
        with pytest.raises(ConfigError) as e:
            resolve(RunConfig.from_dict({"plugins": name}))
        assert e.value.key == "plugins" and name in str(e.value) and reason in str(e.value)
        assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="not a module name"):
        RunConfig.from_dict({"plugins": "a b"})
    plugins._loaded.pop("broken_layer", None), plugins._loaded.pop("no_such_layer_xyz", None)
