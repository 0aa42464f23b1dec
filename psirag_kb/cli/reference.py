"""The site's reference pages (CLI, configuration, HTTP API, MCP tools), made from the code.

    python -m psirag_kb.cli.reference [DIR]      # writes DIR (default docs/reference)

It lives in the top layer because it reads the command line's parser; `make docs` runs it
before building the site, and tests/unit/test_reference.py checks the committed pages are
current and complete.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import dataclasses
import inspect
import json
import sys
import tomllib
from pathlib import Path
from typing import Any, get_type_hints

from psirag_kb import config as config_module
from psirag_kb.cli.parser import build_parser
from psirag_kb.serving import reference as http_reference

GENERATED = ("Generated from the code by `python -m psirag_kb.cli.reference` (`make docs` runs "
             "it); do not edit by hand.")
SHIPPED_CONFIG = Path(__file__).resolve().parents[2] / "config.toml"


def _cell(text: Any) -> str:
    """Text safe inside a Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _sentence(text: str) -> str:
    """A help string as a sentence: capitalised, with a full stop."""
    text = _cell(text)
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".") if text else ""


# --- the command line -------------------------------------------------------------------

def _argument(action: argparse.Action) -> str:
    """How an argument is written: `--mode {a,b}`, `-k K`, `paths ...`."""
    if not action.option_strings:
        name = action.metavar or action.dest
        return f"`{name} ...`" if action.nargs in ("*", "+") else f"`{name}`"
    flags = ", ".join(action.option_strings)
    if action.nargs == 0:
        return f"`{flags}`"
    value = action.metavar or ("{" + ",".join(map(str, action.choices)) + "}"
                               if action.choices else action.dest.upper())
    return f"`{flags} {value}`"


def _default(action: argparse.Action) -> str:
    """An argument's default when it has a meaningful one."""
    if action.required or not action.option_strings:
        return "required" if action.nargs not in ("*", "?") else ""
    if action.nargs == 0 or action.default in (None, [], argparse.SUPPRESS):
        return ""
    return f"`{action.default}`"


def _arguments_table(parser: argparse.ArgumentParser) -> list[str]:
    """One row per argument of a parser (its subcommands are listed apart)."""
    rows = [(_argument(a), _default(a), a.help or "") for a in parser._actions
            if not isinstance(a, argparse._SubParsersAction | argparse._HelpAction)]
    if not rows:
        return []
    return ["| Argument | Default | What |", "| --- | --- | --- |",
            *(f"| {name} | {default} | {_cell(what)} |" for name, default, what in rows), ""]


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """A parser's subcommands: (name, help, parser), in the order `--help` lists them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return []


def cli_markdown() -> str:
    """Every command, subcommand and option of `psirag-kb`, from its argparse parser."""
    parser = build_parser()
    lines = ["# Command line reference", "", GENERATED, "",
             "`psirag-kb [GLOBAL OPTIONS] COMMAND [ARGUMENTS]`; `python -m psirag_kb` is the "
             "same program. `-h, --help` after any command lists its options. `--json` prints "
             "one JSON object on stdout; logs and progress go to stderr.", "",
             "## Global options", "", *_arguments_table(parser)]
    for name, what, command in _subcommands(parser):
        lines += [f"## `psirag-kb {name}`", "", _sentence(what), "", *_arguments_table(command)]
        for sub, sub_what, subparser in _subcommands(command):
            lines += [f"### `psirag-kb {name} {sub}`", "", _sentence(sub_what), "",
                      *_arguments_table(subparser)]
    return "\n".join(lines).rstrip() + "\n"


def cli_names() -> list[str]:
    """Every command and subcommand as `psirag-kb NAME [SUB]` (what the page must cover)."""
    names = []
    for name, _what, command in _subcommands(build_parser()):
        names.append(f"psirag-kb {name}")
        names += [f"psirag-kb {name} {sub}" for sub, _w, _p in _subcommands(command)]
    return names


# --- the configuration ------------------------------------------------------------------

def _attribute_docs() -> dict[str, dict[str, str]]:
    """Each config dataclass's attribute docstrings, by class and attribute name."""
    tree = ast.parse(inspect.getsource(config_module))
    docs: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        fields = docs.setdefault(node.name, {})
        for first, second in zip(node.body, node.body[1:], strict=False):
            if (isinstance(first, ast.AnnAssign) and isinstance(first.target, ast.Name)
                    and isinstance(second, ast.Expr) and isinstance(second.value, ast.Constant)
                    and isinstance(second.value.value, str)):
                fields[first.target.id] = inspect.cleandoc(second.value.value)
    return docs


