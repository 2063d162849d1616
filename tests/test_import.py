"""`cemctl import` all or nothing (issue 33.4): only a regular file is opened, every shape checked before a run
folder moves, a kill at any stage leaves the project as before or finishable by the next import, memory bounded."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.helpers import assert_clean_error, cli, finish_run, plan_ids, subprocess_env, tiny_grid

GRID = tiny_grid("imp", seeds="[0, 1]", extra='''
[axes]
"model.attention" = ["llama", "cem"]
''')


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    (src / "imp.toml").write_text(GRID)
    res = cli(src, "plan", str(src / "imp.toml"), "--json")
    assert res.returncode == 0, res.output
    for i, r in enumerate(json.loads(res.stdout)["runs"]):
        finish_run(src / "runs" / r["run_id"], test_loss=1.5 + i / 100)
    assert cli(src, "tag", "imp", "phase=final").returncode == 0
    out = src / "imp.tar.gz"
    assert cli(src, "archive", "imp", "-o", str(out)).returncode == 0
    return out


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar}


def _write(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _untouched(where: Path) -> None:
    """Nothing of the archive was written: no run folder, no experiment, no staging left behind."""
    runs = where / "runs"
    assert not runs.exists() or not [p for p in runs.iterdir()], sorted(p.name for p in runs.iterdir())
    if (where / "results.db").exists():
        res = cli(where, "status", "--json")
        assert not [e for e in json.loads(res.stdout)["experiments"] if e["name"] == "imp"]


def test_a_fifo_or_a_device_is_refused_at_once(tmp_path):
    fifo = tmp_path / "a.tar.gz"
    os.mkfifo(fifo)
    res = cli(tmp_path, "import", str(fifo), subprocess=True, timeout=60)
    assert_clean_error(res, contains="refused: a FIFO")
    res = cli(tmp_path, "import", "/dev/zero", subprocess=True, timeout=60)
    assert_clean_error(res, contains="refused: a device")
    _untouched(tmp_path)


def test_a_truncated_archive_is_named_so(archive, tmp_path):
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    assert_clean_error(cli(tmp_path, "import", str(cut)), contains="truncated or damaged archive")
    _untouched(tmp_path)


def _with_manifest(archive: Path, tmp_path: Path, edit) -> Path:  # noqa: ANN001
    members = _members(archive)
    manifest = json.loads(members["manifest.json"])
    edit(manifest)
    members["manifest.json"] = json.dumps(manifest).encode()
    return _write(tmp_path / "edited.tar.gz", members)


def _first_run(m: dict) -> str:
    files = m.get("files") or {}
    return next(k.split("/")[1] for k in files) if files else next(iter(m["runs"]))


BAD_MANIFESTS = {
    "runs is a list": lambda m: m.update(runs=[]) if "runs" in m else m.update(files=[]),
    "experiments not a list": lambda m: m.update(experiments="x"),
    "experiment name a path": lambda m: m["experiments"][0].update(name="../../etc"),
    "plans not a list": lambda m: m["experiments"][0].update(plans={"a": 1}),
    "a link to no run": lambda m: m["experiments"][0]["plans"][0]["links"].append({"run_id": "ffffffffffff"}),
    "a scale that is a number": lambda m: m["experiments"][0]["plans"][0].update(scale=3),
    "a bad sha256": lambda m: [v.update(sha256="x") for v in (m.get("files") or {}).values()]
    or [f.update(sha256="x") for r in m.get("runs", {}).values() for f in r["files"].values()],
    "not a cemctl archive": lambda m: m.update(format="zip", written_by="someone", what="photos"),
    "a run linked twice in a plan": lambda m: m["experiments"][0]["plans"][0]["links"].append(
        dict(m["experiments"][0]["plans"][0]["links"][0], position=99)),
    "a position twice in a plan": lambda m: m["experiments"][0]["plans"][0]["links"][1].update(
        position=m["experiments"][0]["plans"][0]["links"][0]["position"]),
    "a plan key twice": lambda m: m["experiments"][0]["plans"].append(dict(m["experiments"][0]["plans"][0])),
    "an unknown scale": lambda m: m["experiments"][0]["plans"][0].update(scale="huge"),
    "an axis that is no config key": lambda m: m["experiments"][0]["plans"][0]["links"][0].update(axes={"x.y": 1}),
    "an axis value that is not the run's": lambda m: m["experiments"][0]["plans"][0]["links"][0]["axes"].update(
        {"model.attention": "nonsense"}),
    "an override that is no config key": lambda m: m["experiments"][0]["plans"][0].update(
        overrides_json='{"train.nope": 1}'),
    "an override that is a table": lambda m: m["experiments"][0]["plans"][0].update(
        overrides_json='{"train.lr": {"a": 1}}'),
    "seeds that are not numbers": lambda m: m["experiments"][0]["plans"][0].update(overrides_json='{"--seeds": "x"}'),
}


@pytest.mark.parametrize("case", list(BAD_MANIFESTS))
def test_every_bad_manifest_shape_is_one_line_and_writes_nothing(archive, tmp_path, case):
    bad = _with_manifest(archive, tmp_path, BAD_MANIFESTS[case])
    res = cli(tmp_path, "import", str(bad))  # in this process: an exception that escapes fails the test itself
    line = assert_clean_error(res)
    assert "internal error" not in line and ("manifest" in line or "archive" in line), line
    _untouched(tmp_path)


def test_a_same_named_experiment_of_another_grid_is_not_taken_over(archive, tmp_path):
    (tmp_path / "imp.toml").write_text(GRID.replace('seeds = [0, 1]', 'seeds = [5]'))  # same name, other grid
    assert cli(tmp_path, "plan", str(tmp_path / "imp.toml")).returncode == 0
    before = sorted(p.name for p in (tmp_path / "runs").iterdir())
    line = assert_clean_error(cli(tmp_path, "import", str(archive)), contains="is here already from another grid")
    assert "nothing was imported" in line
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == before


BAD_CLAIMS = {
    "a registration of another experiment": ("claims/registry.jsonl",
                                             b'{"experiment": "other", "time": 1, "scale": "tiny", "parts": []}\n'),
    "a registry that is not JSON": ("claims/registry.jsonl", b'{"experiment": "imp", "ti\n'),
    "a design named for another experiment": ("claims/sequential/other@tiny.json",
                                              b'{"design": {"experiment": "imp", "scale": "tiny"}, "looks": []}'),
    "a claims path out of the folder": ("claims/sequential/../../x.json", b"{}"),
    "a claims file that is not claims state": ("claims/notes.txt", b"hello"),
}


@pytest.mark.parametrize("case", list(BAD_CLAIMS))
def test_bad_claims_state_in_an_archive_is_one_line_and_writes_nothing(archive, tmp_path, case):
    name, data = BAD_CLAIMS[case]
    members = _members(archive)
    members[name] = data
    manifest = json.loads(members["manifest.json"])
    manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    members["manifest.json"] = json.dumps(manifest).encode()
    line = assert_clean_error(cli(tmp_path, "import", str(_write(tmp_path / "bad.tar.gz", members))))
    assert "internal error" not in line and "claims" in line, line
    _untouched(tmp_path)


BAD_RUN_FILES = {
    "tags.json": b'{"tags": {"a": 1}, "notes": []}',
    "evals.json": b'{"evals": 3}',
    "environment.json": b'{"attempt": "x"}',
    "result.json": b'{"state": "done", "test_loss": null}',
    "result.json cut": b'{"state": "do',
}


@pytest.mark.parametrize("case", list(BAD_RUN_FILES))
def test_a_run_file_its_reader_refuses_is_refused_before_anything_moves(archive, tmp_path, case):
    """Each JSON run file of the archive is read by its one reader before a folder moves (before, a tags.json, evals.json
    or environment.json of the wrong shape was imported as it was, and a result.json that is not a result came in as
    a damaged run; a cut one, just written, was not even that)."""
    data = BAD_RUN_FILES[case]
    members = _members(archive)
    rid = _first_run(json.loads(members["manifest.json"]))
    name = f"runs/{rid}/{case.split()[0]}"
    members[name] = data
    manifest = json.loads(members["manifest.json"])
    manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    members["manifest.json"] = json.dumps(manifest).encode()
    line = assert_clean_error(cli(tmp_path, "import", str(_write(tmp_path / "bad.tar.gz", members))),
                              contains=f"{name}: ")
    assert "nothing was imported" in line
    _untouched(tmp_path)


def _without_grid_sha(m: dict) -> None:
    for e in m["experiments"]:
        e.pop("grid_sha256", None)


def test_a_same_named_experiment_of_another_grid_is_refused_before_a_folder_moves_without_a_sha(archive, tmp_path):
    """An archive whose manifest has no grid_sha256 (an older or edited one): the grids are told apart by their text,
    before anything moves. Before, the run folders were renamed in and then recording the plan refused."""
    bare = _with_manifest(archive, tmp_path, _without_grid_sha)
    (tmp_path / "imp.toml").write_text(GRID.replace('seeds = [0, 1]', 'seeds = [5]'))  # same name, other grid
    assert cli(tmp_path, "plan", str(tmp_path / "imp.toml")).returncode == 0
    before = sorted(p.name for p in (tmp_path / "runs").iterdir())
    line = assert_clean_error(cli(tmp_path, "import", str(bare)), contains="is here already from another grid")
    assert "nothing was imported" in line
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == before


def test_the_same_grid_without_a_sha_imports_by_its_text(archive, tmp_path):
    """The same grid text planned here (another --set: other runs) under another path: the archive without a sha is the
    same experiment."""
    bare = _with_manifest(archive, tmp_path, _without_grid_sha)
    (tmp_path / "imp.toml").write_text(GRID)
    assert cli(tmp_path, "plan", str(tmp_path / "imp.toml"), "--set", "train.lr=0.0123").returncode == 0
    res = cli(tmp_path, "import", str(bare))
    assert res.returncode == 0, res.output
    states = sorted(v[0] for v in _snapshot(tmp_path).values())
    assert states == ["done"] * 4 + ["planned"] * 4  # the archive's runs and this project's, in one experiment


def test_a_grid_sha_that_is_not_the_grid_texts_is_refused(archive, tmp_path):
    """A manifest cannot claim the local grid's sha256 for other text (it would replace the experiment's grid)."""
    def edit(m: dict) -> None:
        m["experiments"][0]["grid_text"] += "\n# edited\n"

    assert_clean_error(cli(tmp_path, "import", str(_with_manifest(archive, tmp_path, edit))), contains="grid_sha256")
    _untouched(tmp_path)


def test_the_runs_folder_the_project_recorded_is_used(archive, tmp_path):
    """A project whose runs live elsewhere (--runs-dir at plan) imports there; its earlier runs never turn damaged."""
    (tmp_path / "own.toml").write_text(tiny_grid("own", seeds="[9]"))  # no run in common with the archive
    assert cli(None, "plan", str(tmp_path / "own.toml"), "--db", str(tmp_path / "results.db"), "--runs-dir",
               str(tmp_path / "elsewhere"), cwd=tmp_path).returncode == 0
    res = cli(None, "import", str(archive), "--db", str(tmp_path / "results.db"), cwd=tmp_path)
    assert res.returncode == 0, res.output
    assert not (tmp_path / "runs").exists() and len(list((tmp_path / "elsewhere").iterdir())) == 1 + 4
    st = cli(None, "status", "--json", "--db", str(tmp_path / "results.db"), cwd=tmp_path)
    states = {r["state"] for e in json.loads(st.stdout)["experiments"] for r in e["runs"]}
    assert "damaged" not in states


def test_a_result_the_database_records_otherwise_is_refused_before_anything_moves(archive, tmp_path):
    """A run whose folder is gone here but whose result the database still records: an archive bringing another
    result for it is refused in one line, and nothing is written (no folder comes back, no other run moves)."""
    assert cli(tmp_path, "import", str(archive)).returncode == 0
    members = _members(archive)
    rid = _first_run(json.loads(members["manifest.json"]))
    import shutil

    shutil.rmtree(tmp_path / "runs" / rid)  # the folder is gone; the database keeps its result
    name = f"runs/{rid}/result.json"
    result = json.loads(members[name])
    result["test_loss"] = 9.25  # another result under the same run id
    members[name] = json.dumps(result).encode()
    manifest = json.loads(members["manifest.json"])
    manifest["files"][name] = {"size": len(members[name]), "sha256": hashlib.sha256(members[name]).hexdigest()}
    members["manifest.json"] = json.dumps(manifest).encode()
    before = sorted(p.name for p in (tmp_path / "runs").iterdir())
    line = assert_clean_error(cli(tmp_path, "import", str(_write(tmp_path / "other.tar.gz", members))),
                              contains="the database already records another result")
    assert rid in line and "nothing was imported" in line
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == before


@contextlib.contextmanager
def _read_only_view(src: Path):
    """`src` seen read-only: a read-only bind mount as root (chmod does not stop root), chmod otherwise."""
    if os.geteuid() != 0:
        src.chmod(0o555)
        try:
            yield src
        finally:
            src.chmod(0o755)
        return
    view = src.parent / f"{src.name}-ro"
    view.mkdir()
    ok = subprocess.run(["mount", "--bind", str(src), str(view)], capture_output=True).returncode == 0 and \
        subprocess.run(["mount", "-o", "remount,ro,bind", str(view)], capture_output=True).returncode == 0
    try:
        if not ok:
            pytest.skip("running as root without permission to mount a read-only view")
        yield view
    finally:
        subprocess.run(["umount", "-l", str(view)], capture_output=True)


def test_a_read_only_database_is_refused_before_anything_is_written(archive, tmp_path):
    """A results database in a folder that cannot be written (a read-only bind mount, as root; chmod otherwise):
    one line, and the runs folder stays as it was (no staging folder, no run)."""
    src = tmp_path / "db"
    src.mkdir()
    (src / "own.toml").write_text(tiny_grid("own", seeds="[9]"))
    runs = tmp_path / "runs"
    assert cli(None, "plan", str(src / "own.toml"), "--db", str(src / "results.db"), "--runs-dir",
               str(runs), subprocess=True).returncode == 0  # its own process: the database closed, its WAL folded in
    before = sorted(p.name for p in runs.iterdir())
    with _read_only_view(src) as view:
        res = cli(None, "import", str(archive), "--db", str(view / "results.db"), "--runs-dir", str(runs),
                  subprocess=True)
        line = assert_clean_error(res)
        assert "is read-only here: nothing was imported" in line, line
    assert sorted(p.name for p in runs.iterdir()) == before


def _import(where: Path, archive: Path, kill_at: str | None = None) -> subprocess.CompletedProcess:
    env = subprocess_env(**({"CEMCTL_TEST_KILL_IMPORT_AT": kill_at} if kill_at else {}))
    return subprocess.run([sys.executable, "-m", "cemctl.cli", "import", str(archive), "--db",
                           str(where / "results.db"), "--runs-dir", str(where / "runs")], cwd=where, env=env,
                          capture_output=True, text=True, timeout=300)


def _snapshot(where: Path) -> dict:
    st = json.loads(cli(where, "status", "--json", "--no-sync", "--columns", "run,state,test,tag.phase").stdout)
    return {r["run_id"]: (r["state"], r["test_loss"], r.get("tag.phase")) for e in st["experiments"] for r in e["runs"]}


@pytest.mark.parametrize("stage", [pytest.param("staged", marks=pytest.mark.slow),  # a process killed at each
                                   pytest.param("checked", marks=pytest.mark.slow),  # stage: the fast tier kills
                                   "moved",  # it once, between moving the runs in and recording them
                                   pytest.param("planned", marks=pytest.mark.slow)])
def test_a_kill_at_any_stage_leaves_the_project_as_before_or_finishable(archive, tmp_path, stage):
    clean = tmp_path / "clean"
    clean.mkdir()
    assert _import(clean, archive).returncode == 0
    want = _snapshot(clean)
    assert len(want) == 4 and all(v[0] == "done" and v[2] == "final" for v in want.values())
    where = tmp_path / "killed"
    where.mkdir()
    killed = _import(where, archive, kill_at=stage)
    assert killed.returncode == -9, killed.stderr
    if stage in ("staged", "checked"):  # before any run folder moved: the project is as before
        runs = where / "runs"
        assert not [p for p in runs.iterdir() if not p.name.startswith(".import-")] if runs.exists() else True
    again = _import(where, archive)
    assert again.returncode == 0, again.stderr
    assert _snapshot(where) == want
    assert not [p for p in (where / "runs").iterdir() if p.name.startswith(".import-")]  # the killed staging: gone


class _Endless(io.RawIOBase):
    """`size` bytes of one endless line, produced as they are read (never held whole)."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # noqa: ANN001
        n = min(len(b), self.left)
        b[:n] = b"x" * n
        self.left -= n
        return n


