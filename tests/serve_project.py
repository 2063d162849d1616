"""A small recorded project for the dashboard's tests (`tests/test_serve*.py`), and a server on a free port.

    project = make_project(tmp_path)          # a 2 x 3 grid, 3 seeds, finished runs, hostile strings everywhere
    with running_server(project) as base:     # http://127.0.0.1:PORT (a real server in a thread)
        status, headers, body = get(base + "/experiments/demo")
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import random
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

from tests.helpers import cli, finish_run, tiny_grid

HOSTILE = "<script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\">"
DESCRIPTION = "An <b id=\"injected\">HTML</b> description " + HOSTILE


@dataclass
class Project:
    root: Path
    runs: list[str]  # run ids in grid order
    configs: dict[str, dict]

    @property
    def db(self) -> Path:
        return self.root / "results.db"

    @property
    def runs_root(self) -> Path:
        return self.root / "runs"


def make_project(where: Path, *, name: str = "demo", unfinished: int = 1) -> Project:
    """Plan a 2 x 3 grid (attention x lr, 3 seeds) and finish all but the last `unfinished` runs without training
    (one failed, with an HTML error); a note, a tag, a grid description and a log line carry HTML."""
    grid = tiny_grid(name, seeds="[0, 1, 2]", extra='''
[axes]
"model.attention" = ["llama", "cem"]
"train.lr" = [0.001, 0.002, 0.004]
''').replace(f'name = "{name}"', f'name = "{name}"\ndescription = {json.dumps(DESCRIPTION)}')
    (where / f"{name}.toml").write_text(grid)
    res = cli(where, "plan", str(where / f"{name}.toml"), "--json")
    assert res.returncode == 0, res.output
    runs = [r["run_id"] for r in json.loads(res.stdout)["runs"]]
    configs = {}
    rng = random.Random(0)
    for i, rid in enumerate(runs):
        cfg = json.loads((where / "runs" / rid / "config.json").read_text())
        configs[rid] = cfg
        if i >= len(runs) - unfinished:
            continue
        loss = 1.6 + (0.1 if cfg["model"]["attention"] == "cem" else 0.0) + \
            abs(math.log2(cfg["train"]["lr"] / 0.002)) * 0.05 + rng.gauss(0, 0.02)
        failed = i == 3
        finish_run(where / "runs" / rid, test_loss=loss, steps=20, state="failed" if failed else "done",
                   error=("boom " + HOSTILE) if failed else None)
        (where / "runs" / rid / "train.log").write_text(f"step 1 loss 3.0\nlog line {HOSTILE}\n")
    assert cli(where, "sync").returncode == 0
    assert cli(where, "note", runs[0], f"{HOSTILE} lr too high?").returncode == 0
    assert cli(where, "tag", runs[1], "phase=<i>warmup</i>").returncode == 0
    return Project(where, runs, configs)


@contextlib.contextmanager
def running_server(project: Project, *, host: str = "127.0.0.1", reports_dir: Path | None = None) -> Iterator[str]:
    from cemctl.serve import start

    server = start(f"sqlite:///{project.db}", project.runs_root, host=host, port=0, reports_dir=reports_dir)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield server.url.rstrip("/")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def request(base: str, path: str, method: str = "GET", headers: dict | None = None,
            body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    """One HTTP request, the path sent exactly as given (no client-side normalisation)."""
    u = urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    try:
        conn.putrequest(method, path, skip_host=bool(headers and "Host" in headers), skip_accept_encoding=True)
        for k, v in (headers or {}).items():
            conn.putheader(k, v)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def get(base: str, path: str, **kw) -> tuple[int, dict[str, str], str]:
    status, headers, body = request(base, path, **kw)
    return status, headers, body.decode()
