"""Grid files: expansion semantics and one-line errors (file, key, allowed values) with exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cem_core.errors import ConfigError
from cemctl.cli import app
from cemctl.grid import load_grid, parse_overrides

GOOD = """
seeds = [0, 1]
[experiment]
figure = "recursion"
[base]
"model.size" = "nano"
"model.attention" = "cem"
"train.max_steps" = 10
[axes]
"model.attn_steps" = [1, 2]
"model.attn_precond" = ["diag", "diag_lowrank"]
[[extra]]
"model.attention" = "llama"
"model.attn_steps" = 1
"model.attn_precond" = "identity"
"""


def write(tmp_path: Path, text: str, name: str = "grid.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_product_extras_and_seeds(tmp_path):
    plan = load_grid(write(tmp_path, GOOD))
    assert len(plan.runs) == (2 * 2 + 1) * 2
    assert plan.varied == ["model.attn_steps", "model.attn_precond", "train.seed", "model.attention"]
    llama = [r for r in plan.runs if r.config.model.attention == "llama"]
    assert len(llama) == 2 and {r.axes["train.seed"] for r in llama} == {0, 1}
    assert all(r.config.model.d_model == 64 for r in plan.runs)  # resolved from the size
    assert len({r.run_id for r in plan.runs}) == len(plan.runs)


def test_zip_moves_values_together_and_exclude_drops(tmp_path):
    text = """
[base]
"model.size" = "nano"
"train.max_steps" = 10
[axes]
"train.lr" = [0.001, 0.002, 0.004]
[[zip]]
"model.attention" = ["llama", "cem", "cem"]
"model.kq_diagonal" = ["none", "shared", "per_head"]
[[exclude]]
"model.kq_diagonal" = "per_head"
"train.lr" = [0.001, 0.002]
"""
    plan = load_grid(write(tmp_path, text))
    combos = {(r.config.model.attention, r.config.model.kq_diagonal, r.config.train.lr) for r in plan.runs}
    assert len(combos) == 3 * 3 - 2 == len(plan.runs)
    assert ("cem", "per_head", 0.004) in combos and ("cem", "per_head", 0.001) not in combos
    assert plan.excluded == 2


def test_identical_configs_collapse_and_set_beats_the_file(tmp_path):
    path = write(tmp_path, GOOD)
    plan = load_grid(path, overrides=parse_overrides(["model.attn_steps=1", "train.max_steps=7"]))
    assert len(plan.runs) == (2 + 1) * 2  # the T axis collapsed
    assert plan.duplicates == 2 * 2
    assert all(r.config.train.max_steps == 7 and r.config.model.attn_steps == 1 for r in plan.runs)
    assert "model.attn_steps" not in plan.varied


def test_scale_presets(tmp_path):
    text = GOOD + """
