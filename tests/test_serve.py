"""`cemctl serve` at the HTTP level: every page answers, nothing from a run is markup, bad URLs are 4xx pages, only
GET/HEAD, the database is opened read-only (a running writer is neither blocked nor seen half-way), loopback
binding, Ctrl-C. The browser tests are in tests/test_serve_browser.py."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT, cli, subprocess_env, write_json
from tests.serve_project import get, make_project, request, running_server


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return make_project(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def base(project):
    with running_server(project) as url:
        yield url


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _text(markup: str) -> str:
    """The text a reader sees: tags dropped, entities read."""
    import html

    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def _no_raw_markup(text: str) -> None:
    """Nothing a run, a grid, a note or a log holds appears as markup: only the dashboard's own script tags."""
    assert "window.__pwned" not in re.sub(r"&lt;script&gt;window.__pwned=1&lt;/script&gt;|onerror=&#34;window.__pwned=2&#34;"
                                          r"|onerror=&quot;window.__pwned=2&quot;|\\u003cscript\\u003ewindow.__pwned=1"
                                          r"|onerror=\\\"window.__pwned=2\\\"|onerror=\\\\\"window.__pwned=2", "", text), text
    assert not re.search(r"<script>|<img |<b id=|<i>warmup", text)
    for tag in re.findall(r"<script[^>]*>", text):
        assert re.fullmatch(r'<script src="/static/(uPlot\.iife\.min|dashboard)\.js">', tag), tag


def test_curves_colour_each_arm_when_the_chart_hue_gives_them_one_colour(project, base):
    """x = the learning rate: the hue (attention) colours the curves and the dash tells the rates apart; with one
    attention selected every arm would be one colour: then each arm gets its own, and the lines are solid."""
    from urllib.parse import quote

    status, _, body = get(base, "/experiments/demo/curves.json?x=train.lr")
    assert status == 200, body[:300]
    curves = [s for s in json.loads(body)["charts"][0]["series"] if s.get("y")]
    series = [s for s in curves if s.get("legend") is not False]  # the others: each arm's validation points
    assert {s["color"] for s in curves} == {s["color"] for s in series} and len(curves) == 12
    assert len(series) == 6 and len({s["color"] for s in series}) == 2  # coloured by attention, 3 rates per colour
    assert len({(s["color"], json.dumps(s["dash"])) for s in series}) == 6
    status, _, body = get(base, "/experiments/demo/curves.json?x=train.lr&where=" + quote("attention=cem"))
    assert status == 200, body[:300]
    series = [s for s in json.loads(body)["charts"][0]["series"] if s.get("y") and s.get("legend") is not False]
    assert len(series) == 3 and len({s["color"] for s in series}) == 3 and all(s["dash"] is None for s in series)
    assert len({s["label"] for s in series}) == 3


def test_every_page_answers_and_shows_strings_as_text(project, base):
    run0, failed = project.runs[0], project.runs[3]
    pages = ["/", "/claims", "/experiments/demo", "/experiments/demo/live", "/experiments/demo/claims",
             "/experiments/demo/arms?asort=-val_loss&metric=val_loss",
             "/experiments/demo/parallel", f"/runs/{run0}", f"/runs/{failed}",
             f"/compare?experiment=demo&item={project.runs[0]}&item={project.runs[1]}", "/compare",
             "/experiments/demo?sort=-test_loss&asort=-test_loss&x=train.lr&hue=model.attention&panel=attention&logx=1"]
    for path in pages:
        status, headers, body = get(base, path)
        assert status == 200, (path, body[:500])
        assert headers["content-type"].startswith("text/html")
        assert "default-src 'none'" in headers["content-security-policy"]
        assert headers["x-content-type-options"] == "nosniff"
        _no_raw_markup(body)
    _, _, page = get(base, "/experiments/demo")
    assert "An &lt;b id=&#34;injected&#34;&gt;HTML&lt;/b&gt; description" in page  # the grid's description, as text
    _, _, run = get(base, f"/runs/{run0}")
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in run and "lr too high?" in run  # the note
    assert "log line &lt;script&gt;" in run  # the log tail, escaped
    _, _, failed_page = get(base, f"/runs/{failed}")
    assert "boom &lt;script&gt;" in failed_page  # the error
    _, _, live = get(base, "/experiments/demo/live")
    assert "&lt;i&gt;warmup&lt;/i&gt;" in live  # a tag value
    for path in ["/experiments/demo/metric.json", "/experiments/demo/curves.json", "/experiments/demo/parallel.json",
                 f"/runs/{run0}/curves.json", f"/runs/{run0}/system.json",
                 f"/compare/curves.json?item={project.runs[0]}&item={project.runs[1]}"]:
        status, headers, body = get(base, path)
        assert status == 200 and headers["content-type"].startswith("application/json"), (path, body[:300])
        assert "<" not in body and ">" not in body and "&" not in body, path  # JSON safe inside HTML
        json.loads(body)


