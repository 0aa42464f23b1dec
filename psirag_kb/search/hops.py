"""Hop discriminator: a 2-layer numpy MLP that predicts how many retrieval hops a question needs."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

import numpy as np

from psirag_kb.errors import KBError

HOPS = (1, 2, 3, 4)
FEATURE_VERSION = "q1"
SINGLE_HOP_KEY = "single_hop_min_probability"
"""Metadata key of the one-hop threshold chosen on the training script's validation part."""

_TOKEN = re.compile(
    r"[A-Za-z0-9][\w'’\-.&]*[\w'’]|[A-Za-z0-9]|[,;:?!\"“”]|(?<!\w)['‘’]|['‘’](?!\w)"
)
_SENTENCE_END = re.compile(r"[.?!](?=\s+[A-Z]|\s*$)")
_QUOTES = frozenset("'\"“”‘’")
_MONTHS = frozenset(
    "january february march april may june july august september october november december".split()
)
_RELATIVE = frozenset("who whom whose that which where when".split())
_PREPOSITIONS = frozenset("in of by for to from at on with".split())
_DETERMINERS = frozenset("the a an this that its his her their".split())
_CONNECTORS = frozenset("of the de von van der la le".split())
_COMPARE = frozenset(
    "both while whereas between consistent inconsistent consistency inconsistency change changed "
    "same contrast contrasting before after later earlier align aligns differ different".split()
)
_SOURCE_BIGRAMS = frozenset(
    {("according", "to"), ("reported", "by"), ("report", "from"), ("reports", "from"),
     ("article", "from"), ("articles", "from"), ("article", "by"), ("articles", "by"),
     ("noted", "by"), ("covered", "by"), ("published", "by"), ("mentioned", "by")}
)
_QWORDS = ("what", "who", "which", "when", "where", "how", "is are was were", "do does did")
_QWORD_INDEX = {w: i for i, group in enumerate(_QWORDS) for w in group.split()}

FEATURE_NAMES = (
    "log_words", "words_per_10", "commas", "and", "of_det", "possessives", "relative",
    "prep_which", "of_chains", "cap_spans", "distinct_cap_spans", "quoted", "months", "years",
    "numbers", "source_phrases", "compare_words", "sentences",
    *(f"qword_{group.split()[0]}" for group in _QWORDS), "qword_other",
)
_N_QWORDS = len(_QWORDS)


def _one(question: str) -> list[float]:
    """The FEATURE_NAMES values of one question."""
    tokens = _TOKEN.findall(question)
    lower = [t.lower() for t in tokens]
    words = [t for t in lower if t[0].isalnum()]
    counts = dict.fromkeys(("and", "of_det", "rel", "prep", "chain", "poss", "month", "year",
                            "num", "source", "compare", "quote"), 0)
    spans: list[str] = []
    span: list[str] = []
    last_of = -10
    for i, (token, low) in enumerate(zip(tokens, lower, strict=True)):
        nxt = lower[i + 1] if i + 1 < len(lower) else ""
        if token[0] in _QUOTES:
            counts["quote"] += 1
        if low == "and":
            counts["and"] += 1
        elif low == "of" and nxt in _DETERMINERS:
            counts["of_det"] += 1
            counts["chain"] += i - last_of <= 4
            last_of = i
        elif low in _RELATIVE and i > 0:
            counts["rel"] += 1
            counts["prep"] += lower[i - 1] in _PREPOSITIONS
        elif low in _MONTHS:
            counts["month"] += 1
        elif low in _COMPARE:
            counts["compare"] += 1
        if (low, nxt) in _SOURCE_BIGRAMS:
            counts["source"] += 1
        if low.endswith(("'s", "’s", "s'", "s’")):
            counts["poss"] += 1
        if token[0].isdigit():
            counts["num"] += 1
            counts["year"] += len(token) == 4 and token.isdigit() and 1500 <= int(token) <= 2099
        if i > 0 and token[0].isupper():
            span.append(token)
        elif span and low in _CONNECTORS:
            span.append(token)
        elif span:
            while span and span[-1].lower() in _CONNECTORS:
                span.pop()
            spans.append(" ".join(span))
            span = []
    if span:
        spans.append(" ".join(span))
    qword = _QWORD_INDEX.get(words[0], _N_QWORDS) if words else _N_QWORDS
    onehot = [0.0] * (_N_QWORDS + 1)
    onehot[qword] = 1.0
    n = len(words)
    return [
        float(np.log1p(n)), n / 10.0, lower.count(","), counts["and"], counts["of_det"],
        counts["poss"], counts["rel"], counts["prep"], counts["chain"], len(spans),
        len(set(spans)), counts["quote"] / 2.0, counts["month"], counts["year"], counts["num"],
        counts["source"], counts["compare"], max(1, len(_SENTENCE_END.findall(question))), *onehot,
    ]