PEAK = ("import atexit, sys\n"
        "def peak():\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith('VmHWM:'): print('VmHWM', int(line.split()[1]), file=sys.stderr)\n"
        "atexit.register(peak)\n"
        "from cemctl.cli import main\n"
        "sys.argv = ['cemctl'] + sys.argv[1:]\n"
        "main()\n")


def _bomb(tmp_path: Path, member: str, size: int) -> tuple[Path, str]:
    """An archive of one finished run whose `member` is `size` bytes of one endless line (a few hundred kB
    compressed, as a decompression bomb would be); returns it and the run id."""
    src = tmp_path / "src"
    if not src.exists():
        src.mkdir()
        (src / "big.toml").write_text(tiny_grid("big", seeds="[0]"))
        rid = json.loads(cli(src, "plan", str(src / "big.toml"), "--json").stdout)["runs"][0]["run_id"]
        finish_run(src / "runs" / rid)
        assert cli(src, "archive", "big", "-o", str(src / "small.tar.gz")).returncode == 0
    members = _members(src / "small.tar.gz")
    rid = next(n.split("/")[1] for n in members if n.startswith("runs/"))
    digest = hashlib.sha256()
    stream = _Endless(size)
    while chunk := stream.read(1 << 20):
        digest.update(chunk)
    manifest = json.loads(members["manifest.json"])
    entry = {"size": size, "sha256": digest.hexdigest()}
    if "files" in manifest:
        manifest["files"][f"runs/{rid}/{member}"] = entry
    else:
        manifest["runs"][rid]["files"][member] = entry
    members["manifest.json"] = json.dumps(manifest).encode()
    members.pop(f"runs/{rid}/{member}", None)
    bomb = tmp_path / f"bomb-{member}.tar.gz"
    with tarfile.open(bomb, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo(f"runs/{rid}/{member}")
        info.size = size
        tar.addfile(info, io.BufferedReader(_Endless(size)))
    assert bomb.stat().st_size < 2 << 20
    return bomb, rid


def _peak_import(bomb: Path, where: Path) -> tuple[subprocess.CompletedProcess, float]:
    """`cemctl import` in a process of its own; (the process, its peak resident memory in MiB)."""
    proc = subprocess.run([sys.executable, "-c", PEAK, "import", str(bomb), "--db", str(where / "results.db"),
                           "--runs-dir", str(where / "runs")], cwd=where, env=subprocess_env(), capture_output=True,
                          text=True, timeout=600)
    return proc, int(proc.stderr.split("VmHWM")[-1].split()[0]) / 1024


@pytest.mark.slow
def test_memory_stays_bounded_on_a_large_archive(tmp_path):
    """A 200 MiB metrics.jsonl is streamed to disk and its lines read in chunks, and hashed in chunks when the run is
    here already (a second import): the importing process's peak memory stays far below the member's size."""
    size = 200 << 20
    bomb, rid = _bomb(tmp_path, "metrics.jsonl", size)
    where = tmp_path / "dst"
    where.mkdir()
    for _ in range(2):  # the second import hashes the 200 MiB file already here
        proc, peak_mib = _peak_import(bomb, where)
        assert proc.returncode == 0, proc.stderr
        assert peak_mib < 160, f"peak {peak_mib:.0f} MiB importing a {size >> 20} MiB member"
        assert (where / "runs" / rid / "metrics.jsonl").stat().st_size == size
    assert "(1 already here)" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("member", ["config.json", "result.json", "tags.json", "evals.json", "environment.json"])
def test_a_json_member_over_its_readers_cap_is_refused_unread(tmp_path, member):
    """A JSON run file is read whole by its one reader: a member larger than that reader's cap is refused from its
    header, in one line naming the member and the cap, never read (a 200 MiB config.json took 462 MB before)."""
    from cemctl.services.archive import member_cap

    bomb, rid = _bomb(tmp_path, member, 200 << 20)
    where = tmp_path / "dst"
    where.mkdir()
    proc, peak_mib = _peak_import(bomb, where)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("VmHWM")]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert f"runs/{rid}/{member}" in lines[0] and f"at most {member_cap(member)} for {member}" in lines[0], lines[0]
    assert peak_mib < 160, f"peak {peak_mib:.0f} MiB refusing a 200 MiB {member}"
    _untouched(where)


