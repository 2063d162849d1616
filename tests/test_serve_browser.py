"""`cemctl serve` in a real headless Chromium (Debian's `chromium`, driven by Playwright; `.ci/run` installs it,
no browser is ever downloaded): pages load without console errors and draw their charts, sorting and filtering
change the URL and the rows, compare shows the differing keys, escaped text stays inert, and the live table shows
a run advance while a real `cemctl launch` trains."""

from __future__ import annotations

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


pytestmark = pytest.mark.skipif(_why_no_browser() is not None, reason=_why_no_browser() or "")


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
        legend = page.locator("#metric-chart .u-legend").inner_text()
        assert "Llama" in legend and "CEM attention" in legend
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


def test_a_runs_environment_and_system_charts_are_drawn(browser, project, base):
    from tests.serve_project import ENV_RUN

    p = Page(browser)
    try:
        page = p.open(f"{base}/runs/{project.runs[ENV_RUN]}")
        page.wait_for_selector("#system-chart .uplot canvas")
        assert page.locator("#system-chart .uplot").count() == 4  # CPU, host memory, GPU utilisation, GPU memory
        assert "CPU (%)" in page.locator("#system-chart").inner_text()
        assert "NVIDIA H100 80GB HBM3" in page.locator("#environment").inner_text()
        assert p.problems == []
    finally:
        p.close()


def test_hover_shows_values(browser, base):
    p = Page(browser)
    try:
        page = p.open(base + "/experiments/demo")
        over = page.locator("#metric-chart .u-over").first
        over.wait_for()
        over.scroll_into_view_if_needed()
        box = over.bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.mouse.move(box["x"] + 6, box["y"] + box["height"] / 2, steps=4)  # the first x value: lr=0.001
        page.wait_for_timeout(300)
        text = page.locator("#metric-chart .u-legend").inner_text()
        assert re.search(r"1\.\d{3,4} \[1\.\d+, 1\.\d+\] n=3", text), text  # mean [95% interval] n
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
        assert set(_column(page, "attention")) == {"cem"} and len(_column(page, "attention")) == 9
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


@pytest.mark.slow
def test_the_live_table_shows_a_run_advance_while_a_real_launch_trains(browser, tmp_path):
    """A real `cemctl launch` of a tiny CPU grid (slowed per step) while the page is open: the run's progress
    grows in the live table without reloading the page, and the run ends done."""
    grid = tmp_path / "live.toml"
    grid.write_text(tiny_grid("live", steps=24, ckpt=12, seeds="[0]"))
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
            assert page.locator("#runs tbody tr").count() == 1
            seen: list[int] = []

            def progress() -> int | None:
                row = page.locator("#runs tbody tr").first
                state = row.locator(".state").inner_text()
                m = re.search(r"(\d+)%", row.inner_text())
                if state == "running" and m:
                    pct = int(m.group(1))
                    if not seen or seen[-1] != pct:
                        seen.append(pct)
                # advancing: two growing percentages while it runs, or a percentage below 100 and then done (on a
                # loaded machine a refresh every 3 s may see the 12-second run only once while it runs)
                return (len(set(seen)) >= 2 and seen[-1] > seen[0]) or (bool(seen) and seen[-1] < 100
                                                                         and state == "done")

            try:
                wait_for(progress, timeout_s=240, poll_s=0.5, what="the live table to show the run advancing")
            except AssertionError as e:  # say what the page saw and how the launch ended
                rc = launch.poll()
                raise AssertionError(f"{e}; percentages seen while running: {seen}; launch exit: {rc}; "
                                     f"{launch.stderr.read()[-2000:] if rc is not None else ''}") from None
            assert page.url.endswith("/experiments/live")  # no reload: the table refreshed itself
            wait_for(lambda: page.locator("#runs tbody tr .state").first.inner_text() == "done", timeout_s=240,
                     poll_s=0.5, what="the run to be shown done")
        launch.wait(timeout=240)
        assert launch.returncode == 0, launch.stderr.read()
        assert p.problems == []
    finally:
        p.close()
        if launch.poll() is None:
            launch.terminate()
            launch.wait(timeout=60)
        shutil.rmtree(runs / ".snapshots", ignore_errors=True)