def test_index_counts_states_and_experiment_page_has_every_section(project, base):
    _, _, index = get(base, "/")
    row = re.search(r'<a href="/experiments/demo">demo</a>.*?</tr>', index, re.S).group(0)
    assert ">18<" in row and "16 done" in row and "1 failed" in row and "1 planned" in row
    _, _, page = get(base, "/experiments/demo")
    for section in ('id="runs"', 'id="arms-part"', 'id="metric-chart"', 'id="curves-chart"', 'id="claims-part"'):
        assert section in page
    _, _, page = get(base, "/experiments/demo/arms")
    arms = re.search(r'<table class="grid arms stack" id="arms">.*?</table>', page, re.S).group(0)
    assert arms.count("<tr data-arm=") == 6
    assert "3/3" in arms and "2/3" in arms  # seeds done / planned (one failed, one planned)
    assert re.search(r"\[1\.\d{4}, 1\.\d{4}\]", arms)  # a 95% interval


def test_index_shows_last_activity_and_the_claims_verdicts(project, base):
    """The experiments' last activity (the latest start, heartbeat or finish of their runs: its time in the title,
    how long ago in the cell) and, once the claims were evaluated, the adjusted verdicts of the claims they declare."""
    from cemctl.records.formats import timestamp

    runs = json.loads(cli(project.root, "status", "demo", "--json").stdout)["experiments"][0]["runs"]
    latest = max(t for r in runs for t in (r["started_at"], r["finished_at"], r["heartbeat_at"]) if t is not None)
    def cells() -> list[str]:  # experiment, runs, by state, last activity, claims, description
        _, _, index = get(base, "/")
        row = re.search(r'<tr>\s*<td><a href="/experiments/demo">demo</a>.*?</tr>', index, re.S).group(0)
        assert f'<td title="{timestamp(latest)}" data-label="last activity">' in row, row
        return [c.strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]

    ago = re.fullmatch(r"(?:(\d+)m)?(\d+)s ago", cells()[3])
    assert ago, cells()
    seconds = int(ago.group(1) or 0) * 60 + int(ago.group(2))
    assert abs(seconds - (time.time() - latest)) < 30, (seconds, time.time() - latest)
    status, _, claims = get(base, "/claims")  # evaluates the claims (the index shows them once they were)
    assert status == 200 and "cem-costs" in claims
    assert cells()[4] == "1 holds", cells()  # cem is 0.1 higher than llama: decided


