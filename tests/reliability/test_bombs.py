"""Document bombs: a zip-based document or a PDF that unpacks past [ingest] max_extracted_bytes,
a member or stream that unpacks far past its packed size, a forged zip header, or an XML member
declaring entities, is skipped with the reason, found in bounded reads (memory measured for the
reader alone in a fresh process); nothing else is lost and ingestion goes on with the next file.

Real KnowledgeBase, DuckDB, Tantivy, hnswlib and the MiniLM model (a fake embedder for the
daemon); the bombs are built from the real fixtures of every zip-based kind the project reads
and with pypdf (see tests/bombs.py).
"""

from __future__ import annotations

import shutil
import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from bombs import FIXTURES, LAUGHS, MB, TEMPLATES, write_bomb, write_pdf_bomb
from daemon_helpers import api, wait_for
from memory_probe import reader_growth

from psirag_kb.config import Config
from psirag_kb.errors import SkippedFile
from psirag_kb.ingest.documents import read_document
from psirag_kb.ingest.formats.bounds import RATIO_FLOOR, UnpackLimits, check_unpacked
from psirag_kb.kb import KnowledgeBase
from psirag_kb.service.daemon import Daemon

SMALL_LIMIT = 4 * MB
NOTE = "The walrus hauls out on the ice floe to rest between dives."


@pytest.fixture
def small_kb(config: Config, minilm) -> Iterator[KnowledgeBase]:
    """A knowledge base whose documents may unpack to SMALL_LIMIT bytes at most."""
    limited = config.replace("ingest", max_extracted_bytes=SMALL_LIMIT)
    with KnowledgeBase(limited, embedder=minilm) as kb:
        yield kb


@pytest.fixture
def kb(config: Config, minilm) -> Iterator[KnowledgeBase]:
    """A knowledge base with the default limits (200 MB, ratio 100)."""
    with KnowledgeBase(config, embedder=minilm) as kb:
        yield kb


def _problems(kb: KnowledgeBase) -> dict[str, tuple[str, str]]:
    return {Path(p["path"]).name: (p["state"], p["reason"]) for p in kb.status()["problems"]}


def _top(kb: KnowledgeBase, text: str) -> str:
    return Path(kb.query(text, mode="hybrid", k=1)["results"][0]["source"]).name


@pytest.mark.parametrize("kind", sorted(TEMPLATES))
def test_bomb_past_the_byte_limit_is_skipped_and_nothing_else_is_lost(
        small_kb: KnowledgeBase, tmp_path: Path, kind: str) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    bomb = write_bomb(folder / f"a-bomb.{kind}", kind, 6 * SMALL_LIMIT)
    assert bomb.stat().st_size < SMALL_LIMIT // 20  # small on disk, 24 MB unpacked
    template, _ = TEMPLATES[kind]
    shutil.copy(FIXTURES / template, folder / f"b-good.{kind}")  # the same kind, well-formed
    (folder / "c-note.md").write_text(NOTE + "\n")
    report = small_kb.ingest([folder])
    assert (report.added, report.skipped, report.failed) == (2, 1, 0)
    state, reason = _problems(small_kb)[bomb.name]
    assert state == "skipped"
    assert reason.startswith(f"document bomb: this .{kind} says it unpacks to ")
    assert reason.endswith(f"over the limit of {SMALL_LIMIT} ([ingest] max_extracted_bytes)")
    assert set(_problems(small_kb)) == {bomb.name}
    assert small_kb.status()["files"] == {"indexed": 2, "skipped": 1, "failed": 0}
    assert _top(small_kb, "walrus resting on the ice floe between dives") == "c-note.md"
    good = read_document(folder / f"b-good.{kind}")
    assert small_kb.query(good.text[:200], mode="sparse", k=1)["results"][0]["source"] == str(
        folder / f"b-good.{kind}")