def question_features(questions: list[str]) -> np.ndarray:
    """Cheap surface features of each question (counts of clauses, entities, sources), float32."""
    if not questions:
        return np.zeros((0, len(FEATURE_NAMES)), dtype=np.float32)
    return np.array([_one(q) for q in questions], dtype=np.float32)


class HopDiscriminator:
    """Linear -> ReLU -> Linear over the standardised [embedding, question features] input."""

    def __init__(
        self, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray, b2: np.ndarray,
        mean: np.ndarray, std: np.ndarray, extra: bool = True, metadata: dict | None = None,
    ) -> None:
        self.w1 = np.ascontiguousarray(w1, dtype=np.float32)
        self.b1 = np.asarray(b1, dtype=np.float32)
        self.w2 = np.ascontiguousarray(w2, dtype=np.float32)
        self.b2 = np.asarray(b2, dtype=np.float32)
        self.mean = np.asarray(mean, dtype=np.float32)
        self.std = np.asarray(std, dtype=np.float32)
        self.extra = bool(extra)
        self.metadata = dict(metadata or {})
        if self.w1.shape[0] != self.mean.shape[0] or self.w2.shape != (self.w1.shape[1], 4):
            raise KBError("hop discriminator weights have inconsistent shapes: retrain them")

    @property
    def dim(self) -> int:
        """Embedding dimension the model expects."""
        return self.w1.shape[0] - (len(FEATURE_NAMES) if self.extra else 0)

    @classmethod
    def load(cls, path: str | Path | None = None) -> HopDiscriminator:
        """Load the shipped weights (or the .npz file at `path`)."""
        if path is None:
            source = resources.files("psirag_kb").joinpath("data/hops.npz")
            if not source.is_file():
                raise KBError(
                    "the hop discriminator weights psirag_kb/data/hops.npz are missing: "
                    "reinstall psirag-kb or run training/train_hops.py"
                )
            with source.open("rb") as handle:
                return cls._from_npz(np.load(handle, allow_pickle=False))
        with np.load(Path(path), allow_pickle=False) as data:
            return cls._from_npz(data)

    @classmethod
    def _from_npz(cls, data) -> HopDiscriminator:
        """Build a model from the arrays of an opened .npz file."""
        metadata = json.loads(str(data["metadata"]))
        if metadata.get("feature_version", FEATURE_VERSION) != FEATURE_VERSION:
            raise KBError("hop discriminator weights use other question features: retrain them")
        return cls(
            data["w1"], data["b1"], data["w2"], data["b2"], data["mean"], data["std"],
            extra=bool(metadata.get("extra_features", True)), metadata=metadata,
        )

    def save(self, path: str | Path) -> None:
        """Write weights, standardisation and metadata to an .npz file."""
        metadata = {**self.metadata, "extra_features": self.extra,
                    "feature_version": FEATURE_VERSION}
        np.savez(
            Path(path), w1=self.w1, b1=self.b1, w2=self.w2, b2=self.b2, mean=self.mean,
            std=self.std, metadata=np.array(json.dumps(metadata, sort_keys=True)),
        )

    def features(self, questions: list[str], vectors: np.ndarray) -> np.ndarray:
        """The standardised MLP input for questions and their L2-normalised embeddings."""
        vectors = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
        if vectors.shape != (len(questions), self.dim):
            raise KBError(
                f"expected {len(questions)} query vectors of dimension {self.dim}, "
                f"got shape {vectors.shape}: embed with the model the discriminator was trained on"
            )
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        x = vectors / np.where(norms == 0, 1.0, norms)
        if self.extra:
            x = np.concatenate([x, question_features(questions)], axis=1)
        return (x - self.mean) / self.std

    def probabilities(self, questions: list[str], vectors: np.ndarray) -> np.ndarray:
        """Softmax over 1..4 hops, one row per question."""
        hidden = np.maximum(self.features(questions, vectors) @ self.w1 + self.b1, 0.0)
        logits = hidden @ self.w2 + self.b2
        logits -= logits.max(axis=1, keepdims=True)
        exp = np.exp(logits)
        return exp / exp.sum(axis=1, keepdims=True)

    @property
    def single_hop_min(self) -> float | None:
        """The probability of one hop a question needs to be called one-hop (None: argmax)."""
        value = self.metadata.get(SINGLE_HOP_KEY)
        return None if value is None else float(value)

    def decide(self, probabilities: np.ndarray) -> np.ndarray:
        """Hop counts (1..4) from rows of probabilities: one hop only when its probability
        reaches `single_hop_min` (a question wrongly sent to one round loses its second hop,
        one wrongly sent to more rounds little), else the likeliest of 2..4."""
        probabilities = np.atleast_2d(probabilities)
        best = probabilities.argmax(axis=1).astype(np.int64) + 1
        threshold = self.single_hop_min
        if threshold is None:
            return best
        multi = probabilities[:, 1:].argmax(axis=1).astype(np.int64) + 2
        return np.where(probabilities[:, 0] >= threshold, 1, multi)

    def predict_many(self, questions: list[str], vectors: np.ndarray) -> np.ndarray:
        """Predicted hop counts (1..4), one per question."""
        if not questions:
            return np.zeros(0, dtype=np.int64)
        return self.decide(self.probabilities(questions, vectors))

    def predict(self, question: str, vector: np.ndarray) -> int:
        """Predicted hop count (1..4) of one question."""
        return int(self.predict_many([question], np.reshape(vector, (1, -1)))[0])

    def evaluate(self, labelled: list[tuple[str, int]], vectors: np.ndarray) -> dict:
        """Metrics of this model on labelled questions and their embeddings."""
        predicted = self.predict_many([q for q, _ in labelled], vectors)
        return metrics(np.array([h for _, h in labelled]), predicted)


