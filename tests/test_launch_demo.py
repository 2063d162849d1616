"""The demo grid (experiments/demo.toml) launched with the local executor completes; a relaunch starts nothing.

The grid runs as written except for a shorter token budget (`--set`), so the
test takes a couple of minutes on 2 cores instead of the demo's few minutes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_launch_local import cemctl, cli_env, events, run_states, status_json  # noqa: E402

DEMO = Path(__file__).resolve().parents[1] / "experiments" / "demo.toml"
SHRINK = ["--set", "train.max_steps=6", "--set", "train.eval_every_steps=3", "--set", "train.val_tokens=2048",
          "--set", "train.test_tokens=2048", "--set", "train.batch_seqs=8"]


def _launch_demo(tmp_path: Path, extra: list[str]) -> None:
    env = cli_env(tmp_path)
    out = cemctl(tmp_path, "launch", str(DEMO), "--workers", "2", *extra, env=env, timeout=1800)
    assert out.returncode == 0, out.stdout + out.stderr
    st = status_json(tmp_path, env)
    exp = st["experiments"][0]
    runs = run_states(st, exp["name"])
    assert len(runs) == 4 and exp["counts"] == {"done": 4}
    assert all(r["test_loss"] and r["step"] == r["total_steps"] for r in runs.values())
    n_events = {rid: len(events(tmp_path / "runs" / rid)) for rid in runs}
    again = cemctl(tmp_path, "launch", str(DEMO), *extra, env=env)
    assert again.returncode == 0 and "launched 0 of 4" in again.stdout, again.stdout + again.stderr
    assert {rid: len(events(tmp_path / "runs" / rid)) for rid in runs} == n_events


@pytest.mark.slow
@pytest.mark.skipif(not DEMO.exists(), reason="experiments/demo.toml not written yet")
def test_demo_grid_shrunk_completes_and_relaunch_starts_nothing(tmp_path):
    _launch_demo(tmp_path, SHRINK)