def test_ratio_bomb_at_the_default_limits_is_skipped_by_reading_part_of_it(
        kb: KnowledgeBase, tmp_path: Path) -> None:
    """150 MB of spaces in word/document.xml (under the 200 MB limit, 150 KB on disk): the
    member is refused by its ratio once RATIO_FLOOR bytes were read, and the next file goes on."""
    folder = tmp_path / "docs"
    folder.mkdir()
    bomb = write_bomb(folder / "a-bomb.docx", "docx", 150 * MB)
    assert bomb.stat().st_size < 1 * MB
    (folder / "b-note.md").write_text(NOTE + "\n")
    report = kb.ingest([folder])
    assert (report.added, report.skipped) == (1, 1)
    state, reason = _problems(kb)[bomb.name]
    assert state == "skipped"
    assert reason.startswith("document bomb: word/document.xml in this .docx unpacks to more "
                             "than ")
    assert reason.endswith("(limit 100: [ingest] max_compression_ratio)")
    assert _top(kb, "walrus resting on the ice floe between dives") == "b-note.md"
    assert kb.ingest([folder]).skipped == 1  # still refused, and only that file

    huge = write_bomb(folder / "c-huge.docx", "docx", 300 * MB)  # about 300 KB on disk
    assert kb.ingest([huge]).skipped == 1
    state, reason = _problems(kb)[huge.name]
    assert state == "skipped" and reason.startswith("document bomb: this .docx says it unpacks to")
    assert reason.endswith("over the limit of 200000000 ([ingest] max_extracted_bytes)")


@pytest.mark.parametrize(("kind", "member"), [
    ("docx", None), ("pptx", None), ("xlsx", None), ("odt", None), ("ods", None),
    ("epub", "OPS/content.opf"), ("docx", "[Content_Types].xml"),
])
def test_xml_entity_declarations_are_refused(kb: KnowledgeBase, tmp_path: Path, kind: str,
                                             member: str | None) -> None:
    """A "billion laughs" document type (1e9 "lol"s from a few hundred bytes) in any member the
    readers parse as XML: skipped with the reason before any parser sees it."""
    folder = tmp_path / "docs"
    folder.mkdir()
    bomb = write_bomb(folder / f"laughs.{kind}", kind, 0, prolog=LAUGHS, member=member)
    (folder / "note.md").write_text(NOTE + "\n")
    report = kb.ingest([folder])
    assert (report.added, report.skipped) == (1, 1)
    assert _problems(kb)[bomb.name][0] == "skipped"
    assert _problems(kb)[bomb.name][1].startswith(f"refused .{kind}: ")
    assert _problems(kb)[bomb.name][1].endswith(" declares XML entities (an entity-expansion "
                                                "bomb?)")


def test_an_svg_image_declaring_entities_is_not_refused(tmp_path: Path) -> None:
    """Illustrator's SVGs declare entities; an image inside a document is never parsed."""
    path = tmp_path / "with-svg.docx"
    shutil.copy(FIXTURES / "testWORD.docx", path)
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("word/media/image9.svg", b'<?xml version="1.0"?>' + LAUGHS + b"<svg/>")
    assert "sample Microsoft Word Document" in read_document(path).text


def test_an_entity_declaration_across_two_reads_is_found(tmp_path: Path) -> None:
    for offset in range(9):  # "<!ENTITY" cut after 0..8 of its bytes at the first 1 MB read
        path = tmp_path / f"split{offset}.odt"
        shutil.copy(FIXTURES / "example.odt", path)
        with zipfile.ZipFile(path, "a") as archive:
            archive.writestr("extra.xml", b" " * (MB - offset) + b'<!ENTITY x "y">')
        with pytest.raises(SkippedFile, match="extra.xml declares XML entities"):
            check_unpacked(path.read_bytes(), "odt", UnpackLimits())


def _lying_zip(path: Path, padding: int) -> None:
    """A .docx whose word/document.xml says it unpacks to 1 KB but holds `padding` spaces."""
    write_bomb(path, "docx", padding)
    with zipfile.ZipFile(path) as archive:
        start, local = archive.start_dir, archive.getinfo("word/document.xml").header_offset
    data = bytearray(path.read_bytes())
    entry = start
    while bytes(data[entry:entry + 4]) == b"PK\x01\x02":  # walk the central directory
        lengths = struct.unpack_from("<HHH", data, entry + 28)
        if data[entry + 46:entry + 46 + lengths[0]] == b"word/document.xml":
            struct.pack_into("<I", data, entry + 24, 1024)  # uncompressed size
            break
        entry += 46 + sum(lengths)
    else:
        raise AssertionError("word/document.xml not in the central directory")
    struct.pack_into("<I", data, local + 22, 1024)
    path.write_bytes(bytes(data))


