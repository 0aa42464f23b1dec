"""The HTTP API's reference page in Markdown, made from the table of operations."""

from __future__ import annotations

from pydantic import BaseModel

from psirag_kb.serving.ops import OPS, Op

WHO = {"open": "anyone", "reader": "reader", "editor": "editor", "admin": "admin",
       "monitor": "admin, monitor"}
"""The role column: who may call an operation (an admin may call everything)."""


def _fields(model: type[BaseModel] | None) -> str:
    """A model's fields as JSON names, `?` after the optional ones."""
    if model is None:
        return ""
    names = [(info.alias or name) + ("" if info.is_required() else "?")
             for name, info in model.model_fields.items()]
    return "`{" + ", ".join(f'"{n}"' for n in names) + "}`" if names else ""


def _answer(entry: Op) -> str:
    """The 2xx answer: its media type when not JSON, its model's description and fields."""
    model = entry.response
    described = (model.__doc__ or "").strip().split("\n")[0] if model is not None else ""
    if described.startswith("A JSON object answered with 200"):
        described = ""
    fields = _fields(model) if model is not None and model.model_fields else ""
    media = "" if entry.media == "application/json" else f"`{entry.media}`"
    return " ".join(part for part in (media, described, fields) if part)


def _cell(text: str) -> str:
    """Text safe inside a table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def markdown() -> str:
    """The reference page: one row per operation, in the table's order."""
    lines = [
        "# HTTP API reference",
        "",
        "Generated from `psirag_kb/serving/ops.py` by `python -m psirag_kb.cli.reference`;",
        "do not edit by hand. The daemon serves the same as OpenAPI 3.1 at",
        "`GET /api/openapi.json`, with every request and answer's schema. Send the token as",
        "`Authorization: Bearer TOKEN`.",
        "",
        "| Method and path | Who | Body or query | What it does | Answer |",
        "| --- | --- | --- | --- | --- |",
    ]
    for entry in OPS:
        lines.append("| " + " | ".join(_cell(cell) for cell in (
            f"`{entry.method} {entry.template}`", WHO[entry.role],
            _fields(entry.body) or _fields(entry.query), entry.summary, _answer(entry),
        )) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
