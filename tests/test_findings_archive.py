"""The committed cpu-scale findings can be re-derived: importing docs/findings/cpu-archive.tar.gz (every cpu-scale
run of the nine figure grids and the five confirmation grids, with the until-decided designs and their looks) into an empty folder and running `cemctl
claims --scale cpu` gives docs/findings/claims/claims.csv exactly: the parts, their runs, effects, intervals,
labels, verdicts after the step-down, the sequential looks and revisions, the declarations and convergence flags."""

from __future__ import annotations

import csv
import math

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