def test_a_zip_header_that_lies_about_its_size_is_not_trusted(tmp_path: Path) -> None:
    """A member claiming 1 KB that holds 50 MB: zipfile would inflate all of it before cutting
    it to its claim (+100 MB measured through python-docx); it is counted in bounded reads and
    refused, and a small liar under every limit is refused for its forged header."""
    path = tmp_path / "liar.docx"
    _lying_zip(path, 50 * MB)
    assert zipfile.ZipFile(path).getinfo("word/document.xml").file_size == 1024
    with pytest.raises(SkippedFile) as raised:
        read_document(path, limits=UnpackLimits(max_bytes=4 * MB))
    assert raised.value.reason.startswith("document bomb: this .docx unpacks past ")
    growth, outcome = reader_growth(path, 20 * MB)
    assert outcome.startswith("document bomb: word/document.xml in this .docx unpacks to more "
                              "than "), outcome
    assert growth < RATIO_FLOOR, f"peak RSS grew by {growth / MB:.0f} MB on a lying 50 MB member"

    small = tmp_path / "small-liar.docx"
    _lying_zip(small, 2 * MB)
    with pytest.raises(SkippedFile, match=r"^document bomb: word/document.xml in this .docx "
                       r"unpacks to more than the 1024 bytes its header says \(a forged zip "
                       r"header\)$"):
        read_document(small)


def test_rejecting_a_bomb_takes_the_same_memory_whatever_its_size(tmp_path: Path) -> None:
    """Memory of the reader alone, in a fresh process, while refusing ratio bombs of 60 and
    120 MB (both under the 200 MB default, so they are unpacked until the ratio check stops
    them): far below either size, and no larger for the bigger bomb. A reader that unpacked a
    member whole (or parsed it) would grow by at least the member's size."""
    size = 60 * MB
    small = write_bomb(tmp_path / "small.docx", "docx", size)
    large = write_bomb(tmp_path / "large.docx", "docx", 2 * size)
    small_growth, small_outcome = reader_growth(small, 20 * MB)
    large_growth, large_outcome = reader_growth(large, 20 * MB)
    for outcome in (small_outcome, large_outcome):
        assert outcome.startswith("document bomb: word/document.xml in this .docx unpacks")
    assert small_growth < RATIO_FLOOR, f"{small_growth / MB:.1f} MB for a {size // MB} MB bomb"
    assert large_growth < RATIO_FLOOR, f"{large_growth / MB:.1f} MB for a {2 * size // MB} MB bomb"
    assert abs(large_growth - small_growth) < size / 10, (
        f"{small_growth / MB:.1f} MB, then {large_growth / MB:.1f} MB for twice the bomb")


def test_pdf_whose_page_unpacks_far_past_its_size_is_skipped(kb: KnowledgeBase,
                                                             tmp_path: Path) -> None:
    """A 30 KB PDF whose one page unpacks to 30 MB: skipped by its ratio before pypdf decodes
    the page; sample.pdf and a note beside it are indexed."""
    folder = tmp_path / "docs"
    folder.mkdir()
    ratio = write_pdf_bomb(folder / "ratio.pdf", 1, 30 * MB, sentence="The okapi grazes at dusk")
    assert ratio.stat().st_size < 100_000
    shutil.copy(FIXTURES.parent / "sample.pdf", folder / "sample.pdf")
    (folder / "note.md").write_text(NOTE + "\n")
    report = kb.ingest([folder])
    assert (report.added, report.skipped) == (2, 1)
    state, reason = _problems(kb)["ratio.pdf"]
    assert state == "skipped"
    assert reason.startswith("document bomb: a stream of page 1 of this PDF unpacks to more than")
    assert reason.endswith("(limit 100: [ingest] max_compression_ratio)")
    assert _top(kb, "walrus resting on the ice floe between dives") == "note.md"
    assert kb.query("okapi", mode="sparse")["results"] == []


