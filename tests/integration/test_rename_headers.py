"""A renamed file's chunks that had its name as their header get the new name, in BM25 and in
their vectors; chunks whose header does not depend on the name keep theirs (real model)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase
from psirag_kb.storage.records import indexed_text

INTRO = ("The climb took six days from the rainforest gate, and every evening the porters "
         "sang while the cooks boiled water for tea and soup at the camp.")
ROUTE = ("The path zigzags over volcanic scree above the last hut, and the guides set off "
         "at midnight so that the summit is reached before the clouds rise.")
GEAR = ("Warm gloves, a down jacket and a headlamp with spare batteries matter more than "
        "anything else, because the final night is bitterly cold and dark.")
NOTE = f"{INTRO}\n\n# Route\n\n{ROUTE}\n\n# Gear\n\n{GEAR}\n"


def chunks(kb: KnowledgeBase) -> dict[int, tuple[str, str]]:
    """(context, text) of every chunk, by id."""
    return {i: (context, text) for i, context, text in kb.stores.store.db.cursor().execute(
        "SELECT id, context, text FROM chunks").fetchall()}


def sparse_names(kb: KnowledgeBase, words: str) -> set[str]:
    return {Path(r["path"]).name for r in kb.query(words, mode="sparse", k=10)["results"]}


def check_renamed(kb: KnowledgeBase, minilm, before: dict[int, tuple[str, str]]) -> None:
    """The name headers say "matterhorn" (new chunks, embedded with it), the others are kept,
    and only the new name finds the note through its header."""
    after = chunks(kb)
    named = {i for i, (context, _) in before.items() if context == "kilimanjaro"}
    others = set(before) - named
    assert named and others
    assert others <= set(after) and not named & set(after)  # kept ids, new ids
    fresh = sorted(set(after) - others)
    assert [after[i][0] for i in fresh] == ["matterhorn"] * len(named)
    assert {after[i][1] for i in fresh} == {before[i][1] for i in named}
    texts = [indexed_text(*after[i]) for i in fresh]
    assert np.allclose(kb.stores.store.vectors(np.array(fresh)), minilm.embed(texts), atol=1e-5)
    assert np.allclose(kb.stores.dense.get(np.array(fresh)), minilm.embed(texts), atol=1e-5)
    assert sparse_names(kb, "kilimanjaro") == set()
    assert sparse_names(kb, "matterhorn") == {"matterhorn.md"}


def test_an_ingest_that_finds_a_renamed_file_refreshes_its_name_headers(
        config: Config, minilm, tmp_path: Path) -> None:
    folder = tmp_path / "trips"
    folder.mkdir()
    (folder / "kilimanjaro.md").write_text(NOTE)
    config = config.replace("ingest", chunk_tokens=40)
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([folder])
        before = chunks(kb)
        assert sparse_names(kb, "kilimanjaro") == {"kilimanjaro.md"}
        os.rename(folder / "kilimanjaro.md", folder / "matterhorn.md")
        report = kb.ingest([folder])
        assert report.renamed == 1 and report.chunks_embedded == 1
        check_renamed(kb, minilm, before)
        assert kb.ingest([folder]).unchanged == 1


def test_a_rename_refreshes_the_name_headers(config: Config, minilm, tmp_path: Path) -> None:
    folder = tmp_path / "trips"
    folder.mkdir()
    (folder / "kilimanjaro.md").write_text(NOTE)
    config = config.replace("ingest", chunk_tokens=40)
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([folder])
        before = chunks(kb)
        os.rename(folder / "kilimanjaro.md", folder / "matterhorn.md")
        assert kb.rename(folder / "kilimanjaro.md", folder / "matterhorn.md")
        check_renamed(kb, minilm, before)
        assert kb.stores.store.file(str(folder / "matterhorn.md")).hash  # read again: not pending
        for mode in ("dense", "hybrid"):
            top = kb.query("matterhorn", mode=mode, k=1)["results"][0]
            assert top["text"].startswith(INTRO), mode


def test_a_move_that_keeps_the_name_keeps_every_vector(config: Config, minilm,
                                                       tmp_path: Path) -> None:
    folder = tmp_path / "trips"
    (folder / "done").mkdir(parents=True)
    (folder / "kilimanjaro.md").write_text(NOTE)
    config = config.replace("ingest", chunk_tokens=40)
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([folder])
        before = chunks(kb)
        os.rename(folder / "kilimanjaro.md", folder / "done" / "kilimanjaro.md")
        report = kb.ingest([folder])
        assert (report.renamed, report.unchanged, report.chunks_embedded) == (1, 1, 0)
        assert chunks(kb) == before
