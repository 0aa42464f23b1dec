"""The HTTP API's reference page is made from the table of operations, never edited by hand."""

from __future__ import annotations

from pathlib import Path

from psirag_kb.serving.ops import OPS
from psirag_kb.serving.reference import markdown

PAGE = Path(__file__).resolve().parents[2] / "docs" / "http-api.md"


def test_every_operation_has_a_row():
    page = markdown()
    for entry in OPS:
        assert f"`{entry.method} {entry.template}`" in page


def test_the_committed_page_is_the_generated_one():
    assert PAGE.read_text() == markdown(), (
        "docs/http-api.md is stale: python -m psirag_kb.serving.reference > docs/http-api.md")