def _toml(value: Any) -> str:
    """A default as it is written in config.toml."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | Path):
        return f'"{value}"'
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if value is None:
        return "(none)"
    return str(value)


def config_sections() -> list[tuple[str, type, tuple[str, ...]]]:
    """Every table of config.toml: (its name, its dataclass, keys that are sub-tables)."""
    hints = get_type_hints(config_module.Config)
    tables = ("oidc", "proxy", "groups")
    sections: list[tuple[str, type, tuple[str, ...]]] = [
        (f"[{f.name}]", hints[f.name], tables if f.name == "auth" else ())
        for f in dataclasses.fields(config_module.Config)]
    at = next(i for i, s in enumerate(sections) if s[0] == "[auth]") + 1
    sections[at:at] = [("[auth.oidc]", config_module.OIDCConfig, ()),
                       ("[auth.proxy]", config_module.ProxyConfig, ()),
                       ("[auth.groups.NAME]", config_module.GroupConfig, ("name",))]
    return sections


def _shipped() -> dict[str, Any]:
    """The shipped config.toml, when the package runs from its source tree."""
    return tomllib.loads(SHIPPED_CONFIG.read_text()) if SHIPPED_CONFIG.exists() else {}


def config_keys() -> list[tuple[str, str, str, str]]:
    """(table, key, default, meaning) of every setting."""
    docs, rows = _attribute_docs(), []
    for table, cls, skipped in config_sections():
        for item in dataclasses.fields(cls):
            if item.name in skipped:
                continue
            default = (item.default if item.default is not dataclasses.MISSING
                       else item.default_factory() if item.default_factory
                       is not dataclasses.MISSING else None)
            rows.append((table, item.name, _toml(default), docs.get(cls.__name__, {})
                         .get(item.name, "")))
    return rows


def _choices(table: str, key: str) -> str:
    """The allowed values of a setting that has a fixed set."""
    name = table.strip("[]")
    allowed = (config_module._CHOICES.get((name, key))
               or config_module._LIST_CHOICES.get((name, key)))
    return f" One of: {', '.join(f'`{c}`' for c in sorted(allowed))}." if allowed else ""


def config_markdown() -> str:
    """Every configuration key with its default and meaning, from the config module."""
    shipped = _shipped()
    lines = ["# Configuration reference", "", GENERATED, "",
             "`psirag-kb` reads `./config.toml` when present, or the file `--config` names. "
             "Every key is optional; an unknown key is an error naming it. Relative paths are "
             "taken from the folder holding the file. The repository's `config.toml` is the "
             "same settings with comments; where its value differs from the built-in default, "
             "both are shown."]
    for table, cls, _skipped in config_sections():
        keys = [row for row in config_keys() if row[0] == table]
        lines += ["", f"## `{table}`", "", _cell(cls.__doc__ or ""), "",
                  "| Key | Default | Meaning |", "| --- | --- | --- |"]
        values = shipped
        for part in table.strip("[]").split("."):
            values = values.get(part, {}) if isinstance(values, dict) else {}
        for _table, key, default, meaning in keys:
            cell = f"`{default}`"
            if isinstance(values, dict) and key in values and _toml(values[key]) != default:
                cell += f" (config.toml: `{_toml(values[key])}`)"
            lines.append(f"| `{key}` | {_cell(cell)} | {_cell(meaning)}"
                         f"{_cell(_choices(table, key))} |")
    return "\n".join(lines) + "\n"


# --- the MCP tools ----------------------------------------------------------------------

def mcp_tools() -> list[Any]:
    """The tools the MCP server lists (its tools need no knowledge base to be listed)."""
    from psirag_kb.service.mcp import build_server

    return list(asyncio.run(build_server(backend=object()).list_tools()))  # type: ignore[arg-type]


def _schema_type(spec: dict[str, Any]) -> str:
    """A JSON schema's type in a few words."""
    if "anyOf" in spec:
        return " or ".join(_schema_type(s) for s in spec["anyOf"])
    kind = spec.get("type", "object")
    return f"array of {_schema_type(spec['items'])}" if kind == "array" and "items" in spec \
        else str(kind)


def mcp_markdown() -> str:
    """Every MCP tool: what it does, its arguments and its result's fields."""
    lines = ["# MCP tools reference", "", GENERATED, "",
             "`psirag-kb mcp` serves these tools over stdio; a running daemon serves the same "
             "at `/mcp` (Streamable HTTP, with the API's token). Every tool is read-only. "
             "Results are JSON (`structuredContent`, described by each tool's output schema); "
             "a knowledge-base error comes back as a tool error with its message."]
    for tool in mcp_tools():
        schema, out = tool.input_schema, tool.output_schema or {}
        lines += ["", f"## `{tool.name}`", "", " ".join(tool.description.split()), ""]
        arguments = schema.get("properties", {})
        if arguments:
            lines += ["| Argument | Type | Default | What |", "| --- | --- | --- | --- |"]
            for name, spec in arguments.items():
                default = ("required" if name in schema.get("required", [])
                           else f"`{json.dumps(spec.get('default'))}`")
                lines.append(f"| `{name}` | {_cell(_schema_type(spec))} | {default} | "
                             f"{_cell(spec.get('description', ''))} |")
        else:
            lines.append("No arguments.")
        fields = ", ".join(f"`{name}`" for name in out.get("properties", {}))
        described = " ".join(str(out.get("description", "")).split())
        lines += ["", " ".join(part for part in (
            "Result:", described, f"Fields: {fields}." if fields else "") if part)]
    return "\n".join(lines) + "\n"


# --- all of them ------------------------------------------------------------------------

def pages() -> dict[str, str]:
    """Each reference page's file name and text."""
    return {"cli.md": cli_markdown(), "configuration.md": config_markdown(),
            "http-api.md": http_reference.markdown(), "mcp.md": mcp_markdown()}


def main(argv: list[str] | None = None) -> int:
    """Write the pages into a folder (default docs/reference)."""
    args = argv if argv is not None else sys.argv[1:]
    folder = Path(args[0] if args else "docs/reference")
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in pages().items():
        (folder / name).write_text(text)
        print(folder / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
