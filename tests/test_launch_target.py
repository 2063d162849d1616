"""`cemctl launch TARGET` where TARGET names nothing: one line, exit 2, and nothing created (issue 48: `launch
nosuchfile.toml` left an empty results.db behind)."""

from __future__ import annotations

from tests.helpers import cli


def test_a_launch_of_nothing_creates_nothing(tmp_path):
    for target, says in (("nosuchfile.toml", "no such grid file (packaged grids: demo"),
                         ("nosuch", "is no grid file and there is no results database yet")):
        res = cli(tmp_path, "launch", target, cwd=tmp_path)
        assert res.returncode == 2 and says in res.output, res.output
        assert len(res.lines) == 1 and "Traceback" not in res.output
        assert sorted(p.name for p in tmp_path.iterdir()) == [], list(tmp_path.iterdir())