def test_the_run_page_shows_its_environment_and_system_samples(project, base):
    """A run whose trainer recorded environment.json and system samples (tests/serve_project.py), beside one that
    did not (an older run)."""
    from tests.serve_project import ENV_RUN, SAMPLES

    rid = project.runs[ENV_RUN]
    _, _, page = get(base, f"/runs/{rid}")
    env = re.search(r'<table class="kv" id="environment">.*?</table>', page, re.S)
    assert env, page[page.index("<h2>Environment</h2>"):][:500]
    shown = dict(re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>", env.group(0)))
    assert shown["hostname"] == "gpu-node-7" and shown["gpu_model"] == "NVIDIA H100 80GB HBM3"
    assert shown["cpu_model"] == "AMD EPYC 7763 64-Core Processor" and shown["cpu_count"] == "128"
    assert shown["cuda_version"] == "12.4" and shown["driver_version"] == "550.54.15"
    assert shown["peak_host_rss_bytes"] == "3.00 GiB" and shown["gpu_memory_bytes"] == "80.00 GiB"
    assert "not recorded" not in page[page.index("<h2>Environment</h2>"):page.index("<h2>System samples</h2>")]
    assert f'data-chart="/runs/{rid}/system.json"' in page
    status, _, body = get(base, f"/runs/{rid}/system.json")
    assert status == 200, body[:300]
    data = json.loads(body)
    assert data["note"] == f"{SAMPLES} samples"
    charts = {c["title"]: c for c in data["charts"]}
    cpu_process, cpu_machine = "CPU, this process (% of one core)", "CPU, the machine (% of all its cores)"
    assert list(charts) == [cpu_process, cpu_machine, "host memory (GiB)", "GPU utilisation (%)", "GPU memory (GiB)"]
    assert charts[cpu_process]["x"] == [10.0 * i for i in range(SAMPLES)]
    # a process's share per core (up to 200% on two) and the machine's of all its cores: never one axis (issue 48)
    assert charts[cpu_process]["series"][0]["y"] == [50.0 + 10 * i for i in range(SAMPLES)]
    assert charts[cpu_machine]["series"][0]["y"] == [20.0] * SAMPLES
    rss = {s["label"]: s["y"] for s in charts["host memory (GiB)"]["series"]}["resident (process)"]
    assert rss == pytest.approx([2 + 0.1 * i for i in range(SAMPLES)], abs=1e-6)
    assert [s["y"] for s in charts["GPU utilisation (%)"]["series"]] == [[80.0] * SAMPLES]
    gpu = {s["label"]: s["y"] for s in charts["GPU memory (GiB)"]["series"]}
    assert gpu == {"allocated (torch)": [10.0] * SAMPLES, "reserved (torch)": [12.0] * SAMPLES,
                   "used (device)": [14.0] * SAMPLES}
    # A run without them: the page says so, its system data is empty with the reason.
    _, _, old = get(base, f"/runs/{project.runs[0]}")
    assert 'id="environment"' not in old and "not recorded (a run trained before" in old
    old_data = json.loads(get(base, f"/runs/{project.runs[0]}/system.json")[2])
    assert old_data["charts"] == [] and old_data["note"].startswith("no system samples")


def test_where_and_sort_select_like_the_command_line(project, base):
    _, _, page = get(base, "/experiments/demo/live?where=attention%3Dcem&where=lr%3E%3D0.002&sort=-test")
    ids = re.findall(r'data-run="([0-9a-f]{12})"', page)
    want = [r for r in project.runs if project.configs[r]["model"]["attention"] == "cem"
            and project.configs[r]["train"]["lr"] >= 0.002]
    assert sorted(ids) == sorted(want)
    status = cli(project.root, "status", "demo", "--json", "--where", "attention=cem", "--where", "lr>=0.002",
                 "--sort", "-test")
    cli_ids = [r["run_id"] for e in json.loads(status.stdout)["experiments"] for r in e["runs"]]
    assert ids == cli_ids  # the same runs in the same order as `cemctl status`


@pytest.mark.parametrize("path, code, says", [
    ("/experiments/nope", 404, "unknown experiment 'nope' (known: demo)"),
    ("/experiments/..%2F..%2Fetc", 404, "no such page"),
    ("/experiments/%2e%2e/x", 404, "no such page"),
    ("/static/..%2F..%2Fpyproject.toml", 404, "no such page"),
    ("/static/app.py", 404, "no such page"),
    ("/runs/zzz", 404, "not a run id"),
    ("/runs/0123456789ab", 404, "no run 0123456789ab"),
    ("/runs/../../etc/passwd", 404, "no such page"),
    ("/experiments/demo/report/..%2F..%2Fresults.db", 404, "no such page"),
    ("/experiments/demo/report/results.db", 404, "no file"),
    ("/experiments/demo?where=attn_steps", 400, "--where: cannot read 'attn_steps'"),
    ("/experiments/demo/live?where=in%201,2", 400, "--where"),
    ("/experiments/demo?where=test_los%3C1", 400, "did you mean test_loss"),
    ("/experiments/demo?sort=bogus_field", 400, "--sort"),
    ("/experiments/demo?limit=-1", 400, "limit"),
    ("/experiments/demo?metric=bogus", 400, "metric"),
    ("/experiments/demo/arms?asort=model.d_model", 400, "arms sort"),
    ("/experiments/demo?asort=nosuch", 400, "arms sort"),
    ("/experiments/demo/metric.json?x=model.d_model", 400, "does not vary"),
    ("/experiments/demo/curves.json?cmetric=evil", 400, "curve metric"),
    ("/experiments/demo?logx=maybe", 400, "logx"),
    ("/experiments/demo?where=" + "x" * 3000, 400, "at most 2000"),
    ("/experiments/demo?" + "&".join(["where=state%3Ddone"] * 40), 400, "at most 32"),
    ("/experiments/demo?sort=test&sort=val", 400, "give it once"),
    ("/experiments/demo?x=" + "y" * 9000, 414, "at most 8192"),
    ("/compare?item=zzzz&item=yyyy", 400, "no run or arm"),
    ("/compare?experiment=..%2Fx&item=a&item=b", 404, "not a valid name"),
    ("/experiments/%ff", 404, "not percent-encoded UTF-8"),  # main: a 500 and a traceback in the terminal
    ("/runs/%C3%28/curves.json", 404, "not percent-encoded UTF-8"),
])
def test_bad_urls_are_a_4xx_page_never_a_traceback(base, path, code, says):
    status, headers, body = get(base, path)
    assert status == code, body[:600]
    assert "Traceback" not in body and "File \"" not in body
    text = json.loads(body)["error"] if path.split("?")[0].endswith(".json") else \
        re.search(r'<p class="error" id="error-message">(.*?)</p>', body, re.S).group(1)
    assert says in text.replace("&#39;", "'").replace("&lt;", "<").replace("&gt;", ">"), text


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "FROB"])
def test_only_get_and_head(project, base, method):
    before = _digest(project.db)
    status, headers, body = request(base, "/experiments/demo", method=method, body=b"state=cancelled")
    assert status == 405 and headers["allow"] == "GET, HEAD", (status, body[:200])
    assert _digest(project.db) == before
    status, headers, body = request(base, "/experiments/demo", method="HEAD")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 1000


