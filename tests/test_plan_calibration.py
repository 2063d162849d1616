"""`cemctl plan` estimates what a grid costs from what this machine measured (issue 48 item 5): the CPU-hours of a
model size some finished runs here trained are the time those took per FLOP, and the plan says which runs it used;
a size never measured here, an explicit --cpu-gflops, runs from another host or an archive keep the default. Runs are
finished without training, their times and hosts written as a trainer and an executor leave them."""

from __future__ import annotations

import json
import re
import socket
import time

from tests.helpers import cli, finish_run, plan_ids, tiny_grid


def _finished_here(where, run_ids, *, seconds: float, flops: float, host: str) -> None:
    from cem_core.runfiles.environment import write_environment

    for rid in run_ids:
        run = where / "runs" / rid
        finish_run(run, test_loss=1.5)
        now = time.time()
        (run / "events.jsonl").write_text(
            json.dumps({"time": now - seconds, "state": "running", "reason": "attempt 1", "attempt": 1,
                        "host": host}) + "\n" + json.dumps({"time": now, "state": "done", "reason": "", "attempt": 1,
                                                            "host": host}) + "\n")
        result = json.loads((run / "result.json").read_text())
        result.update(train_flops=flops, wall_time_s=seconds - 5)
        (run / "result.json").write_text(json.dumps(result))
        (run / "heartbeat.json").write_text(json.dumps({"time": now, "step": 4, "total_steps": 4, "tokens": 512,
                                                        "pid": 1, "host": host, "attempt": 1}))
        write_environment(run, {"attempt": 1, "hostname": host, "device": "cpu", "python_version": "3.11.7",
                                "torch_version": "2.13.0+cpu"})


def test_plan_estimates_cpu_time_from_the_runs_this_host_finished(tmp_path):
    """main estimated every CPU run at 30 GFLOP/s (an 8-run grid said 2 minutes; a README example said 9 minutes
    and took about an hour)."""
    host = socket.gethostname()
    _, ids = plan_ids(tmp_path, tiny_grid("measured", seeds="[0, 1, 2, 3]"), "measured")
    _finished_here(tmp_path, ids[:2], seconds=40.0, flops=4e11, host=host)  # 10 GFLOP/s from start to result
    _finished_here(tmp_path, ids[2:], seconds=1.0, flops=4e11, host="another-machine")  # not this host's: left out
    assert cli(tmp_path, "sync").returncode == 0
    (tmp_path / "next.toml").write_text(tiny_grid("next", steps=12, seeds="[0, 1]"))
    res = cli(tmp_path, "plan", str(tmp_path / "next.toml"), "--json", "--dry-run")
    assert res.returncode == 0, res.output
    plan = json.loads(res.stdout)
    flops = sum(r["train_flops"] for r in plan["runs"])
    assert plan["totals"]["cpu_hours"] * 3600 == __import__("pytest").approx(flops / 10e9)
    said = plan["totals"]["calibrated"]["cpu"]
    assert f"2 runs finished on this host ({host}) on cpu: nano 10 GFLOP/s per worker" in said
    table = cli(tmp_path, "plan", str(tmp_path / "next.toml"), "--dry-run", env={"COLUMNS": "200"})
    assert "finished on this host" in table.stdout, table.stdout
    given = json.loads(cli(tmp_path, "plan", str(tmp_path / "next.toml"), "--json", "--dry-run",
                           "--cpu-gflops", "30").stdout)
    assert "cpu" not in given["totals"]["calibrated"]
    assert given["totals"]["cpu_hours"] * 3600 == __import__("pytest").approx(flops / 30e9)


def test_plan_says_when_gpu_hours_are_mostly_a_runs_fixed_cost(tmp_path):
    """main gave runs whose FLOPs differ by 38% the same 0.019 GPU-hours without saying why (a per-run floor)."""
    (tmp_path / "g.toml").write_text(tiny_grid("g", seeds="[0]"))
    res = cli(tmp_path, "plan", str(tmp_path / "g.toml"), "--dry-run", env={"COLUMNS": "250"})
    assert res.returncode == 0 and re.search(r"GPU-hours \(\d+% of it each run's fixed start, compilation and "
                                             r"evaluation\)", res.output), res.output


def test_launch_says_what_its_runs_will_take_here(tmp_path):
    """The launch of a grid whose model size this host has measured prints the same estimate plan gives."""
    from cemctl.services.plan import launch_estimate

    host = socket.gethostname()
    _, ids = plan_ids(tmp_path, tiny_grid("measured", seeds="[0, 1]"), "measured")
    _finished_here(tmp_path, ids, seconds=40.0, flops=4e11, host=host)
    assert cli(tmp_path, "sync").returncode == 0
    _, new = plan_ids(tmp_path, tiny_grid("next", steps=12, seeds="[0, 1, 2, 3]"), "next")
    line = launch_estimate(f"sqlite:///{tmp_path / 'results.db'}", [tmp_path / "runs" / r for r in new], 2)
    assert line.startswith("estimate: about ") and "for 4 runs with 2 workers" in line, line
    assert f"2 runs finished on this host ({host}) on cpu: nano 10 GFLOP/s per worker" in line
    assert launch_estimate(f"sqlite:///{tmp_path / 'nothing.db'}", [tmp_path / "runs" / r for r in new], 2) == ""
