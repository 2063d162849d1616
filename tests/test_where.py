"""The `--where` grammar (`cemctl.records.where`): several conditions, every operator, keys by short name, bad
expressions one line naming what is allowed."""

from __future__ import annotations

import pytest

from cem_core.errors import ConfigError
from cemctl.records.where import describe, matches, parse_where

ROWS = [
    {"run_id": "a1", "state": "done", "model.attn_steps": 1, "model.attention": "cem", "train.lr": 0.001,
     "test_loss": 1.50, "tag.note": "warmup sweep"},
    {"run_id": "b2", "state": "done", "model.attn_steps": 2, "model.attention": "cem", "train.lr": 0.002,
     "test_loss": 1.40},
    {"run_id": "c3", "state": "failed", "model.attn_steps": 1, "model.attention": "llama", "train.lr": 0.004,
     "test_loss": None, "tag.note": "baseline"},
]


def ids(*items: str) -> list[str]:
    conds = parse_where(items)
    return [r["run_id"] for r in ROWS if matches(conds, r)]


@pytest.mark.parametrize("items,expected", [
    (("model.attn_steps>=2",), ["b2"]),
    (("model.attn_steps<2",), ["a1", "c3"]),
    (("model.attention!=llama",), ["a1", "b2"]),
    (("attention=cem", "attn_steps=1"), ["a1"]),  # short names; several conditions are all required
    (("attention=cem and attn_steps=1",), ["a1"]),
    (("train.lr in 1e-3,2e-3",), ["a1", "b2"]),
    (("lr in 0.004",), ["c3"]),
    (("tag.note~WARMUP",), ["a1"]),  # contains, case-insensitive
    (("tag.note!~warmup",), ["b2", "c3"]),  # a run without the tag does not contain it
    (("state=done", "test_loss<1.45"), ["b2"]),
    (("test_loss>0",), ["a1", "b2"]),  # a missing value never meets a comparison
    (("train.lr=0.0010",), ["a1"]),  # numbers compare as numbers
    (("model.attn_steps==1.0",), ["a1", "c3"]),
])
def test_conditions_select_runs(items, expected):
    assert ids(*items) == expected


@pytest.mark.parametrize("text,value,hit", [("job~77_1", "slurm:77_1", True), ("job~1e3", "run 1e3", True),
                                            ("job!~0.50", "lr 0.5", True), ("job~0.50", "lr 0.5", False)])
def test_contains_looks_for_the_text_as_written(text, value, hit):
    """Found by the catalogue walk (issue 32): `job~77_1` read 77_1 as the number 771 (a grid file's integer with
    an underscore) and matched no job 'slurm:77_1'."""
    assert matches(parse_where([text]), {"job": value}) is hit


@pytest.mark.parametrize("text,what", [
    ("model.attn_stepz>=2", "unknown field 'model.attn_stepz' (did you mean model.attn_steps"),
    ("stepz=1", "unknown field 'stepz'"),
    ("model.attn_steps", "cannot read"),
    ("model.attn_steps>=", "cannot read"),
    ("lr in ", "cannot read"),
    ("tag.bad name=1", "cannot read"),
    ("tag.x/y=1", "bad tag name"),
])
def test_bad_expressions_name_what_is_allowed(text, what):
    with pytest.raises(ConfigError) as info:
        parse_where([text])
    message = str(info.value)
    assert what in message and "\n" not in message
    assert info.value.key == "--where" and info.value.allowed


def test_a_filter_is_described_as_written():
    assert describe(parse_where(["attn_steps>=2", "state=done"])) == "attn_steps>=2 and state=done"
