"""The tree's rows in DuckDB: the nodes and leaves tables written from and read into a LiveTree.

Every function takes the `Store` whose connection holds the tables; writes run on its owner
thread inside a transaction (`save_tree` opens its own).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import duckdb
import numpy as np

from psirag_kb.storage.store import Store, TreeUpdate
from psirag_kb.tree import kept
from psirag_kb.tree.live import LeafLookup, LiveTree

LiveUpdate = Callable[[np.ndarray, np.ndarray, np.ndarray], "LiveTree | None"]
"""update(added chunk ids, their vectors, removed chunk ids) -> the tree to write, or None."""


def writing(store: Store, update: LiveUpdate) -> TreeUpdate:
    """A `tree_update` for `Store.apply` and `Store.merge_duplicates`: the tree's update, then
    its changed rows written into the same transaction."""
    def update_and_write(added: np.ndarray, vectors: np.ndarray, removed: np.ndarray) -> None:
        live = update(added, vectors, removed)
        if live is not None:
            write_tree(store, live)
    return update_and_write


def write_tree(store: Store, live: LiveTree, full: bool = False) -> None:
    """Write the tree's changed rows (all rows when `full`); call inside a transaction.

    The tree keeps its list of changes: the caller clears it once the transaction commits.
    """
    db = store.db
    touched, dropped = live.changes()
    if full:
        db.execute("DELETE FROM nodes")
        db.execute("DELETE FROM leaves")
        touched = set(live.children)
        _write_all_leaves(db, live)
    else:
        _delete_rows(db, sorted(touched | dropped))
    abstract = sorted(n for n in touched if n > 0)
    leaves = sorted(-n for n in touched if n < 0)
    if abstract:
        _write_nodes(db, live, abstract, store.dim)
    if leaves and not full:
        _write_leaves(db, live, leaves)
    db.execute("UPDATE meta SET value = ? WHERE key = ?", [str(live.next_id), "next_node_id"])
    if live.join is not None and str(live.join) != _meta(db, "partition_join"):
        db.execute("DELETE FROM meta WHERE key = 'partition_join'")
        db.execute("INSERT INTO meta VALUES ('partition_join', ?)", [str(live.join)])


def _meta(db: duckdb.DuckDBPyConnection, key: str) -> str:
    """One meta value ('' when the key is missing)."""
    row = db.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
    return row[0] if row else ""


def _delete_rows(db: duckdb.DuckDBPyConnection, gone: list[int]) -> None:
    """Delete the rows of these tree keys (abstract node ids, negated chunk ids for leaves)."""
    abstract_gone = [n for n in gone if n > 0]
    leaves_gone = [-n for n in gone if n < 0]
    if abstract_gone:
        db.execute("DELETE FROM nodes WHERE id IN (SELECT unnest(?::BIGINT[]))",
                   [abstract_gone])
    if leaves_gone:
        db.execute(
            "DELETE FROM leaves WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))",
            [leaves_gone])


def _write_nodes(db: duckdb.DuckDBPyConnection, live: LiveTree, abstract: list[int],
                 dim: int) -> None:
    """Insert the rows of these abstract nodes, built as arrays."""
    vectors = np.empty(len(abstract), dtype=object)
    abstract_vectors = np.empty(len(abstract), dtype=object)
    for i, node in enumerate(abstract):
        vectors[i] = live.vectors[node]
        abstract_vectors[i] = live.abstract_vectors.get(node)
    db.register("tree_nodes", {
        "id": np.array(abstract, dtype=np.int64),
        "parent": np.array([live.parent.get(n, -1) for n in abstract], dtype=np.int64),
        "layer": np.array([live.layer[n] for n in abstract], dtype=np.int64),
        "ord": np.array([live.order_of(n) for n in abstract], dtype=np.int64),
        "vector": vectors,
        "abstract": np.array([live.abstracts.get(n) for n in abstract], dtype=object),
        "dirty": np.array([n in live.dirty for n in abstract], dtype=bool),
        "abstract_vector": abstract_vectors,
        "label": np.array([live.labels.get(n) for n in abstract], dtype=object),
    })
    try:
        db.execute(
            f"""INSERT INTO nodes (id, parent, layer, ord, vector, abstract, dirty,
                abstract_vector, label)
                SELECT id, CASE WHEN parent < 0 THEN NULL ELSE parent END,
                CAST(layer AS INTEGER), CAST(ord AS INTEGER),
                CAST(vector AS FLOAT[{dim}]), abstract, dirty,
                CAST(abstract_vector AS FLOAT[{dim}]), label FROM tree_nodes"""
        )
    finally:
        db.unregister("tree_nodes")


def _write_leaves(db: duckdb.DuckDBPyConnection, live: LiveTree, leaves: list[int]) -> None:
    """Insert the rows of these leaves (chunk ids)."""
    keys = [-c for c in leaves]
    _insert_leaves(db, np.array(leaves, dtype=np.int64),
                   np.array([live.parent.get(k, -1) for k in keys], dtype=np.int64),
                   np.array([live.order_of(k) for k in keys], dtype=np.int64))


def _write_all_leaves(db: duckdb.DuckDBPyConnection, live: LiveTree) -> None:
    """Insert every leaf row (the table is empty), built as arrays."""
    ids: list[int] = []
    parents: list[int] = []
    order: list[int] = []
    if live.root is not None and live.root < 0:
        ids, parents, order = [live.root], [-1], [0]
    for node, kids in live.children.items():
        if live.layer[node] == 1:
            ids.extend(kids)
            parents.extend([node] * len(kids))
            order.extend(range(len(kids)))
    if not ids:
        return
    _insert_leaves(db, -np.asarray(ids, dtype=np.int64), np.asarray(parents, dtype=np.int64),
                   np.asarray(order, dtype=np.int64))


def _insert_leaves(db: duckdb.DuckDBPyConnection, chunk_ids: np.ndarray, parents: np.ndarray,
                   order: np.ndarray) -> None:
    """Insert leaf rows from arrays (a parent below 0 is the root's NULL)."""
    db.register("tree_leaves", {"chunk_id": chunk_ids, "parent": parents, "ord": order})
    try:
        db.execute(
            """INSERT INTO leaves SELECT chunk_id,
                CASE WHEN parent < 0 THEN NULL ELSE parent END, CAST(ord AS INTEGER)
                FROM tree_leaves"""
        )
    finally:
        db.unregister("tree_leaves")


def save_tree(store: Store, live: LiveTree) -> None:
    """Replace the whole stored tree in one transaction, which also drops the abstracts a
    reembed kept for the new tree (given out to its nodes by then)."""
    with store.transaction() as db:
        write_tree(store, live, full=True)
        kept.drop(db)
    live.clear_changes()


def load_tree(store: Store, max_children: int, lookup: LeafLookup | None = None
              ) -> tuple[LiveTree | None, list[str]]:
    """The stored tree and what is wrong with it: (None, []) when there is none, (None,
    problems) when it does not fit the chunks. Checked with array operations only."""
    db = store.reader()
    nodes = db.execute(
        "SELECT id, coalesce(parent, -1) AS parent, layer, ord, abstract, dirty, vector, "
        "abstract_vector, label FROM nodes"
    ).fetchnumpy()
    leaves = db.execute(
        "SELECT chunk_id, coalesce(parent, -1) AS parent, ord FROM leaves"
    ).fetchnumpy()
    leaf_ids = np.asarray(leaves["chunk_id"], np.int64)
    if len(leaf_ids) == 0:
        return None, []
    node_ids = np.asarray(nodes["id"], np.int64)
    node_parent = np.asarray(nodes["parent"], np.int64)
    node_layer = np.asarray(nodes["layer"], np.int64)
    leaf_parent = np.asarray(leaves["parent"], np.int64)
    problems = tree_problems(node_ids, node_parent, node_layer, leaf_ids, leaf_parent,
                             store.chunk_ids(), max_children)
    if problems:
        return None, problems
    live = LiveTree(max_children, store.dim, int(_meta(db, "next_node_id") or 1), lookup)
    keys = np.concatenate([-leaf_ids, node_ids])
    parents = np.concatenate([leaf_parent, node_parent])
    order_in = np.concatenate([np.asarray(leaves["ord"], np.int64),
                               np.asarray(nodes["ord"], np.int64)])
    _link(live, keys, parents, order_in)
    live.layer = dict(zip(node_ids.tolist(), node_layer.tolist(), strict=True))
    _node_columns(live, nodes, node_ids)
    live._leaves = len(leaf_ids)
    return live, []


def _link(live: LiveTree, keys: np.ndarray, parents: np.ndarray, order_in: np.ndarray) -> None:
    """Give the tree its root, parents and ordered children from the rows' keys."""
    root = keys[parents < 0]
    live.root = int(root[0])
    child = parents >= 0
    keys, parents, order_in = keys[child], parents[child], order_in[child]
    live.parent = dict(zip(keys.tolist(), parents.tolist(), strict=True))
    order = np.lexsort((order_in, parents))
    keys, parents = keys[order], parents[order]
    starts = np.r_[0, np.flatnonzero(np.diff(parents)) + 1].tolist()
    ends = [*starts[1:], len(keys)]
    flat, owners = keys.tolist(), parents.tolist()
    live.children = {owners[a]: flat[a:b] for a, b in zip(starts, ends, strict=True)
                     } if flat else {}


def _node_columns(live: LiveTree, nodes: dict[str, Any], node_ids: np.ndarray) -> None:
    """Give the tree its nodes' vectors, abstracts, labels, abstract vectors and dirty marks."""
    if len(node_ids):  # rows of one array: no array object built per node
        matrix = np.stack(list(nodes["vector"])).astype(np.float32, copy=False)
        live.vectors = dict(zip(node_ids.tolist(), matrix, strict=True))
    live.abstracts = {n: v for n, v in _present(nodes["abstract"], node_ids).items()
                      if isinstance(v, str)}
    live.labels = {n: v for n, v in _present(nodes["label"], node_ids).items()
                   if isinstance(v, str)}
    live.abstract_vectors = {n: np.asarray(v, dtype=np.float32)
                             for n, v in _present(nodes["abstract_vector"], node_ids).items()
                             if isinstance(v, np.ndarray)}
    dirty = np.asarray(nodes["dirty"], dtype=object)
    live.dirty = {n for n, d in zip(node_ids.tolist(), dirty.tolist(), strict=True) if d}


def _present(values: Any, node_ids: np.ndarray) -> dict[int, Any]:
    """The values of a column that are not NULL, by node id."""
    present = ~np.ma.getmaskarray(values)  # masked where NULL: read the data under the mask once
    data = np.ma.getdata(values)
    return dict(zip(node_ids[present].tolist(), data[present].tolist(), strict=True))


def tree_problems(node_ids: np.ndarray, node_parent: np.ndarray, node_layer: np.ndarray,
                  leaf_ids: np.ndarray, leaf_parent: np.ndarray, chunk_ids: np.ndarray,
                  max_children: int) -> list[str]:
    """What makes stored tree rows unusable for these chunks (empty when they form a valid
    equi-depth tree over exactly those chunks)."""
    found: list[str] = []
    if not np.array_equal(np.sort(leaf_ids), chunk_ids):
        found.append(f"the tree has {len(leaf_ids)} leaves, the database {len(chunk_ids)} "
                     "chunks, and they differ")
        return found
    if len(np.unique(node_ids)) != len(node_ids):
        found.append("abstract node ids repeat")
        return found
    roots = int((node_parent < 0).sum() + (leaf_parent < 0).sum())
    if roots != 1:
        found.append(f"{roots} roots, expected 1")
        return found
    order = np.argsort(node_ids)
    sorted_ids = node_ids[order]

    def layer_of(parents: np.ndarray) -> np.ndarray | None:
        at = np.clip(np.searchsorted(sorted_ids, parents), 0, max(len(sorted_ids) - 1, 0))
        if len(sorted_ids) == 0 or not np.array_equal(sorted_ids[at], parents):
            return None
        return node_layer[order][at]

    has_up = node_parent >= 0
    up_layers = layer_of(node_parent[has_up])
    leaf_up = leaf_parent[leaf_parent >= 0]
    leaf_up_layers = layer_of(leaf_up)
    if (up_layers is None and has_up.any()) or (leaf_up_layers is None and len(leaf_up)):
        found.append("a node's parent is missing")
        return found
    if has_up.any() and np.any(up_layers != node_layer[has_up] + 1):
        found.append("a node is not one layer below its parent")
    if len(leaf_up) and np.any(leaf_up_layers != 1):
        found.append("a leaf hangs from a node above layer 1")
    if len(node_ids):
        counts = np.bincount(np.searchsorted(sorted_ids, np.r_[node_parent[has_up], leaf_up]),
                             minlength=len(sorted_ids))
        if counts.min() < 1 or counts.max() > max_children:  # 1: a partition's lift
            found.append(f"a node has {int(counts.min())}..{int(counts.max())} children "
                         f"(allowed 1..{max_children})")
    return found
