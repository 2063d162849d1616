"""`cemctl serve` against what a long-lived project leaves behind (issue 47): a 600 MB log, a results database
replaced or deleted under the server, an experiment whose runs all failed, values of 1e308, an undecodable URL,
the static report's own documents (inline styles) and runs that carry no logs. Library level: the pages through
`Dashboard.handle`, no socket, no browser."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import tracemalloc

import pytest

from tests.helpers import cli, finish_run, plan_ids, tiny_grid
from tests.serve_project import make_project


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return make_project(tmp_path_factory.mktemp("faults"))


def _app(root, runs_root=None, reports_dir=None):
    from cemctl.serve.app import Dashboard
    from cemctl.services.dashboard import open_source

    return Dashboard(open_source(f"sqlite:///{root / 'results.db'}", runs_root or root / "runs", reports_dir),
                     log=lambda line: print(line))


def _cells(html: str) -> list[str]:
    return [c.strip() for c in re.findall(r"<td[^>]*>([^<]*)</td>", html)]


def test_the_run_page_reads_a_600_mb_log_from_its_tail_in_bounded_memory(project):
    """main read the whole train.log for its last 200 lines (624 MB: 27 s and 2.7 GB a request)."""
    rid = project.runs[5]
    log = project.runs_root / rid / "train.log"
    saved = log.read_bytes()
    try:
        with open(log, "wb") as f:  # sparse: 600 MB long, a few kB on disk
            f.truncate(600 * 2**20)
            f.seek(0, os.SEEK_END)
            f.write(b"".join(b"step %d loss 2.5\n" % i for i in range(1000)) + b"the very last line\n")
        app = _app(project.root)
        app.handle("GET", f"/runs/{project.runs[0]}")  # imports and templates outside the measured request
        tracemalloc.start()
        try:
            resp = app.handle("GET", f"/runs/{rid}")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert resp.status == 200
        page = resp.body.decode()
        shown = re.search(r'<pre class="log" id="log">(.*?)</pre>', page, re.S).group(1).splitlines()
        assert shown[-1] == "the very last line" and shown[-2] == "step 999 loss 2.5"
        assert sum(1 for line in shown if line.startswith("step ")) == 199  # the last 200 lines of the log
        assert peak < 32 * 2**20, f"the request allocated {peak / 2**20:.0f} MiB at its peak"
        lines = _app(project.root).handle("GET", f"/runs/{rid}?lines=5000")
        assert lines.status == 200 and "step 0 loss" not in lines.body.decode()  # 5000 asked, 1001 there
    finally:
        log.write_bytes(saved)


def _copy(src, dst, change: str = "") -> None:
    """A self-contained copy of a SQLite database (no -wal beside it), with one change made to it."""
    a, b = sqlite3.connect(src), sqlite3.connect(dst)
    try:
        a.backup(b)
        b.execute("PRAGMA journal_mode = DELETE")
        if change:
            b.execute(change)
            b.commit()
    finally:
        a.close()
        b.close()


def test_a_replaced_or_deleted_database_is_noticed(project, tmp_path):
    """main kept serving a deleted or replaced results.db (its open connections) until restarted."""
    shutil.copytree(project.root / "runs", tmp_path / "runs", symlinks=True)
    db = tmp_path / "results.db"
    _copy(project.db, db)
    app = _app(tmp_path)
    assert app.handle("GET", "/experiments/demo").status == 200
    other = tmp_path / "other.db"  # the same project after a colleague's change: the experiment is renamed
    _copy(db, other, "UPDATE experiments SET name = 'renamed' WHERE name = 'demo'")
    os.replace(other, db)
    index = app.handle("GET", "/").body.decode()
    assert "/experiments/renamed" in index and "/experiments/demo\"" not in index
    assert app.handle("GET", "/experiments/renamed").status == 200
    assert app.handle("GET", "/experiments/demo").status == 404
    os.rename(db, tmp_path / "moved.db")
    gone = app.handle("GET", "/")
    assert gone.status == 503 and "is gone" in gone.body.decode() and "Traceback" not in gone.body.decode()
    assert app.handle("GET", "/experiments/renamed/metric.json").status == 503
    os.rename(tmp_path / "moved.db", db)
    assert app.handle("GET", "/experiments/renamed").status == 200
    (tmp_path / "not-a-db").write_bytes(b"not a database at all" * 100)
    os.replace(tmp_path / "not-a-db", db)
    broken = app.handle("GET", "/")
    assert broken.status == 503 and "Traceback" not in broken.body.decode()


def test_an_experiment_whose_runs_all_failed_shows_its_page(tmp_path):
    """main answered 400: its grid's metric (test_loss) was not among the metrics some run has."""
    _, ids = plan_ids(tmp_path, tiny_grid("allfail", seeds="[0, 1]"), "allfail")
    for rid in ids:
        finish_run(tmp_path / "runs" / rid, state="failed", error="RuntimeError: boom")
    assert cli(tmp_path, "sync").returncode == 0
    app = _app(tmp_path)
    for path in ("/experiments/allfail", "/experiments/allfail/arms", "/experiments/allfail/metric.json",
                 "/experiments/allfail/curves.json", "/experiments/allfail/parallel",
                 "/experiments/allfail/parallel.json"):
        assert app.handle("GET", path).status == 200, path
    chart = json.loads(app.handle("GET", "/experiments/allfail/metric.json").body)
    assert chart["charts"] == [] and chart["note"].startswith("No finished run with a test_loss yet (2 failed")


