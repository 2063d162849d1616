"""`cemctl serve` in a real headless Chromium (Debian's `chromium`, driven by Playwright; `.ci/run` installs it,
no browser is ever downloaded): pages load without console errors and draw their charts, sorting and filtering
change the URL and the rows, compare shows the differing keys, escaped text stays inert, and the live table shows
a run advance while a real `cemctl launch` trains."""

from __future__ import annotations

from collections.abc import Callable
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.helpers import subprocess_env, tiny_grid, wait_for
from tests.serve_project import make_project, running_server

CHROMIUM = os.environ.get("CEMCTL_TEST_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _why_no_browser() -> str | None:
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium chromium-driver; .ci/run does)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]')"
    return None


pytestmark = [pytest.mark.slow, pytest.mark.skipif(_why_no_browser() is not None, reason=_why_no_browser() or "")]


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


class Page:
    """A page that records every console error, failed request and uncaught exception."""

    def __init__(self, browser, width: int = 1280) -> None:
        self.ctx = browser.new_context(viewport={"width": width, "height": 900})
        self.page = self.ctx.new_page()
        self.problems: list[str] = []
        self.page.on("console", lambda m: self.problems.append(f"console {m.type}: {m.text}")
                     if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        self.page.on("requestfailed", lambda r: self.problems.append(f"request failed: {r.url}"))
        self.page.on("response", lambda r: self.problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)

    def open(self, url: str):
        self.page.goto(url)
        self.page.wait_for_load_state("networkidle")
        return self.page

    def close(self) -> None:
        self.ctx.close()


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return make_project(tmp_path_factory.mktemp("browser"))


@pytest.fixture(scope="module")
def base(project):
    with running_server(project) as url:
        yield url


@pytest.mark.parametrize("width", [1280, 400])
def test_pages_load_without_console_errors_and_draw_their_charts(browser, project, base, width):
    p = Page(browser, width)
    try:
        page = p.open(base + "/")
        assert page.locator("#experiments a", has_text="demo").count() == 1
        page = p.open(base + "/experiments/demo")
        page.wait_for_selector("#metric-chart .uplot canvas")
        page.wait_for_selector("#curves-chart .uplot canvas")
        page.wait_for_selector("#claims-part p, #claims-part table")
        assert page.locator("#runs tbody tr").count() == 18
        page = p.open(base + "/experiments/demo?rates=all")  # every rate on x, the attentions as colours
        page.wait_for_selector("#metric-chart .uplot canvas")
        legend = page.locator("#metric-chart .u-legend").inner_text()
        assert "Llama" in legend and "CEM attention" in legend
        assert page.locator("#metric-chart canvas.swatch").count() == 2  # swatches that show line and marker
        page = p.open(f"{base}/runs/{project.runs[0]}")
        page.wait_for_selector("#run-curves .uplot canvas")
        page.wait_for_selector("#system-chart p")
        page = p.open(f"{base}/compare?experiment=demo&item={project.runs[0]}&item={project.runs[9]}")
        page.wait_for_selector("#compare-chart .uplot canvas")
        page = p.open(base + "/experiments/demo/parallel")
        page.wait_for_selector("#parallel canvas")
        assert p.problems == []
        # No page is wider than the window (a wide table scrolls inside its own box); main's run page was 486 px
        # wide at 400: its state history table had no scroll box.
        from tests.serve_project import ENV_RUN

        for path in ("/", "/experiments/demo", f"/runs/{project.runs[ENV_RUN]}", f"/runs/{project.runs[3]}",
                     f"/compare?experiment=demo&item={project.runs[0]}&item={project.runs[9]}&item={project.runs[4]}",
                     "/experiments/demo/parallel", "/claims"):
            page = p.open(base + path)
            assert page.evaluate("document.documentElement.scrollWidth") <= width, path
    finally:
        p.close()


def test_the_index_follows_a_run_that_starts_and_the_claims_evaluated(browser, project, base):
    """The experiments page, never reloaded: a planned run's folder starts saying it trains and the table shows it
    running; the claims column fills once the page's claims part evaluated them (main: the table stayed as loaded,
    its claims column empty until a reload)."""
    import json
    import time

    from tests.helpers import write_json

    rid = project.runs[-1]
    run_dir = project.runs_root / rid
    p = Page(browser)
    try:
        page = p.open(base + "/")
        row = page.locator("#experiments tbody tr", has_text="demo")

        def cells() -> list[str]:
            return [c.strip() for c in row.locator("td").all_inner_texts()]

        assert "running" not in cells()[2], cells()
        page.wait_for_selector("#claims-all table")
        wait_for(lambda: cells()[4] == "1 holds", timeout_s=40, poll_s=0.5, what="the claims column to fill")
        now = time.time()
        write_json(run_dir / "heartbeat.json", {"time": now, "step": 4, "total_steps": 6, "tokens": 512, "pid": 1,
                                                "host": "h", "attempt": 1})
        (run_dir / "events.jsonl").write_text(json.dumps({"time": now, "state": "running", "reason": "attempt 1",
                                                          "attempt": 1}) + "\n")
        wait_for(lambda: "1 running" in cells()[2], timeout_s=40, poll_s=0.5, what="the index to show the run running")
        assert page.url == base + "/"
        assert p.problems == []
    finally:
        p.close()
        for name in ("heartbeat.json", "events.jsonl"):
            (run_dir / name).unlink(missing_ok=True)


def test_a_series_drawn_over_another_leaves_it_visible_and_hovering_its_legend_brings_it_forward(browser, base):
    """Two series with the same values (the metric chart's data replaced by the browser): the orange one, drawn last,
    lets the blue one under it show (its pixels are a blend, not orange), and hovering the blue one's legend entry
    fades the other so the blue one is seen alone (main: the lines were opaque and nothing brought one forward; one
    series of four hid completely under another)."""
    import json

    chart = {"charts": [{"x": [1, 2, 3, 4, 5], "x_label": "step", "y_label": "loss", "series": [
        {"label": "A", "color": "#2a6fdb", "dash": None, "y": [5, 4, 3, 2, 1]},
        {"label": "B", "color": "#f28e2b", "dash": None, "y": [5, 4, 3, 2, 1]}]}]}
    colours = """() => { const c = document.querySelector('#metric-chart .uplot canvas');
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let blue = 0, orange = 0, blend = 0;
      for (let i = 0; i < d.length; i += 4) { const r = d[i], g = d[i + 1], b = d[i + 2];
        if (b > r + 80 && b > 150) blue++; else if (r > b + 120 && r > 200) orange++;
        else if (r > 150 && b > 60 && b < 140 && g > 110 && g < 170) blend++; }
      return {blue, orange, blend}; }"""
    p = Page(browser)
    try:
        p.page.route("**/metric.json*", lambda route: route.fulfill(status=200, content_type="application/json",
                                                                     body=json.dumps(chart)))
        page = p.open(base + "/experiments/demo")
        page.wait_for_selector("#metric-chart .uplot canvas")
        seen = page.evaluate(colours)
        assert seen["blend"] > seen["orange"] and seen["blue"] == 0, seen
        page.locator("#metric-chart .u-legend .u-series").nth(1).hover()  # A's entry (0 is the x value)
        page.wait_for_timeout(300)
        seen = page.evaluate(colours)
        assert seen["blue"] > 1000 and seen["orange"] == 0 and seen["blend"] == 0, seen
        assert [m for m in p.problems if "willReadFrequently" not in m] == []  # the test's own pixel reads warn
    finally:
        p.close()


def test_a_runs_environment_and_system_charts_are_drawn(browser, project, base):
    from tests.serve_project import ENV_RUN

    p = Page(browser)
    try:
        page = p.open(f"{base}/runs/{project.runs[ENV_RUN]}")
        page.wait_for_selector("#system-chart .uplot canvas")
        # CPU of the process (per core) and of the machine (of all cores) apart, host memory, GPU utilisation, memory
        assert page.locator("#system-chart .uplot").count() == 5
        assert "CPU, this process (% of one core)" in page.locator("#system-chart").inner_text()
        assert "NVIDIA H100 80GB HBM3" in page.locator("#environment").inner_text()
        assert p.problems == []
    finally:
        p.close()


def test_hover_shows_values(browser, base):
    p = Page(browser)
    try:
        page = p.open(base + "/experiments/demo?rates=all")
        over = page.locator("#metric-chart .u-over").first
        over.wait_for()
        over.scroll_into_view_if_needed()
        box = over.bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.mouse.move(box["x"] + 6, box["y"] + box["height"] / 2, steps=4)  # the first x value: lr=0.001
        page.wait_for_timeout(300)
        text = page.locator("#metric-chart .u-legend").inner_text()
        assert re.search(r"1\.\d{3,5} ± 0\.\d+ \(n=3\)", text), text  # mean ± s.d. (n): the whiskers' numbers
        assert p.problems == []
    finally:
        p.close()


def test_escaped_text_stays_inert(browser, project, base):
    p = Page(browser)
    try:
        for path in ("/", "/experiments/demo", f"/runs/{project.runs[0]}", f"/runs/{project.runs[3]}",
                     f"/compare?item={project.runs[0]}&item={project.runs[3]}", "/experiments/demo/parallel"):
            page = p.open(base + path)
            page.wait_for_timeout(300)
            assert page.evaluate("window.__pwned === undefined"), path
            assert page.locator("#injected").count() == 0, path
        page = p.open(base + "/experiments/demo")
        assert "<script>window.__pwned=1</script>" in page.locator("#description").inner_text()
        page = p.open(f"{base}/runs/{project.runs[0]}")
        assert "<script>window.__pwned=1</script>" in page.locator("#notes").inner_text()
        assert "log line <script>" in page.locator("#log").inner_text()
    finally:
        p.close()


def _column(page, header: str) -> list[str]:
    headers = [h.strip().rstrip(" ▲▼") for h in page.locator("#runs thead th").all_inner_texts()]
    i = headers.index(header)
    return [row.locator("td").nth(i).inner_text().strip() for row in page.locator("#runs tbody tr").all()]


def test_sorting_and_filtering_work_like_the_command_line(browser, base):
    p = Page(browser)
    try:
        page = p.open(base + "/experiments/demo")
        page.locator("#runs thead a", has_text=re.compile(r"^test$")).click()
        page.wait_for_load_state("networkidle")
        assert "sort=test_loss" in page.url
        tests = [t for t in _column(page, "test") if t]
        assert tests == sorted(tests, key=float) and len(tests) == 16
        page.locator("#runs thead a", has_text=re.compile(r"^test")).click()
        page.wait_for_load_state("networkidle")
        assert "sort=-test_loss" in page.url
        tests = [t for t in _column(page, "test") if t]
        assert tests == sorted(tests, key=float, reverse=True)
        field = page.locator("form.where input[name=where]").last
        field.fill("attention=cem")
        field.press("Enter")
        page.wait_for_load_state("networkidle")
        assert "where=attention%3Dcem" in page.url and "sort=-test_loss" in page.url
        arms = _column(page, "arm")  # each run named by its arm: attention and rate, by the specs' names
        assert len(arms) == 9 and all(a.startswith("CEM attention") for a in arms), arms
        page.locator("form.where input[name=where]").last.fill("test_los<1.7")
        page.locator("form.where input[name=where]").last.press("Enter")
        page.wait_for_load_state("networkidle")
        assert "did you mean test_loss" in page.locator("#error-message").inner_text()
        p.problems = [x for x in p.problems if not x.startswith("HTTP 400") and "status of 400" not in x]
        assert p.problems == []
    finally:
        p.close()


def test_compare_picked_arms_shows_the_differing_keys(browser, base):
    p = Page(browser)
    try:
        page = p.open(base + "/experiments/demo")
        button = page.locator("#compare-arms button")
        page.wait_for_selector("#arms input[type=checkbox]")
        assert button.is_disabled()
        boxes = page.locator("#arms input[type=checkbox]")
        boxes.nth(0).check()
        boxes.nth(3).check()
        assert button.is_enabled()
        button.click()
        page.wait_for_load_state("networkidle")
        assert "/compare?" in page.url and page.url.count("item=") == 2
        keys = page.locator("#differing tbody th").all_inner_texts()
        assert keys == ["model.attention"]
        page.wait_for_selector("#compare-chart .uplot canvas")
        assert "−" in page.locator("#metrics thead").inner_text()  # the difference column
        assert p.problems == []
    finally:
        p.close()


def _status_runs(where, *common) -> list[dict]:
    res = subprocess.run([sys.executable, "-m", "cemctl.cli", "status", "live", "--json", *common], cwd=where,
                         env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    import json

    return json.loads(res.stdout)["experiments"][0]["runs"]


def test_the_page_follows_a_real_launch_to_the_values_status_shows(browser, tmp_path):
    """A real `cemctl launch` of a tiny CPU grid (two seeds, one at a time, slowed per step) while the page is open,
    never reloaded: the live table shows a run advance; the curves are drawn while it trains (read from its folder);
    at every moment the arms table counts the seeds the runs table shows done (with one, its test loss), and at the
    end 2/2 with the mean `cemctl status` gives, and the metric chart's legend the two seeds (main: only the runs
    table was live; the arms table said 0/1 beside a finished run)."""
    import statistics

    grid = tmp_path / "live.toml"
    grid.write_text(tiny_grid("live", steps=24, ckpt=12, seeds="[0, 1]"))
    env = subprocess_env(CEMCTL_TEST_SLEEP_PER_STEP_S="0.5", CEMCTL_HEARTBEAT_S="0.3")
    db, runs = tmp_path / "results.db", tmp_path / "runs"
    common = ["--db", str(db), "--runs-dir", str(runs)]
    planned = subprocess.run([sys.executable, "-m", "cemctl.cli", "plan", str(grid), *common], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
    assert planned.returncode == 0, planned.stderr
    from tests.serve_project import Project

    launch = subprocess.Popen([sys.executable, "-m", "cemctl.cli", "launch", "live", "--workers", "1", *common],
                              cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    p = Page(browser)
    try:
        with running_server(Project(tmp_path, [], {})) as base:
            page = p.open(base + "/experiments/live")
            assert page.locator("#runs tbody tr").count() == 2
            seen: dict[int, list[int]] = {}  # row -> the percentages it showed while running

            def progress() -> bool:
                for i, row in enumerate(page.locator("#runs tbody tr").all()):
                    m = re.search(r"(\d+)%", row.inner_text())
                    if row.locator(".state").inner_text() == "running" and m:
                        pct, shown = int(m.group(1)), seen.setdefault(i, [])
                        if not shown or shown[-1] != pct:
                            shown.append(pct)
                # advancing: one run's percentage grows while it runs (a refresh every 3 s sees a 12 s run several
                # times); per row, since the first seed may be seen only at its end and the second from its start
                return any(len(s) >= 2 and s[-1] > s[0] for s in seen.values())

            try:
                wait_for(progress, timeout_s=240, poll_s=0.5, what="the live table to show a run advancing")
            except AssertionError as e:  # say what the page saw and how the launch ended
                rc = launch.poll()
                raise AssertionError(f"{e}; percentages seen while running: {seen}; launch exit: {rc}; "
                                     f"{launch.stderr.read()[-2000:] if rc is not None else ''}") from None
            page.wait_for_selector("#curves-chart .uplot canvas", timeout=60000)  # a run in flight has its curve

            def arms_cell(i: int) -> str:
                row = page.locator("#arms tbody tr").first
                return row.locator("td").nth(i).inner_text().strip() if row.count() else ""

            def shown() -> tuple[dict[str, str], str, str, list[str]]:
                """One moment of the page, read in one go: {run: its state} in the runs table, the arms table's
                seeds and mean cells, and the seeds (n=) the metric chart's legend counts."""
                runs, seeds, mean, legend = page.evaluate("""() => {
                    const cells = (document.querySelector('#arms tbody tr') || {cells: []}).cells;
                    const text = (i) => cells[i] ? cells[i].textContent.trim() : '';
                    const legend = document.querySelector('#metric-chart .u-legend');
                    return [Array.from(document.querySelectorAll('#runs tbody tr'),
                                       r => [r.dataset.run, r.querySelector('.state').textContent.trim()]),
                            text(2), text(3), legend ? legend.textContent.match(/n=\\d+/g) || [] : []];
                }""")
                return dict(runs), seeds, mean, legend

            one_done: list[tuple[str, str]] = []  # (the run shown done, the arms' mean) while the other trains

            def agreeing(until: Callable[[list[str]], bool]) -> bool:
                """At every moment the runs table, the arms table and the metric chart agree: the seeds the arms table
                and the chart's legend count are the runs the runs table shows done (main: each part on its own timer
                and its own read of the folders; the arms said 2/2 beside a run shown running)."""
                runs, seeds, mean, legend = shown()
                states = list(runs.values())
                if seeds:
                    assert seeds == f"{states.count('done')}/2", (runs, seeds)
                assert set(legend) <= {f"n={states.count('done')}"}, (runs, legend)  # the chart: the same seeds
                if sorted(states) == ["done", "running"]:
                    one_done.append((next(r for r, st in runs.items() if st == "done"), mean))
                return until(states)

            wait_for(lambda: agreeing(lambda st: "done" in st), timeout_s=240, poll_s=0.5,
                     what="the first seed to be shown done")
            wait_for(lambda: agreeing(lambda st: st == ["done", "done"]), timeout_s=240, poll_s=0.5,
                     what="both runs done")
            losses_of = {r["run_id"]: r["test_loss"] for r in _status_runs(tmp_path, *common)}
            for rid, mean in one_done:  # with one seed done, the arms' mean is that seed's test loss, as status says
                assert mean == f"{losses_of[rid]:.4f}", (rid, mean, losses_of)
            assert page.url.endswith("/experiments/live")  # no reload: every part refreshed itself
            mean = f"{statistics.mean(losses_of.values()):.4f}"
            wait_for(lambda: arms_cell(2) == "2/2" and arms_cell(3) == mean, timeout_s=30, poll_s=0.5,
                     what=f"the arms table to say 2/2 and {mean}, as status does")
            wait_for(lambda: "n=2" in page.locator("#metric-chart .u-legend").inner_text(), timeout_s=60, poll_s=0.5,
                     what="the metric chart to show both seeds")
            over = page.locator("#metric-chart .u-over").first
            box = over.bounding_box()
            page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            page.wait_for_timeout(300)
            legend = page.locator("#metric-chart .u-legend").inner_text()
            assert re.search(rf"{mean[:-1]}\d? ± [\d.]+ \(n=2\)", legend), (legend, mean)
            assert "updated" in page.locator("#arms-part").inner_text()
        launch.wait(timeout=240)
        assert launch.returncode == 0, launch.stderr.read()
        assert p.problems == []
    finally:
        p.close()
        if launch.poll() is None:
            launch.terminate()
            launch.wait(timeout=60)
        shutil.rmtree(runs / ".snapshots", ignore_errors=True)


PACKAGED = ("demo", "fig2a", "fig2b", "fig2c", "fig2d", "fig3a", "fig3b", "fig3c", "fig4", "gp", "t2_ablation")


@pytest.fixture(scope="module")
def packaged(tmp_path_factory):
    """Every packaged experiment planned at its CPU scale (the demo and gp at theirs) and a grid of our own (the
    attention step size against T at five learning rates), each run finished without training; one run per
    experiment failed with a long error, as real grids have."""
    import json

    from tests.helpers import cli, finish_run
    from tests.test_serve_charts import OWN, _loss

    where = tmp_path_factory.mktemp("packaged")
    (where / "own.toml").write_text(OWN)
    for name in (*PACKAGED, str(where / "own.toml")):
        res = cli(where, "plan", name, "--scale", "cpu", "--json")
        if res.returncode != 0:
            res = cli(where, "plan", name, "--json")
        assert res.returncode == 0, res.output
        for i, r in enumerate(json.loads(res.stdout)["runs"]):
            folder = where / "runs" / r["run_id"]
            if (folder / "result.json").exists():
                continue  # a run two grids share
            cfg = json.loads((folder / "config.json").read_text())
            loss = _loss(cfg, cfg["train"]["seed"]) if name.endswith("own.toml") else 1.4 + 0.013 * (i % 17)
            finish_run(folder, test_loss=loss, steps=20, state="failed" if i == 5 else "done",
                       error="RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.2 GiB total "
                             "capacity; 77.1 GiB already allocated)" if i == 5 else None)
    assert cli(where, "sync").returncode == 0
    return where


NUMBERS = """(sel) => Array.from(document.querySelectorAll(sel)).filter(e => e.offsetParent !== null)
    .map(e => [e.textContent.trim(), Math.round(e.getBoundingClientRect().right)])"""
SCROLLS = """() => Array.from(document.querySelectorAll('.scroll')).filter(e => e.scrollWidth > e.clientWidth + 1)
    .map(e => (e.querySelector('table') || {}).id)"""


@pytest.mark.parametrize("width", [1280, 400])
def test_every_experiments_tables_show_their_numbers_without_scrolling(browser, packaged, width):
    """Issue 48: at 1280 px the arms table of every real experiment hid its test mean, interval and seeds behind a
    horizontal scrollbar (arm labels of 75 to 130 characters), fig4's interval was cut mid-number and a claims table
    cut its verdict; at 400 px two T=2 arms read alike. Every packaged experiment and a grid of our own: no table
    scrolls sideways, every number lies inside the window, and no two arms (no two runs) read alike."""
    from tests.serve_project import Project

    p = Page(browser, width)
    try:
        with running_server(Project(packaged, [], {})) as base:
            for name in (*PACKAGED, "own"):
                page = p.open(f"{base}/experiments/{name}")
                page.wait_for_selector("#arms tbody tr")
                page.wait_for_selector("#claims-part table, #claims-part p.dim")
                assert page.evaluate(SCROLLS) == [], (name, width)
                assert page.evaluate("document.documentElement.scrollWidth") <= width, (name, width)
                for sel in ("#runs td.num", "#arms td.num", "#claims td.num", "#claims .verdict"):
                    cells = page.evaluate(NUMBERS, sel)
                    outside = [c for c in cells if c[1] > width]
                    assert not outside, (name, width, sel, outside[:3])
                assert page.locator("#arms td.num").count() > 0
                names = page.locator("#arms td.name").all_inner_texts()
                assert len(names) == len(set(names)), (name, [n for n in names if names.count(n) > 1][:3])
                rows = [tuple(r.locator("td.name, td[data-label=seed]").all_inner_texts())
                        for r in page.locator("#runs tbody tr").all()[:60]]
                assert len(rows) == len(set(rows)), name
            page = p.open(base + "/")  # the experiments and every claim's verdict
            page.wait_for_selector("#claims-all table, #claims-all p.dim")
            assert page.evaluate(SCROLLS) == [] and page.evaluate("document.documentElement.scrollWidth") <= width
        assert p.problems == []
    finally:
        p.close()
