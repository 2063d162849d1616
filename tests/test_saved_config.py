"""One reader of config.json (`cem_core.runfiles.saved_config`): every bad shape is one line naming the file, the
same through every caller (the trainer's RunDir, load_run_config, sync, import, the database's records)."""

from __future__ import annotations

import json
import os

import pytest

from cem_core import runfiles
from cem_core.runfolder import checked_config
from cem_core.config import RunConfig, load_run_config, resolve, run_id
from cem_core.errors import ConfigError
from tests.helpers import assert_clean_error, cli, plan_ids, status_rows, tiny_grid

GOOD = json.dumps(resolve(RunConfig()).to_dict())

BAD = {
    "not json": ("{ not json", "is not valid JSON"),
    "a list": ("[1, 2]", "must be a JSON object, got list"),
    "a string": ('"x"', "must be a JSON object, got str"),
    "null": ("null", "must be a JSON object"),
    "nested too deeply": ("[" * 200_000 + "]" * 200_000, "nested too deeply"),
    "deep object": ('{"model": ' * 100_000 + "1" + "}" * 100_000, "nested too deeply"),
    "unknown key": ('{"model": {"nope": 1}}', "model.nope: unknown key"),
    "wrong type": ('{"train": {"lr": "fast"}}', "train.lr: must be a number"),
    "NaN": ('{"train": {"lr": NaN}}', "train.lr: must be a finite number"),
    "a section as a value": ('{"model": 5}', "model: must be a table"),
    "bad plugins": ('{"plugins": 5}', "plugins: must be a list"),
    "not utf-8": (b'{"task": "\xff"}', "is not valid JSON"),
}


def _write(path, data):
    path.write_bytes(data if isinstance(data, bytes) else data.encode())


@pytest.mark.parametrize("case", sorted(BAD))
def test_every_bad_shape_is_one_line_naming_the_file_by_every_reader(tmp_path, case):
    data, reason = BAD[case]
    run = tmp_path / "3f2a61c0b2d4"
    run.mkdir()
    _write(run / "config.json", data)
    path = str(run / "config.json")
    readers = {
        "load_run_config": lambda: load_run_config(path),
        "checked_config": lambda: checked_config(run),
        "read_run_config": lambda: runfiles.read_run_config(run),
        "parse_config": lambda: runfiles.parse_config(data, path),
    }
    for name, read in readers.items():
        with pytest.raises(ConfigError) as e:
            read()
        line = str(e.value)
        assert "\n" not in line and len(line) < 1200, (name, line[:300])
        assert path in line and reason in line, (name, line[:300])
    if isinstance(data, bytes):
        return  # a database record is text
    with pytest.raises(ConfigError) as e:  # a database record: named as such
        runfiles.config_of_record(data, "3f2a61c0b2d4")
    assert "the results database's record of run 3f2a61c0b2d4" in str(e.value) and reason in str(e.value)


def test_a_good_config_reads_the_same_through_every_reader(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    (run / "config.json").write_text(GOOD)
    expected = resolve(RunConfig())
    assert load_run_config(str(run / "config.json")) == expected
    assert checked_config(run)[1] == expected
    saved = runfiles.read_run_config(run)
    assert saved.config == expected and saved.raw == json.loads(GOOD)
    assert runfiles.config_of_record(GOOD, "x") == expected == runfiles.config_of_record(json.loads(GOOD), "x")
    assert run_id(saved.config) == run_id(RunConfig())


def test_what_is_not_a_regular_file_inside_the_run_is_refused_without_blocking(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    outside = tmp_path / "elsewhere.json"
    outside.write_text(GOOD)
    (run / "config.json").symlink_to(outside)
    with pytest.raises(ConfigError, match="refused: it leads outside the run directory"):
        runfiles.read_run_config(run)
    (run / "config.json").unlink()
    os.mkfifo(run / "config.json")  # never waited on
    for read in (lambda: runfiles.read_run_config(run), lambda: load_run_config(str(run / "config.json"))):
        with pytest.raises(ConfigError, match="not a regular file"):
            read()
    (run / "config.json").unlink()
    with pytest.raises(ConfigError, match="missing in run directory"):
        runfiles.read_run_config(run)
    with pytest.raises(ConfigError, match="does not exist"):
        runfiles.read_run_config(tmp_path / "gone")


def test_sync_shows_a_config_nested_too_deeply_as_damaged_with_the_reason(tmp_path):
    """It used to end `cemctl sync` with an internal error (RecursionError escaped the reader)."""
    _, ids = plan_ids(tmp_path, tiny_grid("exp", seeds="[0, 1]"))
    (tmp_path / "runs" / ids[0] / "config.json").write_text("[" * 200_000 + "]" * 200_000)
    res = cli(tmp_path, "sync")
    assert res.returncode == 0, res.output
    row = status_rows(tmp_path)[ids[0]]
    assert row["state"] == "damaged" and "nested too deeply" in row["reason"]
    assert status_rows(tmp_path)[ids[1]]["state"] == "planned"


def test_import_of_an_archive_with_a_bad_config_is_one_line_naming_the_member(tmp_path):
    import hashlib
    import io
    import tarfile

    rid = "3f2a61c0b2d4"
    config = b'{"train": {"lr": "fast"}}'
    manifest = {"format": "cemctl-archive", "version": 1, "created": 0, "experiments": [],
                "runs": {rid: {"files": {"config.json": {"size": len(config),
                                                         "sha256": hashlib.sha256(config).hexdigest()}}}}}
    path = tmp_path / "a.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in (("manifest.json", json.dumps(manifest).encode()), (f"runs/{rid}/config.json", config)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    res = cli(tmp_path, "import", str(path))
    assert_clean_error(res, contains=f"runs/{rid}/config.json: train.lr: must be a number")
