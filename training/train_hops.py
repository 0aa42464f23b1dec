"""Train the hop discriminator (paper App. E.2) and print its held-out metrics as JSON.

    python training/train_hops.py --data hops/train.jsonl --out psirag_kb/data/hops.npz \
        --write-holdout holdout.jsonl --cache-dir ~/.cache/psirag-kb

Near-duplicate questions (cosine >= --dup-threshold) are grouped and each group goes wholly to
one side of a stratified split, so the held-out figures are not inflated by templated twins.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import shlex
import sys
from pathlib import Path

import numpy as np

from psirag_kb.search.hops import (
    SINGLE_HOP_KEY,
    HopDiscriminator,
    load_labelled,
    metrics,
    question_features,
)
from psirag_kb.config import EmbeddingConfig
from psirag_kb.ingest.embedding import CachedEmbedder, SentenceTransformerEmbedder


def file_digest(path: Path) -> tuple[str, int]:
    """SHA-256 and line count of a file."""
    data = Path(path).read_bytes()
    return hashlib.sha256(data).hexdigest(), data.count(b"\n")


def sources(path: Path) -> list[str]:
    """The "source" field of each non-empty JSONL line ("" when absent)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [str(json.loads(line).get("source", "")) for line in lines if line.strip()]


def near_duplicate_groups(vectors: np.ndarray, threshold: float, block: int = 2048) -> np.ndarray:
    """Group id per row: connected components of pairs with cosine >= threshold."""
    n = len(vectors)
    parent = np.arange(n)

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for start in range(0, n, block):
        sims = vectors[start:start + block] @ vectors.T
        rows, cols = np.nonzero(sims >= threshold)
        for r, c in zip(rows + start, cols, strict=True):
            if r < c:
                a, b = find(int(r)), find(int(c))
                if a != b:
                    parent[max(a, b)] = min(a, b)
    return np.array([find(i) for i in range(n)])


