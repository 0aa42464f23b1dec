"""Manual pages: roff (man and mdoc macros) read as text with sections as headings."""

from __future__ import annotations

import gzip
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from psirag_kb.errors import SkippedFile
from psirag_kb.ingest.documents import kind_of, read_document
from psirag_kb.ingest.filetypes import looks_like_roff
from psirag_kb.ingest.roff import man_text

MAN = Path(__file__).resolve().parent.parent / "fixtures" / "textfiles" / "man"
PAGES = sorted(p.name for p in MAN.glob("*.gz"))
# A roff request or escape left in the text: a line starting with a macro, or \f \( \* \s.
LEFTOVER = re.compile(r"^[.'](?:SH|SS|TP|IP|PP|LP|B|I|BR|IR|RB|RS|RE|br|sp|nf|fi|Nm|Nd|Fl|Op|Xr|"
                      r"Ar|Pp|Sh|Bl|It|El)(?:\s|$)|\\[fs(*\-&e]", re.MULTILINE)


def source(name: str) -> str:
    return gzip.decompress((MAN / name).read_bytes()).decode()


@pytest.mark.parametrize("name", PAGES)
def test_pages_read_as_text_line_for_line_without_roff(name: str) -> None:
    roff = source(name)
    text, title, headings = man_text(roff)
    assert text.count("\n") == roff.count("\n")  # line N of the text is line N of the page
    assert not LEFTOVER.search(text), LEFTOVER.search(text)
    assert title == f"{name.split('.')[0].upper()}(1)"
    assert [h.text for h in headings][:2] == ["NAME", "SYNOPSIS"]
    assert all(text.split("\n")[h.line - 1].strip() == h.text for h in headings)


@pytest.mark.parametrize(("name", "line"), [
    ("ls.1.gz", "ls - list directory contents"),
    ("gzip.1.gz", "gzip, gunzip, zcat - compress or expand files"),
    ("xargs.1.gz", "xargs - build and execute command lines from standard input"),
    ("true.1.gz", "true - do nothing, successfully"),
    ("ssh-keyscan.1.gz", "\u2014 gather SSH public keys from servers"),  # mdoc: .Nd
])
def test_the_name_line_is_plain_text(name: str, line: str) -> None:
    text, _, headings = man_text(source(name))
    lines = text.split("\n")
    after = [t.strip() for t in lines[headings[0].line:] if t.strip()]
    assert line in after[:2], after[:3]


def test_mdoc_options_and_references() -> None:
    text, title, headings = man_text(source("ssh-keyscan.1.gz"))
    assert title == "SSH-KEYSCAN(1)"
    assert "[-46cDHv]" in text and "ssh(1)" in text and "sshd(8)" in text
    assert {"NAME", "SYNOPSIS", "DESCRIPTION", "FILES", "SEE ALSO"} <= {h.text for h in headings}
    assert "Mdocdate" not in text


def test_escapes_and_macros() -> None:
    roff = "\n".join([
        '.\\" a comment',
        ".TH DEMO 7 2026-01-01 \"demo 1.0\" \"Demo Manual\"",
        ".SH NAME",
        "demo \\- show \\fBbold\\fR and \\fIitalic\\fP text",
        ".SH \"SEE ALSO\"",
        ".BR ls (1),",
        ".IR grep (1)",
        "A \\(em dash, \\(lqquotes\\(rq, \\*(lqstrings\\*(rq, a \\(bu bullet, \\e and \\(co.",
        ".SS Sub section",
        ".TP",
        ".B \\-\\-all",
        "all of them\\c",
        ".de XX",
        "this definition is not text",
        "..",
        ".SH",
        "OLD STYLE HEADING",
        "end \\s-1SMALL\\s0 \\N'65'\\[u00E9]",
    ])
    text, title, headings = man_text(roff)
    lines = text.split("\n")
    assert title == "DEMO(7)"
    assert lines[3] == "demo - show bold and italic text"
    assert lines[5:7] == ["ls(1),", "grep(1)"]
    assert lines[7] == ("A \u2014 dash, \u201cquotes\u201d, \u201cstrings\u201d, a \u2022 bullet, "
                        "\\ and \u00a9.")
    assert lines[10] == "--all" and lines[11] == "all of them"
    assert "definition" not in text
    assert lines[17] == "end SMALL A\u00e9"
    assert [(h.line, h.level, h.text) for h in headings] == [
        (3, 1, "NAME"), (5, 1, "SEE ALSO"), (9, 2, "Sub section"), (17, 1, "OLD STYLE HEADING")]


def test_a_page_is_recognised_by_name_and_by_content(tmp_path: Path) -> None:
    assert kind_of(tmp_path / "ls.1.gz") == "man"
    assert kind_of(tmp_path / "perlfunc.3pm") == "man"
    assert kind_of(tmp_path / "openssl.1ssl") == "man"
    assert looks_like_roff(b'.\\" comment\n.TH X 1\n')
    assert looks_like_roff(b".Dd $Mdocdate$\n.Dt X 1\n")
    assert not looks_like_roff(b"Just a note about .TH\n")
    page = tmp_path / "demo-page"  # no suffix: its content says it is a manual page
    page.write_text(".TH DEMO 8\n.SH NAME\ndemo \\- a daemon\n")
    doc = read_document(page)
    assert doc.kind == "man" and doc.title == "DEMO(8)" and "demo - a daemon" in doc.text
    note = tmp_path / "notes.2"  # a section suffix without roff inside is text by content
    note.write_text("Second draft of the plan.\n")
    assert read_document(note).kind == "text"


def test_a_page_read_from_disk_has_its_title_and_headings(tmp_path: Path) -> None:
    path = Path(shutil.copy(MAN / "ls.1.gz", tmp_path / "ls.1.gz"))
    doc = read_document(path)
    assert doc.kind == "man" and doc.title == "LS(1)" and doc.encoding == "utf-8"
    headers = doc.headers([h.line + 2 for h in doc.headings[:3]])
    assert headers[2].startswith("LS(1) > DESCRIPTION")


def test_a_page_that_only_includes_another_is_skipped_saying_so(tmp_path: Path) -> None:
    path = tmp_path / "gunzip.1.gz"
    path.write_bytes(gzip.compress(b".so man1/gzip.1\n"))
    old = time.time() - 3600
    os.utime(path, (old, old))
    with pytest.raises(SkippedFile, match=r"only includes another \(man1/gzip.1\)"):
        read_document(path)