[scale.tiny]
seeds = [3]
[scale.paper]
[scale.paper.axes]
"model.size" = ["86M", "108M"]
[scale.paper.base]
"data.tokenizer" = "hf"
"""
    path = write(tmp_path, text)
    tiny = load_grid(path, "tiny")
    assert len(tiny.runs) == 5 and {r.config.train.seed for r in tiny.runs} == {3}
    paper = load_grid(path, "paper")
    assert len(paper.runs) == 5 * 2 * 2  # extras span the paper sizes too
    assert {r.config.model.vocab_size for r in paper.runs} == {32000}


def test_grid_size_is_checked_before_expansion(tmp_path):
    values = ", ".join(str(i) for i in range(1, 60))
    text = f'[axes]\n"train.seed" = [{values}]\n"train.max_steps" = [{values}]\n"train.ckpt_keep" = [{values}]\n'
    with pytest.raises(ConfigError, match="59\\^3|205379 runs"):
        load_grid(write(tmp_path, text))


# (grid text, extra CLI args, substrings the one-line error must contain)
MALFORMED = [
    ("[base\nx = 1\n", [], ["toml", "line 1"]),
    ('bogus = 1\n', [], ["bogus", "unknown key", "experiment, base, axes"]),
    ('[base]\n"model.atention" = "cem"\n', [], ["model.atention", "model.attention"]),
    ('[axes]\n"model.attention" = ["llama", "cme"]\n', [], ["model.attention", "'cme'", "llama, cem, reuse"]),
    ('[base]\n"train.lr" = "fast"\n', [], ["train.lr", "must be a number"]),
    ('[axes]\n"train.lr" = []\n', [], ["train.lr", "empty axis"]),
    ('[[zip]]\n"train.lr" = [0.1, 0.2]\n"train.seed" = [1]\n', [], ["zip[0]", "equal lengths"]),
    ('[base]\n"model.kq_diagonal" = "shared"\n', [], ["model.kq_diagonal", "does not go with model.attention='llama'", "allowed: none"]),
    ('[axes]\n"train.seed" = [' + ", ".join(map(str, range(400))) + ']\n"train.max_steps" = ['
     + ", ".join(map(str, range(1, 400))) + "]\n", [], ["axes", "159600 runs", "limit"]),
    ('[base]\n"train.lr" = nan\n', [], ["train.lr", "finite"]),
    ('[base]\n"train.max_steps" = -5\n', [], ["train.max_steps", ">= 0"]),
    ('[experiment]\nfigure = "fig9"\n', [], ["experiment.figure", "components, recursion"]),
    ("[base]\n", ["--scale", "huge"], ["--scale", "tiny, cpu, gpu, paper"]),
    ("", [], ["file", "is empty"]),
    ("  \n# only a comment\n", [], ["file", "is empty"]),
    ('seeds = [0, "a"]\n', [], ["seeds", "integers"]),
    ('[axes]\n"train.lr" = 0.1\n', [], ["train.lr", "list of values"]),
    ('[experiment]\ntitle = "x"\n', [], ["experiment.title", "name, description, figure"]),
    ('[axes]\n"train.lr" = [0.1]\n[[zip]]\n"train.lr" = [0.2]\n', [], ["train.lr", "varied twice"]),
    ('[axes]\n"model.attention" = ["cem", "cem"]\n', [], ["model.attention", "repeated"]),
    ('[base]\n"model.attention" = 3\n', [], ["model.attention", "must be a string"]),
    ('[axes]\n"model.attn_steps" = [1, 2]\n', [], ["model.attn_steps", "llama", "in run model.attn_steps=2"]),
    ('[base]\n"train.lr" = inf\n', [], ["train.lr", "finite"]),
    ("[base]\n", ["--set", "model.size=huge"], ["--set", "model.size", "86M"]),
    ("[base]\n", ["--set", "train.lrr=1"], ["--set", "train.lrr", "train.lr"]),
    ('[[exclude]]\n"model.size" = "micro"\n', [], ["exclude", "drops every run"]),
    ("[scale.big]\n", [], ["scale.big", "tiny, cpu, gpu, paper"]),
    ('[[extra]]\n', [], ["extra[0]", "empty"]),
    ('[base]\nmodel = "cem"\n', [], ["model", "unknown config key"]),
]


@pytest.mark.parametrize("text, args, needles", MALFORMED, ids=[f"case{i}" for i in range(len(MALFORMED))])
def test_malformed_grid_is_one_line_exit_2_and_writes_nothing(tmp_path, text, args, needles):
    path = write(tmp_path, text, "bad.toml")
    db = tmp_path / "results.db"
    runs = tmp_path / "runs"
    result = CliRunner().invoke(app, ["plan", str(path), "--db", str(db), "--runs-dir", str(runs), *args])
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    source = "--set" if "--set" in args else str(path)
    assert source in err
    for needle in needles:
        assert needle in err, (needle, err)
    assert not db.exists() and not runs.exists()
    assert "Traceback" not in result.output


def test_missing_grid_file(tmp_path):
    result = CliRunner().invoke(app, ["plan", str(tmp_path / "nope.toml"), "--db", str(tmp_path / "r.db")])
    assert result.exit_code == 2 and "nope.toml" in result.stderr and "no such grid file" in result.stderr
    assert not (tmp_path / "r.db").exists()
