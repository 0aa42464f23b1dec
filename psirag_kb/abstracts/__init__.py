"""Abstracts of the tree's nodes: their writers and the job that runs them."""
