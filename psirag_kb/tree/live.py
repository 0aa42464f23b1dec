"""A mutable equi-depth tree with stable ids: insert and remove leaves without rebuilding.

Leaves are keyed by ``-chunk_id`` (negative), abstract nodes by positive ids. Every change
records which nodes must be written back (``touched``) or deleted (``dropped``), and which
abstract nodes have stale abstracts (``dirty``). The tree holds the vectors of its abstract
nodes; leaf vectors come from a lookup (the dense index) so that they are held once, except
for leaves added since the last commit (or all of them when there is no lookup).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

import numpy as np

from psirag_kb.tree.build import build_tree
from psirag_kb.tree.model import Tree, leaves_under
from psirag_kb.tree.partition import MIXED, build_partitioned
from psirag_kb.tree.rebalance import principal_halves
from psirag_kb.tree.vectors import abstract_vectors, normalise

Nearest = Callable[..., tuple[np.ndarray, np.ndarray]]
"""nearest(vectors[, labels]) -> (chunk id of the most similar existing leaf, its cosine) per
row; with a partition label per row, the most similar leaf of that label."""

LeafLookup = Callable[[np.ndarray], np.ndarray]
"""lookup(chunk ids) -> their leaf vectors, one row each (float32)."""

LabelOf = Callable[[np.ndarray], np.ndarray]
"""label_of(chunk ids) -> the partition label of each chunk (int64): who may read it."""


def leaf_key(chunk_id: int) -> int:
    """Node key of a chunk's leaf."""
    return -int(chunk_id)


def is_leaf_key(key: int) -> bool:
    """Whether a node key is a leaf's (leaves have negative keys, abstract nodes positive)."""
    return key < 0


