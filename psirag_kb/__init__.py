"""psirag-kb: an always-on knowledge base for document folders, indexed as a Ψ-RAG tree."""

import os

__version__ = "0.2.0"
"""This release (recorded in each database it writes, meta.release; see storage/migrations.py)."""

# Query-time scoring is a memory-bound matrix-vector product; with torch's worker threads
# alive, a multi-threaded BLAS contends with them and runs 3-8x slower on two cores. Bulk
# products (tree building) raise the limit explicitly (see treeindex.py).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
