"""Plugins (`cem_core.plugins`, `[experiment] plugins`): a variant of the user's own, planned, trained, reported
from a folder outside the repository; a broken plugin is one line naming it. Every command runs in a subprocess:
a plugin registers variants in the process that imports it."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import ROOT, assert_clean_error, cli, status_rows

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
    assert (snapshot / "scalar_precond" / "layers.py").is_file()  # the jobs ran the plugin code
    res = _run(where, "report", "scalar_precond", "--format", "png")
    assert res.returncode == 0, res.stderr
    index = (where / "reports" / "scalar_precond" / "index.md").read_text()
    # each arm a row with both its seeds, named as the report names arms (generic.arm_names: the fewest keys, by
    # the specs' display names, the plugin's included)
    rows = [ln for ln in index.splitlines() if ln.startswith("| ") and "| 2/2 |" in ln]
    assert any("scalar" in ln for ln in rows) and any("diag" in ln and "scalar" not in ln for ln in rows), index
    with open(where / "reports" / "scalar_precond" / "runs.csv") as f:
        assert {r["state"] for r in csv.DictReader(f)} == {"done"}
    # Editing the plugin beside the grid (no re-plan) makes outdated the runs of its variant, and only those
    # (the plugin's source is part of their code fingerprint, not of the built-in "diag" arm's).
    scalar = sorted(r["run_id"] for r in runs if r["axes"]["model.attn_precond"] == "scalar")
    layers = where / "scalar_precond" / "layers.py"
    layers.write_text(layers.read_text().replace("math.log(math.e - 1.0)", "0.0"))
    doc = json.loads(_run(where, "status", "--json").stdout)
    assert sorted(doc["experiments"][0]["outdated"]) == scalar
    assert (where / "runs" / ".plugins" / "scalar_precond" / "layers.py").read_text() != layers.read_text()  # read only
    res = _run(where, "launch", "scalar_precond", "--workers", "2", "--rerun-outdated")  # refreshes the jobs' copy
    assert res.returncode == 0, res.stderr
    snapshots = sorted((where / "runs" / ".snapshots").iterdir(), key=lambda p: p.stat().st_mtime)
    assert (snapshots[-1] / "scalar_precond" / "layers.py").read_text() == layers.read_text()  # the jobs ran the edit
    assert json.loads(_run(where, "status", "--json").stdout)["experiments"][0]["outdated"] == []


@pytest.mark.parametrize("plugin,source,reason", [
    ("broken_import", "import no_such_dependency_xyz\n", "failed on import: ModuleNotFoundError"),
    ("broken_code", "x = 1 / 0\n", "failed on import: ZeroDivisionError: division by zero (broken_code.py:1)"),
    ("exits", "import sys\n\nsys.exit(3)\n", "failed on import: called sys.exit(3) while being imported (exits.py:3)"),
    ("exits_quietly", "raise SystemExit\n", "called sys.exit(None) while being imported (exits_quietly.py:1)"),
    ("hard_exit", "import os\nos._exit(0)\n", "failed on import: called os._exit(0) while being imported (hard_exit.py:2)"),
    ("base_exception", "class Stop(BaseException):\n    pass\n\n\nraise Stop('no')\n",
     "failed on import: Stop: no (base_exception.py:5)"),
    ("bad_str", "class B(BaseException):\n    def __str__(self):\n        raise RuntimeError('x')\n\n\nraise B()\n",
     "failed on import: B: (its message cannot be shown) (bad_str.py:6)"),
    ("bad_syntax", "x = (\n", "syntax error in bad_syntax.py, line 1"),
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


# ------------------------------------------------------------------------------------------------ names, files, copies

def _grid(where: Path, plugin: str, axes: str = "") -> Path:
    grid = where / "g.toml"
    grid.write_text(f'[experiment]\nname = "g"\nplugins = ["{plugin}"]\n[base]\n"model.size" = "nano"\n'
                    f'"model.attention" = "cem"\n"data.tokenizer" = "byte"\n"train.max_steps" = 2\n{axes}')
    return grid


@pytest.mark.parametrize("plugin,files,reason", [
    ("json", {"json.py": "X = 1\n"}, "'json' is the name of a module of Python's standard library"),
    ("cem_core", {"cem_core/__init__.py": ""}, "'cem_core' is the name of cemctl's own package"),
    ("numpy", {"numpy.py": "X = 1\n"}, "'numpy' is also the name of an installed module"),
    ("typer", {"typer/__init__.py": ""}, "'typer' is also the name of an installed module"),
])
def test_a_plugin_named_like_an_installed_module_is_refused_at_plan(tmp_path, plugin, files, reason):
    """These used to be accepted (Python imported the installed module, the plugin never ran) and copied."""
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    grid = _grid(tmp_path, plugin)  # planned from another folder: one that holds a cem_core/ shadows cemctl itself
    line = assert_clean_error(cli(tmp_path, "plan", str(grid), subprocess=True, cwd=tmp_path.parent),
                              contains=f"experiment.plugins: {plugin}: ")
    assert reason in line and "g.toml" in line
    assert not (tmp_path / "runs").exists() and not (tmp_path / "results.db").exists()


def test_a_syntax_error_in_any_file_of_a_plugin_is_one_line_at_plan(tmp_path):
    """A file __init__ does not import used to pass plan and fail every run later (the code fingerprint parses it)."""
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text(SCALAR.replace("myplug:", "mypkg.layers:"))
    (tmp_path / "mypkg" / "layers.py").write_text("class Scalar:\n    pass\n")
    (tmp_path / "mypkg" / "extra.py").write_text("def f(:\n    pass\n")  # imported by nothing
    _grid(tmp_path, "mypkg")
    line = assert_clean_error(_run(tmp_path, "plan", "g.toml"), contains="experiment.plugins: mypkg: ")
    assert "syntax error in mypkg/extra.py, line 1" in line
    assert not (tmp_path / "runs").exists()


SCALAR = '''from cem_core.spec import PreconditionerSpec, register

SCALE = 1
register(PreconditionerSpec(name="myscalar", module="myplug:Scalar", description="P = c I", label="scalar",
                            params=lambda n, width, rank: n * SCALE))
'''


def _fingerprint(where: Path, plugins: list[str]) -> str:
    """The code fingerprint a trainer records for a run using `plugins` (computed in a process of its own)."""
    code = ("import sys; sys.path.append(sys.argv[1]); from cem_core.fingerprint import code_fingerprint; "
            "print(code_fingerprint(plugins=sys.argv[2:]))")
    import subprocess
    import sys

    from tests.helpers import subprocess_env

    out = subprocess.run([sys.executable, "-c", code, str(where), *plugins], capture_output=True, text=True,
                         env=subprocess_env(CEMCTL_CACHE=str(where / "cache")), check=True)
    return out.stdout.strip()


def _finished_plugin_project(where: Path, *, legacy: bool = False) -> dict[str, str]:
    """A grid whose arms are the built-in "diag" and the plugin's "myscalar", both finished with the fingerprints a
    trainer records (`legacy`: the built-in arm's as the release before recorded it, plugin source included)."""
    from tests.helpers import finish_run

    (where / "myplug.py").write_text(SCALAR)
    _grid(where, "myplug", '[axes]\n"model.attn_precond" = ["diag", "myscalar"]\n')
    res = _run(where, "plan", "g.toml", "--json")
    assert res.returncode == 0, res.stderr
    arms = {r["axes"]["model.attn_precond"]: r["run_id"] for r in json.loads(res.stdout)["runs"]}
    with_plugin = _fingerprint(where, ["myplug"])
    for arm, rid in arms.items():
        finish_run(where / "runs" / rid)
        result = json.loads((where / "runs" / rid / "result.json").read_text())
        result["code_fingerprint"] = with_plugin if arm == "myscalar" or legacy else _fingerprint(where, [])
        (where / "runs" / rid / "result.json").write_text(json.dumps(result))
    return arms


def _outdated(where: Path) -> list[str]:
    res = _run(where, "status", "--json")
    assert res.returncode == 0, res.stderr
    return sorted(json.loads(res.stdout)["experiments"][0]["outdated"])


def test_an_edit_beside_the_grid_is_seen_without_a_re_plan_and_outdates_only_its_variants_runs(tmp_path):
    """It used to be invisible until a re-plan (everything read the copy in runs/.plugins), and then every run of the
    grid was outdated, the built-in arm included."""
    arms = _finished_plugin_project(tmp_path)
    assert _outdated(tmp_path) == []
    (tmp_path / "myplug.py").write_text(SCALAR.replace("SCALE = 1", "SCALE = 2"))
    assert _outdated(tmp_path) == [arms["myscalar"]]
    copy = tmp_path / "runs" / ".plugins" / "myplug.py"
    assert "SCALE = 1" in copy.read_text()  # status reads the source and writes nothing (the copy is the jobs')
    assert _run(tmp_path, "sync").returncode == 0  # a command that writes refreshes the copy the jobs import
    assert copy.read_text() == (tmp_path / "myplug.py").read_text()
    manifest = json.loads((tmp_path / "runs" / ".plugins" / ".cemctl-manifest.json").read_text())
    assert manifest["what"] == "plugins" and set(manifest["files"]) == {"myplug.py"}
    assert manifest["sources"]["myplug"]["path"] == str(tmp_path.resolve())


def test_runs_trained_before_the_upgrade_are_not_outdated_by_it(tmp_path):
    """The built-in arm's fingerprint recorded the way the release before did (plugin source included) still
    matches while nothing changed."""
    _finished_plugin_project(tmp_path, legacy=True)
    assert _outdated(tmp_path) == []


def test_an_edit_made_in_the_copy_is_refused_and_kept(tmp_path):
    """plan used to overwrite it silently."""
    _finished_plugin_project(tmp_path)
    copy = tmp_path / "runs" / ".plugins" / "myplug.py"
    copy.write_text(SCALAR.replace("SCALE = 1", "SCALE = 5"))  # the user's edit, in the wrong place
    for command in (("plan", "g.toml"), ("sync",)):
        line = assert_clean_error(_run(tmp_path, *command), contains=f"{copy}: refused: it was edited after cemctl "
                                  "copied it")
        assert f"copy it into {tmp_path.resolve() / 'myplug.py'}" in line and f"then delete {copy}" in line
        assert "SCALE = 5" in copy.read_text()
    assert _run(tmp_path, "status").returncode == 0  # a read reads the source: the copy is neither used nor touched
    assert "SCALE = 5" in copy.read_text()
    copy.unlink()  # the recovery the line names
    assert _run(tmp_path, "sync").returncode == 0
    assert copy.read_text() == (tmp_path / "myplug.py").read_text()


def test_a_copy_an_older_cemctl_made_is_adopted_when_it_is_the_source_and_refused_when_it_differs(tmp_path):
    (tmp_path / "myplug.py").write_text(SCALAR)
    _grid(tmp_path, "myplug", '[axes]\n"model.attn_precond" = ["diag", "myscalar"]\n')
    copy = tmp_path / "runs" / ".plugins" / "myplug.py"
    copy.parent.mkdir(parents=True)
    copy.write_text(SCALAR)  # what the release before left: the copy, no manifest
    assert _run(tmp_path, "plan", "g.toml").returncode == 0
    assert (copy.parent / ".cemctl-manifest.json").is_file()
    (copy.parent / ".cemctl-manifest.json").unlink()
    copy.write_text(SCALAR.replace("SCALE = 1", "SCALE = 3"))
    line = assert_clean_error(_run(tmp_path, "plan", "g.toml"), contains="no manifest of cemctl's lists it")
    assert "SCALE = 3" in copy.read_text() and "delete" in line


def test_a_moved_source_leaves_the_copy_in_use(tmp_path):
    arms = _finished_plugin_project(tmp_path)
    (tmp_path / "myplug.py").rename(tmp_path / "myplug.py.moved")
    assert _outdated(tmp_path) == []  # status reads the copy: the same code as the runs
    assert set(status_rows(tmp_path, subprocess=True)) == set(arms.values())
