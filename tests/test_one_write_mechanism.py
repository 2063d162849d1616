"""Each write mechanism once (issue 33, item 7): one atomic write and one lock (`cem_core.runfiles`) under the code
fingerprint cache and the owned output files, and one shape with one strict reader for every "cemctl wrote these
bytes" record (a folder's manifest, the record beside an output file, an archive's manifest), the shapes older
releases wrote still read as cemctl's."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from cem_core.runfiles import manifest as M
from cemctl.report import outfile
from cemctl.services.archive_manifest import archive_manifest_bytes, read_archive_manifest
from tests.helpers import assert_clean_error, cli

SHA = hashlib.sha256(b"x").hexdigest()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------------------------------ owned output files

def test_an_output_file_cemctl_wrote_before_the_upgrade_is_still_its_own(tmp_path):
    """The record an older cemctl kept beside an export (`{"by": "cemctl", "file", "size", "sha256"}`): the file
    is replaced without --force, and the record is rewritten in the one shape."""
    out = tmp_path / "runs.csv"
    out.write_bytes(b"a,b\n1,2\n")
    outfile.record_path(out).write_text(json.dumps({"file": "runs.csv", "size": 8, "sha256": _sha(b"a,b\n1,2\n"),
                                                    "written_at": 1.0, "by": "cemctl"}))
    assert outfile.owned(out)
    outfile.write_owned_file(out, lambda tmp: tmp.write_bytes(b"a,b\n3,4\n"))
    assert out.read_bytes() == b"a,b\n3,4\n"
    record = json.loads(outfile.record_path(out).read_text())
    assert record["written_by"] == "cemctl" and record["what"] == "output"
    assert record["files"] == {"runs.csv": {"size": 8, "sha256": _sha(b"a,b\n3,4\n")}}
    assert M.read_manifest(tmp_path, outfile.record_path(out).name, what="output").files["runs.csv"].size == 8


def test_an_edited_output_file_or_a_foreign_record_is_refused(tmp_path):
    out = tmp_path / "runs.csv"
    outfile.write_owned_file(out, lambda tmp: tmp.write_bytes(b"one"))
    assert outfile.owned(out)
    out.write_bytes(b"two")  # the user's edit
    with pytest.raises(outfile.NotOurs, match="did not write it"):
        outfile.write_owned_file(out, lambda tmp: tmp.write_bytes(b"three"))
    assert out.read_bytes() == b"two"
    # a record for another purpose (a report folder's manifest renamed into place) proves nothing here
    doc = M.manifest_doc("report", {"runs.csv": M.FileEntry(3, _sha(b"two"))})
    outfile.record_path(out).write_text(json.dumps(doc))
    assert not outfile.owned(out)
    outfile.write_owned_file(out, lambda tmp: tmp.write_bytes(b"four"), force=True)
    assert out.read_bytes() == b"four" and outfile.owned(out)


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path):
    out = tmp_path / "runs.csv"
    outfile.write_owned_file(out, lambda tmp: tmp.write_bytes(b"old"))

    def fail(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        outfile.write_owned_file(out, fail)
    assert out.read_bytes() == b"old" and outfile.owned(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".runs.csv.cemctl.json", "runs.csv"]


def test_a_report_folder_manifest_written_before_the_upgrade_is_still_cemctls(tmp_path):
    """The folder manifest as the release before this one wrote it (byte for byte the same keys)."""
    (tmp_path / "index.md").write_bytes(b"x")
    (tmp_path / ".cemctl-output.json").write_text(json.dumps(
        {"written_by": "cemctl", "version": 2, "what": "report", "files": {"index.md": {"size": 1, "sha256": SHA}}},
        indent=1, sort_keys=True))
    manifest = M.read_manifest(tmp_path, ".cemctl-output.json", what="report")
    assert M.remove_owned(tmp_path, manifest).removed == ["index.md"] and not tmp_path.exists()


# ------------------------------------------------------------------------------------------------ the one reader

@pytest.mark.parametrize("doc,needle", [
    ([], "not a cemctl manifest"),
    ({"written_by": "someone"}, "not a cemctl manifest"),
    ({"written_by": "cemctl", "what": "report"}, "no file list"),
    ({"written_by": "cemctl", "what": "report", "files": ["a"]}, "older cemctl"),
    ({"written_by": "cemctl", "what": "report", "files": {"../a": {"size": 1, "sha256": SHA}}}, "bad entry"),
    ({"written_by": "cemctl", "what": "report", "files": {"a": {"size": -1, "sha256": SHA}}}, "bad entry"),
    ({"written_by": "cemctl", "what": "report", "files": {"a": {"size": True, "sha256": SHA}}}, "bad entry"),
    ({"written_by": "cemctl", "what": "report", "files": {"a": {"size": 1, "sha256": "abc"}}}, "bad entry"),
    ({"written_by": "cemctl", "what": "report", "files": {"a": "x"}}, "bad entry"),
    ({"by": "cemctl", "file": 5, "size": 1, "sha256": SHA}, "no file list"),
    ({"by": "cemctl", "file": "a", "size": "1", "sha256": SHA}, "bad entry"),
    ({"format": "cemctl-archive", "version": 1, "runs": []}, "runs is a list"),
    ({"format": "cemctl-archive", "version": 1, "runs": {"3f2a61c0b2d4": "x"}}, "bad run entry"),
    ({"format": "cemctl-archive", "version": 1, "runs": {"..": {"files": {"a": {}}}}}, "bad entry"),
    ({"format": "cemctl-archive", "version": 7, "runs": {}}, "version 7"),
])
def test_every_bad_shape_is_one_line_naming_the_record(doc, needle):
    with pytest.raises(M.ManifestError) as e:
        M.parse_manifest(doc, "some/record.json")
    line = str(e.value)
    assert line.startswith("some/record.json: ") and needle in line and "\n" not in line


def test_the_three_kinds_of_record_are_one_shape():
    files = {"runs/3f2a61c0b2d4/config.json": M.FileEntry(1, SHA)}
    archive = json.loads(archive_manifest_bytes([], files, created=5.0))
    folder = M.manifest_doc("report", {"index.md": M.FileEntry(1, SHA)})
    one = M.manifest_doc("output", {"a": M.FileEntry(1, SHA)})
    for doc in (archive, folder, one):
        assert {"written_by", "version", "what", "files"} <= set(doc) and doc["written_by"] == "cemctl"
        assert M.parse_manifest(doc, "x").files
    assert read_archive_manifest(json.dumps(archive).encode(), "x").doc["runs"] == {
        "3f2a61c0b2d4": {"files": {"config.json": {"size": 1, "sha256": SHA}}}}


# ------------------------------------------------------------------------------------------------ archives

def _archive(path: Path, manifest: dict, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in [("manifest.json", json.dumps(manifest).encode()), *members.items()]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _planned(tmp_path: Path) -> tuple[str, bytes]:
    from cem_core.config import RunConfig, resolve, run_id

    cfg = resolve(RunConfig.from_dict({"model.size": "nano", "train.max_steps": 2, "data.tokenizer": "byte"}))
    return run_id(cfg), json.dumps(cfg.to_dict()).encode()


@pytest.mark.parametrize("shape", ["version 1", "one shape"])
def test_an_archive_of_either_shape_imports(tmp_path, shape):
    """An archive written before the upgrade (manifest version 1) imports as it did; so does the one shape."""
    rid, config = _planned(tmp_path)
    exp = {"name": "g", "grid_file": "g.toml", "grid_text": "", "plans": [
        {"scale": "tiny", "overrides_json": "{}", "links": [{"run_id": rid, "axes": {}, "position": 0, "marks": []}]}]}
    entry = {"size": len(config), "sha256": _sha(config)}
    if shape == "version 1":
        manifest = {"format": "cemctl-archive", "version": 1, "created": 1.0, "experiments": [exp],
                    "runs": {rid: {"files": {"config.json": entry}}}}
    else:
        manifest = json.loads(archive_manifest_bytes([exp], {f"runs/{rid}/config.json": M.FileEntry(**entry)},
                                                     created=1.0))
    path = _archive(tmp_path / "a.tar.gz", manifest, {f"runs/{rid}/config.json": config})
    res = cli(tmp_path, "import", str(path))
    assert res.returncode == 0, res.output
    assert (tmp_path / "runs" / rid / "config.json").read_bytes() == config


@pytest.mark.parametrize("change,needle", [
    (lambda m: m.update(runs=[]), "runs is a list"),
    (lambda m: m["runs"].update({"3f2a61c0b2d4": "x"}), "bad run entry"),
    (lambda m: m.update(experiments={}), "experiments must be a list"),
    (lambda m: m.update(experiments=["x"]), "experiments[0] must be a table"),
    (lambda m: m["experiments"][0].update(plans="x"), "experiments[0].plans must be a list"),
    (lambda m: m["experiments"][0]["plans"][0].update(links={}), "links must be a list"),
    (lambda m: m["experiments"][0]["plans"][0]["links"][0].update(run_id="0" * 12), "a run the archive holds"),
    (lambda m: m["experiments"][0]["plans"][0]["links"][0].update(marks="x"), "marks must be a list of strings"),
    (lambda m: m["experiments"][0]["plans"][0].update(overrides_json="[1]"), "overrides_json must be"),
])
def test_a_bad_archive_manifest_is_one_line_and_imports_nothing(tmp_path, change, needle):
    """Shapes like these used to end `cemctl import` with `internal error (AttributeError ...)`."""
    rid, config = _planned(tmp_path)
    manifest = {"format": "cemctl-archive", "version": 1, "created": 1.0,
                "experiments": [{"name": "g", "plans": [{"scale": "tiny", "links": [{"run_id": rid}]}]}],
                "runs": {rid: {"files": {"config.json": {"size": len(config), "sha256": _sha(config)}}}}}
    change(manifest)
    path = _archive(tmp_path / "a.tar.gz", manifest, {f"runs/{rid}/config.json": config})
    assert_clean_error(cli(tmp_path, "import", str(path)), contains=needle)
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------------------------------------ fingerprint cache

def test_the_fingerprint_cache_is_written_by_the_one_atomic_write_and_survives_damage(tmp_path, monkeypatch):
    from cem_core import fingerprint

    monkeypatch.setenv("CEMCTL_CACHE", str(tmp_path / "cache"))
    calls = []
    real = fingerprint.atomic_write_bytes
    monkeypatch.setattr(fingerprint, "atomic_write_bytes", lambda *a, **k: (calls.append(a[0]), real(*a, **k)))
    first = fingerprint.code_fingerprint()
    cache = tmp_path / "cache" / "code-fingerprints.json"
    assert calls == [cache] and isinstance(json.loads(cache.read_text()), dict)
    assert fingerprint.code_fingerprint() == first and len(calls) == 1  # nothing new parsed: nothing written
    for damage in (b"[1]", b"{ not json", b"[" * 100_000):
        cache.write_bytes(damage)
        assert fingerprint.code_fingerprint() == first
        assert isinstance(json.loads(cache.read_text()), dict)
    cache.unlink()
    os.mkfifo(cache)  # never blocked on, never written through
    assert fingerprint.code_fingerprint() == first
    assert [p.name for p in cache.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_a_process_holding_the_cache_lock_is_not_waited_for(tmp_path, monkeypatch):
    from cem_core import fingerprint
    from cem_core.runfiles.lock import file_lock

    monkeypatch.setenv("CEMCTL_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    with file_lock(tmp_path / "cache" / ".code-fingerprints.json.lock"):
        value = fingerprint.code_fingerprint()  # computed; the writer holding the lock writes the cache
    assert not (tmp_path / "cache" / "code-fingerprints.json").exists()
    assert fingerprint.code_fingerprint() == value
    assert (tmp_path / "cache" / "code-fingerprints.json").is_file()


# ------------------------------------------------------------------------------------------------ folders put in place

def test_publish_dir_puts_a_finished_folder_in_place_and_never_replaces_one(tmp_path):
    """The one way a folder is put in place (cem_core.runfiles.publish_dir: data cache generations, code snapshots,
    imported plugin sources): one rename of a finished folder; whatever holds the name already (an empty folder,
    which a plain rename would replace, a file, a link) stays, and the caller gets False."""
    from cem_core.runfiles import publish_dir

    def finished(name: str) -> Path:
        tmp = tmp_path / name
        (tmp / "sub").mkdir(parents=True)
        (tmp / "sub" / "a.py").write_bytes(b"x = 1\n")
        return tmp

    tmp = finished(".new")
    assert publish_dir(tmp, tmp_path / "final") is True
    assert (tmp_path / "final" / "sub" / "a.py").read_bytes() == b"x = 1\n" and not tmp.exists()
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("mine")
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    for name in ("empty", "file", "link"):
        tmp = finished(f".new-{name}")
        assert publish_dir(tmp, tmp_path / name) is False
        assert (tmp / "sub" / "a.py").exists()  # left for the caller
    assert not any((tmp_path / "empty").iterdir()) and (tmp_path / "file").read_text() == "mine"
    assert os.path.islink(tmp_path / "link")