def test_the_database_is_opened_read_only(project, tmp_path):
    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    from cemctl.services.dashboard import open_source, readonly_url

    assert readonly_url(str(project.db)).endswith("?mode=ro&uri=true")
    pg = readonly_url("postgresql+psycopg://u:p@h/db")
    assert "default_transaction_read_only" in pg and pg.startswith("postgresql+psycopg://u:p@h/db?options=")
    src = open_source(f"sqlite:///{project.db}", project.runs_root)
    with pytest.raises(OperationalError, match="readonly"):
        with src.engine.begin() as conn:
            conn.execute(text("UPDATE runs SET state = 'cancelled'"))
    # A read-only database file (and folder) is served as it is; nothing is created beside it.
    ro = tmp_path / "ro"
    ro.mkdir()
    copy = ro / "results.db"
    src_con, dst_con = sqlite3.connect(project.db), sqlite3.connect(copy)
    src_con.backup(dst_con)
    dst_con.execute("PRAGMA journal_mode = DELETE")
    src_con.close()
    dst_con.close()
    copy.chmod(0o444)
    ro.chmod(0o555)
    try:
        from tests.serve_project import Project

        with running_server(Project(ro, project.runs, project.configs)) as url:
            assert get(url, "/experiments/demo")[0] == 200
        assert sorted(p.name for p in ro.iterdir()) == ["results.db"]
    finally:
        ro.chmod(0o755)


