"""The Tree browser: the hierarchy from the root, each node loaded when first expanded."""

from __future__ import annotations

import os
from functools import partial
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Footer, Header, Static, Tree
from textual.widgets.tree import TreeNode

from .. import format as fmt
from .. import keys
from ..messages import Failed, NodeLoaded, Reconnected
from .base import FAILED, Banner, KBScreen

LABEL_CHARS = 48


def node_label(node: dict[str, Any]) -> Text:
    """A node's label (truncated), its leaf count and a stale marker."""
    if node.get("kind") == "leaf":
        where = fmt.where(node, 28) if node.get("source") else ""
        text = " ".join(str(node.get("abstract") or "").split())
        return Text.assemble((f"chunk {node.get('id')} ", "dim"), (where + " ", "underline"),
                             text[:LABEL_CHARS] + ("…" if len(text) > LABEL_CHARS else ""))
    shown = node.get("label") or node.get("abstract") or ""
    abstract = " ".join(str(shown).split()) or "(no abstract yet)"
    if len(abstract) > LABEL_CHARS:
        abstract = abstract[:LABEL_CHARS - 1] + "…"
    leaves = node.get("leaves", 0)
    label = Text.assemble(abstract, (f"  {leaves} leaf" if leaves == 1 else f"  {leaves} leaves",
                                     "dim"))
    if node.get("dirty"):
        label.append(" stale", style="bold italic")
    return label


class TreeScreen(KBScreen):
    """Browse the Ψ-RAG tree: expanding a node asks the knowledge base for its children."""

    BINDINGS = keys.TREE

    def __init__(self) -> None:
        super().__init__()
        self.loaded_root = False

    def compose(self) -> ComposeResult:
        yield Header()
        yield Banner(id="banner", classes="-empty")
        with Horizontal(id="treebody"):
            yield Tree("loading the tree…", id="tree")
            with VerticalScroll(id="blockpane"):
                yield Static("", id="blocks")
        yield Static("Expand a node with enter or space.", id="nodeinfo")
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one(Tree).focus()
        self.load(None, None)

    def on_screen_resume(self) -> None:
        if not self.loaded_root:
            self.load(None, None)

    def load(self, target: TreeNode | None, node_id: int | None) -> None:
        """Fetch one node in a worker of its own (exclusive per node)."""
        self.run_worker(partial(self.fetch, target, node_id), thread=True, exclusive=True,
                        exit_on_error=False, group=f"node-{node_id}")

    def fetch(self, target: TreeNode | None, node_id: int | None) -> None:
        node = self.call("tree node" if node_id is not None else "tree",
                         lambda client: client.node(node_id))
        if node is not FAILED or target is not None:
            self.post_message(NodeLoaded(target, None if node is FAILED else node))

    @on(NodeLoaded)
    def fill(self, message: NodeLoaded) -> None:
        tree = self.query_one(Tree)
        node = message.node
        target = message.target
        if node is None:  # failed: collapse it so expanding again retries
            target.data["loaded"] = False
            target.remove_children()
            target.collapse()
            return
        if target is None:
            self.clear_error()
            self.loaded_root = True
            target = tree.root
            target.set_label(node_label(node | {"kind": "node"}))
        target.data = node | {"kind": "node", "loaded": True}
        target.remove_children()
        for child in node.get("children", []):
            if child.get("kind") == "leaf":
                target.add_leaf(node_label(child), data=child)
            else:
                target.add(node_label(child), data=child | {"loaded": False})
        target.expand()
        if target is tree.root:
            tree.move_cursor(tree.root)
            self.describe(target.data)
        if tree.cursor_node is target:
            self.draw_blocks(target)

    @on(Failed)
    def root_failed(self, message: Failed) -> None:
        if message.what == "tree":
            self.query_one(Tree).root.set_label(
                "no topic tree yet (r reloads)" if message.passing
                else "the tree could not be loaded (r reloads)")

    @on(Tree.NodeExpanded)
    def expanded(self, event: Tree.NodeExpanded) -> None:
        data = event.node.data
        if data and data.get("kind") == "node" and not data.get("loaded") and event.node.parent:
            data["loaded"] = True
            event.node.add_leaf(Text("loading…", style="dim"))
            self.load(event.node, int(data["id"]))

    @on(Tree.NodeHighlighted)
    def highlighted(self, event: Tree.NodeHighlighted) -> None:
        if event.node.data:
            self.describe(event.node.data)
        self.draw_blocks(event.node)

    def draw_blocks(self, node: TreeNode) -> None:
        """The children of the highlighted node once they are loaded (enter loads them), else
        its siblings with it marked, as bars sized by passages."""
        data = node.data or {}
        shown, marked = node, None
        if not (data.get("kind") == "node" and data.get("loaded") and data.get("children")):
            shown, marked = node.parent or node, data.get("id")
        children = (shown.data or {}).get("children") or []
        blocks = self.query_one("#blocks", Static)
        if not children:
            blocks.update("")
            return
        width = max(20, self.query_one("#blockpane").size.width - 2)
        title = node_label(shown.data).plain if shown.data else ""
        title = title if len(title) <= width - 8 else title[: width - 9] + "…"
        head = Text(f"below {title}\n", style="dim")
        blocks.update(Text.assemble(head, fmt.blocks_text(children, width, marked)))

    def describe(self, data: dict[str, Any]) -> None:
        """The highlighted node's whole abstract (or chunk text) below the tree."""
        text = " ".join(str(data.get("abstract") or "").split()) or "(no abstract yet)"
        if data.get("kind") == "leaf":
            head = f"chunk {data.get('id')}  {fmt.where(data, 60) if data.get('source') else ''}"
        else:
            head = (f"node {data.get('id')}  layer {data.get('layer', '?')}  "
                    f"{data.get('leaves', 0)} leaves" + ("  stale" if data.get("dirty") else ""))
        note = f"\n{data['note']} (r reloads)" if data.get("note") else ""
        self.query_one("#nodeinfo", Static).update(
            Text.assemble((head, "bold"), (note, "italic"), "\n", text))

    @on(Reconnected)
    def reconnected(self) -> None:
        if not self.loaded_root:
            self.load(None, None)

    def action_reload(self) -> None:
        self.loaded_root = False
        tree = self.query_one(Tree)
        tree.root.remove_children()
        tree.root.set_label("loading the tree…")
        self.load(None, None)

    def action_open_editor(self) -> None:
        node = self.query_one(Tree).cursor_node
        data = node.data if node else None
        source = data.get("source") if data else None
        if not source or not os.path.isfile(source):
            self.notify("Choose a chunk of a file (a leaf) to open it.", severity="warning")
            return
        lines = None if data.get("location") else data.get("lines")  # lines of a text file
        self.app.open_in_editor(source, lines[0] if lines else None)
