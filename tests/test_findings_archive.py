"""The committed cpu-scale findings can be re-derived: importing docs/findings/cpu-archive.tar.gz into an empty
database and running `cemctl claims --scale cpu` gives docs/findings/claims/claims.csv exactly."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.helpers import ROOT, cli

ARCHIVE = ROOT / "docs" / "findings" / "cpu-archive.tar.gz"
CLAIMS = ROOT / "docs" / "findings" / "claims" / "claims.csv"


@pytest.mark.slow
@pytest.mark.skipif(not ARCHIVE.exists(), reason="no committed findings archive")
def test_the_committed_archive_re_derives_the_committed_claims(tmp_path: Path) -> None:
    res = cli(tmp_path, "import", str(ARCHIVE))
    assert res.returncode == 0, res.output
    res = cli(tmp_path, "claims", "--scale", "cpu", "--out", str(tmp_path / "claims"))
    assert res.returncode == 0, res.output
    with open(CLAIMS) as a, open(tmp_path / "claims" / "claims.csv") as b:
        assert list(csv.DictReader(a)) == list(csv.DictReader(b))
