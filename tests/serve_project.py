"""A small recorded project for the dashboard's tests (`tests/test_serve*.py`), and a server on a free port.

    project = make_project(tmp_path)          # a 2 x 3 grid, 3 seeds, finished runs, hostile strings everywhere,
                                              # a claim, one run with its environment and system samples
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

[[claim]]
id = "cem-costs"
statement = "CEM attention has a higher test loss than Llama attention at the middle rate"
[[claim.part]]
name = "CEM - Llama at lr 0.002"
arms = [{ "model.attention" = "cem", "train.lr" = 0.002 }, { "model.attention" = "llama", "train.lr" = 0.002 }]
expect = "higher"
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
    record_environment(where / "runs" / runs[ENV_RUN])
    assert cli(where, "sync").returncode == 0
    assert cli(where, "note", runs[0], f"{HOSTILE} lr too high?").returncode == 0
    assert cli(where, "tag", runs[1], "phase=<i>warmup</i>").returncode == 0
    return Project(where, runs, configs)


ENV_RUN = 2  # the run (index in grid order) that recorded its environment and system samples; the others did not
ENVIRONMENT = {"attempt": 1, "hostname": "gpu-node-7", "python_version": "3.11.7", "torch_version": "2.5.1+cu124",
               "platform": "Linux-6.8.0-x86_64", "cpu_model": "AMD EPYC 7763 64-Core Processor", "cpu_count": 128,
               "device": "cuda:0", "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 1, "gpu_memory_bytes": 80 * 2**30,
               "driver_version": "550.54.15", "cuda_version": "12.4", "cemctl_version": "0.9.0",
               "peak_host_rss_bytes": 3 * 2**30, "peak_gpu_allocated_bytes": 12 * 2**30, "system_every_s": 10.0}
SAMPLES = 6  # system samples, every 10 s of training: CPU 50, 60, ... %, GPU 80 %, resident memory 2, 2.1, ... GiB


def record_environment(run_dir: Path) -> None:
    """What a trainer on a GPU machine leaves beside a run's results (`cem_core.runfiles.environment`): its
    environment.json and system samples (metrics.jsonl lines of kind "system")."""
    from cem_core.runfiles.environment import SYSTEM_KIND, write_environment

    write_environment(run_dir, dict(ENVIRONMENT))
    lines = [{"kind": SYSTEM_KIND, "step": 3 * i, "tokens": 3 * i * 128, "time_s": 10.0 * i, "series": f"1.{i}",
              "attempt": 1, "sample": i, "unix_s": 1.7e9 + 10 * i, "cpu_process_pct": 50.0 + 10 * i,
              "cpu_machine_pct": 20.0, "rss_bytes": int((2 + 0.1 * i) * 2**30), "host_mem_available_bytes": 200 * 2**30,
              "gpu_util_pct": 80.0, "gpu_mem_used_bytes": 14 * 2**30, "gpu_mem_allocated_bytes": 10 * 2**30,
              "gpu_mem_reserved_bytes": 12 * 2**30} for i in range(SAMPLES)]
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write("".join(json.dumps(line) + "\n" for line in lines))


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