def metrics(truth: np.ndarray, predicted: np.ndarray) -> dict:
    """Accuracy, balanced accuracy (over classes present), within-one accuracy, per-class recall."""
    truth, predicted = np.asarray(truth), np.asarray(predicted)
    recall = {
        str(h): (float(np.mean(predicted[truth == h] == h)) if np.any(truth == h) else None)
        for h in HOPS
    }
    present = [r for r in recall.values() if r is not None]
    n = len(truth)
    return {
        "accuracy": float(np.mean(truth == predicted)) if n else 0.0,
        "balanced_accuracy": float(np.mean(present)) if present else 0.0,
        "within_one": float(np.mean(np.abs(truth - predicted) <= 1)) if n else 0.0,
        "per_class_recall": recall,
        "n": n,
    }


def evaluate(
    labelled: list[tuple[str, int]], vectors: np.ndarray, model: HopDiscriminator | None = None
) -> dict:
    """Metrics of `model` (default: the shipped one) on labelled questions and their vectors."""
    return (model or HopDiscriminator.load()).evaluate(labelled, vectors)


_MUSIQUE_ID = re.compile(r"^(\d)hop")


def load_labelled(path: str | Path) -> list[tuple[str, int]]:
    """Read (question, hops) pairs from JSONL with "question" and "hops" or a "2hop__..." id."""
    pairs = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise KBError(f"cannot read labelled questions from {path}: {exc}") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            hops = record.get("hops")
            if hops is None:
                match = _MUSIQUE_ID.match(str(record.get("id", "")))
                hops = int(match.group(1)) if match else None
            if hops is None:
                raise KeyError("hops")
            if int(hops) < 1:
                raise ValueError(f"hops must be at least 1, not {hops}")
            pairs.append((str(record["question"]), min(int(hops), 4)))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise KBError(
                f"{path} line {number}: expected JSON with \"question\" and \"hops\" "
                f"(or an id like \"2hop__...\"), got {line[:80]!r} ({exc})"
            ) from exc
    return pairs
