"""A variant added through the spec API alone (no file of cemctl edited): validation, counts, labels and plan read
the spec. The variant is the example plugin's scalar preconditioner, registered in this process and removed after."""

from __future__ import annotations

import sys

import pytest

from cem_core import plugins
from cem_core import variants as V
from cem_core.config import RunConfig, resolve
from cem_core.counts import run_counts
from cem_core.errors import ConfigError
from tests.helpers import ROOT

EXAMPLE = ROOT / "examples" / "plugin"


@pytest.fixture
def scalar(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    for name in ("scalar_precond", "scalar_precond.layers"):
        sys.modules.pop(name, None)
    plugins._loaded.pop("scalar_precond", None)
    try:
        assert plugins.load_plugins("scalar_precond") == ("scalar_precond",)
        yield V.PRECONDITIONERS.spec("scalar")
    finally:  # leave the registry as every other test expects it
        for table in (V.PRECONDITIONERS._items, V.PRECONDITIONERS._specs, V.PRECONDITIONERS._descriptions):
            table.pop("scalar", None)
        plugins._loaded.pop("scalar_precond", None)
        for name in ("scalar_precond", "scalar_precond.layers"):
            sys.modules.pop(name, None)


def _cfg(precond: str, **extra) -> RunConfig:
    return resolve(RunConfig.from_dict({"model.size": "nano", "data.tokenizer": "byte", "model.attention": "cem",
                                        "model.attn_steps": 2, "model.attn_precond": precond, "train.max_steps": 4,
                                        **extra}))


def test_the_spec_is_tagged_with_its_plugin_and_validation_knows_the_name(scalar):
    assert scalar.plugin == "scalar_precond" and scalar.label == "scalar"
    assert "scalar" in V.PRECONDITIONERS.names()
    with pytest.raises(ConfigError) as e:
        _cfg("scalr")
    assert "scalar" in str(e.value) and "diag_lowrank" in str(e.value)  # the allowed names include it


def test_counts_come_from_the_spec_and_match_the_built_module(scalar):
    import torch  # noqa: F401 - builds the model

    from cem_core.model.transformer import build_model

    cfg = _cfg("scalar")
    model = build_model(cfg)
    built = sum(p.numel() for p in model.parameters())
    assert run_counts(cfg)["params_total"] == built
    m = cfg.model
    identity = run_counts(_cfg("identity"))["params_total"]
    assert built - identity == m.n_layers * m.n_heads  # one learned scalar per head and layer


def test_report_labels_and_plan_read_the_spec(scalar, tmp_path):
    from cemctl.grid.expand import load_grid
    from cemctl.records.labels import single_name
    row = {"model.attention": "cem", "model.mlp": "llama", "model.attn_steps": 2, "model.attn_precond": "scalar",
           "model.kq_diagonal": "shared"}
    assert "scalar" in single_name(row)  # the one labelling path shows the plugin's value by its spec's label
    plan = load_grid(EXAMPLE / "scalar.toml", "tiny")
    assert sorted(r.config.model.attn_precond for r in plan.runs) == ["diag", "diag", "scalar", "scalar"]
    assert {r.config.plugins for r in plan.runs} == {"scalar_precond"}
