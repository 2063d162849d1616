"""The committed cpu-scale findings can be re-derived: importing docs/findings/cpu-archive.tar.gz (every cpu-scale
run of the nine figure grids and the five confirmation grids, with the until-decided designs and their looks) into an empty folder and running `cemctl
claims --scale cpu` gives docs/findings/claims/claims.csv exactly: the parts, their runs, effects, intervals,
labels, verdicts after the step-down, the sequential looks and revisions, the declarations and convergence flags."""

from __future__ import annotations

import csv
import json
import math
import tarfile

import pytest

from tests.helpers import ROOT, cli

ARCHIVE = ROOT / "docs" / "findings" / "cpu-archive.tar.gz"
CLAIMS = ROOT / "docs" / "findings" / "claims" / "claims.csv"


@pytest.fixture(scope="module")
def derived(tmp_path_factory) -> tuple[list[dict], list[dict]]:
    tmp_path = tmp_path_factory.mktemp("archive")
    res = cli(tmp_path, "import", str(ARCHIVE))
    assert res.returncode == 0, res.output
    res = cli(tmp_path, "claims", "--scale", "cpu", "--out", str(tmp_path / "claims"))
    assert res.returncode == 0, res.output
    with open(CLAIMS) as a, open(tmp_path / "claims" / "claims.csv") as b:
        return list(csv.DictReader(a)), list(csv.DictReader(b))


@pytest.mark.slow
@pytest.mark.skipif(not ARCHIVE.exists(), reason="no committed findings archive")
def test_the_committed_archive_re_derives_the_parts_their_runs_and_effects(derived) -> None:
    committed, now = derived
    assert [(r["claim"], r["part"]) for r in committed] == [(r["claim"], r["part"]) for r in now]
    for old, new in zip(committed, now):
        assert set(old["runs"].split(",")) == set(new["runs"].split(",")), old["part"]
        if old["effect"] == "" or new["effect"] == "":  # a part not run (a registered design not trained yet)
            assert old["effect"] == new["effect"] and old["verdict"] == new["verdict"] == "not run", old["part"]
            continue
        assert math.isclose(float(old["effect"]), float(new["effect"]), rel_tol=1e-4, abs_tol=1e-5), old["part"]


@pytest.mark.slow
@pytest.mark.skipif(not ARCHIVE.exists(), reason="no committed findings archive")
def test_the_committed_archive_re_derives_the_committed_claims(derived) -> None:
    committed, now = derived
    assert committed == [{k: r.get(k) for k in committed[0]} for r in now]


@pytest.mark.skipif(not ARCHIVE.exists(), reason="no committed findings archive")
def test_the_runs_behind_the_committed_confirmatory_verdicts_are_current_under_this_code() -> None:
    """Every run a stage-2 (confirmatory) part of the committed claims uses was trained by this code, or by code
    shown to compute the same (`cem_core.fingerprint.EQUIVALENT`, evidence in docs/code-equivalence.md). A change
    to the model code that is not recorded there makes the published verdicts rest on outdated runs: this fails,
    and the way out is evidence of equivalence or retraining and regenerating docs/findings. It failed after
    368f611, which deleted an unused class from data/packing.py and so outdated all 402 finished archived runs."""
    from cem_core.fingerprint import code_fingerprint, equivalent

    with open(CLAIMS) as f:
        used = {rid for row in csv.DictReader(f) if row["stage"] == "stage 2" for rid in row["runs"].split(",") if rid}
    trained_by = {}
    with tarfile.open(ARCHIVE) as tf:
        for member in tf:
            parts = member.name.split("/")
            if parts[-1] == "result.json" and len(parts) >= 2 and parts[-2] in used:
                trained_by[parts[-2]] = json.load(tf.extractfile(member))["code_fingerprint"]  # type: ignore[arg-type]
    assert len(used) > 50 and set(trained_by) == used  # every such run is in the archive, with its result
    current = code_fingerprint()
    stale = {code for code in trained_by.values() if not equivalent(code, current)}
    assert not stale, (f"the committed confirmatory runs were trained by {sorted(stale)}, not current under this "
                       f"code ({current}): record the equivalence with its evidence or retrain")
