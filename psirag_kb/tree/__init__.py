"""The Ψ-RAG abstract tree: pure numpy logic for building, rebalancing and searching it."""

from psirag_kb.tree.build import build_tree
from psirag_kb.tree.cost import dasgupta_cost
from psirag_kb.tree.model import Tree
from psirag_kb.tree.rebalance import rebalance
from psirag_kb.tree.search import tree_search
from psirag_kb.tree.vectors import node_vectors

__all__ = ["Tree", "build_tree", "dasgupta_cost", "node_vectors", "rebalance", "tree_search"]
