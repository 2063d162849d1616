"""`cemctl report` on real tiny training runs: plan a grid, train on the CPU, sync, report."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from cemctl.cli import app

GRID = """
seeds = [0, 1]

[experiment]
name = "real_tiny"
figure = "components"
description = "Llama vs CEM attention on nano, a few steps"

[base]
"model.size" = "nano"
"model.context_len" = 32
"data.tokenizer" = "byte"
"data.cache_dir" = "{cache}"
"train.max_steps" = 4
"train.batch_seqs" = 8
"train.micro_batch_seqs" = 4
"train.eval_every_steps" = 2
"train.val_tokens" = 1024
"train.test_tokens" = 2048

[[zip]]
"model.attention" = ["llama", "cem"]
"model.kq_diagonal" = ["none", "shared"]
"""


@pytest.mark.slow
def test_report_on_real_tiny_runs(tmp_path):
    from cem_core.train import run_training
    from cemctl.db import open_db
    from cemctl.services.plan import plan_experiment
    from cemctl.records import load_records

    grid = tmp_path / "real_tiny.toml"
    grid.write_text(GRID.format(cache=tmp_path / "cache"))
    db_url = f"sqlite:///{tmp_path / 'results.db'}"
    runs_root = tmp_path / "runs"
    report = plan_experiment(grid, db_url=db_url, runs_root=runs_root)
    ids = [r.run_id for r in report.plan.runs]
    assert len(ids) == 4
    for rid in ids[:3]:  # the last one stays planned
        result = run_training(runs_root / rid)
        assert result["state"] == "done"
    out = tmp_path / "report"
    res = CliRunner().invoke(app, ["report", "real_tiny", "--db", db_url, "--runs-dir", str(runs_root),
                                   "--out", str(out), "--format", "png,pdf"])
    assert res.exit_code == 0, res.output
    runs = load_records(open_db(db_url), "real_tiny").frame()
    done = runs[runs["state"].eq("done")]
    assert len(done) == 3 and all(math.isfinite(p) and p > 1 for p in done["test_ppl"])
    assert (done["params_total"] > 0).all() and (done["tokens"] > 0).all()
    md = (out / "index.md").read_text()
    assert ids[3] in md and "no result yet (state planned)" in md
    for name in ("components", "training_curves"):
        assert (out / "figures" / f"{name}.png").read_bytes().startswith(b"\x89PNG")
        assert (out / "figures" / f"{name}.pdf").read_bytes().startswith(b"%PDF")
    table = (out / "tables" / "components.csv").read_text()
    # one labelling path: the fewest words that tell this grid's two arms apart (records.labels.series_names)
    assert {line.split(",")[1] for line in table.splitlines()[1:]} == {"Llama", "CEM attention"}, table
