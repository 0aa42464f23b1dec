"""The tree never mixes readers: partitioned at grant boundaries, with the real model, DuckDB,
Tantivy and hnswlib over real files.

Three folders of different topics each carry a marker word (KRAKNOVA, ZEPHYRINE, QUILLON), and
each holds a near-twin of the same hiking diaries that differs only by the marker: an
unpartitioned tree pairs the twins under abstract nodes whose abstracts name two markers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from waiting import wait_until

from psirag_kb.access import Access
from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase
from psirag_kb.people import People

MARKERS = {"eng": "Kraknova", "hr": "Zephyrine", "ops": "Quillon"}
TOPICS = {"eng": "the volcano erupted and lava flows poured down the slope",
          "hr": "the payroll review and holiday allowance were approved",
          "ops": "the delivery trucks were loaded at the harbour warehouse"}
LAKES = ["blue lake", "alpine meadow", "glacier lake", "birch grove", "old quarry", "river ford"]


def write_corpus(root: Path) -> None:
    """Topic notes and marker-only twins of the same diaries in three folders."""
    for folder, marker in MARKERS.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        for i in range(10):
            (root / folder / f"note{i}.md").write_text(
                f"{marker} note {i}: {TOPICS[folder]}; {marker} wrote it down on day {i}.\n")
        for i, lake in enumerate(LAKES):
            (root / folder / f"day{i}.md").write_text(
                f"Hiking diary, day {i + 1}, written by {marker}. We walked to the {lake}, "
                f"stopped for lunch by the water at the {lake} and slept beside the {lake}.\n")


def folder_of(path: str) -> str:
    """The top folder under docs/ that holds a file."""
    parts = Path(path).parts
    return parts[len(parts) - 1 - parts[::-1].index("docs") + 1]


def paths_of(kb: KnowledgeBase, ids) -> dict[int, str]:
    """The file path of each chunk."""
    return {i: hit.path for i, hit in kb.stores.store.hits([int(i) for i in ids]).items()}


def join_of(kb: KnowledgeBase) -> int:
    """The layer up to which the tree is partitioned (1 for a tree that is not: its leaves'
    parents must not mix folders either)."""
    return getattr(kb.stores.tree_index.live, "join", None) or 1


def leaves_below(view, key: int) -> list[int]:
    """Chunk ids under a node of the published view."""
    out, stack = [], [key]
    while stack:
        node = stack.pop()
        if node < 0:
            out.append(-node)
        else:
            stack.extend(view.nodes[node].children)
    return out


def mixing_nodes(kb: KnowledgeBase, join: int) -> list[tuple[int, set[str]]]:
    """Nodes on or below the join layer whose leaves lie in more than one folder."""
    view = kb.stores.tree_index.view
    found = []
    for key, info in view.nodes.items():
        if info.layer > join:
            continue
        paths = paths_of(kb, leaves_below(view, key))
        folders = {folder_of(p) for p in paths.values()}
        if len(folders) > 1:
            found.append((key, folders))
    return found


def markers_in(text: str) -> set[str]:
    return {folder for folder, marker in MARKERS.items() if marker.lower() in text.lower()}


def open_kb(root: Path, data: Path, minilm, grants: list[str] | None) -> KnowledgeBase:
    data.mkdir(parents=True, exist_ok=True)
    people = People(data)
    for number, grant in enumerate(grants or []):
        people.add(f"p{number}", "reader", [grant])
    return KnowledgeBase(Config().with_data_dir(data), embedder=minilm)


@pytest.fixture(scope="module")
def docs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("parts") / "docs"
    write_corpus(root)
    return root


@pytest.fixture(scope="module")
def kb(tmp_path_factory, docs, minilm):
    grants = [str(docs / "eng"), str(docs / "hr"), str(docs / "ops")]
    kb = open_kb(docs, tmp_path_factory.mktemp("data") / "data", minilm, grants)
    kb.ingest([docs])
    kb.regenerate_abstracts(offline=True)
    yield kb
    kb.close()


def test_no_node_below_the_join_layer_mixes_folders(kb):
    join = join_of(kb)
    assert mixing_nodes(kb, join) == []
    assert kb.stores.tree_index.problems() == []


def test_abstracts_below_the_partition_roots_name_only_their_own_folder(kb):
    view = kb.stores.tree_index.view
    join = join_of(kb)
    checked = 0
    for key, info in view.nodes.items():
        if info.layer > join or not info.abstract:
            continue
        paths = paths_of(kb, leaves_below(view, key))
        own = {folder_of(p) for p in paths.values()}
        assert markers_in(info.abstract) <= own, (key, info.abstract)
        checked += 1
    assert checked >= 3


@pytest.mark.parametrize("folder", ["eng", "hr"])
def test_a_reader_browses_their_partition_subtree_and_its_abstracts(kb, docs, folder):
    person = Access("ann", "reader", (str(docs / folder),))
    root = kb.node(access=person)
    kids = root["children"]
    assert kids and all(kid["kind"] == "node" for kid in kids)
    readable = len(paths_of(kb, kb.stores.tree_index.chunk_ids()))
    mine = sum(1 for p in paths_of(kb, kb.stores.tree_index.chunk_ids()).values()
               if folder_of(p) == folder)
    assert 0 < mine < readable
    assert sum(kid["leaves"] for kid in kids) == mine
    for kid in kids:
        assert markers_in(kid["abstract"]) <= {folder}
        below = kb.node(kid["id"], access=person)
        assert all(markers_in(c["abstract"]) <= {folder} for c in below["children"])
    assert any(markers_in(kid["abstract"]) == {folder} for kid in kids)


def test_a_new_file_joins_its_partitions_subtree(kb, docs):
    (docs / "hr" / "late.md").write_text(
        "Zephyrine note: the payroll review of the late contractors was approved today.\n")
    kb.ingest([docs])
    join = join_of(kb)
    assert mixing_nodes(kb, join) == []
    new = [i for i, p in paths_of(kb, kb.stores.tree_index.chunk_ids()).items()
           if p.endswith("late.md")]
    path = kb.path_of(new[0])
    under_join = [n for n in path if n["layer"] <= join]
    assert len(under_join) == join
    top = under_join[0]["id"]
    # beside other hr leaves, not alone
    assert len(leaves_below(kb.stores.tree_index.view, top)) > 1


def test_a_file_moved_to_another_partition_leaves_its_old_subtree(kb, docs):
    old, new = docs / "eng" / "note3.md", docs / "ops" / "moved" / "note3.md"
    new.parent.mkdir()
    old.rename(new)  # the same name: its chunks and leaves stay, only their path changes
    assert kb.rename(old, new)

    def parted() -> bool:
        assert len(kb.query("volcano lava", k=3)["results"]) == 3  # queries go on meanwhile
        return not (kb.tree_status().get("splitting") or mixing_nodes(kb, join_of(kb)))

    wait_until(parted, 120, 0.2, "the moved file out of the nodes it shared with eng/")
    assert kb.tree_status()["state"] == "ok"


def test_a_boundary_added_later_splits_the_tree_in_the_background(tmp_path, docs, minilm):
    kb = open_kb(docs, tmp_path / "data", minilm, None)
    try:
        kb.ingest([docs])
        assert mixing_nodes(kb, join_of(kb))  # twins share nodes: one partition
        assert kb.set_boundaries([str(docs / "eng"), str(docs / "hr")])

        def split() -> bool:  # queries go on with the current tree
            assert len(kb.query("hiking diary by the lake", k=3)["results"]) == 3
            return not kb.tree_status().get("splitting")

        wait_until(split, 120, 0.0, "the split")
        assert kb.tree_status()["state"] == "ok"
        assert mixing_nodes(kb, join_of(kb)) == []
        assert len(kb.query("hiking diary by the lake", k=3, mode="tree")["results"]) == 3
        assert not kb.set_boundaries([str(docs / "eng"), str(docs / "hr")])  # nothing to split
    finally:
        kb.close()
    with open_kb(docs, tmp_path / "data", minilm, None) as again:  # the split was stored
        assert again.stores.tree_index.live.join is not None
        assert mixing_nodes(again, join_of(again)) == []


def test_each_watched_folder_is_a_subtree_of_its_own(tmp_path, docs, minilm):
    roots = (docs / "eng", docs / "hr")
    config = Config().with_data_dir(tmp_path / "data").replace("watch", folders=roots)
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest(list(roots))
        assert mixing_nodes(kb, join_of(kb)) == []
