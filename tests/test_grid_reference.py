"""docs/grid-files.md against the parser (issue 37, item 7): every table and key the parser accepts is described,
every key the page names is accepted, every value list (scales, figure kinds, metrics, statistics, expectations,
config keys with their defaults and allowed values) is the parser's, and the complete example plans."""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import fields

import pytest

from tests.helpers import ROOT, cli

DOC = ROOT / "docs" / "grid-files.md"


def sections() -> dict[str, list[list[str]]]:
    """{heading: rows of its first table (cells, backticks kept)}."""
    out: dict[str, list[list[str]]] = {}
    heading = ""
    for line in DOC.read_text().splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
            continue
        if line.startswith("| ") and not line.startswith("|---") and heading:
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            out.setdefault(heading, []).append(cells)
    return {h: rows[1:] for h, rows in out.items()}  # without the header row


def keys(heading: str) -> set[str]:
    rows = sections()[heading]
    return {re.fullmatch(r"`([^`]+)`", r[0]).group(1) for r in rows}  # type: ignore[union-attr]


def test_every_table_and_key_of_a_grid_file_is_described_and_nothing_else():
    from cemctl.executors.slurm.executor import SlurmOptions
    from cemctl.grid import claims, spec

    assert keys("The top level") == set(spec.TOP_KEYS)
    assert keys("`[experiment]`") == set(spec.EXPERIMENT_KEYS)
    assert keys("`[scale.NAME]`") == set(spec.SCALE_KEYS)
    assert keys("`[[extra]]`") - {"KEY"} == set(spec.EXTRA_KEYS)
    assert keys("`[[mark]]`") == {"label", "KEY"}
    for table in ("`[base]`", "`[axes]`", "`[[zip]]`", "`[[exclude]]`"):
        assert keys(table) == {"KEY"}, table
    assert keys("`[[claim]]`") == set(claims.CLAIM_KEYS)
    assert keys("`[[claim.part]]`") == set(claims.PART_KEYS)
    assert keys("`[slurm]`") == {f.name for f in fields(SlurmOptions)}
    # every top-level table has its own section
    for key in spec.TOP_KEYS:
        if key != "seeds":
            assert any(h.startswith(f"`[{key}") or h.startswith(f"`[[{key}") for h in sections()), key


def test_every_named_value_is_the_parsers():
    from cemctl.grid import claims, spec
    from cemctl.grid.kinds import FIGURE_KINDS, SCALES

    assert keys("Scales") == set(SCALES.names())
    assert keys("Figure kinds") == set(FIGURE_KINDS.names())
    assert keys("Metrics") == set(spec.METRICS)
    assert keys("Expectations") == set(claims.EXPECTS)
    stats = {row[0].strip("`"): int(row[1]) for row in sections()["Statistics"]}
    assert stats == claims.STATISTICS


BEGIN = "<!-- config keys: generated from cem_core.keydoc by `python -m tests.test_grid_reference --write` -->"
END = "<!-- end of config keys -->"


def config_keys_table() -> str:
    """The config keys section's table, from `cem_core.keydoc` (the one place a key's meaning is written)."""
    from cem_core.keydoc import key_docs

    def default(value: object) -> str:
        return "true" if value is True else "false" if value is False else json.dumps(value)

    lines = ["| key | type | default | allowed | meaning |", "|---|---|---|---|---|"]
    for d in key_docs():
        allowed = ", ".join(f"`{a.strip()}`" for a in d.allowed.split(",")) if d.allowed and not any(
            c in d.allowed for c in ".<>[(") else (f"{d.allowed}" if d.allowed else "")
        unit = f" ({d.unit})" if d.unit else ""
        lines.append(f"| `{d.key}` | {d.kind} | `{default(d.default)}` | {allowed} | {d.help}{unit} |")
    return "\n".join(lines)


def test_the_config_keys_are_cem_core_keydocs_every_key_with_default_and_meaning():
    from cem_core.config import RunConfig, field_names, flatten

    text = DOC.read_text()
    section = text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip()
    assert section == config_keys_table(), "regenerate it: python -m tests.test_grid_reference --write"
    rows = {r[0].strip("`"): r for r in sections()["Config keys"]}
    assert list(rows) == field_names()  # every key the config takes, in its order, nothing else
    defaults = flatten(RunConfig().to_dict())
    for key, row in rows.items():
        assert tomllib.loads(f"v = {row[2].strip('`')}")["v"] == defaults[key], key


def test_the_examples_are_toml_and_the_complete_grid_plans(tmp_path):
    text = DOC.read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, re.S)
    assert blocks
    for block in blocks:
        tomllib.loads(block)
    complete = [b for b in blocks if b.startswith("# a complete grid")]
    assert complete
    for i, block in enumerate(complete):
        grid = tmp_path / f"g{i}.toml"
        grid.write_text(block)
        for scale in ("tiny", "paper"):
            res = cli(tmp_path, "plan", str(grid), "--dry-run", "--json", "--scale", scale)
            assert res.returncode == 0, res.output
            assert json.loads(res.stdout)["runs"]
    # every example key written `key = ...` in the tables parses as TOML
    for row in sections()["`[experiment]`"]:
        tomllib.loads(row[2].strip("`"))


@pytest.mark.parametrize("table", ["experiment", "claim.part"])
def test_a_key_the_page_does_not_describe_is_refused_by_the_parser(tmp_path, table):
    """The other direction, by example: a key outside the page is one line naming the allowed ones."""
    body = ('[experiment]\nname = "x"\ncolour = "red"\n' if table == "experiment" else
            '[experiment]\nname = "x"\n[[claim]]\nid = "1"\nstatement = "s"\n[[claim.part]]\nname = "p"\n'
            'arms = [{ "model.size" = "nano" }, { "model.size" = "nano" }]\nexpect = "lower"\nsign = 1\n')
    (tmp_path / "x.toml").write_text(body)
    res = cli(tmp_path, "plan", str(tmp_path / "x.toml"), "--dry-run")
    assert res.returncode == 2 and "unknown key" in res.stderr, res.output


if __name__ == "__main__":  # python -m tests.test_grid_reference --write: the config keys section from keydoc
    import sys

    text = DOC.read_text()
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    if "--write" in sys.argv:
        DOC.write_text(f"{head}{BEGIN}\n{config_keys_table()}\n{END}{tail}")
    else:
        print(config_keys_table())
