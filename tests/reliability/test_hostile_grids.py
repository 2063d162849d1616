"""Hostile grid files (`cemctl plan FILE`): one clean error line, exit 2, nothing written; grid expansion properties.

The corpus is `hostile_grids/*.toml` (regenerate with `python tests/reliability/make_hostile_grids.py`).
A file's first line may be `# expect: TEXT`: the error line must contain TEXT (usually the key).
"""

from __future__ import annotations

import itertools
import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cemctl.cli import app
from cemctl.grid import load_grid

from tests.helpers import HOSTILE_DIR, assert_clean_error, cli

CORPUS = sorted(HOSTILE_DIR.glob("*.toml"))


def expected_text(path: Path) -> str:
    first = path.read_bytes().split(b"\n", 1)[0].decode("utf-8", "replace")
    return first[len("# expect:"):].strip() if first.startswith("# expect:") else ""


def test_corpus_is_large_and_varied():
    assert len(CORPUS) >= 50
    names = {p.stem.split("_")[0] for p in CORPUS}
    assert {"syntax", "unknown", "name", "seeds", "huge", "nan", "inf", "negative"} <= names


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_hostile_grid_is_one_clean_error_and_writes_nothing(path: Path, tmp_path: Path):
    db, runs = tmp_path / "results.db", tmp_path / "runs"
    result = CliRunner().invoke(app, ["plan", str(path), "--db", str(db), "--runs-dir", str(runs)])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    line = assert_clean_error(result, contains=expected_text(path))
    assert str(path) in line  # names the file
    assert not db.exists() and not runs.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["syntax_invalid_utf8", "name_parent_traversal", "grid_of_ten_million_runs", "nan_lr"])
def test_hostile_grid_in_a_real_process(name: str, tmp_path: Path):
    """The same through a real `cemctl` process: exit status 2, one stderr line, no traceback, no files."""
    proc = cli(None, "plan", str(HOSTILE_DIR / f"{name}.toml"), "--db", "results.db", "--runs-dir", "runs", cwd=tmp_path,
               subprocess=True, timeout=120)
    assert proc.stdout == ""
    assert_clean_error(proc, contains=expected_text(HOSTILE_DIR / f"{name}.toml"))
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------
# Properties of the expander (hypothesis)

AXIS_VALUES = {
    "train.lr": [0.0005, 0.001, 0.002, 0.003, 0.004, 0.01],
    "train.warmup_frac": [0.0, 0.05, 0.1, 0.2],
    "train.final_lr_frac": [0.0, 0.1, 0.5, 1.0],
    "train.weight_decay": [0.0, 0.01, 0.1],
    "model.attention": ["llama", "reuse", "cem"],
}
HEADER = '[experiment]\nname = "prop"\n\n[base]\n"model.size" = "nano"\n"data.tokenizer" = "byte"\n"train.max_steps" = 3\n'


def toml_value(v: object) -> str:
    return f'"{v}"' if isinstance(v, str) else repr(v)


@st.composite
def grids(draw):
    keys = draw(st.lists(st.sampled_from(sorted(AXIS_VALUES)), unique=True, min_size=0, max_size=3))
    axes = {k: draw(st.lists(st.sampled_from(AXIS_VALUES[k]), unique=True, min_size=1, max_size=3)) for k in keys}
    seeds = draw(st.none() | st.lists(st.integers(0, 50), unique=True, min_size=1, max_size=3))
    excludes = []
    if axes and draw(st.booleans()):
        k = draw(st.sampled_from(sorted(axes)))
        excludes.append({k: draw(st.sampled_from(axes[k]))})
    if not axes and seeds is None:
        seeds = [0]
    order = draw(st.permutations(list(axes)))
    return axes, seeds, excludes, order


def write_grid(folder: Path, name: str, axes, seeds, excludes, order) -> Path:
    text = (f"seeds = {seeds}\n" if seeds is not None else "") + HEADER + "\n[axes]\n"
    text += "".join(f'"{k}" = [{", ".join(toml_value(v) for v in axes[k])}]\n' for k in order)
    for rule in excludes:
        text += "\n[[exclude]]\n" + "".join(f'"{k}" = {toml_value(v)}\n' for k, v in rule.items())
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grids())
def test_expansion_size_uniqueness_and_stable_ids(grid):
    axes, seeds, excludes, order = grid
    full = dict(axes)
    if seeds is not None:
        full["train.seed"] = seeds
    combos = [dict(zip(full, values)) for values in itertools.product(*full.values())]
    kept = [c for c in combos if not any(all(c.get(k) == v for k, v in rule.items()) for rule in excludes)]
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        if not kept:
            with pytest.raises(Exception, match="drops every run"):
                load_grid(write_grid(folder, "a", axes, seeds, excludes, order))
            return
        plan = load_grid(write_grid(folder, "a", axes, seeds, excludes, order))
        reordered = load_grid(write_grid(folder, "b", axes, seeds, excludes, list(reversed(order))))
    ids = [r.run_id for r in plan.runs]
    # size = product of the axis lengths minus exclusions; no duplicates
    assert len(ids) == len(kept) == math.prod(len(v) for v in full.values()) - (len(combos) - len(kept))
    assert len(set(ids)) == len(ids)
    assert plan.excluded == len(combos) - len(kept)
    # every run carries exactly its assignment
    got = {tuple(sorted((k, _value(r.config, k)) for k in full)) for r in plan.runs}
    assert got == {tuple(sorted(c.items())) for c in kept}
    # run ids do not depend on the order of the keys in the file
    assert sorted(ids) == sorted(r.run_id for r in reordered.runs)


def _value(cfg, key: str):
    section, name = key.split(".")
    return getattr(getattr(cfg, section), name)
