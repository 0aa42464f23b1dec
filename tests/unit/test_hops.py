"""Hop discriminator: numpy inference, metrics, loading labelled data, the shipped model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from psirag_kb.errors import KBError
from psirag_kb.search.hops import (
    FEATURE_NAMES,
    HopDiscriminator,
    evaluate,
    load_labelled,
    metrics,
    question_features,
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "hops_holdout_sample.jsonl"
QUESTIONS = [
    "In what city was Joe English born?",
    "Who is the mother of the director of the film Kiss and Tell?",
    "Does the 'Fortune' article agree with TechCrunch, as reported on October 7, 2023?",
]


def random_model(dim: int = 8, hidden: int = 5, extra: bool = True) -> HopDiscriminator:
    """A small model with random weights and a non-trivial standardisation."""
    rng = np.random.default_rng(0)
    width = dim + (len(FEATURE_NAMES) if extra else 0)
    return HopDiscriminator(
        rng.standard_normal((width, hidden)), rng.standard_normal(hidden),
        rng.standard_normal((hidden, 4)), rng.standard_normal(4),
        rng.standard_normal(width), rng.uniform(0.5, 2.0, width), extra=extra,
    )


def unit_vectors(n: int, dim: int = 8) -> np.ndarray:
    """Random L2-normalised float32 rows."""
    x = np.random.default_rng(1).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_numpy_inference_matches_reference() -> None:
    model = random_model()
    vectors = unit_vectors(len(QUESTIONS))
    x = np.concatenate([vectors, question_features(QUESTIONS)], axis=1)
    x = (x - model.mean) / model.std
    logits = np.maximum(x @ model.w1 + model.b1, 0) @ model.w2 + model.b2
    expected = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(model.probabilities(QUESTIONS, vectors), expected, rtol=1e-5)
    assert model.predict_many(QUESTIONS, vectors).tolist() == (logits.argmax(1) + 1).tolist()


def test_matches_torch_module() -> None:
    torch = pytest.importorskip("torch")
    model = random_model()
    vectors = unit_vectors(len(QUESTIONS))
    net = torch.nn.Sequential(torch.nn.Linear(model.w1.shape[0], 5), torch.nn.ReLU(),
                              torch.nn.Linear(5, 4))
    with torch.no_grad():
        for layer, w, b in ((net[0], model.w1, model.b1), (net[2], model.w2, model.b2)):
            layer.weight.copy_(torch.from_numpy(w.T.copy()))
            layer.bias.copy_(torch.from_numpy(b))
        logits = net(torch.from_numpy(model.features(QUESTIONS, vectors))).numpy()
    np.testing.assert_allclose(
        model.probabilities(QUESTIONS, vectors), np.exp(logits) / np.exp(logits).sum(1)[:, None],
        rtol=1e-4,
    )


def test_predictions_are_hops_and_vectors_are_normalised() -> None:
    model = random_model()
    vectors = unit_vectors(len(QUESTIONS))
    predicted = model.predict_many(QUESTIONS, vectors)
    assert set(predicted.tolist()) <= {1, 2, 3, 4}
    assert model.predict(QUESTIONS[0], 3.0 * vectors[0]) == predicted[0]
    assert model.predict_many([], np.zeros((0, 8))).shape == (0,)
    with pytest.raises(KBError):
        model.predict(QUESTIONS[0], np.ones(5))


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    model = random_model(extra=False)
    model.metadata = {"seed": 3}
    model.save(tmp_path / "m.npz")
    loaded = HopDiscriminator.load(tmp_path / "m.npz")
    vectors = unit_vectors(2)
    np.testing.assert_array_equal(
        loaded.probabilities(QUESTIONS[:2], vectors), model.probabilities(QUESTIONS[:2], vectors)
    )
    assert loaded.metadata["seed"] == 3 and not loaded.extra


def test_question_features_count_structure() -> None:
    rows = dict(zip(FEATURE_NAMES, question_features([QUESTIONS[1]])[0].tolist(), strict=True))
    assert rows["of_det"] == 2 and rows["of_chains"] == 1 and rows["qword_who"] == 1
    assert question_features([]).shape == (0, len(FEATURE_NAMES))


def test_metrics_on_a_hand_made_case() -> None:
    truth = np.array([1, 1, 2, 2, 2, 2, 3, 4])
    predicted = np.array([1, 3, 2, 2, 2, 1, 4, 4])
    m = metrics(truth, predicted)
    assert m["n"] == 8
    assert m["accuracy"] == pytest.approx(5 / 8)
    assert m["per_class_recall"] == {"1": 0.5, "2": 0.75, "3": 0.0, "4": 1.0}
    assert m["balanced_accuracy"] == pytest.approx((0.5 + 0.75 + 0.0 + 1.0) / 4)
    assert m["within_one"] == pytest.approx(7 / 8)


def test_metrics_skip_absent_classes() -> None:
    m = metrics(np.array([2, 2, 3]), np.array([2, 3, 3]))
    assert m["per_class_recall"]["1"] is None
    assert m["balanced_accuracy"] == pytest.approx((0.5 + 1.0) / 2)


def test_load_labelled(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(
        json.dumps({"question": "a?", "hops": 2}) + "\n\n"
        + json.dumps({"id": "3hop1__12_34", "question": "b?"}) + "\n"
    )
    assert load_labelled(path) == [("a?", 2), ("b?", 3)]
    path.write_text(json.dumps({"question": "c?"}) + "\n")
    with pytest.raises(KBError, match="line 1"):
        load_labelled(path)


def test_shipped_model_on_holdout_sample(minilm) -> None:
    model = HopDiscriminator.load()
    labelled = load_labelled(FIXTURE)
    assert 50 <= len(labelled) <= 300
    vectors = minilm.embed([q for q, _ in labelled])
    result = evaluate(labelled, vectors, model)
    assert result["n"] == len(labelled)
    assert result["balanced_accuracy"] > 0.6
    assert result["within_one"] > 0.95
    assert model.metadata["holdout_metrics"]["balanced_accuracy"] > 0.6


@pytest.mark.integration  # a subprocess
def test_inference_does_not_import_torch() -> None:
    code = (
        "import sys, numpy as np\n"
        "from psirag_kb.search.hops import HopDiscriminator\n"
        "m = HopDiscriminator.load()\n"
        "v = np.ones(m.dim, dtype=np.float32)\n"
        "assert m.predict('Who directed Kiss and Tell?', v) in (1, 2, 3, 4)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_one_hop_threshold_sends_unsure_questions_to_more_rounds() -> None:
    model = random_model()
    rows = np.array([[0.55, 0.30, 0.10, 0.05], [0.95, 0.03, 0.01, 0.01],
                     [0.40, 0.10, 0.45, 0.05]])
    assert model.decide(rows).tolist() == [1, 1, 3]  # no threshold: the likeliest count
    model.metadata = {"single_hop_min_probability": 0.9}
    assert model.single_hop_min == 0.9
    assert model.decide(rows).tolist() == [2, 1, 3]


def test_training_picks_the_highest_threshold_keeping_one_hop_recall() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "training"))
    from train_hops import single_hop_threshold

    labels = np.array([1, 1, 1, 1, 2, 2, 3])
    p1 = np.array([0.999, 0.97, 0.96, 0.93, 0.92, 0.4, 0.1])
    probabilities = np.stack([p1, 1 - p1, np.zeros(7), np.zeros(7)], axis=1)
    chosen, binary = single_hop_threshold(probabilities, labels)
    assert chosen == 0.9  # 0.95 would give one of four one-hop questions more rounds
    assert binary == {"one_hop_recall": 1.0, "more_hop_recall": pytest.approx(2 / 3, abs=1e-4)}