def test_an_archive_of_a_plugin_experiment_imports_where_the_plugin_is_not(tmp_path):
    """The archive carries the plugin sources its runs' configs name; the importing project keeps them, and once
    trusted (tests/test_archive_is_data.py: never before) they are the source of the copy the jobs import."""
    import shutil

    example = Path(__file__).resolve().parents[1] / "examples" / "plugin"
    src = tmp_path / "src"
    shutil.copytree(example, src)
    res = cli(src, "plan", str(src / "scalar.toml"), "--json", subprocess=True)
    assert res.returncode == 0, res.stderr
    runs = json.loads(res.stdout)["runs"]
    for i, r in enumerate(runs):
        finish_run(src / "runs" / r["run_id"], test_loss=1.5 + i / 100)
    out = tmp_path / "plug.tar.gz"
    res = cli(src, "archive", "scalar_precond", "-o", str(out), subprocess=True)
    assert res.returncode == 0, res.stderr
    assert any(n.startswith("plugins/scalar_precond/") for n in _members(out))
    dst = tmp_path / "dst"
    dst.mkdir()
    res = cli(dst, "import", str(out), subprocess=True, cwd=dst)
    assert res.returncode == 0, res.stderr
    assert cli(dst, "trust", "scalar_precond", "--yes", subprocess=True, cwd=dst).returncode == 0  # an archive is data
    assert (dst / "runs" / ".plugins" / "scalar_precond" / "layers.py").exists()
    st = cli(dst, "status", "scalar_precond", "--json", subprocess=True, cwd=dst)
    assert st.returncode == 0, st.stderr
    assert {r["state"] for r in json.loads(st.stdout)["experiments"][0]["runs"]} == {"done"}
    rep = cli(dst, "report", "scalar_precond", "--out", str(dst / "rep"), "--format", "png", subprocess=True, cwd=dst)
    assert rep.returncode == 0, rep.stderr
    again = cli(dst, "import", str(out), subprocess=True, cwd=dst)  # twice: nothing changes
    assert again.returncode == 0 and f"imported 0 runs ({len(runs)} already here)" in again.stdout