def test_a_writer_is_never_blocked_and_a_half_written_run_never_shown(project, base):
    rid = project.runs[-1]  # planned
    con = sqlite3.connect(project.db, timeout=5, isolation_level=None)
    try:
        con.execute("BEGIN IMMEDIATE")
        con.execute("UPDATE runs SET state = 'running', last_step = 3, total_steps = 6 WHERE id = ?", (rid,))
        con.execute("UPDATE runs SET state = 'cancelled' WHERE id = ?", (project.runs[0],))
        t0 = time.monotonic()
        _, _, mid = get(base, "/experiments/demo/live")  # while the write transaction is open
        assert time.monotonic() - t0 < 10
        row = re.search(rf'data-run="{rid}".*?</tr>', mid, re.S).group(0)
        assert "planned" in row and "running" not in row  # not committed: not seen
        con.execute("COMMIT")  # the dashboard's reads never hold the writer up
        _, _, after = get(base, "/experiments/demo/live")
        assert "st-running" in re.search(rf'data-run="{rid}".*?</tr>', after, re.S).group(0)
        assert "st-cancelled" in re.search(rf'data-run="{project.runs[0]}".*?</tr>', after, re.S).group(0)
    finally:
        con.execute("UPDATE runs SET state = 'planned', last_step = NULL WHERE id = ?", (rid,))
        con.execute("UPDATE runs SET state = 'done' WHERE id = ?", (project.runs[0],))
        con.close()


def test_the_live_table_reads_runs_in_flight_from_their_folders(project, base):
    """The database says planned; the run's folder says it is training (what a launch does before any sync). The
    index's experiments table is live too (main: it stayed as first loaded): the page holds it as a fragment that asks
    again every 15 s while nothing trains and every 3 s while something does, and shows the run training."""
    rid = project.runs[-1]
    run_dir = project.runs_root / rid
    _, _, index = get(base, "/")
    assert '<div id="overview" data-fragment="/experiments"><div class="overview" data-refresh-s="15.0">' in index
    now = time.time()
    try:
        write_json(run_dir / "heartbeat.json", {"time": now, "step": 4, "total_steps": 6, "tokens": 512, "pid": 1,
                                                "host": "h", "attempt": 1})
        (run_dir / "events.jsonl").write_text(json.dumps({"time": now - 5, "state": "running", "reason": "attempt 1",
                                                          "attempt": 1}) + "\n")
        (run_dir / "metrics.jsonl").write_text(json.dumps({"kind": "train", "step": 4, "tokens": 512,
                                                           "train_loss": 2.5, "lr": 1e-3, "grad_norm": 1.0,
                                                           "tokens_per_s": 2.0, "time_s": 256.0}) + "\n")
        _, _, live = get(base, "/experiments/demo/live")
        row = re.search(rf'data-run="{rid}".*?</tr>', live, re.S).group(0)
        assert "st-running" in row and "67%" in row and "2.5000" in row, row
        assert 'data-refresh-s="3.0"' in live  # refreshed often while something trains
        _, _, overview = get(base, "/experiments")
        assert overview.lstrip().startswith('<div class="overview" data-refresh-s="3.0">'), overview[:200]
        row = re.search(r'<a href="/experiments/demo">demo</a>.*?</tr>', overview, re.S).group(0)
        assert "1 running" in row and "planned" not in row, row
        # The grid's ETA (nothing queued: the running run's own, 2 steps left at its pace, 256 s over 4 steps), written
        # as the command line writes a duration; a selection without the running run has none.
        summary = re.search(r'<p class="summary">.*?</p>', live, re.S).group(0)
        assert re.search(r'<span class="eta"[^>]*>grid ETA 2m08s</span>', summary), summary
        assert re.search(r"grid ETA 2m08s\s+·\s+updated \d", _text(summary)), summary  # main: "2m08supdated 05:34"
        _, _, done_only = get(base, "/experiments/demo/live?where=state%3Ddone")
        assert "grid ETA" not in done_only
        # as `cemctl status`: a column no matching run has a value in is left out (tokens/s now and ETA once
        # nothing trains; main showed them empty for every finished experiment)
        assert 'data-sort="eta_s"' in live and 'data-sort="tokens_per_s"' in live
        assert 'data-sort="eta_s"' not in done_only and 'data-sort="tokens_per_s"' not in done_only
        assert 'data-sort="test_loss"' in done_only and 'data-sort="state"' in done_only
    finally:
        for name in ("heartbeat.json", "events.jsonl", "metrics.jsonl"):
            (run_dir / name).unlink(missing_ok=True)