def grouped_stratified_split(
    labels: np.ndarray, groups: np.ndarray, fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Indices (kept, held out): about `fraction` of each class held out, groups never split."""
    rng = np.random.default_rng(seed)
    unique = np.unique(groups)
    # A group is filed under its rarest label so rare classes are not starved by mixed groups.
    counts = {h: int(np.sum(labels == h)) for h in np.unique(labels)}
    group_label = {}
    for g in unique:
        members = labels[groups == g]
        group_label[g] = min(members.tolist(), key=lambda h: counts[h])
    held = np.zeros(len(labels), dtype=bool)
    for h in sorted(counts):
        candidates = [g for g in unique if group_label[g] == h]
        rng.shuffle(candidates)
        target, taken = fraction * counts[h], 0
        for g in candidates:
            if taken >= target:
                break
            members = groups == g
            held |= members
            taken += int(np.sum(labels[members] == h))
    return np.nonzero(~held)[0], np.nonzero(held)[0]


def fit(
    x: np.ndarray, y: np.ndarray, x_val: np.ndarray, y_val: np.ndarray, *, hidden: int = 128,
    max_epochs: int = 200, patience: int = 20, lr: float = 1e-3, weight_decay: float = 1e-2,
    batch: int = 64, dropout: float = 0.1, class_power: float = 1.0, seed: int = 0,
) -> tuple[list[np.ndarray], int, float]:
    """Train Linear-ReLU-Dropout-Linear with class-weighted CE; early stop on validation score.

    Returns the best weights [w1, b1, w2, b2] (numpy, w as in x @ w), best epoch and its score,
    where the score is balanced accuracy plus within-one accuracy on the validation rows.
    """
    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    rng = np.random.default_rng(seed)
    counts = np.bincount(y - 1, minlength=4).astype(np.float64)
    weights = (len(y) / (4 * np.maximum(counts, 1))) ** class_power
    model = torch.nn.Sequential(
        torch.nn.Linear(x.shape[1], hidden), torch.nn.ReLU(), torch.nn.Dropout(dropout),
        torch.nn.Linear(hidden, 4),
    )
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    loss_fn = torch.nn.CrossEntropyLoss(weight=torch.tensor(weights, dtype=torch.float32))
    xt, yt = torch.from_numpy(x), torch.from_numpy(y - 1)
    xv = torch.from_numpy(x_val)
    best: tuple[float, int, list[np.ndarray]] = (-1.0, 0, [])
    for epoch in range(1, max_epochs + 1):
        model.train()
        order = torch.from_numpy(rng.permutation(len(y)))
        for start in range(0, len(y), batch):
            idx = order[start:start + batch]
            optimiser.zero_grad()
            loss_fn(model(xt[idx]), yt[idx]).backward()
            optimiser.step()
        model.eval()
        with torch.no_grad():
            predicted = model(xv).argmax(1).numpy() + 1
        m = metrics(y_val, predicted)
        score = m["balanced_accuracy"] + m["within_one"]
        if score > best[0]:
            params = [p.detach().numpy().copy() for p in model.parameters()]
            best = (score, epoch, [params[0].T, params[1], params[2].T, params[3]])
        elif epoch - best[1] >= patience:
            break
    return best[2], best[1], best[0]


def standardiser(x: np.ndarray, scale_embedding: bool, n_embedding: int):
    """Mean and std over training rows; embedding dims left as they are unless asked."""
    mean, std = x.mean(axis=0), x.std(axis=0)
    std[std < 1e-6] = 1.0
    if not scale_embedding:
        mean[:n_embedding], std[:n_embedding] = 0.0, 1.0
    return mean.astype(np.float32), std.astype(np.float32)


def build_inputs(questions: list[str], vectors: np.ndarray, extra: bool) -> np.ndarray:
    """Unstandardised MLP input: the embedding, then the question features when `extra`."""
    if not extra:
        return vectors.astype(np.float32)
    return np.concatenate([vectors, question_features(questions)], axis=1).astype(np.float32)


def train_model(
    questions: list[str], labels: np.ndarray, vectors: np.ndarray, groups: np.ndarray, *,
    extra: bool, scale_embedding: bool, seed: int, val_fraction: float, refit: bool,
    single_hop: bool = True, **fit_args,
) -> tuple[HopDiscriminator, dict]:
    """Split off a validation part for early stopping (and the one-hop threshold), train,
    optionally refit on all rows."""
    inner, val = grouped_stratified_split(labels, groups, val_fraction, seed + 1)
    x_all = build_inputs(questions, vectors, extra)
    mean, std = standardiser(x_all[inner], scale_embedding, vectors.shape[1])
    x = (x_all - mean) / std
    params, epoch, score = fit(x[inner], labels[inner], x[val], labels[val], seed=seed, **fit_args)
    info = {"best_epoch": epoch, "validation_score": round(score, 4)}
    if single_hop:
        probe = HopDiscriminator(*params, mean, std, extra=extra)
        chosen, binary = single_hop_threshold(
            probe.probabilities([questions[i] for i in val], vectors[val]), labels[val])
        info |= {SINGLE_HOP_KEY: chosen, "validation_one_vs_more": binary}
    if refit:
        mean, std = standardiser(x_all, scale_embedding, vectors.shape[1])
        x = (x_all - mean) / std
        fixed = {**fit_args, "max_epochs": epoch, "patience": epoch + 1}
        params, _, _ = fit(x, labels, x[:0], labels[:0], seed=seed, **fixed)
    metadata = {SINGLE_HOP_KEY: info[SINGLE_HOP_KEY]} if single_hop else {}
    return HopDiscriminator(*params, mean, std, extra=extra, metadata=metadata), info


THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99)
ONE_HOP_RECALL = 0.95
"""Share of one-hop validation questions that must keep their single round."""


def single_hop_threshold(probabilities: np.ndarray, labels: np.ndarray) -> tuple[float, dict]:
    """The one-hop probability a question needs for one round: the highest of THRESHOLDS
    that still gives ONE_HOP_RECALL of the one-hop questions one round (a more-hop question
    sent to one round loses its later hops; a one-hop question sent to more rounds keeps its
    first round's passages, fused with the later ones), with that decision's recall of both
    sides at it."""
    single = labels == 1
    scores = {}
    for threshold in THRESHOLDS:
        called = probabilities[:, 0] >= threshold
        scores[threshold] = (float(np.mean(called[single])) if single.any() else 1.0,
                             float(np.mean(~called[~single])) if (~single).any() else 1.0)
    enough = [t for t, (one, _) in scores.items() if one >= ONE_HOP_RECALL] or [THRESHOLDS[0]]
    chosen = max(enough)
    one, more = scores[chosen]
    return chosen, {"one_hop_recall": round(one, 4), "more_hop_recall": round(more, 4)}


def threshold_only(args: argparse.Namespace, labelled: list[tuple[str, int]],
                   vectors: np.ndarray, groups: np.ndarray, kept: np.ndarray,
                   held: np.ndarray) -> None:
    """Choose the one-hop threshold of existing weights on the validation part of the kept
    rows (the split `train_model` makes), save them with it, print hold-out metrics of both
    rules."""
    labels = np.array([h for _, h in labelled], dtype=np.int64)
    questions = [q for q, _ in labelled]
    model = HopDiscriminator.load(args.weights)
    _, val = grouped_stratified_split(labels[kept], groups[kept], args.val_fraction,
                                      args.seed + 1)
    val = kept[val]
    chosen, binary = single_hop_threshold(
        model.probabilities([questions[i] for i in val], vectors[val]), labels[val])
    held_pairs = [labelled[i] for i in held]
    model.metadata.pop(SINGLE_HOP_KEY, None)
    before = model.evaluate(held_pairs, vectors[held])
    model.metadata |= {SINGLE_HOP_KEY: chosen, "validation_one_vs_more": binary,
                       "holdout_metrics_argmax": before}
    after = model.evaluate(held_pairs, vectors[held])
    model.metadata["holdout_metrics"] = after
    model.metadata["threshold_command"] = "python training/train_hops.py " + shlex.join(
        sys.argv[1:])
    model.save(args.out)
    print(json.dumps({"argmax": before, "threshold": after, SINGLE_HOP_KEY: chosen,
                      "validation_one_vs_more": binary}, indent=2))


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, embed, split, train, save the weights and print held-out metrics."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="JSONL of question and hops")
    parser.add_argument("--out", type=Path, default=Path("psirag_kb/data/hops.npz"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--holdout-fraction", type=float, default=0.2)
    parser.add_argument("--write-holdout", type=Path, help="save the held-out split as JSONL")
    parser.add_argument("--cache-dir", type=Path, help="embedding cache folder (optional)")
    parser.add_argument("--dup-threshold", type=float, default=0.9)
    parser.add_argument("--no-features", action="store_true", help="embedding only (baseline)")
    parser.add_argument("--scale-embedding", action="store_true", help="standardise embedding too")
    parser.add_argument("--class-power", type=float, default=1.0, help="0 = unweighted loss")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--max-epochs", type=int, default=200)
    parser.add_argument("--patience", type=int, default=20)
    parser.add_argument("--weight-decay", type=float, default=1e-2)
    parser.add_argument("--val-fraction", type=float, default=0.15)
    parser.add_argument("--refit", action="store_true", help="retrain on all kept rows")
    parser.add_argument("--argmax", action="store_true",
                        help="call a question one-hop when that is its likeliest count (no "
                             "threshold chosen on the validation part: the earlier rule)")
    parser.add_argument("--weights", type=Path,
                        help="no training: choose the one-hop threshold of these weights")
    parser.add_argument("--exclude", type=Path, action="append", default=[],
                        help="questions.jsonl whose questions are held back as well (repeat)")
    args = parser.parse_args(argv)

    labelled = load_labelled(args.data)
    questions = [q for q, _ in labelled]
    labels = np.array([h for _, h in labelled], dtype=np.int64)
    embedder = SentenceTransformerEmbedder(EmbeddingConfig())
    if args.cache_dir:
        embedder = CachedEmbedder(embedder, args.cache_dir)
    vectors = embedder.embed(questions)
    groups = near_duplicate_groups(vectors, args.dup_threshold)
    kept, held = grouped_stratified_split(labels, groups, args.holdout_fraction, args.seed)
    if args.weights:
        threshold_only(args, labelled, vectors, groups, kept, held)
        return
    excluded = {json.loads(line)["question"] for path in args.exclude
                for line in path.read_text(encoding="utf-8").splitlines() if line.strip()}
    dropped = int(sum(questions[i] in excluded for i in kept))
    kept = np.array([i for i in kept if questions[i] not in excluded], dtype=np.int64)

    model, info = train_model(
        [questions[i] for i in kept], labels[kept], vectors[kept], groups[kept],
        extra=not args.no_features, scale_embedding=args.scale_embedding, seed=args.seed,
        val_fraction=args.val_fraction, refit=args.refit, single_hop=not args.argmax,
        hidden=args.hidden,
        max_epochs=args.max_epochs, patience=args.patience, weight_decay=args.weight_decay,
        class_power=args.class_power,
    )
    held_out = model.evaluate([labelled[i] for i in held], vectors[held])
    digest, lines = file_digest(args.data)
    model.metadata = {
        **model.metadata,
        "command": "python training/train_hops.py " + shlex.join(sys.argv[1:] if argv is None
                                                                 else argv),
        "data_file": args.data.name, "data_sha256": digest, "data_lines": lines,
        "seed": args.seed, "holdout_fraction": args.holdout_fraction,
        "dup_threshold": args.dup_threshold, "n_train": len(kept), "n_holdout": len(held),
        "excluded_from_training": [p.name if p.name != "questions.jsonl" else p.parent.name
                                   for p in args.exclude], "n_excluded": dropped,
        "embedding_model": embedder.name, "date": datetime.date.today().isoformat(),
        "holdout_metrics": held_out, **info,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    model.save(args.out)
    if args.write_holdout:
        origin = sources(args.data)
        with args.write_holdout.open("w", encoding="utf-8") as handle:
            for i in held:
                record = {"question": questions[i], "hops": int(labels[i]), "source": origin[i]}
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    print(json.dumps({"holdout": held_out, **info}, indent=2))


if __name__ == "__main__":
    main()
