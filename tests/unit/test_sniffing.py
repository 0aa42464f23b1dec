"""Files known by their content: text without a known suffix, legacy encodings, binary content,
archives, and compressed documents read by their inner name within the unpacking bounds."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import shutil
import time
import tracemalloc
import zlib
from pathlib import Path

import pytest

from psirag_kb.config import Config, parse_config
from psirag_kb.errors import ConfigError, FileReadError, SkippedFile
from psirag_kb.ingest import documents
from psirag_kb.ingest.documents import (
    SNIFFED,
    decode_text,
    kind_of,
    read_document,
    unread_reason,
)
from psirag_kb.ingest.filetypes import SNIFF_BYTES
from psirag_kb.ingest.formats.bounds import UnpackLimits
from psirag_kb.ingest.formats.compressed import zstd_available

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TEXTFILES = FIXTURES / "textfiles"
OLD = time.time() - 3600


def write(path: Path, data: bytes | str) -> Path:
    """Write a file, modified an hour ago (not being written)."""
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    os.utime(path, (OLD, OLD))
    return path


def skip_reason(path: Path, **kwargs: object) -> str:
    """The reason read_document gives for skipping a file (a file read raises the test)."""
    with pytest.raises(SkippedFile) as info:
        read_document(path, **kwargs)  # type: ignore[arg-type]
    return info.value.reason


# -- text by content -----------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "codec", "recorded"), [
    ("tutor.ja.sjis", "shift_jis", {"cp932", "shift_jis"}),
    ("tutor.cs.cp1250", "cp1250", {"cp1250"}),
    ("tutor.ko.euc", "euc_kr", {"cp949", "euc_kr"}),
    ("tutor.zh.euc", "gb2312", {"gb18030", "gb2312", "gbk"}),
])
def test_legacy_encodings_are_detected(tmp_path: Path, name: str, codec: str,
                                       recorded: set[str]) -> None:
    source = TEXTFILES / "tutor" / name
    path = shutil.copy(source, tmp_path / name)
    doc = read_document(Path(path))
    assert doc.kind == "text" and doc.encoding in recorded
    assert doc.text == source.read_bytes().decode(doc.encoding)
    # the detected codec may be a superset of the named one (GB18030 for GB2312), which maps a
    # few punctuation marks apart (U+2015 for U+2014): the text is otherwise the same
    named = source.read_bytes().decode(codec)
    assert len(named) == len(doc.text)
    assert sum(a != b for a, b in zip(named, doc.text, strict=True)) <= len(named) // 200


def test_a_txt_in_windows_1250_reads_as_1250_not_1252(tmp_path: Path) -> None:
    # Before: every non-UTF-8 .txt was tried as Windows-1252, so Czech came out as "è" for "č".
    data = (TEXTFILES / "tutor" / "tutor.cs.cp1250").read_bytes()
    doc = read_document(write(tmp_path / "lekce.txt", data))
    assert doc.encoding == "cp1250"
    assert "č" in doc.text and "è" not in doc.text


@pytest.mark.parametrize("name", ["copyright", "README.Debian", "git-contacts",
                                  "diff-highlight.perl"])
def test_debian_docs_and_dotless_scripts_are_text(tmp_path: Path, name: str) -> None:
    source = TEXTFILES / "git" / name
    path = Path(shutil.copy(source, tmp_path / name))
    assert unread_reason(path) is None
    doc = read_document(path)
    assert doc.text == source.read_text(encoding="utf-8")
    assert doc.encoding == "utf-8"


def test_notes_without_a_known_suffix_are_text(tmp_path: Path) -> None:
    for name in ("todo", "meeting.2026-03", "server.log", "NOTES.old"):
        doc = read_document(write(tmp_path / name, "Ask Marta about the boiler.\n"))
        assert doc.text == "Ask Marta about the boiler.\n" and doc.kind == "text"


@pytest.mark.parametrize(("data", "reason"), [
    (b"\x7fELF\x02\x01\x01" + bytes(300), "binary content (an ELF program)"),
    (b"header\x00\x01\x02" * 50, "binary content (NUL bytes)"),
    (bytes(range(1, 9)) * 500, "binary content (control characters)"),
    (b"PK\x03\x04" + b"x" * 300, "binary content (a zip archive)"),
    (b"SQLite format 3\x00" + bytes(200), "binary content (an SQLite database)"),
])
def test_binary_content_is_skipped_with_its_reason(tmp_path: Path, data: bytes,
                                                   reason: str) -> None:
    path = write(tmp_path / "blob", data)
    assert unread_reason(path) == reason
    assert skip_reason(path) == reason


def test_only_a_prefix_of_a_huge_binary_is_read(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "disk.img2"
    with open(path, "wb") as fh:
        fh.truncate(500_000_000)  # sparse zeros
    reads: list[int] = []
    real_open = open

    class Counting:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def read(self, size: int = -1) -> bytes:
            reads.append(size)
            return self.handle.read(size)

    monkeypatch.setattr(documents, "open",
                        lambda *a, **k: Counting(real_open(*a, **k)), raising=False)
    assert unread_reason(path) == "binary content (NUL bytes)"
    assert reads == [SNIFF_BYTES]


@pytest.mark.parametrize(("name", "reason"), [
    ("photo.png", "unsupported file type .png (an image)"),
    ("font.woff2", "unsupported file type .woff2 (a font)"),
    ("tool.exe", "unsupported file type .exe (a program or library)"),
    ("old.doc", "unsupported file type .doc (a document format that is not read)"),
    ("cache.sqlite", "unsupported file type .sqlite (binary data)"),
])
def test_known_binary_types_are_never_sniffed(tmp_path: Path, name: str, reason: str) -> None:
    path = write(tmp_path / name, "this is text, but the name says otherwise\n")
    assert kind_of(path) is None
    assert unread_reason(path) == reason == skip_reason(path)


@pytest.mark.parametrize("name", ["src.tar.gz", "src.tgz", "photos.zip", "logs.tar.xz",
                                  "backup.7z", "data.tar"])
def test_archives_of_many_files_stay_skipped_and_say_so(tmp_path: Path, name: str) -> None:
    path = write(tmp_path / name, gzip.compress(b"x" * 100))
    reason = unread_reason(path)
    assert reason is not None and reason.startswith("archive of many files")
    assert "not unpacked" in reason and skip_reason(path) == reason


def test_extensions_override_the_content_and_the_name(tmp_path: Path) -> None:
    config = parse_config({"ingest": {"extensions": [".dat=skip", ".nfo", ".inc=code"]}},
                          tmp_path)
    overrides = config.ingest.extension_kinds
    assert overrides == {".dat": "skip", ".nfo": "text", ".inc": "code"}
    assert kind_of(tmp_path / "a.nfo", overrides) == "text"
    assert kind_of(tmp_path / "a.inc", overrides) == "code"
    assert kind_of(tmp_path / "a.nfo") == SNIFFED
    dat = write(tmp_path / "values.dat", "1 2 3\n")
    assert unread_reason(dat, overrides) == "file type .dat is skipped ([ingest] extensions)"
    assert read_document(dat).text == "1 2 3\n"  # without the override its content decides
    for bad in ([".dat=image"], ["dat"]):
        with pytest.raises(ConfigError, match="extensions"):
            parse_config({"ingest": {"extensions": bad}}, tmp_path)
    assert Config().ingest.extension_kinds == {}


def test_a_pdf_without_a_suffix_is_read_as_a_pdf(tmp_path: Path) -> None:
    path = write(tmp_path / "scan-2026-03", (FIXTURES / "sample.pdf").read_bytes())
    assert unread_reason(path) is None
    assert read_document(path, ocr=False).kind == "pdf"


def test_decode_text_names_the_encoding() -> None:
    assert decode_text("naïve".encode()) == ("naïve", "utf-8")
    assert decode_text(b"\xef\xbb\xbfbom") == ("bom", "utf-8")
    text = "Café au lait – “naïve” résumé\n"
    assert decode_text(text.encode("cp1252")) == (text, "cp1252")


# -- compressed documents ------------------------------------------------------------------------


COMPRESSORS = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress}
TEXT = "The heat pump's defrost cycle runs every ninety minutes in winter.\n" * 20


@pytest.mark.parametrize("suffix", [*COMPRESSORS, ".zst"])
def test_compressed_text_is_read_by_its_inner_name(tmp_path: Path, suffix: str) -> None:
    if suffix == ".zst":
        if not zstd_available():
            path = write(tmp_path / "notes.txt.zst", b"(\xb5/\xfd" + bytes(20))
            assert "install the zstandard package" in skip_reason(path)
            return
        import zstandard

        compress = zstandard.ZstdCompressor().compress
    else:
        compress = COMPRESSORS[suffix]
    doc = read_document(write(tmp_path / f"notes.md{suffix}", compress(("# Heating\n" + TEXT)
                                                                      .encode())))
    assert doc.kind == "markdown" and [h.text for h in doc.headings] == ["Heating"]
    assert doc.text.count("defrost") == 20
    changelog = read_document(write(tmp_path / f"changelog.Debian{suffix}",
                                    compress(TEXT.encode("cp1252"))))
    assert changelog.kind == "text" and changelog.text == TEXT


def test_a_gzipped_pdf_is_a_pdf(tmp_path: Path) -> None:
    data = gzip.compress((FIXTURES / "sample.pdf").read_bytes())
    doc = read_document(write(tmp_path / "manual.pdf.gz", data), ocr=False)
    plain = read_document(FIXTURES / "sample.pdf", ocr=False)
    assert doc.kind == "pdf" and doc.text == plain.text and doc.pages == plain.pages


def test_every_member_of_a_gzip_file_is_read(tmp_path: Path) -> None:
    data = gzip.compress(b"first member\n") + gzip.compress(b"second member\n")
    assert read_document(write(tmp_path / "log.gz", data)).text == "first member\nsecond member\n"


def test_binary_inside_compression_is_skipped(tmp_path: Path) -> None:
    path = write(tmp_path / "core.gz", gzip.compress(b"\x7fELF" + bytes(500)))
    assert unread_reason(path) is None  # judged once decompressed
    assert skip_reason(path) == "binary content (an ELF program)"


def test_damaged_and_truncated_compression(tmp_path: Path) -> None:
    data = gzip.compress(TEXT.encode() * 50)
    cut = write(tmp_path / "cut.txt.gz", data[: len(data) // 2])
    assert skip_reason(cut) == "gzip data is cut short (truncated file)"
    fresh = tmp_path / "fresh.txt.gz"
    fresh.write_bytes(data[: len(data) // 2])  # just written: its writer may not be done
    with pytest.raises(FileReadError, match="will retry"):
        read_document(fresh)
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    reason = skip_reason(write(tmp_path / "flipped.txt.gz", bytes(flipped)))
    assert reason.startswith("damaged gzip data")
    assert skip_reason(write(tmp_path / "noise.xz", b"not xz at all")).startswith(
        "damaged xz data")


def _zeros_gzip(path: Path, size: int) -> Path:
    """A gzip file of `size` zero bytes, written without holding them."""
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    block = bytes(1 << 20)
    with open(path, "wb") as fh:
        for _ in range(size >> 20):
            fh.write(packer.compress(block))
        fh.write(packer.flush())
    os.utime(path, (OLD, OLD))
    return path


def _peak(path: Path, **kwargs: object) -> tuple[str, int]:
    """The skip reason of a file and the peak of memory allocated while reading it."""
    tracemalloc.start()
    try:
        reason = skip_reason(path, **kwargs)
        return reason, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_compression_bomb_is_refused_with_flat_memory(tmp_path: Path) -> None:
    bomb = _zeros_gzip(tmp_path / "bomb.txt.gz", 1 << 30)  # 1 GiB of zeros in about 1 MB
    assert bomb.stat().st_size < 2_000_000
    reason, peak = _peak(bomb)
    assert reason == "compressed file unpacks past 20000000 bytes ([ingest] max_file_bytes)"
    assert peak < 64_000_000, peak  # stopped past 20 MB of the 1 GiB
    # Allowed more than that, the ratio check stops it once 10 MB come at over 100 times the
    # packed size.
    reason, peak = _peak(bomb, max_bytes=1 << 31)
    assert reason.startswith("compression bomb: this gzip file unpacks to more than")
    assert "[ingest] max_compression_ratio" in reason
    assert peak < 400_000_000, peak  # 100 times the packed size of 1 MB, not 1 GiB
    small = _zeros_gzip(tmp_path / "small-bomb.txt.gz", 64 << 20)  # 64 MB in 64 KB
    reason, peak = _peak(small, max_bytes=1 << 31)
    assert reason.startswith("compression bomb") and peak < 40_000_000, (reason, peak)


def test_a_compressed_file_past_the_size_limits_is_skipped(tmp_path: Path) -> None:
    data = gzip.compress(os.urandom(1 << 20))  # does not compress: no bomb, just large
    path = write(tmp_path / "big.log.gz", data)
    assert skip_reason(path, max_bytes=2_000_000,
                       limits=UnpackLimits(max_bytes=500_000)) == (
        "compressed file unpacks past 500000 bytes ([ingest] max_extracted_bytes)")
    small = write(tmp_path / "small.log.gz", gzip.compress(TEXT.encode() * 100))
    assert skip_reason(small, max_bytes=1000).startswith(
        "compressed file unpacks past 1000 bytes ([ingest] max_file_bytes)")


def test_a_compressed_file_is_judged_by_its_inner_name(tmp_path: Path) -> None:
    overrides = {".dat": "skip"}
    assert unread_reason(tmp_path / "values.dat.gz", overrides) == (
        "file type .dat is skipped ([ingest] extensions)")
    assert unread_reason(tmp_path / "photo.png.xz") == "unsupported file type .png (an image)"
    assert unread_reason(tmp_path / "twice.txt.gz.gz") == (
        "compressed twice (.gz inside .gz): not read")
    assert kind_of(tmp_path / "ls.1.gz") == "man" and kind_of(tmp_path / "a.pdf.bz2") == "pdf"


RUSSIAN = ("Вчера вечером мы долго гуляли по набережной и говорили о том, как провести отпуск. "
           "Сестра хочет поехать на море, а я предпочитаю горы и тихие деревни.\n") * 3
SPANISH = ("¿Dónde está la señora Muñoz? El niño quiere enseñarle el año que pasó en España. "
           "Mañana iremos a la montaña con el señor Ibáñez y su pequeña compañía.\n") * 3
POLISH = ("Zażółć gęślą jaźń. W Łodzi pada deszcz, a w Gdańsku świeci słońce nad morzem. "
          "Ślusarz naprawił zamek w drzwiach kuchennych.\n") * 3
HUNGARIAN = ("Győri Ödön tűzoltó különös módon ünnepelte a hosszú őszi estéket a kőhíd mellett. "
             "A szőlőművelés és a gyümölcstermesztés fő vidékei itt találhatók.\n") * 3


@pytest.mark.parametrize(("text", "codec"), [
    (RUSSIAN, "cp1251"), (RUSSIAN, "koi8_r"), (SPANISH, "cp1252"), (SPANISH, "latin_1"),
    (POLISH, "cp1250"), (POLISH, "iso8859_2"), (HUNGARIAN, "cp1250"), (HUNGARIAN, "iso8859_2"),
])
def test_a_few_sentences_decode_exactly(text: str, codec: str) -> None:
    # Latin code pages that decode the same bytes tie in the detector: Spanish must not come
    # out in Windows-1250 (ñ as ń) nor Polish in ISO-8859-10 (ł as ŗ)
    decoded, _ = decode_text(text.encode(codec))
    assert decoded == text
