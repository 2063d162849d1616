"""Family 1 of issue 24: nothing is deleted or replaced by shape, only by proof.

Every command that deletes or replaces (report and claims output folders, `data clean`, a newer cache
generation, `--redo-damaged`) removes only files a manifest it wrote lists with their size and sha256;
anything else is reported and kept. Manifests are read like run files (regular, non-blocking, capped).
Each case failed on the main of 526f40c (the report in the issue's pull request says how that was checked).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from tests.helpers import assert_clean_error, cli, finish_run, plan_ids

MARKER = ".cemctl-output.json"


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _report(tmp_path: Path, out: Path, *extra: str, subprocess: bool = False):  # noqa: ANN202
    return cli(tmp_path, "report", "exp", "--out", str(out), "--format", "png", *extra, subprocess=subprocess,
               timeout=60)


# ============================================================== report / claims output folders


SITE_SHAPES = {
    "index_only": {"index.md": "# My project\n"},
    "docs_site": {"index.md": "# Docs\n", "figures/logo.png": "\x89PNG mine", "tables/t.md": "| a |\n"},
    "figures_only": {"figures/photo.png": "\x89PNG holiday", "figures/chart.pdf": "%PDF mine"},
    "html_and_csv": {"index.html": "<html>mine</html>", "runs.csv": "a,b\n1,2\n"},
}


@pytest.mark.parametrize("shape", sorted(SITE_SHAPES))
def test_report_never_replaces_a_folder_that_only_looks_like_a_report(tmp_path, finished, shape):
    """The user's docs or site folder (index.md, figures/*.png, tables/*) carries no manifest: it is theirs."""
    out = tmp_path / "site"
    for rel, text in SITE_SHAPES[shape].items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    before = _tree(out)
    assert_clean_error(_report(tmp_path, out), contains="cemctl did not write")
    assert _tree(out) == before


def test_report_refuses_a_folder_whose_marker_is_a_fifo_at_once(tmp_path, finished):
    out = tmp_path / "rep"
    out.mkdir()
    os.mkfifo(out / MARKER)
    assert_clean_error(_report(tmp_path, out, subprocess=True), contains="not a regular file")
    assert stat.S_ISFIFO(os.lstat(out / MARKER).st_mode)


def test_report_refuses_a_marker_linked_to_a_fifo_at_once(tmp_path, finished):
    out = tmp_path / "rep"
    out.mkdir()
    os.mkfifo(tmp_path / "pipe")
    (out / MARKER).symlink_to(tmp_path / "pipe")
    assert_clean_error(_report(tmp_path, out, subprocess=True), contains="symlink")


def test_claims_refuses_a_folder_whose_marker_is_a_fifo_at_once(tmp_path, finished):
    out = tmp_path / "claims"
    out.mkdir()
    os.mkfifo(out / MARKER)
    res = cli(tmp_path, "claims", "--out", str(out), subprocess=True, timeout=60)
    assert_clean_error(res, contains="not a regular file")


def test_an_earlier_report_whose_index_the_user_edited_is_not_replaced(tmp_path, finished):
    out = tmp_path / "rep"
    assert _report(tmp_path, out).returncode == 0
    (out / "index.md").write_text((out / "index.md").read_text() + "\nMy reading of these results.\n")
    before = _tree(out)
    assert_clean_error(_report(tmp_path, out), contains="index.md")
    assert _tree(out) == before


def test_an_earlier_report_whose_figure_the_user_replaced_is_not_replaced(tmp_path, finished):
    out = tmp_path / "rep"
    assert _report(tmp_path, out).returncode == 0
    fig = sorted((out / "figures").glob("*.png"))[0]
    fig.write_bytes(b"\x89PNG my hand-made figure")
    assert_clean_error(_report(tmp_path, out), contains=fig.name)
    assert fig.read_bytes() == b"\x89PNG my hand-made figure"


def test_a_marker_linked_from_a_real_report_proves_nothing(tmp_path, finished):
    """The user's copy of a report (their own edits inside) with the marker linked from the original."""
    real = tmp_path / "rep"
    assert _report(tmp_path, real).returncode == 0
    mine = tmp_path / "mine"
    shutil.copytree(real, mine, ignore=shutil.ignore_patterns(MARKER))
    (mine / "index.md").write_text("# my edited copy\n")
    (mine / MARKER).symlink_to(real / MARKER)
    assert_clean_error(_report(tmp_path, mine), contains="symlink")
    assert (mine / "index.md").read_text() == "# my edited copy\n"


def test_a_marker_without_sizes_and_hashes_proves_nothing(tmp_path, finished):
    """A name list (what an older cemctl wrote, or anyone can write) does not prove the files are cemctl's."""
    out = tmp_path / "rep"
    out.mkdir()
    (out / "index.md").write_text("# the user's page\n")
    (out / MARKER).write_text(json.dumps({"written_by": "cemctl", "what": "report", "files": ["index.md"]}))
    assert_clean_error(_report(tmp_path, out), contains="older cemctl")
    assert (out / "index.md").read_text() == "# the user's page\n"


def test_claims_never_replaces_a_report_folder(tmp_path, finished):
    out = tmp_path / "rep"
    assert _report(tmp_path, out).returncode == 0
    before = _tree(out)
    res = cli(tmp_path, "claims", "--out", str(out), subprocess=True)
    assert_clean_error(res, contains="cemctl report")
    assert _tree(out) == before


def test_report_never_replaces_a_claims_folder(tmp_path, finished):
    out = tmp_path / "claims"
    assert cli(tmp_path, "claims", "--out", str(out)).returncode == 0
    before = _tree(out)
    assert_clean_error(_report(tmp_path, out), contains="cemctl claims")
    assert _tree(out) == before


