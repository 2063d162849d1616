"""An archive is data: nothing it carries runs on the importer's machine until the user trusts it by name.

The plugin here writes a marker file the moment Python imports it. Importing an archive that carries it, listing
its runs, refusing an import, and every reading command leave no marker; only `cemctl trust NAME --yes` (which
names the files and their sha256) makes the plugin importable, and only then does a command that needs its
variants import it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers import assert_clean_error, cli, finish_run, subprocess_env

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "plugin"


def _marked_project(tmp_path: Path, marker: Path) -> tuple[Path, list[str]]:
    """The example plugin project, its plugin rewritten to write `marker` when imported; its runs finished."""
    src = tmp_path / "src"
    shutil.copytree(EXAMPLE, src)
    init = src / "scalar_precond" / "__init__.py"
    init.write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n" + init.read_text())
    res = cli(src, "plan", str(src / "scalar.toml"), "--json", subprocess=True)
    assert res.returncode == 0, res.stderr
    runs = [r["run_id"] for r in json.loads(res.stdout)["runs"]]
    for i, rid in enumerate(runs):
        finish_run(src / "runs" / rid, test_loss=1.5 + i / 100)
    return src, runs


def test_an_archives_plugin_never_runs_until_trusted(tmp_path):
    marker = tmp_path / "plugin-ran"
    src, runs = _marked_project(tmp_path, marker)
    out = tmp_path / "plug.tar.gz"
    assert cli(src, "archive", "scalar_precond", "-o", str(out), subprocess=True).returncode == 0
    marker.unlink()  # the source project ran its own plugin (it is the author's): from here on, nobody may

    dst = tmp_path / "dst"
    dst.mkdir()
    res = cli(dst, "import", str(out), subprocess=True, cwd=dst)
    assert res.returncode == 0, res.stderr
    assert not marker.exists(), "import ran the archive's plugin"
    assert "cemctl trust scalar_precond" in res.stdout + res.stderr
    assert not (dst / "runs" / ".plugins").exists(), "the jobs' copy of the plugins was made before any trust"

    # reading commands list the runs without the plugin
    st = cli(dst, "status", "scalar_precond", "--json", subprocess=True, cwd=dst)
    assert st.returncode == 0, st.stderr
    assert {r["state"] for r in json.loads(st.stdout)["experiments"][0]["runs"]} == {"done"}
    assert not marker.exists(), "status ran the archive's plugin"
    # the report draws them from their files (the plugin's value as the grid wrote it)
    rep = cli(dst, "report", "scalar_precond", "--out", str(dst / "rep"), "--format", "png", subprocess=True, cwd=dst)
    assert rep.returncode == 0, rep.stderr
    assert not marker.exists(), "report ran the archive's plugin"
    # a command that needs the plugin's code says how to trust it, in one line
    ev = cli(dst, "eval", runs[0], "--steps", "1,2", subprocess=True, cwd=dst)
    line = assert_clean_error(ev, contains="cemctl trust scalar_precond")
    assert not marker.exists(), line

    # the trust step names every file and its sha256; without --yes off a terminal it trusts nothing
    listed = cli(dst, "trust", subprocess=True, cwd=dst)
    assert listed.returncode == 0, listed.stderr
    for path in sorted((src / "scalar_precond").glob("*.py")):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        assert f"scalar_precond/{path.name}" in listed.stdout and digest in listed.stdout, listed.stdout
    refused = cli(dst, "trust", "scalar_precond", subprocess=True, cwd=dst)
    assert_clean_error(refused, contains="--yes")
    assert not marker.exists() and not (dst / "runs" / ".plugins").exists()

    ok = cli(dst, "trust", "scalar_precond", "--yes", subprocess=True, cwd=dst)
    assert ok.returncode == 0, ok.stderr
    assert not marker.exists(), "trusting is a decision, not an import"
    assert (dst / "runs" / ".plugins" / "scalar_precond" / "layers.py").exists()
    ev = cli(dst, "eval", runs[0], "--steps", "1,2", subprocess=True, cwd=dst)
    assert "trust" not in ev.stdout + ev.stderr, ev.stderr
    # what a job does: the copy on the import path, the plugin loaded from it
    job = subprocess.run([sys.executable, "-c", "from cem_core.plugins import add_search_path, load_plugins; "
                          "add_search_path('runs/.plugins'); load_plugins('scalar_precond')"],
                         cwd=dst, env=subprocess_env(), capture_output=True, text=True)
    assert job.returncode == 0, job.stderr
    assert marker.exists(), "a trusted plugin is imported where its code is needed"
    listed = cli(dst, "trust", subprocess=True, cwd=dst)
    assert "nothing to trust" in listed.stdout, listed.stdout


def test_a_refused_import_runs_nothing_either(tmp_path):
    """An import refused after staging (here: an experiment name another grid holds) leaves no marker."""
    marker = tmp_path / "plugin-ran"
    src, runs = _marked_project(tmp_path, marker)
    out = tmp_path / "plug.tar.gz"
    assert cli(src, "archive", "scalar_precond", "-o", str(out), subprocess=True).returncode == 0
    marker.unlink()
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "other.toml").write_text('[experiment]\nname = "scalar_precond"\n[base]\n"model.size" = "nano"\n'
                                    '"train.max_steps" = 2\n')
    assert cli(dst, "plan", str(dst / "other.toml"), subprocess=True, cwd=dst).returncode == 0
    res = cli(dst, "import", str(out), subprocess=True, cwd=dst)
    assert_clean_error(res, contains="nothing was imported")
    assert not marker.exists(), "a refused import ran the archive's plugin"


def test_set_plugins_obeys_the_grid_file_rules(tmp_path):
    """`--set plugins=` (and a [base] plugins) is checked as `[experiment] plugins` is: a module of the standard
    library or of cemctl itself is refused in one line, naming the key."""
    grid = tmp_path / "g.toml"
    grid.write_text('[experiment]\nname = "g"\n[base]\n"model.size" = "nano"\n"train.max_steps" = 2\n')
    for name, why in (("json", "standard library"), ("cemctl", "cemctl's own package")):
        res = cli(tmp_path, "plan", str(grid), "--set", f"plugins={name}", "--dry-run", subprocess=True)
        assert_clean_error(res, contains=why)
    grid.write_text('[experiment]\nname = "g"\n[base]\n"model.size" = "nano"\n"train.max_steps" = 2\nplugins = "json"\n')
    res = cli(tmp_path, "plan", str(grid), "--dry-run", subprocess=True)
    assert_clean_error(res, contains="standard library")
    assert not (tmp_path / "results.db").exists()


def _retarget(src: Path, out: Path, plugins: str, plugin_files: dict[str, bytes]) -> None:
    """An archive like `src` whose runs' configs name `plugins` and which carries `plugin_files` (relative to
    plugins/) instead of its own plugin sources: run ids, links and hashes made consistent, as a forger would."""
    import io
    import tarfile

    from cem_core.identity import config_hash
    from cem_core.schema import flatten

    with tarfile.open(src) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    manifest = json.loads(files.pop("manifest.json"))
    files = {k: v for k, v in files.items() if not k.startswith("plugins/")}
    files.update({f"plugins/{rel}": data for rel, data in plugin_files.items()})
    renamed = {}
    for name in [k for k in files if k.endswith("/config.json")]:
        cfg = json.loads(files[name])
        cfg["plugins"] = plugins
        old = name.split("/")[1]
        renamed[old] = config_hash(flatten(cfg))
        files[name] = json.dumps(cfg).encode()
    files = {"/".join(renamed.get(p, p) for p in k.split("/")): v for k, v in files.items()}
    for old, new in renamed.items():
        if f"runs/{new}/result.json" in files:
            result = json.loads(files[f"runs/{new}/result.json"])
            files[f"runs/{new}/result.json"] = json.dumps({**result, "run_id": new}).encode()
    for exp in manifest["experiments"]:
        for plan in exp["plans"]:
            for link in plan["links"]:
                link["run_id"] = renamed.get(link["run_id"], link["run_id"])
    manifest["files"] = {k: {"sha256": hashlib.sha256(v).hexdigest(), "size": len(v)} for k, v in files.items()}
    with tarfile.open(out, "w:gz") as tar:
        for name, data in [("manifest.json", json.dumps(manifest).encode()), *sorted(files.items())]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_an_archive_naming_or_bringing_a_module_that_is_not_a_plugin_is_refused(tmp_path):
    """From a hostile probe: a config naming `this` (or an installed `numpy`) that the archive does not carry made
    status, report and export import it; an archive bringing its own `numpy` or `os` was imported and trusted, and
    the job then ran it instead of the installed one. Each is refused at import, one line, nothing imported."""
    marker = tmp_path / "plugin-ran"
    src, _ = _marked_project(tmp_path, marker)
    out = tmp_path / "plug.tar.gz"
    assert cli(src, "archive", "scalar_precond", "-o", str(out), subprocess=True).returncode == 0
    evil = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n".encode()
    cases = {"this": ("this", {}, "standard library"), "numpy": ("numpy", {}, "does not carry"),
             "own numpy": ("numpy", {"numpy/__init__.py": evil}, "installed module"),
             "own os": ("os", {"os/__init__.py": evil}, "standard library")}
    for i, (what, (plugins, files, why)) in enumerate(cases.items()):
        marker.unlink(missing_ok=True)
        forged = tmp_path / f"forged{i}.tar.gz"
        _retarget(out, forged, plugins, files)
        dst = tmp_path / f"dst{i}"
        dst.mkdir()
        res = cli(dst, "import", str(forged), subprocess=True, cwd=dst)
        line = assert_clean_error(res, contains=why)
        assert "nothing was imported" in line and "Beautiful is better" not in res.stdout + res.stderr, what
        assert not marker.exists() and not (dst / "runs").exists(), what


def test_trust_takes_only_the_files_the_archive_brought(tmp_path):
    """A compiled file planted beside the sources (Python would run it instead) is refused at trust; `trust NAME`
    with nothing waiting is exit 2, and an import of no file leaves no database behind."""
    marker = tmp_path / "plugin-ran"
    src, _ = _marked_project(tmp_path, marker)
    out = tmp_path / "plug.tar.gz"
    assert cli(src, "archive", "scalar_precond", "-o", str(out), subprocess=True).returncode == 0
    dst = tmp_path / "dst"
    dst.mkdir()
    assert_clean_error(cli(dst, "trust", "scalar_precond", "--yes", subprocess=True, cwd=dst), contains="nothing")
    assert_clean_error(cli(dst, "import", str(tmp_path / "none.tar.gz"), subprocess=True, cwd=dst), contains="no such")
    assert sorted(p.name for p in dst.iterdir()) == []
    assert cli(dst, "import", str(out), subprocess=True, cwd=dst).returncode == 0
    (folder,) = (dst / "runs" / ".plugins-imported").iterdir()
    cache = folder / "scalar_precond" / "__pycache__"
    cache.mkdir()
    (cache / "__init__.cpython-311.pyc").write_bytes(b"planted")
    line = assert_clean_error(cli(dst, "trust", "scalar_precond", "--yes", subprocess=True, cwd=dst), contains=".pyc")
    assert "nothing was trusted" in line and not (dst / "runs" / ".plugins").exists()