ENV = {"attempt": 1, "hostname": "node7", "python_version": "3.11.7", "torch_version": "2.3.0"}


def test_an_archive_sharing_a_baseline_trained_here_too_imports_and_keeps_ours(tmp_path):
    """A run trained both here and where the archive was made (a shared baseline: the same config, its own
    result and environment record) no longer refuses the whole import: ours is kept and named, the rest imports."""
    shared = tiny_grid("base", steps=2, seeds="[0]")
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    _, (base,) = plan_ids(src, shared, "base")
    _, (extra,) = plan_ids(src, tiny_grid("more", steps=3, seeds="[0]"), "more")
    finish_run(src / "runs" / base, test_loss=1.40)
    finish_run(src / "runs" / extra, test_loss=1.30)
    (src / "runs" / base / "environment.json").write_text(json.dumps({**ENV, "hostname": "theirs"}))
    out = tmp_path / "both.tar.gz"
    assert cli(src, "archive", "base", "more", "-o", str(out)).returncode == 0
    plan_ids(dst, shared, "base")
    finish_run(dst / "runs" / base, test_loss=1.45)
    (dst / "runs" / base / "environment.json").write_text(json.dumps({**ENV, "hostname": "ours"}))
    ours = (dst / "runs" / base / "result.json").read_bytes()
    res = cli(dst, "import", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "imported 1 runs" in res.stdout and "kept 1 runs this project trained too" in res.stdout, res.stdout
    assert (dst / "runs" / base / "result.json").read_bytes() == ours
    assert json.loads((dst / "runs" / extra / "result.json").read_text())["test_loss"] == 1.30
