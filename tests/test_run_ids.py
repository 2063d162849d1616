"""Run ids stable across versions (`cem_core.config.run_id`, `cem_core.identity`).

A run's id is its identity: the relaunch of a grid skips every run whose id has a result.
So an upgrade of cemctl must not change the id of any run an earlier release planned:
- the ids of 61 fixed configs (every attention x MLP pairing, preconditioners, KQ
  diagonals, sizes, tokenizers and corpora, both tasks) are pinned to what release
  0.2.0 computed (tests/data/pinned_run_ids.json, written once from that release);
- every config field is either one the 0.2.0 scheme hashed or one added since, whose
  value at its default leaves every id unchanged;
- a field's default can never change (a test compares each default with the value
  frozen in the scheme): a new behaviour is a new value, chosen explicitly.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from cem_core import identity
from cem_core.config import RunConfig, field_names, flatten, resolve, run_id

PINNED = json.loads((Path(__file__).parent / "data" / "pinned_run_ids.json").read_text())["cases"]


@pytest.mark.parametrize("case", PINNED, ids=[c["run_id"] for c in PINNED])
def test_the_ids_of_release_0_2_0_are_kept(case):
    assert run_id(RunConfig.from_dict(case["overrides"])) == case["run_id"]


def test_the_pinned_configs_cover_every_variant_and_both_tasks():
    from cem_core import variants as V

    seen: dict[str, set] = {"model.attention": set(), "model.mlp": set(), "model.attn_precond": set(),
                            "model.mlp_precond": set(), "model.kq_diagonal": set(), "task": set(),
                            "data.tokenizer": set(), "gp.kernel": set()}
    for case in PINNED:
        cfg = flatten(RunConfig.from_dict(case["overrides"]).to_dict())
        for key in seen:
            seen[key].add(cfg[key])
    assert seen["model.attention"] >= set(V.ATTENTION.names())
    assert seen["model.mlp"] >= set(V.MLPS.names())
    assert seen["model.attn_precond"] >= set(V.PRECONDITIONERS.names())
    assert seen["model.kq_diagonal"] >= set(V.KQ_DIAGONALS.names())
    assert seen["task"] >= {"lm", "gp"} and seen["gp.kernel"] >= {"rbf", "gibbs"}
    assert seen["data.tokenizer"] >= {"byte", "bpe", "hf"}


def test_every_field_is_in_the_id_scheme_and_no_default_ever_changes():
    defaults = flatten(RunConfig().to_dict())
    assert set(field_names()) == set(identity.V1_DEFAULTS) | set(identity.ADDED_FIELDS), (
        "a config field was added or removed: add it to cem_core.identity.ADDED_FIELDS with its default")
    for key, frozen in {**identity.V1_DEFAULTS, **identity.ADDED_FIELDS}.items():
        assert defaults[key] == frozen, (
            f"the default of {key} changed from {frozen!r} to {defaults[key]!r}: that would silently change what "
            "runs that never set it compute; keep the default and add a new value instead")


def test_a_field_added_at_its_default_changes_no_id(monkeypatch):
    """What a new field does to the ids of runs planned before it existed: nothing at its default."""
    base = flatten(RunConfig.from_dict({"model.attention": "cem", "train.seed": 1}).to_dict())
    monkeypatch.setitem(identity.ADDED_FIELDS, "model.attn_x0", "h")
    assert identity.config_hash({**base, "model.attn_x0": "h"}) == identity.config_hash(base)
    assert identity.config_hash({**base, "model.attn_x0": "rmsnorm"}) != identity.config_hash(base)
    # and with a real dataclass field: a copy of ModelConfig with one more field at its default
    extra = dataclasses.make_dataclass("ModelPlus", [("attn_x0", str, dataclasses.field(default="h"))],
                                       bases=(type(RunConfig().model),), frozen=True)
    cfg = resolve(RunConfig.from_dict({"model.attention": "cem"}))
    plus = dataclasses.replace(cfg, model=extra(**dataclasses.asdict(cfg.model)))
    assert identity.config_hash(flatten(plus.to_dict())) == run_id(cfg)


def test_the_id_is_the_hash_of_the_resolved_config():
    cfg = RunConfig.from_dict({"model.size": "micro"})
    explicit = RunConfig.from_dict({"model.size": "micro", "model.d_model": 96, "model.n_layers": 3})
    assert run_id(cfg) == run_id(explicit)  # dims from the size or written out: one run
    assert run_id(cfg) != run_id(RunConfig.from_dict({"model.size": "micro", "train.seed": 1}))