def test_live_record_state_follows_the_evidence():
    """records.live derives the state with the same pure function ingest uses (a `now=`, no sleeping)."""
    import tempfile

    from cemctl.records.live import live_record
    from cemctl.records.record import RunRecord

    with tempfile.TemporaryDirectory() as d:
        run = Path(d) / "abc"
        run.mkdir()
        write_json(run / "heartbeat.json", {"time": 1000.0, "step": 2, "total_steps": 4, "tokens": 64})
        os.utime(run / "heartbeat.json", (1000.0, 1000.0))
        rec = RunRecord(run_id="abc", state="planned", run_dir=str(run))
        assert live_record(rec, now=1010.0, timeout_s=120) and rec["state"] == "running" and rec["progress"] == 0.5
        # its ETA: 2 steps left at its pace (3 s over its 2 steps), not at the last step's speed (1 s left)
        (run / "metrics.jsonl").write_text(json.dumps({"kind": "train", "step": 2, "tokens": 64, "train_loss": 3.0,
                                                       "tokens_per_s": 64.0, "time_s": 3.0}) + "\n")
        rec = RunRecord(run_id="abc", state="planned", run_dir=str(run))
        live_record(rec, now=1010.0, timeout_s=120)
        assert rec["eta_s"] == pytest.approx(3.0)
        rec = RunRecord(run_id="abc", state="running", run_dir=str(run))
        live_record(rec, now=1500.0, timeout_s=120)
        assert rec["state"] == "stale" and "no heartbeat for 500 s" in rec["reason"]
        write_json(run / "result.json", {"state": "done", "test_loss": 1.25, "steps": 4, "tokens": 128})
        rec = RunRecord(run_id="abc", state="running", run_dir=str(run))
        live_record(rec, now=1500.0, timeout_s=120)
        assert rec["state"] == "done" and rec["test_loss"] == 1.25 and rec["progress"] == 1.0
        done = RunRecord(run_id="abc", state="done", run_dir=str(run))
        assert not live_record(done, now=1500.0)  # an ended run is the database's


def test_compare_shows_differing_keys_and_differences_with_intervals(project, base):
    arms = re.findall(r'name="item" value="([0-9a-f]{12})" form="compare-arms"', get(base, "/experiments/demo/arms")[2])
    assert len(arms) == 6
    _, _, page = get(base, f"/compare?experiment=demo&item={arms[0]}&item={arms[3]}")
    differing = re.search(r'<table class="grid stack" id="differing">.*?</table>', page, re.S).group(0)
    assert "model.attention" in differing and "train.lr" not in differing and "train.seed" not in differing
    metrics = re.search(r'<table class="grid stack" id="metrics">.*?</table>', page, re.S).group(0)
    assert re.search(r'<th class="num diff">B − A \[95%\]</th>', metrics), metrics  # items named A, B as the CLI does
    test_row = re.search(r"<tr><th[^>]*>test</th>.*?</tr>", metrics, re.S).group(0)
    # the difference and its interval in the loss's own format (main: '+0.1112 [+0.03001, +0.1923]')
    assert re.search(r"[+-]0\.\d{4} \[[+-]0\.\d{4}, [+-]0\.\d{4}\] (Welch|paired)", test_row), test_row
    items = re.search(r'<ul class="items" id="items">.*?</ul>', page, re.S).group(0)
    # the arms table's order: the grid's axes (attention, then lr), each by value
    assert "<b>A</b>: arm “attention=cem, lr=0.001”" in items and "<b>B</b>: arm “attention=llama" in items, items
    _, _, same = get(base, f"/compare?item={project.runs[0]}&item={project.runs[0]}")
    assert 'id="identical"' in same


