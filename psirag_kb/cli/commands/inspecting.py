"""`status` and `tree`: what the knowledge base holds, and one node of its tree."""

from __future__ import annotations

import argparse
import json

from psirag_kb.cli.connection import client
from psirag_kb.config import Config
from psirag_kb.status_text import status_lines


def cmd_status(args: argparse.Namespace, config: Config) -> int:
    """What is indexed, the stores, abstracts and daemon, as text or one JSON object."""
    with client(config) as kb:
        status = kb.status()
    if args.json:
        print(json.dumps(status))
        return 0
    for line in status_lines(status):
        print(line)
    return 0


def cmd_tree(args: argparse.Namespace, config: Config) -> int:
    """A tree node (the root by default) with its children's labels or abstracts."""
    with client(config) as kb:
        node = kb.node(args.node)
    if args.json:
        print(json.dumps(node))
        return 0
    state = " (stale)" if node["dirty"] else ""
    print(f"node {node['id']} on layer {node['layer']}, {node['leaves']} leaves{state}")
    if node.get("label") or node["abstract"]:
        print(f"  {node.get('label') or node['abstract']}")
    for child in node["children"]:
        text = " ".join((child.get("label") or child["abstract"]).split()) or "(no abstract yet)"
        if len(text) > 110:
            text = text[:107] + "..."
        label = f"chunk {child['id']}" if child["kind"] == "leaf" else f"node {child['id']}"
        print(f"  - {label} [{child['leaves']} leaves]: {text}")
    return 0
