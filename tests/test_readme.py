"""The README (issue 37, items 7 and 8): its two set-up commands make and use a virtual environment (a stock
Debian/Ubuntu Python refuses pip installs outside one), one line each; its command table names every command;
it points to the grid-file reference."""

from __future__ import annotations

import re

from tests.helpers import ROOT

README = (ROOT / "README.md").read_text()


def test_the_two_setup_commands_make_and_use_a_venv_one_line_each():
    def first_block(heading: str) -> str:
        return re.findall(r"```bash\n(.*?)```", README[README.index(heading):], re.S)[0].strip()

    setup = [first_block("## Set up"), first_block("## Run the tests")]
    assert setup[0] == ("python3 -m venv .venv && . .venv/bin/activate && PIP_CONSTRAINT=constraints/cpu.txt "
                        "pip install -e . && cemctl demo")
    assert setup[1] == ("python3 -m venv .venv && . .venv/bin/activate && PIP_CONSTRAINT=constraints/cpu.txt "
                        "pip install -e \".[dev]\" && python -m pytest -q tests")
    assert "python3 -m pip install" not in README  # never into the system Python


def test_the_command_table_names_every_command():
    from cemctl.cli import app

    table = README[README.index("| command | what it does |"):README.index("The database is `results.db`")]
    listed = set(re.findall(r"`cemctl ([a-z]+)", table))
    commands = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
    assert commands == listed, (commands - listed, listed - commands)


def test_the_readme_points_to_the_grid_file_reference():
    assert "[`docs/grid-files.md`](docs/grid-files.md)" in README
    assert (ROOT / "docs" / "grid-files.md").is_file()


def test_the_own_grid_section_points_to_cemctl_keys_and_its_where_examples_mean_what_they_say():
    """Issue 32: the own-grid section named no way to list the keys, and gave `tag.note~warmup` (a tag named note)
    as the filter on a run's notes; the same example stood in the API's and the grammar's docstrings."""
    import cemctl.api
    import cemctl.records.where
    from cemctl.records.where import parse_where

    section = README[README.index("### A grid of your own"):README.index("### A layer of your own")]
    assert "cemctl keys" in section
    examples = re.findall(r"`([^`]*[~<>=][^`]*)` \(a run's notes\)", section)
    assert examples and all(parse_where([e])[0].key == "note" for e in examples)
    for text in (section, cemctl.api.__doc__, cemctl.records.where.__doc__):
        notes = re.findall(r"\b(tag\.note|note)~warmup", text)
        assert notes and set(notes) == {"note"}, notes  # a note filter is `note~...`; `tag.NAME` is a tag
