"""Faults that reached the user as the wrong thing (issue 47, medium): each is now one line or the right output."""

from __future__ import annotations

import csv
import io
import json

from tests.helpers import assert_clean_error, cli, finish_run, plan_ids, tiny_grid


def test_an_error_never_prints_a_database_password(tmp_path):
    """Every driver spelling, a password with an unencoded @, and one in the query string (a hostile probe found the
    last three printed in clear)."""
    for url in ("postgresql://alice:s3cret-pw@127.0.0.1:1/results", "mysql+mysql_connector://u:s3cret-pw@h/db",
                "oracle+cx_oracle://u:s3cret-pw@h/db", "postgresql://u:s3cret@-pw@127.0.0.1:1/db",
                "postgresql://127.0.0.1:1/db?password=s3cret-pw", "postgresql://127.0.0.1:1/db?sslpassword=s3cret-pw"):
        line = assert_clean_error(cli(None, "status", "--db", url))
        assert "s3cret" not in line and "-pw" not in line and "***" in line, line



def test_a_driver_s_own_words_never_print_the_password_or_a_piece_of_it():
    """With psycopg installed (CI), the driver splits `s3cret@-pw` at its first @ and names the host '-pw@127.0.0.1'
    in its own message, after the URL: that piece is hidden too (CI printed it)."""
    from cemctl.commands.common import redact

    line = redact("--db: cannot open 'postgresql://u:s3cret@-pw@127.0.0.1:1/db': failed to resolve host "
                  "'-pw@127.0.0.1': [Errno -2] Name or service not known")
    assert "s3cret" not in line and "-pw" not in line and "host '***@127.0.0.1'" in line, line
    line = redact("cannot open 'postgresql://h/db?password=s3cret-pw': the server refused s3cret-pw")
    assert "s3cret" not in line and line.count("***") == 2, line
    assert redact("postgresql://alice@h/db and alice") == "postgresql://alice@h/db and alice"  # no password, no ***

def test_out_dash_is_standard_output_for_text_exports_and_refused_elsewhere(tmp_path, monkeypatch):
    """`-o -` wrote a file named '-'; now export writes csv / jsonl to standard output (what it did to stderr), and
    every command that writes a file or folder refuses '-' in one line, writing nothing."""
    monkeypatch.chdir(tmp_path)
    _, ids = plan_ids(tmp_path, tiny_grid("dash", steps=2, seeds="[0, 1]"), "dash")
    for i, rid in enumerate(ids):
        finish_run(tmp_path / "runs" / rid, test_loss=1.5 + i)
    res = cli(tmp_path, "export", "dash", "-o", "-")
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert sorted(r["run_id"] for r in rows) == sorted(ids) and "standard output" in res.stderr
    res = cli(tmp_path, "export", "dash", "-o", "-", "--format", "jsonl")
    assert sorted(json.loads(line)["run_id"] for line in res.stdout.splitlines()) == sorted(ids)
    for args in (("export", "dash", "-o", "-", "--format", "parquet"), ("report", "dash", "-o", "-"),
                 ("archive", "dash", "-o", "-"), ("claims", "-o", "-")):
        assert_clean_error(cli(tmp_path, *args), contains="'-'")
    assert not (tmp_path / "-").exists()
