"""The wording of messages (issue 37, item 9): each test reads the message a user gets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cem_core.errors import ConfigError
from tests.helpers import ROOT, assert_clean_error, cli, finish_run, plan_ids, tiny_grid


def test_a_type_error_says_an_integer_not_a_integer(tmp_path):
    (tmp_path / "g.toml").write_text(tiny_grid("g").replace('"train.max_steps" = 6', '"train.max_steps" = "ten"'))
    line = assert_clean_error(cli(tmp_path, "plan", str(tmp_path / "g.toml")))
    assert "train.max_steps: must be an integer, got str 'ten'" in line


def test_export_of_one_run_says_1_run(tmp_path):
    grid = tmp_path / "one.toml"
    grid.write_text(tiny_grid("one", seeds="[0]"))
    _, ids = plan_ids(tmp_path, grid.read_text(), "one")
    finish_run(tmp_path / "runs" / ids[0])
    assert cli(tmp_path, "sync").returncode == 0
    res = cli(tmp_path, "export", "one", "--format", "csv", "-o", str(tmp_path / "one.csv"))
    assert res.returncode == 0, res.output
    assert res.stdout.startswith("exported 1 run (1 row) to "), res.stdout


def test_every_bad_value_of_an_axis_is_named(tmp_path):
    (tmp_path / "g.toml").write_text(tiny_grid("g", extra='"model.attention" = "cem"\n[axes]\n'
                                               '"model.attn_precond" = ["diag", "bogus", "scalarz"]\n'))
    line = assert_clean_error(cli(tmp_path, "plan", str(tmp_path / "g.toml")))
    assert "unknown preconditioner 'bogus'" in line and "every bad value of model.attn_precond: 'bogus', 'scalarz'" in line
    assert "(allowed: identity, diag, diag_lowrank)" in line


def test_every_bad_value_of_a_command_line_list_is_named(monkeypatch):
    from cem_core.train.recursion_eval import parse_steps
    from cemctl.executors.local.executor import check_gpus

    with pytest.raises(ConfigError, match=r"got 'x', 'y' in '1,x,y'"):
        parse_steps("1,x,y")
    with pytest.raises(ConfigError, match=r"between 1 and 64, got 0, 99"):
        parse_steps("0,2,99")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(ConfigError, match=r"GPUs 5, 6 are not on this machine"):
        check_gpus([0, 5, 6])


def test_a_set_error_quotes_the_run_as_the_override_made_it(tmp_path):
    (tmp_path / "g.toml").write_text(tiny_grid("g", extra='"model.attention" = "cem"\n[axes]\n"model.attn_steps" = [1, 2]\n'))
    line = assert_clean_error(cli(tmp_path, "plan", str(tmp_path / "g.toml"), "--set", "model.attn_steps=0"))
    assert line.startswith("error: --set: model.attn_steps: must be between 1 and 64, got 0")
    assert "(in run model.attn_steps=0" in line and "model.attn_steps=1" not in line  # main: the value before --set


def test_set_takes_one_value_and_points_to_axis(tmp_path):
    (tmp_path / "g.toml").write_text(tiny_grid("g"))
    line = assert_clean_error(cli(tmp_path, "plan", str(tmp_path / "g.toml"), "--set", "model.attn_steps=[1, 2]"))
    assert "--set takes one value" in line and "--axis model.attn_steps=a,b" in line


def test_export_format_lists_the_installed_formats_and_how_to_install_the_others(tmp_path, monkeypatch):
    import cemctl.services.export as export

    monkeypatch.setitem(export.EXTRAS, "parquet", "no_such_module_for_parquet")
    monkeypatch.setitem(export.EXTRAS, "tensorboard", "no_such_module_for_tensorboard")
    for fmt in ("xml", "parquet"):
        with pytest.raises(ConfigError) as e:
            export.export_runs("sqlite:///x.db", "e", fmt=fmt, out=tmp_path / "out")
        line = str(e.value)
        assert line.endswith("(allowed: csv, jsonl)"), line
        assert "pip install 'cemctl[parquet]'" in line and "pip install 'cemctl[tensorboard]'" in line
    assert export.installed_formats() == ["csv", "jsonl"]


def _plugin_grid(tmp_path: Path, flops: str) -> Path:
    (tmp_path / "halfp.py").write_text(
        "from cem_core.spec import PreconditionerSpec, register\n"
        "register(PreconditionerSpec(name='halfp', module='halfp:X', description='P = I / 2',\n"
        f"    label='one half', params=lambda n, w, r: 0{flops}))\n")
    grid = tmp_path / "g.toml"
    grid.write_text(tiny_grid("g", extra='"model.attention" = "cem"\n[axes]\n"model.attn_precond" = ["diag", "halfp"]\n')
                    .replace('name = "g"', 'name = "g"\nplugins = ["halfp"]'))
    return grid


def test_plan_warns_of_a_plugin_variants_undeclared_flops_and_names_it_by_its_label(tmp_path):
    grid = _plugin_grid(tmp_path, "")
    res = cli(tmp_path, "plan", str(grid), "--dry-run", subprocess=True, cwd=tmp_path)
    assert res.returncode == 0, res.output
    assert ("note: preconditioner 'halfp' (one half) of plugin halfp declares no attention_flops (used by "
            "model.attn_precond): its extra FLOPs are counted as 0") in res.stderr
    assert "plugin variants: halfp = one half (plugin halfp)" in res.stdout
    doc = json.loads(cli(tmp_path, "plan", str(grid), "--dry-run", "--json", subprocess=True, cwd=tmp_path).stdout)
    assert doc["plugin_variants"] == ["halfp = one half (plugin halfp)"] and len(doc["notes"]) == 1
    grid = _plugin_grid(tmp_path, ", attention_flops=lambda m: (0, 0)")  # declared (0 on purpose): no note
    res = cli(tmp_path, "plan", str(grid), "--dry-run", subprocess=True, cwd=tmp_path)
    assert res.returncode == 0 and "declares no" not in res.stderr, res.output


def test_the_example_plugin_declares_its_flops(tmp_path):
    res = cli(tmp_path, "plan", str(ROOT / "examples" / "plugin" / "scalar.toml"), "--dry-run", subprocess=True,
              cwd=tmp_path)
    assert res.returncode == 0 and "declares no" not in res.stderr, res.output