def test_values_of_1e308_keep_pages_and_the_status_table_readable(tmp_path):
    """main: a 314-digit loss in the tables, and the experiments page a 500 (a heartbeat time out of range)."""
    _, ids = plan_ids(tmp_path, tiny_grid("huge", seeds="[0, 1]"), "huge")
    finish_run(tmp_path / "runs" / ids[0], test_loss=2.0)
    result = json.loads((tmp_path / "runs" / ids[0] / "result.json").read_text())
    result.update(test_loss=1e308, test_ppl=1e308, val_loss=1e308, wall_time_s=1e308)
    (tmp_path / "runs" / ids[0] / "result.json").write_text(json.dumps(result))
    (tmp_path / "runs" / ids[1] / "heartbeat.json").write_text(json.dumps(
        {"time": 1e308, "step": 1e308, "total_steps": 10, "tokens": 1e308, "pid": 1, "host": "h", "attempt": 1}))
    assert cli(tmp_path, "sync").returncode == 0
    app = _app(tmp_path)
    for path in ("/", "/experiments/huge", "/experiments/huge/live", "/experiments/huge/arms",
                 f"/runs/{ids[0]}", f"/runs/{ids[1]}", "/experiments/huge/metric.json",
                 "/experiments/huge/parallel.json", f"/compare?item={ids[0]}&item={ids[1]}"):
        resp = app.handle("GET", path)
        assert resp.status == 200, (path, resp.body[:300])
        longest = max((len(c) for c in _cells(resp.body.decode())), default=0)
        assert longest < 60, (path, [c for c in _cells(resp.body.decode()) if len(c) >= 60])
    status = cli(tmp_path, "status", "huge", env={"COLUMNS": "120"})
    assert status.returncode == 0, status.output
    assert max(len(line) for line in status.stdout.splitlines()) <= 120, status.stdout
    assert "1e+308" in status.stdout


def test_report_documents_keep_their_inline_styles_and_run_nothing(project, tmp_path):
    """main's Content-Security-Policy blocked matplotlib's inline <style> in SVG figures (drawn unstyled), and the
    report's index.html was a 404."""
    from cem_core.runfiles.manifest import write_manifest
    from cemctl.report.outdir import MARKER

    folder = tmp_path / "reports" / "demo"
    (folder / "figures").mkdir(parents=True)
    (folder / "figures" / "metric.svg").write_text(
        '<svg xmlns="http://www.w3.org/2000/svg"><style type="text/css">*{stroke-linejoin: round}</style></svg>')
    (folder / "index.html").write_text("<!DOCTYPE html><style>body{margin:2em}</style><h1>Report: demo</h1>")
    (folder / "index.md").write_text("# Report: demo")
    write_manifest(folder, what="report", name=MARKER)
    app = _app(project.root, reports_dir=tmp_path / "reports")
    page = app.handle("GET", "/experiments/demo").body.decode()
    files = re.findall(r'href="/experiments/demo/report/([^"]+)"', page)
    assert files[0] == "index.html" and set(files) == {"index.html", "index.md", "figures/metric.svg"}
    for rel, ctype in (("figures/metric.svg", "image/svg+xml"), ("index.html", "text/html")):
        resp = app.handle("GET", f"/experiments/demo/report/{rel}")
        headers = resp.all_headers()
        csp = dict(p.strip().split(" ", 1) for p in headers["Content-Security-Policy"].split(";"))
        assert resp.status == 200 and headers["Content-Type"].startswith(ctype)
        assert "'unsafe-inline'" in csp["style-src"]
        assert "script-src" not in csp and csp["default-src"] == "'none'"  # no script of any origin runs
    assert "'unsafe-inline'" not in app.handle("GET", "/experiments/demo").all_headers()["Content-Security-Policy"]


def test_a_finished_run_without_logs_says_why(project):
    """main said '(no logs yet)' for a run imported from an archive (archives carry no logs)."""
    rid = project.runs[6]
    log = project.runs_root / rid / "train.log"
    saved = log.read_bytes()
    log.unlink()
    try:
        page = _app(project.root).handle("GET", f"/runs/{rid}").body.decode()
        text = re.search(r'<pre class="log" id="log">(.*?)</pre>', page, re.S).group(1)
        assert "no logs yet" not in text and "an archive carries no logs" in text
    finally:
        log.write_bytes(saved)
