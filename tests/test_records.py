"""One run record, one field catalogue (`cemctl.records`): every field of the catalogue selects the same runs
through `status`, `export`, `report` and the API, on a grid of our own with tags, notes and runs in every
state; `--columns` and `--sort` accept every field."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import pytest

from cemctl.records.fields import RUN_FIELDS
from tests.helpers import cli

GRID = """seeds = [0, 1]

[experiment]
name = "own"
description = "rank x start of CEM attention under a diag+low-rank preconditioner (a question of our own)"

[base]
"model.size" = "nano"
"model.attention" = "cem"
"model.attn_precond" = "diag_lowrank"
"data.tokenizer" = "byte"
"train.max_steps" = 8

[axes]
"model.attn_precond_rank" = [2, 8, 16]
"model.attn_start" = ["h", "norm"]

[[mark]]
label = "ours: rank 8"
"model.attn_precond_rank" = 8
"""
OTHER = """[experiment]
name = "other"
[base]
"model.size" = "nano"
"model.attention" = "cem"
"model.attn_precond" = "diag_lowrank"
"model.attn_precond_rank" = 4
"data.tokenizer" = "byte"
"train.max_steps" = 8
[scale.cpu]
"""
# Which run of the grid (rank, start, seed) is in which state. The rank-16 runs all end, then an edited grid drops
# rank 16: they stay (in_grid false) with their outcomes; the rest take every other state.
ROLES = {"Da": (2, "h", 0), "Db": (8, "norm", 1), "R0": (2, "h", 1), "R1": (8, "norm", 0), "S": (2, "norm", 0),
         "Q": (2, "norm", 1), "C": (8, "h", 0), "P": (8, "h", 1),
         "Dc": (16, "h", 0), "F": (16, "h", 1), "V": (16, "norm", 0), "X": (16, "norm", 1)}
DONE = {  # what each finished run's result.json (and its files) say: all different
    "Da": dict(test_loss=1.40, val_loss=1.45, params_total=1001, params_non_embedding=101, flops_per_token=11,
               train_flops=1.1e6, tokens=512, steps=4, wall_time_s=10.0, test_rmse=0.30, val_rmse=0.31,
               bayes_rmse=0.25),
    "Db": dict(test_loss=1.50, val_loss=1.55, params_total=1002, params_non_embedding=102, flops_per_token=12,
               train_flops=2e6, tokens=768, steps=6, wall_time_s=20.0, test_rmse=0.40, val_rmse=0.41,
               bayes_rmse=0.26, code_fingerprint="0ldc0de"),
    "Dc": dict(test_loss=1.60, val_loss=1.65, params_total=1003, params_non_embedding=103, flops_per_token=13,
               train_flops=3e6, tokens=1024, steps=8, wall_time_s=40.0),
}
# (first running event, last event) as seconds before the fixture's clock: elapsed_s = their difference
# (a run with a result: its wall_time_s instead)
TIMES = {"Da": (9000, 8900), "Db": (9000, 4000), "Dc": (5000, 4900), "F": (7000, 6900), "V": (6500, 6000),
         "R0": (100, None), "R1": (20000, None), "S": (1100, None), "C": (100, 90)}
ENV = {"Da": dict(cpu_model="AMD EPYC 7763", gpu_model="NVIDIA H100", device="cuda:0", torch_version="2.5.0",
                  python_version="3.11.7", cemctl_version="0.9.0", cuda_version="12.4", code_snapshot="snap1",
                  peak_host_rss_bytes=2 ** 30, peak_gpu_allocated_bytes=2 ** 33),
       "Db": dict(cpu_model="Intel Xeon", gpu_model="NVIDIA A100", device="cpu", torch_version="2.4.1",
                  python_version="3.12.3", cemctl_version="0.8.0", cuda_version="12.1", code_snapshot="snap2",
                  peak_host_rss_bytes=2 ** 32, peak_gpu_allocated_bytes=2 ** 34)}


def _events(run_dir: Path, *events: dict) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def _write(run_dir: Path, name: str, obj: dict, mtime: float | None = None) -> None:
    import os

    path = run_dir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def _metrics(run_dir: Path, final: float, steps: int, rate: float = 1e4, val: bool = True) -> None:
    lines = [{"kind": "train", "step": s, "tokens": s * 64, "train_loss": final + 1.0 / s, "lr": 0.002,
              "grad_norm": 1.0, "tokens_per_s": rate, "time_s": s * 64 / rate} for s in range(1, steps + 1)]
    if val:
        lines.append({"kind": "val", "step": steps, "tokens": steps * 64, "val_loss": final + 0.05, "time_s": 1.0})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return build_project(tmp_path_factory.mktemp("records"))


def build_project(where: Path) -> dict:
    """A grid of our own with a run in every state (planned, queued, running, done, diverged, failed, stale,
    cancelled, damaged), runs an edited grid dropped, tags, notes, environments, earlier results, GP RMSEs and a
    second experiment at another scale: every field of the catalogue has different values in different runs."""
    import time

    from cem_core.fingerprint import code_fingerprint

    (where / "own.toml").write_text(GRID)
    res = cli(where, "plan", str(where / "own.toml"), "--json")
    assert res.returncode == 0, res.output
    first = json.loads(res.stdout)["runs"]
    by_axes = {(r["axes"]["model.attn_precond_rank"], r["axes"]["model.attn_start"], r["axes"]["train.seed"]): r
               for r in first}
    ids = {key: by_axes[axes]["run_id"] for key, axes in ROLES.items()}
    now = time.time()
    runs = where / "runs"
    current = code_fingerprint()
    for key, values in DONE.items():
        d = runs / ids[key]
        start, end = TIMES[key]
        _events(d, {"time": now - start, "state": "running", "reason": "attempt 1", "attempt": 1},
                {"time": now - end, "state": "done", "reason": "", "attempt": 1})
        _metrics(d, values["test_loss"], values["steps"])
        result = {"state": "done", "test_ppl": math.exp(values["test_loss"]), "val_ppl": math.exp(values["val_loss"]),
                  "error": None, "diverged_step": None, "run_id": ids[key], "code_fingerprint": current, **values}
        _write(d, "result.json", result)
    for key, state, extra in (("F", "failed", {"error": "Traceback\nRuntimeError: boom at step 2"}),
                              ("V", "diverged", {"error": "non-finite loss nan at step 5", "diverged_step": 5,
                                                 "code_fingerprint": current})):
        d = runs / ids[key]
        start, end = TIMES[key]
        _events(d, {"time": now - start, "state": "running", "reason": "attempt 1", "attempt": 1},
                {"time": now - end, "state": state, "reason": "", "attempt": 1})
        _write(d, "result.json", {"state": state, "test_loss": None, "run_id": ids[key], **extra})
    _events(runs / ids["X"], {"time": now - 300, "state": "running", "reason": "attempt 1", "attempt": 1},
            {"time": now - 290, "state": "done", "reason": "", "attempt": 1})
    _write(runs / ids["X"], "result.json", {"state": "done", "test_loss": None, "run_id": ids["X"]})  # damaged
    for key, rate, total, step, attempt, executor, host, loss in (
            ("R0", 1000.0, 100, 40, 1, {"executor": "slurm", "job_id": "77_1"}, "gpu-node-1", 3.25),
            ("R1", 2000.0, 200, 50, 2, {"executor": "local", "job_id": "4242"}, "gpu-node-2", 3.0)):
        d = runs / ids[key]
        _events(d, {"time": now - TIMES[key][0], "state": "running", "reason": f"attempt {attempt}",
                    "attempt": attempt, **executor})
        _metrics(d, loss - 1.0 / step, step, rate=rate)
        _write(d, "heartbeat.json", {"time": now, "step": step, "total_steps": total, "tokens": step * 64,
                                     "pid": 1, "host": host, "attempt": attempt})
    d = runs / ids["S"]  # its heartbeat stopped long ago: stale
    _events(d, {"time": now - TIMES["S"][0], "state": "running", "reason": "attempt 1", "attempt": 1})
    _write(d, "heartbeat.json", {"time": now - 1000, "step": 5, "total_steps": 100, "tokens": 320, "pid": 2,
                                 "host": "gpu-node-3", "attempt": 1}, mtime=now - 1000)
    import os

    os.utime(d / "events.jsonl", (now - 1000, now - 1000))
    _events(runs / ids["Q"], {"time": now - 50, "state": "queued", "reason": "slurm", "executor": "slurm",
                              "job_id": "88", "attempt": 0})
    _events(runs / ids["C"], {"time": now - TIMES["C"][0], "state": "running", "reason": "attempt 1", "attempt": 1},
            {"time": now - TIMES["C"][1], "state": "cancelled", "reason": "cancelled by user", "attempt": 1})
    for key, folder, loss, code in (("Da", ".outdated-20250101T000000Z", 1.9, "0ldc0de"),
                                    ("Db", ".damaged-20250202T000000Z", 2.1, "abc123")):
        _write(runs / ids[key], f"{folder}/result.json", {"state": "done", "test_loss": loss, "code_fingerprint": code})
    for key, env in ENV.items():
        from cem_core.runfiles.environment import write_environment

        write_environment(runs / ids[key], {"attempt": 1, "hostname": "node", **env})
    assert cli(where, "status").returncode == 0  # one sync reads every folder; every command after reads the database
    assert cli(where, "tag", ids["Da"], "phase=b", "owner=ana").returncode == 0
    assert cli(where, "tag", ids["R0"], "phase=a").returncode == 0
    assert cli(where, "note", ids["Da"], "lr looked too high").returncode == 0
    assert cli(where, "note", ids["C"], "a second look").returncode == 0
    (where / "own.toml").write_text(GRID.replace("[2, 8, 16]", "[2, 8]"))  # the edited grid drops rank 16
    res = cli(where, "plan", str(where / "own.toml"), "--json")
    assert res.returncode == 0, res.output
    position = {r["run_id"]: i for i, r in enumerate(json.loads(res.stdout)["runs"])}
    position.update({r["run_id"]: i for i, r in enumerate(first) if r["run_id"] not in position})
    (where / "other.toml").write_text(OTHER)
    res = cli(where, "plan", str(where / "other.toml"), "--scale", "cpu", "--json")
    assert res.returncode == 0, res.output
    (other,) = [r["run_id"] for r in json.loads(res.stdout)["runs"]]
    states = {r["run_id"]: r["state"] for r in _records({"where": where})}
    expect = {"Da": "done", "Db": "done", "Dc": "done", "R0": "running", "R1": "running", "S": "stale",
              "Q": "queued", "C": "cancelled", "P": "planned", "F": "failed", "V": "diverged", "X": "damaged"}
    assert {k: states.get(ids[k]) for k in ROLES} == expect  # every state, as the fixture meant it
    return {"where": where, "ids": ids, "other": other, "position": position, "now": now}


def _records(project, experiment: str | None = "own") -> list[dict]:
    from cemctl.db.engine import open_readonly_db
    from cemctl.records import load_records

    return load_records(open_readonly_db(str(project["where"] / "results.db")), experiment).records


def _axes(key: str) -> tuple:
    return ROLES[key]


def _keys(test) -> set[str]:
    return {k for k in ROLES if test(k)}


# Every run field: a condition and the runs it must select, worked out from what the fixture wrote (never from
# the grammar). Each selects some runs but not all. `experiment` and `scale` are asked of every experiment (within
# one they are one value); the rest of the grid "own".
ALL_SCOPE = ("experiment", "scale")
CASES: dict[str, tuple[str, Any]] = {
    "run_id": ("run_id={Da}", {"Da"}),
    "experiment": ("experiment=other", {"other"}),
    "scale": ("scale=cpu", {"other"}),
    "position": ("position=1", "position"),
    "in_grid": ("in_grid=false", {"Dc", "F", "V", "X"}),
    "marks": ("marks~rank 8", _keys(lambda k: _axes(k)[0] == 8)),
    "arm": ("arm={arm:Da}", _keys(lambda k: _axes(k)[:2] == _axes("Da")[:2])),
    "arm_label": ("arm_label~precond_rank=8", _keys(lambda k: _axes(k)[0] == 8)),
    "state": ("state=running", {"R0", "R1"}),
    "reason": ("reason~boom", {"F"}),
    "error": ("error~non-finite", {"V"}),
    "attempts": ("attempts>=2", {"R1"}),
    "executor": ("executor=slurm", {"R0", "Q"}),
    "job_id": ("job_id=88", {"Q"}),
    "job": ("job~77_1", {"R0"}),
    "host": ("host=gpu-node-1", {"R0"}),
    "run_dir": ("run_dir~{Db}", {"Db"}),
    "step": ("step>=40", {"R0", "R1"}),
    "total_steps": ("total_steps=200", {"R1"}),
    "progress": ("progress<1", {"R0", "R1", "S"}),
    "tokens": ("tokens>=1000", {"R0", "R1", "Dc"}),
    "train_loss": ("train_loss>3.1", {"R0"}),
    "val_loss": ("val_loss<1.5", {"Da"}),
    "tokens_per_s": ("tokens_per_s>1500", {"R1"}),
    "avg_tokens_per_s": ("avg_tokens_per_s>40", {"Da"}),
    "started_at": ("started_at<{now-6000}", {"Da", "Db", "F", "V", "R1"}),
    "finished_at": ("finished_at<{now-5500}", {"Da", "F", "V"}),
    "heartbeat_at": ("heartbeat_at<{now-500}", {"S"}),
    "last_event_at": ("last_event_at>{now-200}", {"C", "Q"}),
    # a run with a result: the wall time it recorded (Dc 40 s; Da and Db under 30); else since it started (F, V, R0,
    # R1, S: 100 s and more; C 10 s)
    "elapsed_s": ("elapsed_s>=30", {"Dc", "F", "V", "R0", "R1", "S"}),
    "eta_s": ("eta_s>4", {"R1"}),
    "test_loss": ("test_loss<1.45", {"Da"}),
    "test_ppl": ("test_ppl>4.6", {"Dc"}),
    "val_ppl": ("val_ppl<4.3", {"Da"}),
    "test_rmse": ("test_rmse<0.35", {"Da"}),
    "val_rmse": ("val_rmse>0.35", {"Db"}),
    "bayes_rmse": ("bayes_rmse=0.25", {"Da"}),
    "params_total": ("params_total=1002", {"Db"}),
    "params_non_embedding": ("params_non_embedding=101", {"Da"}),
    "flops_per_token": ("flops_per_token=13", {"Dc"}),
    "train_flops": ("train_flops>1.5e6", {"Db", "Dc"}),
    "wall_time_s": ("wall_time_s>=20", {"Db", "Dc"}),
    "diverged_step": ("diverged_step>=0", {"V"}),
    "code_fingerprint": ("code_fingerprint=0ldc0de", {"Db"}),
    "outdated": ("outdated=true", {"Db"}),
    "history": ("history~test 1.9000", {"Da"}),
    "previous_test_loss": ("previous_test_loss>2", {"Db"}),
    "previous_code_fingerprint": ("previous_code_fingerprint=0ldc0de", {"Da"}),
    "cpu_model": ("cpu_model~EPYC", {"Da"}),
    "gpu_model": ("gpu_model~A100", {"Db"}),
    "device": ("device=cpu", {"Db"}),
    "torch_version": ("torch_version=2.5.0", {"Da"}),
    "python_version": ("python_version~3.12", {"Db"}),
    "cemctl_version": ("cemctl_version=0.9.0", {"Da"}),
    "cuda_version": ("cuda_version=12.4", {"Da"}),
    "code_snapshot": ("code_snapshot=snap2", {"Db"}),
    "peak_host_rss_bytes": ("peak_host_rss_bytes>2e9", {"Db"}),
    "peak_gpu_allocated_bytes": ("peak_gpu_allocated_bytes<1e10", {"Da"}),
    "note": ("note~too high", {"Da"}),
    "tag.phase": ("tag.phase=a", {"R0"}),
    "model.attn_precond_rank": ("model.attn_precond_rank=2", _keys(lambda k: _axes(k)[0] == 2)),
    "attn_start": ("attn_start=norm", _keys(lambda k: _axes(k)[1] == "norm")),
    "train.seed": ("train.seed=1", _keys(lambda k: _axes(k)[2] == 1)),
}


def test_the_walk_covers_every_field_of_the_catalogue():
    assert set(CASES) >= {f.name for f in RUN_FIELDS}, sorted({f.name for f in RUN_FIELDS} - set(CASES))


def _case(project, name: str) -> tuple[str, set[str], set[str]]:
    """(condition, the run ids it must select, every run id it is asked of)."""
    import re

    text, keys = CASES[name]
    ids, now = project["ids"], project["now"]
    everyone = {*ids.values(), project["other"]} if name in ALL_SCOPE else set(ids.values())
    if keys == "position":
        expected = {rid for rid in ids.values() if project["position"][rid] == 1}
    else:
        expected = {project["other"] if k == "other" else ids[k] for k in keys}
    arm = {r["run_id"]: r["arm"] for r in _records(project)}
    cond = text.replace("{arm:Da}", arm[ids["Da"]])
    cond = re.sub(r"\{now-(\d+)\}", lambda m: repr(now - int(m[1])), cond)
    cond = re.sub(r"\{(\w+)\}", lambda m: ids[m[1]], cond)
    assert expected and expected < everyone, (name, cond)  # some runs, never all
    return cond, expected, everyone


def _status_ids(project, cond: str, experiment: str | None = "own", sort: str | None = None) -> set[str]:
    res = cli(project["where"], "status", *([experiment] if experiment else []), "--json", "--where", cond,
              *(["--sort", sort] if sort else []), "--no-sync")
    assert res.returncode == 0, res.output
    return {r["run_id"] for e in json.loads(res.stdout)["experiments"] for r in e["runs"]}


def _export_ids(project, cond: str, tmp_path: Path, experiment: str | None = "own") -> set[str]:
    out = tmp_path / "x.csv"
    res = cli(project["where"], "export", *([experiment] if experiment else []), "--where", cond, "--format", "csv",
              "-o", str(out), "--force")
    if res.returncode != 0:
        assert "no runs" in res.output, res.output
        return set()
    with open(out) as f:
        return {r["run_id"] for r in csv.DictReader(f)}


def _api_ids(project, cond: str | list[str], experiment: str | None = "own") -> set[str]:
    import cemctl.api as cem

    conds = [cond] if isinstance(cond, str) else cond
    return set(cem.runs(experiment, db=str(project["where"] / "results.db"), where=conds)["run_id"])


def test_each_field_selects_the_same_runs_in_status_export_and_the_api(project, tmp_path):
    """Every field of the catalogue, one after another: its condition selects the same runs through `status --where`
    (sorted by that field: every field is a sort key), `export --where` and the API."""
    for name in CASES:
        cond, expected, _ = _case(project, name)
        scope = None if name in ALL_SCOPE else "own"
        assert _status_ids(project, cond, scope, sort=name) == expected, cond
        assert _export_ids(project, cond, tmp_path, scope) == expected, cond
        assert _api_ids(project, cond, scope) == expected, cond
    res = cli(project["where"], "status", "own", "--columns", ",".join(["run", *CASES]), "--no-sync")
    assert res.returncode == 0, res.output  # every field is a column too


def test_report_selects_the_runs_the_api_selects(project, tmp_path):
    """`report --where` selects through the one run record (`RunRecords.where`, the API's): its runs.csv holds the
    runs the API selects (a tag, a result and a time field at once), and a selection of no finished run says so.
    (Each field through the API: the test above.)"""
    ids, now = project["ids"], project["now"]
    conds = ["tag.phase!=a", "test_loss<1.55", f"finished_at<{now - 3000!r}"]
    expected = _api_ids(project, conds)
    assert expected == {ids["Da"], ids["Db"]}
    out = tmp_path / "rep"
    res = cli(project["where"], "report", "own", *[a for c in conds for a in ("--where", c)], "--out", str(out),
              "--format", "png", "--no-sync")
    assert res.returncode == 0, res.output
    with open(out / "runs.csv") as f:
        assert {r["run_id"] for r in csv.DictReader(f)} == expected
    res = cli(project["where"], "report", "own", "--where", "state=running", "--out", str(tmp_path / "none"),
              "--format", "png", "--no-sync")
    assert res.returncode == 2 and "no finished runs" in res.output, res.output


def test_the_where_cases_that_disagreed_now_agree(project, tmp_path):
    """Cases where status, export and report used to disagree (status: note~x matched nothing, val_ppl/params/
    wall time/steps matched nothing and `!=` everything; report: tag.x said 'no finished runs')."""
    for cond, count in [("note~too high", 1), ("note~look", 2), ("tag.phase=b", 1), ("tag.phase!=b", 11),
                        ("val_ppl>0", 3), ("params_total>0", 12), ("wall_time_s>0", 3), ("step>0", 6),
                        ("state=failed", 1), ("reason~boom", 1), ("arm_label~rank=8", 4), ("experiment=own", 12),
                        ("attn_start=norm", 6), ("val_ppl!=3", 12)]:
        status = _status_ids(project, cond)
        assert len(status) == count, cond
        assert status == _export_ids(project, cond, tmp_path) == _api_ids(project, cond), cond


def test_status_arms_keeps_the_grids_nuisance_keys_and_every_digit(tmp_path):
    grid = GRID.replace('description =', 'nuisance = ["train.lr"]\ndescription =').replace(
        '"model.attn_start" = ["h", "norm"]', '"train.lr" = [0.0012345678, 0.0012345679]').replace("[2, 8, 16]", "[2, 8]")
    (tmp_path / "n.toml").write_text(grid)
    assert cli(tmp_path, "plan", str(tmp_path / "n.toml")).returncode == 0
    res = cli(tmp_path, "status", "own", "--arms", env={"COLUMNS": "120"})
    assert res.returncode == 0, res.output
    lines = [ln for ln in res.stdout.splitlines() if "planned" in ln and "runs:" not in ln]
    assert len(lines) == 2, res.stdout  # the lr is a nuisance: 2 ranks = 2 arms of 4 runs each
    assert "and train.lr (the grid's nuisance keys)" in res.stdout
    res = cli(tmp_path, "status", "own", "--columns", "run,lr", env={"COLUMNS": "120"})
    assert "0.0012345678" in res.stdout and "0.0012345679" in res.stdout  # two values never print alike


def test_unknown_fields_name_the_closest_ones(project):
    from tests.helpers import assert_clean_error

    assert_clean_error(cli(project["where"], "status", "--where", "val_pll>1"), contains="did you mean val_ppl")
    assert_clean_error(cli(project["where"], "status", "--columns", "run,tset,nope"),
                       contains="unknown field 'tset' (did you mean test")
    res = cli(project["where"], "status", "--columns", "run,tset,nope")
    assert "'nope'" in res.output  # every unknown name, not only the first
    assert_clean_error(cli(project["where"], "export", "own", "--where", "attn_stat=h", "-o", "x.csv"),
                       contains="did you mean")


def test_the_grid_eta_is_the_running_runs_own_plus_the_queued_ones_at_the_finished_ones_pace():
    from cemctl.records.progress import grid_eta_s

    done = [{"state": "done", "wall_time_s": w} for w in (100.0, 200.0)]  # 150 s per run
    running = [{"state": "running", "eta_s": 30.0}, {"state": "running", "eta_s": 90.0}]
    queued = [{"state": "queued"}] * 4
    # two slots: (30 + 90 + 4 x 150) / 2 = 360 s; never less than the longest running run alone
    assert grid_eta_s(done + running + queued) == pytest.approx(360.0)
    assert grid_eta_s(done + running) == pytest.approx(90.0)
    assert grid_eta_s(done + running + queued, workers=4) == pytest.approx(180.0)
    assert grid_eta_s(done) is None  # nothing left
    assert grid_eta_s(running + queued) is None  # queued runs and no finished one to time them by


def test_a_typo_of_a_result_suggests_the_result_not_a_gp_key(project):
    """issue 37.9: `--where tst<2` suggested a GP config key; the run fields come first now."""
    from tests.helpers import assert_clean_error

    line = assert_clean_error(cli(project["where"], "status", "--where", "tst<2"), contains="did you mean test_loss")
    assert "gp." not in line.split("(allowed")[0]


@pytest.mark.parametrize("state, step, total, kw, expected", [
    # 631 steps left at 254 s over 269 steps: its pace so far, whatever the last step's speed said (572 tokens/s
    # on a loaded 2-core machine, where the run went at 2,170 tokens/s: 37m37s shown for a run 10 minutes from its end)
    ("running", 269, 900, dict(time_s=254.0, tokens=269 * 2048, tokens_per_s=572.0), 631 * 254.0 / 269),
    ("running", 270, 900, dict(time_s=254.0, time_step=269), 630 * 254.0 / 269),  # the pace of the step logged last
    ("running", 40, 100, dict(tokens=2560, tokens_per_s=1000.0), 60 * 64 / 1000),  # no time logged: the speed
    ("running", 40, 100, dict(time_s=0.0, tokens=2560, tokens_per_s=1000.0), 60 * 64 / 1000),
    ("running", 100, 100, dict(time_s=50.0), 0.0),
    ("running", 0, 100, dict(time_s=5.0), None),  # no step yet
    ("running", 40, None, dict(time_s=5.0), None),
    ("running", 40, 100, dict(), None),
    ("running", 40, 100, dict(time_s=float("nan"), tokens=2560, tokens_per_s=float("inf")), None),
    ("queued", 40, 100, dict(time_s=5.0), None),
    ("done", 100, 100, dict(time_s=50.0), None),
])
def test_a_running_runs_eta_is_its_steps_left_at_its_pace_so_far(state, step, total, kw, expected):
    from cemctl.records.progress import run_eta_s

    got = run_eta_s(state, step, total, **kw)
    assert got == (pytest.approx(expected) if expected is not None else None)


@pytest.mark.parametrize("state, times, expected", [
    ("done", dict(finished=160.0, heartbeat=150.0, last_event=170.0), 60.0),  # until its result
    ("running", dict(heartbeat=150.0), 900.0),  # until now
    ("stale", dict(heartbeat=150.0, last_event=140.0), 50.0),  # until it was last seen
    ("stale", dict(last_event=130.0), 30.0),  # an imported run: no heartbeat file
    ("interrupted", dict(), None),  # nothing says when it was last seen: unknown, not growing with the clock
    ("failed", dict(finished=None, last_event=120.0), 20.0),  # a failure without a result time: its last event
])
def test_elapsed_ends_where_the_evidence_ends(state, times, expected):
    from cemctl.records.progress import elapsed_s

    got = elapsed_s(state, started=100.0, now=1000.0, **times)
    assert got == (pytest.approx(expected) if expected is not None else None)
    assert elapsed_s(state, started=None, now=1000.0, **times) is None


def test_a_selective_where_is_tested_in_the_query_and_selects_and_labels_as_the_whole_table(project):
    """issue 49: `--where test_loss<1.45`, `state=done`, `attn_precond_rank=8` are pushed into the record's query
    (only the runs they select are read); the records they give are those `matches` keeps of every record, with
    the arm labels every record has (a label never depends on the selection)."""
    from cemctl.records import load_records
    from cemctl.records.load import pushdown
    from cemctl.records.where import matches, parse_where

    db = str(project["where"] / "results.db")
    every = load_records(db, "own").records
    labels = {r.run_id: (r.arm, r.arm_label) for r in every}
    for text in (["test_loss<1.45"], ["state=done"], ["attn_precond_rank=8"], ["train.lr=0.002", "state=running"],
                 ["state in done,failed", "wall_time_s>=20"], ["scale=tiny", "attempts>=2"]):
        conds = parse_where(text)
        assert len(pushdown(conds, "sqlite")) == len(conds), text  # every one of these is tested by the database
        got = load_records(db, "own", where=conds).records
        assert [r.run_id for r in got] == [r.run_id for r in every if matches(conds, r)], text
        assert all(labels[r.run_id] == (r.arm, r.arm_label) for r in got), text
    assert pushdown(parse_where(["note~lr", "tag.phase=b", "state!=done", "task=lm"]), "sqlite") == []
