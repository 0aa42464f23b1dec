"""`eval`, `hops` and `distill`: benchmark recall, the hop predictor, a static embedding model."""

from __future__ import annotations

import argparse
import json

from psirag_kb.cli.connection import print_report
from psirag_kb.config import Config
from psirag_kb.errors import KBError
from psirag_kb.search.retrieval import EVAL_MODES


def cmd_eval(args: argparse.Namespace, config: Config) -> int:
    """Recall@2, recall@5 and time per query of each mode on benchmark questions."""
    from psirag_kb.evaluation import evaluate
    from psirag_kb.kb import KnowledgeBase

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in (*EVAL_MODES, "flat_whole")]
    if unknown or not modes:
        raise KBError(f"unknown mode(s) {', '.join(unknown)}; choose from {', '.join(EVAL_MODES)}")
    report = evaluate(config, args.corpus, args.questions, modes, k=args.k,
                      batches=args.batches, abstracts=args.abstracts,
                      data_dir=args.data_dir.resolve() if args.data_dir else None,
                      open_kb=KnowledgeBase)
    if args.json:
        print(json.dumps(report))
        return 0
    timings = report["timings"]
    print(f"{report['questions']} questions over {report['passages']} passages; "
          f"embedding {timings['embed_s']} s, tree build {timings['tree_build_s']} s")
    print(f"{'mode':<12} {'recall@2':>9} {'recall@5':>9} {'ms/query':>9}")
    for mode, row in report["modes"].items():
        print(f"{mode:<12} {row['recall@2']:>9.4f} {row['recall@5']:>9.4f} "
              f"{row['ms_per_query']:>9.2f}")
    return 0


def cmd_hops(args: argparse.Namespace, config: Config) -> int:
    """The hops a question needs, or the predictor's score on a labelled file."""
    from psirag_kb.ingest.embedding import make_embedder
    from psirag_kb.search.hops import HopDiscriminator, load_labelled

    if (args.question is None) == (args.eval is None):
        raise KBError("give a QUESTION or --eval FILE")
    model = HopDiscriminator.load()
    embedder = make_embedder(config.embedding, config.storage.cache_dir)
    if args.eval is not None:
        labelled = load_labelled(args.eval)
        vectors = embedder.embed([q for q, _ in labelled])
        print_report(model.evaluate(labelled, vectors), args.json)
        return 0
    hops = model.predict(args.question, embedder.embed([args.question])[0])
    if args.json:
        print(json.dumps({"question": args.question, "hops": hops}))
    else:
        print(hops)
    return 0


def cmd_distill(args: argparse.Namespace, config: Config) -> int:
    """Distil a local sentence-transformers model into a static one."""
    from psirag_kb.ingest.distill import distill_static

    made = distill_static(args.out_dir, args.source, args.pca_dims)
    if args.json:
        print(json.dumps(made))
        return 0
    print(f"distilled {made['source']} into {made['path']} ({made['tokens']} tokens x "
          f"{made['dim']} dimensions, {made['distill_s']} s)")
    print(f"use it for a new data directory with: [embedding] model = {json.dumps(made['path'])}")
    return 0
