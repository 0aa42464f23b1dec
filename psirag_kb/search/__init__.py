"""Retrieval over the stores: rankings, fusion, the tree's view, summaries."""
