"""Plugins (`cem_core.plugins`, `[experiment] plugins`): a variant of the user's own, planned, trained, reported
from a folder outside the repository; a broken plugin is one line naming it. Every command runs in a subprocess:
a plugin registers variants in the process that imports it."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import ROOT, assert_clean_error, cli

EXAMPLE = ROOT / "examples" / "plugin"


def _project(tmp_path: Path) -> Path:
    where = tmp_path / "my-study"  # outside the repository, nothing installed
    shutil.copytree(EXAMPLE, where, ignore=shutil.ignore_patterns("__pycache__"))
    text = (where / "scalar.toml").read_text().replace('"train.max_steps" = 60', '"train.max_steps" = 6')
    (where / "scalar.toml").write_text(text.replace('"train.eval_every_steps" = 30', '"train.eval_every_steps" = 6'))
    return where


def _run(where: Path, *args: str):
    return cli(where, *args, subprocess=True, cwd=where)


@pytest.mark.slow
def test_the_example_plugin_plans_launches_and_reports_from_a_folder_of_its_own(tmp_path):
    where = _project(tmp_path)
    res = _run(where, "plan", "scalar.toml", "--json")
    assert res.returncode == 0, res.stderr
    runs = json.loads(res.stdout)["runs"]
    assert sorted(r["axes"]["model.attn_precond"] for r in runs) == ["diag", "diag", "scalar", "scalar"]
    # one learned scalar per head instead of a diagonal of the model width per head: fewer parameters
    params = {r["axes"]["model.attn_precond"]: r["params_total"] for r in runs}
    assert params["scalar"] < params["diag"]
    assert (where / "runs" / ".plugins" / "scalar_precond" / "layers.py").is_file()  # plan copied the source
    res = _run(where, "launch", "scalar_precond", "--workers", "2")
    assert res.returncode == 0, res.stderr
    assert "done 4" in res.stdout
    snapshot = next((where / "runs" / ".snapshots").iterdir())
    assert (snapshot / "scalar_precond" / "layers.py").is_file()  # the jobs ran the planned plugin code
    res = _run(where, "report", "scalar_precond", "--format", "png")
    assert res.returncode == 0, res.stderr
    index = (where / "reports" / "scalar_precond" / "index.md").read_text()
    assert "| attn_precond=scalar | 2/2 |" in index and "| attn_precond=diag | 2/2 |" in index
    # Editing the plugin's layer makes its runs outdated (its source is part of their code fingerprint).
    layers = where / "scalar_precond" / "layers.py"
    layers.write_text(layers.read_text().replace("math.log(math.e - 1.0)", "0.0"))
    assert _run(where, "plan", "scalar.toml").returncode == 0  # copies the edited source into the runs folder
    doc = json.loads(_run(where, "status", "--json").stdout)
    assert len(doc["experiments"][0]["outdated"]) == 4
    with open(where / "reports" / "scalar_precond" / "runs.csv") as f:
        assert {r["state"] for r in csv.DictReader(f)} == {"done"}


@pytest.mark.parametrize("plugin,source,reason", [
    ("broken_import", "import no_such_dependency_xyz\n", "failed on import: ModuleNotFoundError"),
    ("broken_code", "x = 1 / 0\n", "failed on import: ZeroDivisionError: division by zero (broken_code.py:1)"),
    ("clash", "from cem_core.spec import PreconditionerSpec, register\n"
              "register(PreconditionerSpec('diag', 'clash:X', 'mine', 'mine', params=lambda n, w, r: 0))\n",
     "preconditioner 'diag' of plugin 'clash' is already registered by cemctl itself"),
    ("bad_spec", "from cem_core.spec import register\nregister('not a spec')\n", "register() takes an AttentionSpec"),
    ("missing_plugin_xyz", None, "no such module"),
])
def test_a_broken_plugin_is_one_line_naming_it_and_plans_nothing(tmp_path, plugin, source, reason):
    if source is not None:
        (tmp_path / f"{plugin}.py").write_text(source)
    (tmp_path / "g.toml").write_text(f'[experiment]\nname = "g"\nplugins = ["{plugin}"]\n[base]\n"model.size" = "nano"\n')
    res = _run(tmp_path, "plan", "g.toml")
    line = assert_clean_error(res, contains=f"experiment.plugins: {plugin}: ")
    assert reason in line and "g.toml" in line
    assert not (tmp_path / "runs").exists() and not (tmp_path / "results.db").exists()


def test_a_plugin_name_that_is_not_a_module_is_refused(tmp_path):
    (tmp_path / "g.toml").write_text('[experiment]\nname = "g"\nplugins = ["my-layer"]\n')
    assert_clean_error(_run(tmp_path, "plan", "g.toml"), contains="'my-layer' is not a module name")


def test_an_installed_entry_point_registers_its_variants_without_a_grid_key(tmp_path):
    site = tmp_path / "site"  # what `pip install` of a package declaring the entry point leaves
    shutil.copytree(EXAMPLE / "scalar_precond", site / "scalar_precond")
    dist = site / "scalar_precond-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: scalar-precond\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[cemctl.plugins]\nscalar = scalar_precond\n")
    (tmp_path / "g.toml").write_text('[experiment]\nname = "g"\n[base]\n"model.size" = "nano"\n'
                                     '"model.attention" = "cem"\n[axes]\n"model.attn_precond" = ["scalar", "diag"]\n')
    env = {"PYTHONPATH": f"{ROOT}:{site}"}
    res = cli(tmp_path, "plan", "g.toml", "--json", subprocess=True, cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    assert {r["axes"]["model.attn_precond"] for r in json.loads(res.stdout)["runs"]} == {"scalar", "diag"}
    # without the installed package the name is unknown, and the error lists the known ones
    (tmp_path / "g.toml").write_text((tmp_path / "g.toml").read_text().replace('name = "g"', 'name = "h"'))
    res = cli(tmp_path, "plan", "g.toml", subprocess=True, cwd=tmp_path)
    assert_clean_error(res, contains="unknown preconditioner 'scalar'")


def test_plan_never_writes_plugin_sources_through_a_link(tmp_path):
    where = _project(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (where / "runs").mkdir()
    (where / "runs" / ".plugins").symlink_to(outside)  # the plugin copies would land outside the runs folder
    res = _run(where, "plan", "scalar.toml")
    assert_clean_error(res, contains="refused: a symbolic link")
    assert list(outside.iterdir()) == []