# ============================================================== data caches


def _jsonl(path: Path, n: int = 40) -> Path:
    path.write_text("".join(json.dumps({"text": f"document {i}: " + "words and more words " * (i % 5 + 1)}) + "\n"
                            for i in range(n)))
    return path


def _cache(tmp_path: Path) -> Path:
    """A prepared cache no recorded run reads (a small files corpus); returns its folder."""
    from cem_core.config import DataConfig
    from cem_core.data import prepare_data

    cfg = DataConfig(corpus="files", path=str(_jsonl(tmp_path / "c.jsonl")), tokenizer="byte",
                     cache_dir=str(tmp_path / "cache"))
    return prepare_data(cfg).path.parent


def _clean(tmp_path: Path):  # noqa: ANN202
    return cli(None, "data", "clean", "--yes", "--include-unknown", "--cache-dir", str(tmp_path / "cache"),
               "--db", str(tmp_path / "none.db"))


def test_data_clean_keeps_a_file_the_user_put_inside_a_generation(tmp_path):
    base = _cache(tmp_path)
    (gen,) = [p for p in base.iterdir() if p.name.startswith("g")]
    (gen / "my-notes.txt").write_text("which corpus this was")
    res = _clean(tmp_path)
    assert res.returncode == 0 and "my-notes.txt" in res.stdout, res.output
    assert (gen / "my-notes.txt").read_text() == "which corpus this was"
    assert sorted(os.listdir(gen)) == ["my-notes.txt"]  # the build's own files went


def test_data_clean_keeps_a_cache_file_whose_content_changed(tmp_path):
    base = _cache(tmp_path)
    (gen,) = [p for p in base.iterdir() if p.name.startswith("g")]
    data = (gen / "train.bin").read_bytes()
    (gen / "train.bin").write_bytes(bytes(len(data)))  # same size, other bytes: not what the build wrote
    res = _clean(tmp_path)
    assert res.returncode == 0 and "train.bin" in res.stdout, res.output
    assert (gen / "train.bin").read_bytes() == bytes(len(data)) and not (gen / "val.bin").exists()


def test_data_clean_keeps_a_file_inside_the_chunk_folder(tmp_path):
    base = _cache(tmp_path)
    (base / ".shards").mkdir()
    (base / ".shards" / "mine.txt").write_text("kept")
    res = _clean(tmp_path)
    assert res.returncode == 0, res.output
    assert (base / ".shards" / "mine.txt").read_text() == "kept"


def test_data_clean_never_removes_a_folder_that_only_looks_like_a_cache(tmp_path):
    """packed/<name>/g0/meta.json is a shape, not a proof: without the build's manifest it stays."""
    base = tmp_path / "cache" / "packed" / "my-corpus"
    (base / "g0").mkdir(parents=True)
    (base / "g0" / "meta.json").write_text(json.dumps({"format": 1, "splits": {}}))
    (base / "g0" / "train.bin").write_bytes(b"my own tokens")
    res = _clean(tmp_path)
    assert res.returncode == 0, res.output
    assert (base / "g0" / "train.bin").read_bytes() == b"my own tokens" and (base / "g0" / "meta.json").exists()


def test_a_newer_generation_keeps_a_file_the_user_put_in_the_older_one(tmp_path, monkeypatch):
    """A streamed corpus prepared for a larger budget replaces its older generation by the older one's manifest."""
    import cem_core.data.prepare as prepare
    from cem_core.config import DataConfig
    from cem_core.data.sources import Source

    docs = [(f"d{i}", f"document {i}: " + "some streamed words " * 20) for i in range(3000)]
    monkeypatch.setattr(prepare, "make_source", lambda cfg: Source("stream", "stream-test", True, lambda: iter(docs)))
    cfg = DataConfig(tokenizer="byte", cache_dir=str(tmp_path / "cache"))
    first = prepare.prepare_data(cfg, min_train_tokens=2000, val_tokens=100, test_tokens=100)
    (first.path / "my-notes.txt").write_text("mine")
    second = prepare.prepare_data(cfg, min_train_tokens=40000, val_tokens=100, test_tokens=100)
    assert second.path != first.path
    assert sorted(os.listdir(first.path)) == ["my-notes.txt"]


# ============================================================== --redo-damaged


def test_redo_damaged_never_moves_files_into_an_existing_quarantine_folder(tmp_path, monkeypatch):
    """Two repairs in the same second (or a `.damaged-*` folder the user made) used to share a folder, and the
    second move replaced the first's files of the same name."""
    import time as _time

    from cemctl.db import open_db
    from cemctl.services.launch import repair

    _, ids = plan_ids(tmp_path)
    run_dir = tmp_path / "runs" / ids[0]
    frozen = _time.gmtime(1_700_000_000)
    monkeypatch.setattr(repair.time, "gmtime", lambda *a: frozen)
    earlier = run_dir / f".damaged-{_time.strftime('%Y%m%dT%H%M%SZ', frozen)}"
    earlier.mkdir()
    (earlier / "config.json").write_text('{"the": "first damaged config"}')
    finish_run(run_dir)
    engine = open_db(f"sqlite:///{tmp_path / 'results.db'}")
    repair.repair_damaged(engine, ids[0], run_dir)
    assert (earlier / "config.json").read_text() == '{"the": "first damaged config"}'
    moved = [p for p in run_dir.iterdir() if p.name.startswith(".damaged-") and p != earlier]
    assert len(moved) == 1 and (moved[0] / "result.json").exists()