class LiveTree:
    """The Ψ-RAG tree as dictionaries, updated in place by insertions and removals."""

    def __init__(self, max_children: int, dim: int, next_id: int = 1,
                 lookup: LeafLookup | None = None) -> None:
        self.max_children = max_children
        self.dim = dim
        self.parent: dict[int, int] = {}
        self.children: dict[int, list[int]] = {}
        self.layer: dict[int, int] = {}
        self.vectors: dict[int, np.ndarray] = {}
        """Vectors of abstract nodes (never changed in place: a new array replaces one)."""
        self.lookup = lookup
        self._own: dict[int, np.ndarray] = {}
        self._leaves = 0
        self.abstracts: dict[int, str] = {}
        self.labels: dict[int, str] = {}
        """Display labels (a few phrases naming what sets a node apart from its siblings)."""
        self.abstract_vectors: dict[int, np.ndarray] = {}
        self.root: int | None = None
        self.dirty: set[int] = set()
        self.edited: set[int] = set()
        """Nodes changed by incremental edits since the last drift check (not stored)."""
        self.touched: set[int] = set()
        self.dropped: set[int] = set()
        self.next_id = next_id
        self.join: int | None = None
        """The join layer of a partitioned tree: nodes on or below it never mix labels."""
        self.label_of: LabelOf | None = None
        self.parts: dict[int, int] = {}
        """Label of each abstract node on or below the join layer."""
        self.tops: dict[int, set[int]] = {}
        """The nodes on the join layer of each label (its partition's subtree roots)."""
        self.pure = True
        """False while nodes up to the join layer mix labels (until a split replaces it)."""

    # -- queries ----------------------------------------------------------------------------

    def level(self, node: int) -> int:
        """Layer of a node (0 for leaves)."""
        return 0 if node < 0 else self.layer[node]

    @property
    def depth(self) -> int:
        """Layer of the root (0 for an empty or single-leaf tree)."""
        return 0 if self.root is None else self.level(self.root)

    @property
    def n_leaves(self) -> int:
        """Number of leaves."""
        return self._leaves

    def has_leaf(self, chunk_id: int) -> bool:
        """Whether a chunk is a leaf of the tree."""
        key = leaf_key(chunk_id)
        return key in self.parent or self.root == key

    def leaf_keys(self) -> list[int]:
        """Keys of all leaves (in no particular order)."""
        if self.root is not None and self.root < 0:
            return [self.root]
        return [key for kids in self.children.values() for key in kids if key < 0]

    def vectors_of(self, keys: list[int]) -> np.ndarray:
        """Vectors of nodes and leaves, one row per key (float32)."""
        out = np.empty((len(keys), self.dim), dtype=np.float32)
        missing = []
        for row, key in enumerate(keys):
            if key > 0:
                out[row] = self.vectors[key]
            elif key in self._own:
                out[row] = self._own[key]
            else:
                missing.append(row)
        if missing:
            if self.lookup is None:
                raise KeyError(f"no vector for leaf {-keys[missing[0]]}")
            ids = np.array([-keys[row] for row in missing], dtype=np.int64)
            out[missing] = self.lookup(ids)
        return out

    def ancestors(self, node: int) -> list[int]:
        """Parent, grandparent, ... up to the root."""
        out = []
        while node in self.parent:
            node = self.parent[node]
            out.append(node)
        return out

    def leaves_under(self, node: int) -> list[int]:
        """Chunk ids below a node, left to right."""
        return [-key for key in leaves_under(node, self.children.__getitem__, is_leaf_key)]

    # -- conversion -------------------------------------------------------------------------

    @classmethod
    def from_tree(
        cls, tree: Tree, chunk_ids: np.ndarray, vectors: np.ndarray, max_children: int,
        next_id: int = 1, lookup: LeafLookup | None = None,
    ) -> LiveTree:
        """Adopt an array tree (leaf i is chunk_ids[i]); every abstract node is new and dirty.

        With a lookup the leaf vectors are not kept: the lookup has them.
        """
        live = cls(max_children, vectors.shape[1], next_id, lookup)
        live._adopt(tree, np.asarray(chunk_ids, np.int64), vectors, keep=lookup is None)
        return live

    def partition(self, join: int, label_of: LabelOf) -> int:
        """Keep this tree partitioned from now on (nodes up to `join` pure); labels every node
        up to it and returns how many of them mix labels (0 for a tree that respects them)."""
        self.join, self.label_of = join, label_of
        self.parts, self.tops = {}, {}
        if self.root is None or self.root < 0:
            return 0
        firsts = [node for node, level in self.layer.items() if level == 1]
        kids = [self.children[node] for node in firsts]
        flat = -np.asarray([k for group in kids for k in group], np.int64)
        leaf = label_of(flat)
        starts = np.cumsum([0] + [len(group) for group in kids[:-1]])
        low, high = np.minimum.reduceat(leaf, starts), np.maximum.reduceat(leaf, starts)
        marks = np.where(low == high, low, MIXED).tolist()
        self.parts = dict(zip(firsts, marks, strict=True))
        for node in sorted((n for n, level in self.layer.items() if 1 < level <= join),
                           key=self.level):
            first = self.parts[self.children[node][0]]
            same = all(self.parts[k] == first for k in self.children[node])
            self.parts[node] = first if same else MIXED
        mixed = 0
        for node, label in self.parts.items():
            mixed += label == MIXED
            if self.layer[node] == join and label != MIXED:
                self.tops.setdefault(label, set()).add(node)
        self.pure = mixed == 0
        return mixed

    def _label(self, key: int) -> int:
        """Label of a leaf or of a node on or below the join layer."""
        if key < 0:
            assert self.label_of is not None
            return int(self.label_of(np.array([-key], np.int64))[0])
        return self.parts.get(key, MIXED)

    def _adopt(self, tree: Tree, chunk_ids: np.ndarray, leaf_vectors: np.ndarray,
               keep: bool = True) -> int:
        """Add an array tree's nodes under fresh ids; returns the key of its root."""
        n = tree.n_leaves
        keys = np.empty(tree.n_nodes, dtype=np.int64)
        keys[:n] = -chunk_ids
        count = tree.n_nodes - n
        keys[n:] = np.arange(self.next_id, self.next_id + count)
        self.next_id += count
        key_list = keys.tolist()
        leaf_list = key_list[:n]
        if keep:
            self._own.update(zip(leaf_list, np.asarray(leaf_vectors, np.float32), strict=True))
        self._leaves += n
        self.touched.update(key_list)
        self.dirty.update(key_list[n:])
        parents = tree.parent.tolist()
        self.parent.update((key, key_list[up]) for key, up in zip(key_list, parents, strict=True)
                           if up >= 0)
        abstract = abstract_vectors(tree, leaf_vectors)
        for index in range(n, tree.n_nodes):
            key = key_list[index]
            self.children[key] = [key_list[c] for c in tree.children[index]]
            self.layer[key] = int(tree.layer[index])
            self.vectors[key] = abstract[index - n]
        if self.root is None:
            self.root = key_list[tree.root]
        return key_list[tree.root]

    def to_tree(self) -> tuple[Tree, np.ndarray]:
        """The tree as an array Tree (leaves first) and the key of each of its nodes."""
        if self.root is None:
            raise ValueError("the tree is empty")
        leaves = sorted(self.leaf_keys(), reverse=True)
        abstract = sorted(self.children)
        keys = leaves + abstract
        index = {key: i for i, key in enumerate(keys)}
        parent = np.array([index[self.parent[k]] if k in self.parent else -1 for k in keys],
                          dtype=np.int64)
        children: list[list[int]] = ([[] for _ in leaves]
                                     + [[index[c] for c in self.children[k]] for k in abstract])
        layer = np.array([0] * len(leaves) + [self.layer[k] for k in abstract], np.int32)
        return Tree(len(leaves), parent, children, layer, index[self.root]), np.array(keys)

    # -- structural edits -------------------------------------------------------------------

    def _new_node(self, kids: list[int], layer: int) -> int:
        """A new abstract node adopting the given children."""
        node = self.next_id
        self.next_id += 1
        self.children[node] = list(kids)
        self.layer[node] = layer
        for kid in kids:
            self.parent[kid] = node
            self.touched.add(kid)
        if self.join is not None and layer <= self.join:
            label = self._label(kids[0])
            self.parts[node] = label
            if layer == self.join:
                self.tops.setdefault(label, set()).add(node)
        self.vectors[node] = self._centroid(node)
        self.touched.add(node)
        self.dirty.add(node)
        return node

    def _centroid(self, node: int) -> np.ndarray:
        """Normalised mean of a node's children's vectors."""
        mean = self.vectors_of(self.children[node]).mean(axis=0)
        return normalise(mean[None, :])[0]

    def _attach(self, child: int, parent: int, stale: set[int]) -> None:
        """Append a child to a node (collapse) and note what became stale."""
        self.children[parent].append(child)
        self.parent[child] = parent
        self.touched.update((child, parent))
        stale.add(parent)

    def _detach(self, child: int, stale: set[int]) -> int | None:
        """Take a node out of its parent's children; returns the old parent."""
        up = self.parent.pop(child, None)
        if up is not None:
            kids = self.children[up]
            kids.remove(child)
            self.touched.update(kids)
            self.touched.add(up)
            stale.add(up)
        return up

    def _drop(self, node: int) -> None:
        """Forget an abstract node that has no children left."""
        del self.children[node], self.layer[node], self.vectors[node]
        label = self.parts.pop(node, None)
        if label is not None and node in self.tops.get(label, ()):
            self.tops[label].discard(node)
            if not self.tops[label]:
                del self.tops[label]
        self.abstracts.pop(node, None)
        self.labels.pop(node, None)
        self.abstract_vectors.pop(node, None)
        self.parent.pop(node, None)
        self.dirty.discard(node)
        self.edited.discard(node)
        self.touched.discard(node)
        self.dropped.add(node)

    def _split(self, node: int, stale: set[int]) -> None:
        """Split over-full nodes in two along their children's principal direction, upwards."""
        todo = [node]
        while todo:
            current = todo.pop()
            if current not in self.children or len(self.children[current]) <= self.max_children:
                continue
            kids = self.children[current]
            first, second = principal_halves(self.vectors_of(kids))
            keep = [kids[i] for i in first]
            move = [kids[i] for i in second]
            self.children[current] = keep
            self.touched.update(keep)
            self.vectors[current] = self._centroid(current)
            self.dirty.add(current)
            sibling = self._new_node(move, self.layer[current])
            up = self.parent.get(current)
            if up is None:
                self.root = self._new_node([current, sibling], self.layer[current] + 1)
            else:
                siblings = self.children[up]
                siblings.insert(siblings.index(current) + 1, sibling)
                self.parent[sibling] = up
                self.touched.update(siblings)
                stale.add(up)
                todo.append(up)
            todo.extend([current, sibling])

    def _refresh(self, stale: Iterable[int]) -> None:
        """Recompute centroid vectors of stale nodes and their ancestors, bottom-up; mark dirty."""
        nodes: set[int] = set()
        for node in stale:
            if node in self.children:
                nodes.add(node)
                nodes.update(self.ancestors(node))
        for node in sorted(nodes, key=self.level):
            self.vectors[node] = self._centroid(node)
            self.touched.add(node)
            self.dirty.add(node)
        self.edited |= nodes

    # -- insertion --------------------------------------------------------------------------

    def insert(
        self, chunk_ids: np.ndarray, vectors: np.ndarray, nearest: Nearest,
        threshold: float, pair_mode: str = "exact",
    ) -> None:
        """Insert new leaves: near ones by leaf collapse, far ones as a subtree."""
        chunk_ids = np.asarray(chunk_ids, np.int64)
        vectors = np.asarray(vectors, np.float32)
        if len(chunk_ids) == 0:
            return
        stale: set[int] = set()
        if self.root is None:
            if self.label_of is not None:
                tree, join = build_partitioned(vectors, self.label_of(chunk_ids),
                                               mode=pair_mode, max_children=self.max_children)
                self._adopt(tree, chunk_ids, vectors)
                self.partition(join, self.label_of)
                return
            tree = build_tree(vectors, mode=pair_mode, max_children=self.max_children)
            self._adopt(tree, chunk_ids, vectors)
            return
        if self.join is not None:
            self._raise_join()
            assert self.label_of is not None  # set with join by `partition`
            labels = self.label_of(chunk_ids)
            near_ids, similarity = nearest(vectors, labels)
            near_ids = np.asarray(near_ids, np.int64)
            grafted = np.zeros(len(chunk_ids), bool)
            far = similarity < threshold
            for label in np.unique(labels[far]).tolist():  # far leaves: a subtree per label
                chosen = far & (labels == label)
                if chosen.sum() >= 2:
                    self._graft(chunk_ids[chosen], vectors[chosen], label, pair_mode, stale)
                    grafted |= chosen
            keep = ~grafted
            self._insert_labelled(chunk_ids[keep], vectors[keep], near_ids[keep], stale)
            self._refresh(stale)
            return
        near_ids, similarity = nearest(vectors)
        far = similarity < threshold
        if far.sum() >= 2:
            self._insert_subtree(chunk_ids[far], vectors[far], pair_mode, stale)
            chunk_ids, vectors, near_ids = chunk_ids[~far], vectors[~far], near_ids[~far]
        for chunk_id, vector, near in zip(chunk_ids.tolist(), vectors, near_ids.tolist(),
                                          strict=True):
            self._insert_leaf(chunk_id, vector, near, stale)
        self._refresh(stale)

    def _insert_leaf(self, chunk_id: int, vector: np.ndarray, near: int, stale: set[int]) -> None:
        """Leaf node collapse: the new leaf joins the parent of its most similar leaf."""
        key = leaf_key(chunk_id)
        self._own[key] = vector
        self._leaves += 1
        self.touched.add(key)
        assert self.root is not None
        if self.root < 0:
            self.root = self._new_node([self.root, key], 1)
            return
        target = self.parent.get(leaf_key(near)) if near > 0 else None
        if target is None or target not in self.children:
            target = self._descend(self.root, 1, vector)
        self._attach(key, target, stale)
        self._split(target, stale)

    def _insert_labelled(self, chunk_ids: np.ndarray, vectors: np.ndarray, near_ids: np.ndarray,
                         stale: set[int]) -> None:
        """Leaf collapse inside each leaf's own partition: beside its most similar leaf of the
        same label, else down that partition's subtree, else as a new partition's subtree."""
        assert self.label_of is not None and self.join is not None
        labels = self.label_of(chunk_ids).tolist()
        near_labels = np.full(len(near_ids), MIXED, np.int64)
        known = near_ids > 0
        near_labels[known] = self.label_of(near_ids[known])
        for chunk_id, vector, near, label, near_label in zip(
                chunk_ids.tolist(), vectors, near_ids.tolist(), labels, near_labels.tolist(),
                strict=True):
            key = leaf_key(chunk_id)
            self._own[key] = vector
            self._leaves += 1
            self.touched.add(key)
            target = self.parent.get(leaf_key(near)) if near_label == label else None
            if target is None or target not in self.children:
                tops = sorted(self.tops.get(label, ()))
                if not tops:
                    self._new_partition(key, vector, stale)
                    continue
                target = self._descend(self._most_similar(tops, vector), 1, vector)
            self._attach(key, target, stale)
            self._split(target, stale)

    def _graft(self, chunk_ids: np.ndarray, vectors: np.ndarray, label: int, pair_mode: str,
               stale: set[int]) -> None:
        """Far leaves of one label as a subtree of their own (abstract node collapse), cut
        below the join layer and joined inside their partition's subtree (or, for a label the
        tree has not seen, lifted to the join layer and joined above it)."""
        assert self.join is not None
        tree = build_tree(vectors, mode=pair_mode, max_children=self.max_children)
        first = self.next_id
        root = self._adopt(tree, chunk_ids, vectors)
        for key in range(first, self.next_id):
            if self.layer[key] <= self.join:
                self.parts[key] = label
                if self.layer[key] == self.join:
                    self.tops.setdefault(label, set()).add(key)
        tops = sorted(self.tops.get(label, set()) - set(range(first, self.next_id)))
        cut = min(self.level(root), self.join - 1 if tops else self.join)
        pieces, above, stack = [], [], [root]
        while stack:
            node = stack.pop()
            if self.level(node) <= cut:
                pieces.append(node)
            else:
                above.append(node)
                stack.extend(self.children[node])
        for node in above:
            for kid in self.children[node]:
                self.parent.pop(kid, None)
            self.children[node] = []
            self._drop(node)
        for piece in pieces:
            vector = self.vectors_of([piece])[0]
            if tops:
                target = self._descend(self._most_similar(tops, vector), cut + 1, vector)
                self._attach(piece, target, stale)
                self._split(target, stale)
            else:
                self._join_top(piece, vector, stale)

    def _new_partition(self, key: int, vector: np.ndarray, stale: set[int]) -> None:
        """A leaf of a label the tree has not seen: lifted alone to the join layer and joined
        above it."""
        self._join_top(key, vector, stale)

    def _raise_join(self) -> None:
        """With one partition only, the join layer follows the root up (so later subtrees and
        partitions join as high as they can); its nodes in between get the label."""
        if (self.root is None or self.root < 0 or self.join is None or len(self.tops) != 1
                or not self.pure):
            return
        if self.level(self.root) <= self.join:
            return
        (label,) = self.tops
        stack = [self.root]
        while stack:
            node = stack.pop()
            if node > 0 and self.layer[node] > self.join:
                self.parts[node] = label
                stack.extend(self.children[node])
        self.join = self.level(self.root)
        self.tops = {label: {self.root}}

    def _join_top(self, top: int, vector: np.ndarray, stale: set[int]) -> None:
        """Lift a partition's node (or leaf) to the join layer and join it above that."""
        assert self.join is not None and self.root is not None
        while self.level(self.root) < self.join:  # a lone leaf (or short tree) of one partition
            self.root = self._new_node([self.root], self.level(self.root) + 1)
        for level in range(self.level(top) + 1, self.join + 1):
            top = self._new_node([top], level)
        if self.level(self.root) <= self.join:
            self.root = self._new_node([self.root, top], self.join + 1)
            return
        target = self._descend(self.root, self.join + 1, vector)
        self._attach(top, target, stale)
        self._split(target, stale)

    def _most_similar(self, nodes: list[int], vector: np.ndarray) -> int:
        """The node whose vector is closest to a vector."""
        scores = self.vectors_of(nodes) @ vector
        return nodes[int(np.argmax(scores))]

    def _descend(self, top: int, layer: int, vector: np.ndarray) -> int:
        """The node on `layer` below `top` reached by following the most similar child."""
        node = top
        while self.level(node) > layer:
            node = self._most_similar(self.children[node], vector)
        return node

    def _peer(self, node: int) -> int | None:
        """The most similar other node on the same layer, searched from the nearest ancestor
        that has one (None when the node is alone on its layer)."""
        layer, vector = self.level(node), self.vectors[node]
        below = node
        for up in self.ancestors(node):
            candidates = [c for c in self.children[up] if c != below]
            below = up
            best: int | None = None
            best_score = -np.inf
            for child in candidates:
                peer = self._descend(child, layer, vector)
                score = float(self.vectors[peer] @ vector)
                if score > best_score:
                    best, best_score = peer, score
            if best is not None:
                return best
        return None

    def _insert_subtree(
        self, chunk_ids: np.ndarray, vectors: np.ndarray, pair_mode: str, stale: set[int]
    ) -> None:
        """Build a tree of the new leaves alone and join it by abstract node collapse."""
        tree = build_tree(vectors, mode=pair_mode, max_children=self.max_children)
        old_root = self.root
        assert old_root is not None
        sub_root = self._adopt(tree, chunk_ids, vectors)
        height, main = self.level(sub_root), self.level(old_root)
        if height == main:
            self.root = self._new_node([old_root, sub_root], main + 1)
            return
        if height < main:
            top, joiner = old_root, sub_root
        else:
            top, joiner = sub_root, old_root
            self.root = sub_root
        target = self._descend(top, self.level(joiner) + 1, self.vectors_of([joiner])[0])
        self._attach(joiner, target, stale)
        self._split(target, stale)

    # -- removal ----------------------------------------------------------------------------

    def remove(self, chunk_ids: Iterable[int]) -> None:
        """Remove leaves; prune emptied nodes and fold single-child nodes into a neighbour."""
        stale: set[int] = set()
        for chunk_id in chunk_ids:
            key = leaf_key(chunk_id)
            if not self.has_leaf(chunk_id):
                continue
            if self.root == key:
                self.root = None
            self._detach(key, stale)
            self._own.pop(key, None)
            self._leaves -= 1
            self.touched.discard(key)
            self.dropped.add(key)
        heap = [(self.level(n), n) for n in stale]
        heapq.heapify(heap)
        while heap:
            _, node = heapq.heappop(heap)
            if node not in self.children:
                continue
            kids = self.children[node]
            if not kids:
                up = self._detach(node, stale)
                if self.root == node:
                    self.root = None
                self._drop(node)
                if up is not None:
                    heapq.heappush(heap, (self.level(up), up))
            elif len(kids) == 1 and node != self.root and (
                    self.join is None or self.level(node) > self.join):
                target = self._peer(node)
                if target is None:
                    continue
                child = kids[0]
                self._detach(child, stale)
                self._attach(child, target, stale)
                self._split(target, stale)
                up = self._detach(node, stale)
                self._drop(node)
                if up is not None:
                    heapq.heappush(heap, (self.level(up), up))
        while self.root is not None and self.root > 0 and len(self.children[self.root]) == 1 \
                and (self.join is None or self.level(self.root) > self.join):
            old = self.root
            self.root = self.children[old][0]
            self.parent.pop(self.root, None)
            self.touched.add(self.root)
            self._drop(old)
        stale = {n for n in stale if n in self.children}
        self._refresh(stale)

    # -- drift repair -----------------------------------------------------------------------

    def subtree(self, node: int) -> tuple[Tree, np.ndarray, np.ndarray]:
        """The subtree under an abstract node as an array Tree, its chunk ids and leaf vectors."""
        leaves = [-c for c in self.leaves_under(node)]
        abstract, stack = [], [node]
        while stack:
            current = stack.pop()
            if current > 0:
                abstract.append(current)
                stack.extend(self.children[current])
        keys = leaves + abstract
        index = {key: i for i, key in enumerate(keys)}
        parent = np.array([index.get(self.parent.get(k, 0), -1) if k != node else -1
                           for k in keys], dtype=np.int64)
        children: list[list[int]] = ([[] for _ in leaves]
                                     + [[index[c] for c in self.children[k]] for k in abstract])
        layer = np.array([0] * len(leaves) + [self.layer[k] for k in abstract], dtype=np.int32)
        tree = Tree(len(leaves), parent, children, layer, index[node])
        return tree, -np.array(leaves, dtype=np.int64), self.vectors_of(leaves)

    def replace_subtree(self, node: int, tree: Tree, chunk_ids: np.ndarray) -> None:
        """Give an abstract node new descendants: `tree` over the same leaves, of its height."""
        stale: set[int] = set()
        old, stack = [], list(self.children[node])
        while stack:
            current = stack.pop()
            if current > 0:
                old.append(current)
                stack.extend(self.children[current])
        vectors = self.vectors_of([-int(c) for c in chunk_ids])
        for current in old:
            self._drop(current)
        self._leaves -= len(chunk_ids)  # adopted again below
        first = self.next_id
        top = self._adopt(tree, chunk_ids, vectors, keep=False)
        if self.join is not None:  # one partition's leaves: the new nodes carry its label
            self.parts.update((key, self.parts[node]) for key in range(first, self.next_id))
        kids = self.children[top]
        self.children[node] = list(kids)
        for kid in kids:
            self.parent[kid] = node
        self._drop(top)
        self.touched.add(node)
        stale.add(node)
        self._split(node, stale)
        self._refresh(stale)

    # -- persistence bookkeeping ------------------------------------------------------------

    def changes(self) -> tuple[set[int], set[int]]:
        """(touched, dropped) since the last `clear_changes`."""
        touched = {n for n in self.touched
                   if (n in self.children if n > 0 else self.has_leaf(-n))}
        return touched, set(self.dropped)

    def clear_changes(self) -> None:
        """Forget the changes: they are committed (and the lookup now has the new leaves)."""
        self.touched, self.dropped = set(), set()
        if self.lookup is not None:
            self._own = {}

    def set_abstract(self, node: int, text: str, vector: np.ndarray | None) -> None:
        """Store a freshly generated abstract (and its embedding); the node is clean again."""
        self.abstracts[node] = text
        if vector is not None:
            self.abstract_vectors[node] = np.asarray(vector, dtype=np.float32)
        self.dirty.discard(node)
        self.touched.add(node)

    def set_label(self, node: int, label: str) -> None:
        """Store a node's display label (written back only when it changed)."""
        if self.labels.get(node) != label:
            self.labels[node] = label
            self.touched.add(node)

    def order_of(self, node: int) -> int:
        """Position of a node among its parent's children (0 for the root)."""
        up = self.parent.get(node)
        return 0 if up is None else self.children[up].index(node)