def test_report_files_are_only_those_its_manifest_lists(project, tmp_path):
    from cem_core.runfiles.manifest import write_manifest
    from cemctl.report.outdir import MARKER

    reports = tmp_path / "reports"
    folder = reports / "demo"
    (folder / "figures").mkdir(parents=True)
    (folder / "figures" / "main.png").write_bytes(b"\x89PNG fake")
    (folder / "index.md").write_text("# demo")
    write_manifest(folder, what="report", name=MARKER)
    (folder / "added-later.png").write_bytes(b"not cemctl's")
    (tmp_path / "secret.txt").write_text("secret")
    (folder / "link.md").symlink_to(tmp_path / "secret.txt")
    with running_server(project, reports_dir=reports) as url:
        _, _, page = get(url, "/experiments/demo")
        assert "/experiments/demo/report/figures/main.png" in page and "added-later" not in page
        status, headers, body = request(url, "/experiments/demo/report/figures/main.png")
        assert status == 200 and headers["content-type"] == "image/png" and body == b"\x89PNG fake"
        for path in ("/experiments/demo/report/added-later.png", "/experiments/demo/report/link.md",
                     "/experiments/demo/report/.cemctl-output.json", "/experiments/demo/report/..%2F..%2Fsecret.txt"):
            assert get(url, path)[0] == 404, path
        (folder / "index.md").write_text("# edited by hand")  # no longer the file cemctl wrote
        assert get(url, "/experiments/demo/report/index.md")[0] == 404


def test_host_header_must_name_the_loopback_server(base):
    assert get(base, "/", headers={"Host": "evil.example:80"})[0] == 421  # a DNS-rebinding page cannot read it
    assert get(base, "/", headers={"Host": "localhost:1234"})[0] == 200


def _serve(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cemctl.cli", "serve", "--port", "0", *args], cwd=cwd,
                            env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_serve_binds_loopback_prints_the_url_and_stops_on_ctrl_c(project):
    proc = _serve(["--db", str(project.db), "--runs-dir", str(project.runs_root)], project.root)
    try:
        line = proc.stdout.readline()
        m = re.match(r"cemctl serve: http://127\.0\.0\.1:(\d+)/ \(read-only; Ctrl-C to stop\)$", line.strip())
        assert m, line
        status, _, body = get(f"http://127.0.0.1:{m.group(1)}", "/experiments/demo")
        assert status == 200 and "demo" in body
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and out.strip() == "stopped" and err == "", (out, err)


def test_serve_on_another_host_warns_and_bad_input_is_one_line(project, tmp_path):
    proc = _serve(["--host", "0.0.0.0", "--db", str(project.db), "--runs-dir", str(project.runs_root)], project.root)
    try:
        line = proc.stdout.readline()
        assert line.startswith("cemctl serve: http://0.0.0.0:"), line
        warning = proc.stderr.readline()
        assert warning.startswith("warning: listening on 0.0.0.0: anyone who can reach this machine"), warning
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    from tests.helpers import assert_clean_error

    missing = cli(tmp_path, "serve", "--port", "0", subprocess=True, timeout=60)
    assert_clean_error(missing, contains="no results database")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        taken = cli(None, "serve", "--port", str(port), "--db", str(project.db), "--runs-dir", str(project.runs_root),
                    subprocess=True, timeout=60)
    assert_clean_error(taken, contains=f"port {port} on 127.0.0.1 is in use")


def test_cli_start_does_not_import_the_server():
    code = ("import sys, cemctl.cli; "
            "bad = [m for m in ('jinja2', 'http.server', 'cemctl.serve', 'cemctl.services.dashboard') if m in sys.modules]; "
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], env=subprocess_env(), capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
    assert "serve" in cli(None, "--help").stdout


def test_every_packaged_file_the_pages_load_is_served(base):
    _, _, page = get(base, "/experiments/demo")
    assets = re.findall(r'(?:src|href)="(/static/[^"]+)"', page)
    assert {"/static/uPlot.iife.min.js", "/static/dashboard.js", "/static/dashboard.css", "/static/uPlot.min.css",
            "/static/favicon.svg"} <= set(assets)
    for path in assets:
        status, headers, body = get(base, path)
        assert status == 200 and len(body) > 100, path
    assert not re.search(r'(?:src|href)="(?:https?:)?//', page)  # nothing from another host (no CDN)
