"""Family 8 of issue 24: bad input is refused with one line, never accepted silently.

Empty corpora, `~` in data.cache_dir read differently by different commands, nonsense test losses taken
as done, `--set train.lr=0x10` read as 16, `--gpus 99` training on the CPU, unbounded `--workers`,
in-memory databases, rich markup in mark labels, raw HTML in index.md, control characters in CSV, `sync`
exiting 0 having synced nothing. Each case failed on the main of 526f40c.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.helpers import assert_clean_error, cli, finish_run, plan_ids, status_rows, tiny_grid


def _files_grid(tmp_path, pattern: str, cache: str | None = None, name: str = "corpus") -> str:
    return tiny_grid(name, seeds="[0]", cache_dir=cache or str(tmp_path / "cache"),
                     extra=f'"data.corpus" = "files"\n"data.path" = "{pattern}"\n')


# ============================================================== corpora and caches


EMPTY = {"empty.jsonl": "", "blank_texts.jsonl": '{"text": ""}\n{"text": ""}\n', "empty.txt": ""}


@pytest.mark.parametrize("name", sorted(EMPTY))
def test_an_empty_corpus_is_refused_not_prepared_as_zero_tokens(tmp_path, name):
    (tmp_path / name).write_text(EMPTY[name])
    (tmp_path / "g.toml").write_text(_files_grid(tmp_path, str(tmp_path / name)))
    res = cli(None, "data", "prepare", str(tmp_path / "g.toml"), "--workers", "1", "--json", subprocess=True)
    assert_clean_error(res, contains="no text")
    assert not list((tmp_path / "cache").glob("packed/*/g*"))


def test_a_home_relative_cache_dir_means_the_same_folder_to_every_command(tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (work / "c.jsonl").write_text("".join(json.dumps({"text": f"doc {i} words"}) + "\n" for i in range(30)))
    (work / "g.toml").write_text(_files_grid(work, str(work / "c.jsonl"), cache="~/my-cache"))
    env = {"HOME": str(home)}
    assert cli(work, "plan", str(work / "g.toml"), subprocess=True, env=env).returncode == 0
    res = cli(work, "data", "prepare", str(work / "g.toml"), "--workers", "1", subprocess=True, env=env, cwd=work)
    assert res.returncode == 0, res.output
    assert list((home / "my-cache").glob("packed/*/g0")) and not (work / "~").exists()
    info = cli(None, "data", "info", "--json", "--db", str(work / "results.db"), subprocess=True, env=env, cwd=work)
    assert [c["experiments"] for c in json.loads(info.stdout)] == [["corpus"]], info.output


# ============================================================== results


@pytest.mark.parametrize("loss", ["banana", -1.0, None, True], ids=["string", "negative", "null", "bool"])
def test_a_done_result_without_a_usable_test_loss_is_damaged_not_done(tmp_path, loss):
    _, ids = plan_ids(tmp_path)
    finish_run(tmp_path / "runs" / ids[0])
    path = tmp_path / "runs" / ids[0] / "result.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "test_loss": loss}))
    row = status_rows(tmp_path)[ids[0]]
    assert row["state"] == "damaged" and "test_loss" in row["reason"], row


# ============================================================== options


@pytest.mark.parametrize("setting", ["train.lr=0x10", "train.max_steps=0o17", "train.max_steps=0b11"])
def test_set_refuses_hex_octal_and_binary_numbers(tmp_path, setting):
    grid = tmp_path / "g.toml"
    grid.write_text(tiny_grid("g"))
    res = cli(tmp_path, "plan", str(grid), "--set", setting)
    assert_clean_error(res, contains=setting.split("=")[0])
    assert not (tmp_path / "runs").exists()


def test_launch_refuses_a_gpu_that_is_not_there(tmp_path):
    grid = tmp_path / "g.toml"
    grid.write_text(tiny_grid("g"))
    res = cli(tmp_path, "launch", str(grid), "--gpus", "99", "--dry-run", subprocess=True)
    assert_clean_error(res, contains="--gpus")


def test_launch_refuses_gpu_0_on_a_machine_without_gpus(tmp_path):
    if shutil.which("nvidia-smi") or os.environ.get("CUDA_VISIBLE_DEVICES"):
        pytest.skip("this machine may have a GPU 0")
    grid = tmp_path / "g.toml"
    grid.write_text(tiny_grid("g"))
    res = cli(tmp_path, "launch", str(grid), "--gpus", "0", "--dry-run", subprocess=True)
    assert_clean_error(res, contains="--gpus none")


def test_launch_refuses_an_absurd_number_of_workers(tmp_path):
    grid = tmp_path / "g.toml"
    grid.write_text(tiny_grid("g"))
    res = cli(tmp_path, "launch", str(grid), "--workers", "100000", "--dry-run", subprocess=True)
    assert_clean_error(res, contains="--workers")


def test_data_prepare_refuses_an_absurd_number_of_workers(tmp_path):
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(20)))
    (tmp_path / "g.toml").write_text(_files_grid(tmp_path, str(tmp_path / "c.jsonl")))
    res = cli(None, "data", "prepare", str(tmp_path / "g.toml"), "--workers", "100000", subprocess=True)
    assert_clean_error(res, contains="--workers")


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_an_in_memory_database_is_refused(tmp_path, url):
    grid = tmp_path / "g.toml"
    grid.write_text(tiny_grid("g"))
    res = cli(None, "plan", str(grid), "--db", url, "--runs-dir", str(tmp_path / "runs"), subprocess=True)
    assert_clean_error(res, contains="in-memory")
    assert not (tmp_path / "runs").exists()


# ============================================================== what is shown and written


def test_a_mark_label_is_never_read_as_rich_markup(tmp_path):
    path = tmp_path / "marked.toml"
    path.write_text(tiny_grid("marked", seeds="[0]", extra='\n[axes]\n"model.attention" = ["llama", "cem"]\n\n'
                                                         '[[mark]]\nlabel = "[bold red]beyond[/bold red] the paper"\n'
                                                         '"model.attention" = "cem"\n'))
    res = cli(tmp_path, "plan", str(path), subprocess=True)
    assert res.returncode == 0 and "[bold red]beyond[/bold red]" in res.stdout, res.output


def _html_report(tmp_path, *, description: str = "", error: str = "RuntimeError: boom"):  # noqa: ANN202
    text = tiny_grid("html", seeds="[0, 1]")
    if description:
        text = text.replace('figure = "curves"', f'figure = "curves"\ndescription = "{description}"')
    _, ids = plan_ids(tmp_path, text, "html")
    finish_run(tmp_path / "runs" / ids[0])
    finish_run(tmp_path / "runs" / ids[1], state="failed", error=error)
    res = cli(tmp_path, "report", "html", "--out", str(tmp_path / "rep"), "--format", "png")
    assert res.returncode == 0, res.output
    return tmp_path / "rep"


def test_raw_html_in_a_description_stays_text_in_index_md(tmp_path):
    out = _html_report(tmp_path, description="<script>alert(1)</script> & more")
    md = (out / "index.md").read_text()
    assert "<script>" not in md and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in md


def test_raw_html_in_an_error_stays_text_in_index_md(tmp_path):
    out = _html_report(tmp_path, error='ValueError: <img src=x onerror="alert(1)">')
    md = (out / "index.md").read_text()
    assert "<img" not in md and "&lt;img" in md


def test_control_characters_are_escaped_in_runs_csv(tmp_path):
    out = _html_report(tmp_path, error="RuntimeError: boom \x1b]0;owned\x07 \x1b[2J")
    for name in ("runs.csv", "tables/missing_and_failed.csv"):
        text = (out / name).read_text()
        assert "\x1b" not in text and "\x07" not in text and "\\x1b]0;owned\\x07" in text, name


def test_sync_fails_when_it_skipped_every_run_folder(tmp_path):
    """Rebuilding a database from run folders none of which can be read synced nothing: not a success."""
    for rid in ("0123456789ab", "abcdef012345"):
        (tmp_path / "runs" / rid).mkdir(parents=True)
        (tmp_path / "runs" / rid / "config.json").write_text("{ not json")
    res = cli(tmp_path, "sync", subprocess=True)
    assert res.returncode == 1 and res.stderr.count("skipped:") == 2, res.output


def test_sync_of_a_runs_folder_that_does_not_exist_is_one_line(tmp_path):
    res = cli(None, "sync", "--db", str(tmp_path / "results.db"), "--runs-dir", str(tmp_path / "nowhere"),
              subprocess=True)
    assert_clean_error(res, contains="nowhere")
