"""The reference pages are made from the code, never edited by hand, and cover all of it."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest

from psirag_kb.cli import reference
from psirag_kb.serving.ops import OPS
from psirag_kb.serving.reference import markdown

ROOT = Path(__file__).resolve().parents[2]
PAGES = ROOT / "docs" / "reference"


@pytest.mark.parametrize("name", ["cli.md", "configuration.md", "http-api.md", "mcp.md"])
def test_the_committed_page_is_the_generated_one(name):
    assert (PAGES / name).read_text() == reference.pages()[name], (
        f"docs/reference/{name} is stale: python -m psirag_kb.cli.reference")


def test_every_operation_has_a_row():
    page = markdown()
    for entry in OPS:
        assert f"`{entry.method} {entry.template}`" in page


def test_every_command_and_option_is_on_the_cli_page():
    page = reference.cli_markdown()
    names = reference.cli_names()
    assert {"psirag-kb ingest", "psirag-kb users add", "psirag-kb conversations rename"} \
        <= set(names)
    for name in names:
        assert f"`{name}`" in page, name
    parsers = [reference.build_parser()]
    while parsers:
        parser = parsers.pop()
        for action in parser._actions:
            for flag in action.option_strings:
                assert f"{flag}" in page, flag  # -h, --help: said once, at the top
        parsers += [sub for _n, _w, sub in reference._subcommands(parser)]


def test_every_setting_has_a_default_and_a_meaning():
    rows = reference.config_keys()
    assert len(rows) > 80
    for table, key, default, meaning in rows:
        assert default and meaning, f"{table} {key} has no description in psirag_kb/config.py"
    page = reference.config_markdown()
    keys = {(table, key) for table, key, _d, _m in rows}
    for table, cls, skipped in reference.config_sections():
        for item in dataclasses.fields(cls):
            if item.name not in skipped:
                assert (table, item.name) in keys
                assert f"`{item.name}`" in page


def test_every_key_of_the_shipped_config_toml_is_documented():
    keys = {(table, key) for table, key, _d, _m in reference.config_keys()}
    shipped = tomllib.loads((ROOT / "config.toml").read_text())
    for table, values in shipped.items():
        for key in values:
            assert (f"[{table}]", key) in keys, f"[{table}] {key}"


def test_every_mcp_tool_and_argument_is_on_the_mcp_page():
    page = reference.mcp_markdown()
    tools = reference.mcp_tools()
    assert {tool.name for tool in tools} >= {"search", "fetch", "answer", "browse", "status"}
    for tool in tools:
        assert f"## `{tool.name}`" in page
        for argument in tool.input_schema.get("properties", {}):
            assert f"`{argument}`" in page