def test_pdf_whose_pages_add_up_past_the_byte_limit_is_skipped(small_kb: KnowledgeBase,
                                                               tmp_path: Path) -> None:
    """Three pages of 2 MB each under a 4 MB limit: skipped; 3 x 0.5 MB is indexed."""
    folder = tmp_path / "docs"
    folder.mkdir()
    write_pdf_bomb(folder / "pages.pdf", 3, 2 * MB, sentence="The okapi grazes at dusk")
    write_pdf_bomb(folder / "ok.pdf", 3, MB // 2, sentence="The zebra drinks at dawn")
    report = small_kb.ingest([folder])
    assert (report.added, report.skipped) == (1, 1)
    state, reason = _problems(small_kb)["pages.pdf"]
    assert state == "skipped"
    assert reason.startswith("document bomb: this PDF's page streams unpack past ")
    assert reason.endswith(f"(page 2), over the limit of {SMALL_LIMIT} ([ingest] "
                           "max_extracted_bytes)")
    assert _top(small_kb, "zebra drinking at dawn") == "ok.pdf"
    assert small_kb.query("okapi", mode="sparse")["results"] == []


def test_rejecting_a_pdf_bomb_takes_the_same_memory_whatever_its_size(tmp_path: Path) -> None:
    """The reader alone, in a fresh process, refusing PDFs whose page unpacks to 60 and 120 MB:
    far below either size and no larger for the bigger one (pypdf decoding the page would hold
    it whole)."""
    size = 60 * MB
    small = write_pdf_bomb(tmp_path / "small.pdf", 1, size, sentence="The okapi")
    large = write_pdf_bomb(tmp_path / "large.pdf", 1, 2 * size, sentence="The okapi")
    small_growth, small_outcome = reader_growth(small, 20 * MB)
    large_growth, large_outcome = reader_growth(large, 20 * MB)
    for outcome in (small_outcome, large_outcome):
        assert outcome.startswith("document bomb: a stream of page 1 of this PDF unpacks")
    assert small_growth < RATIO_FLOOR and large_growth < RATIO_FLOOR, (small_growth, large_growth)
    assert abs(large_growth - small_growth) < size / 10


def test_daemon_skips_a_bomb_and_goes_on_with_the_next_file(config: Config, fake_embedder,
                                                          tmp_path: Path) -> None:
    folder = tmp_path / "watched"
    folder.mkdir()
    settings = (config.replace("watch", folders=[str(folder)], quiet_period_s=0.2)
                .replace("ingest", max_extracted_bytes=SMALL_LIMIT).replace("api", port=0))
    daemon = Daemon(settings, embedder=fake_embedder)
    daemon.start()
    try:
        bomb = folder / "bomb.xlsx"  # written beside, then moved in whole
        write_bomb(tmp_path / "bomb.xlsx", "xlsx", 6 * SMALL_LIMIT).replace(bomb)
        (folder / "note.md").write_text(NOTE + "\n")

        def problems() -> dict[str, tuple[str, str]]:
            code, body = api(daemon, "GET", "/api/status")
            assert code == 200, body
            return {p["path"]: (p["state"], p["reason"]) for p in body["problems"]}

        state, reason = wait_for(lambda: problems().get(str(bomb)))
        assert state == "skipped" and reason.startswith("document bomb: this .xlsx says")

        def found() -> bool:
            code, body = api(daemon, "POST", "/api/query", {"text": "walrus", "mode": "sparse"})
            return [r["source"] for r in body["results"]] == [str(folder / "note.md")]

        wait_for(found)
        code, health = api(daemon, "GET", "/api/health")
        assert code == 200 and health["ok"] is True
    finally:
        daemon.stop()


def test_a_damaged_member_no_reader_needs_does_not_lose_the_document(tmp_path: Path) -> None:
    """The bounded pre-read skips a member that fails its checksum (an unused image): the
    reader decides, as before, and the text is read."""
    path = tmp_path / "bad-image.docx"
    shutil.copy(FIXTURES / "testWORD.docx", path)
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("word/media/unused.png", b"\x89PNG" + bytes(5000))
    data = bytearray(path.read_bytes())
    png = data.index(b"\x89PNG")
    data[png + 100] ^= 0xFF  # stored, so the byte flip only breaks its CRC
    path.write_bytes(bytes(data))
    with zipfile.ZipFile(path) as archive:
        assert archive.testzip() == "word/media/unused.png"
    assert "sample Microsoft Word Document" in read_document(path).text
