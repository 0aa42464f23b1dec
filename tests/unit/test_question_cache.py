"""The question-vector cache: a question asked again within minutes costs no model pass."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from waiting import wait_until

from psirag_kb.ingest.embedding import QueryEmbedder
from psirag_kb.ingest.question_cache import QuestionCache, question_key


class Counting:
    """An embedder that counts the texts it is given (the conftest's bag-of-words vectors, each
    text embedded alone so its vector does not depend on its place in a batch)."""

    def __init__(self, inner, name: str = "fake-bow") -> None:
        self.inner = inner
        self.name = name
        self.dim = inner.dim
        self.texts: list[str] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.texts.extend(texts)
        return np.stack([self.inner.embed([text])[0] for text in texts])

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_question_asked_again_is_not_embedded_again(fake_embedder) -> None:
    model = Counting(fake_embedder)
    embedder = QueryEmbedder(model)
    first = embedder.embed_one("Who founded  the Hanseatic League?")
    again = embedder.embed_one(" Who founded the Hanseatic League? ")  # white space differs
    assert model.texts == ["Who founded  the Hanseatic League?"]
    np.testing.assert_array_equal(first, again)
    mixed = embedder.embed_many(["Who founded the Hanseatic League?", "Where is Lübeck?",
                                 "Where is Lübeck?"])
    assert model.texts[1:] == ["Where is Lübeck?"]  # one pass for the new text, once
    np.testing.assert_array_equal(mixed[0], first)
    np.testing.assert_array_equal(mixed[1], mixed[2])


def test_vectors_expire_after_the_ttl() -> None:
    clock = Clock()
    cache = QuestionCache(size=8, ttl_s=300.0, clock=clock)
    cache.put("m", "q", np.ones(3, np.float32))
    clock.now += 299.0
    assert cache.get("m", "q") is not None
    clock.now += 1.0
    assert cache.get("m", "q") is None and len(cache) == 0


def test_the_cache_is_bounded_and_drops_the_least_recently_used() -> None:
    cache = QuestionCache(size=3, ttl_s=300.0, clock=Clock())
    for word in ("a", "b", "c"):
        cache.put("m", word, np.full(2, ord(word), np.float32))
    assert cache.get("m", "a") is not None  # a used: b is now the oldest
    cache.put("m", "d", np.zeros(2, np.float32))
    assert len(cache) == 3
    assert cache.get("m", "b") is None
    assert all(cache.get("m", w) is not None for w in ("a", "c", "d"))


def test_a_vector_kept_cannot_be_changed_by_a_caller(fake_embedder) -> None:
    embedder = QueryEmbedder(Counting(fake_embedder))
    vector = embedder.embed_one("a question")
    vector[:] = 0.0  # the caller's copy
    assert np.linalg.norm(embedder.embed_one("a question")) == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(ValueError):
        embedder.cache.get(embedder.inner.name, "a question")[0] = 1.0


def test_another_model_never_gets_the_old_models_vectors(fake_embedder) -> None:
    cache = QuestionCache()
    old = Counting(fake_embedder, name="old-model")
    QueryEmbedder(old, cache).embed_one("a question")
    new = Counting(fake_embedder, name="new-model")
    QueryEmbedder(new, cache).embed_one("a question")
    assert old.texts == ["a question"] and new.texts == ["a question"]


def test_many_threads_share_the_cache(fake_embedder) -> None:
    model = Counting(fake_embedder)
    embedder = QueryEmbedder(model)
    questions = [f"question {i % 10}" for i in range(200)]
    results: dict[int, np.ndarray] = {}

    def ask(index: int) -> None:
        results[index] = embedder.embed_one(questions[index])

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(questions))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(model.texts) == set(questions)
    for index, question in enumerate(questions):
        np.testing.assert_array_equal(results[index], embedder.embed_one(question))


def test_question_key_normalises_white_space_and_unicode() -> None:
    assert question_key("  Caf\u0065\u0301  au\tlait\n") == "Caf\u00e9 au lait"


def test_the_backlog_counts_texts_queued_and_in_the_model(fake_embedder) -> None:
    gate = threading.Event()
    entered = threading.Event()

    class Held(Counting):
        def embed(self, texts: list[str]) -> np.ndarray:
            entered.set()
            gate.wait(10)
            return super().embed(texts)

    embedder = QueryEmbedder(Held(fake_embedder))
    assert embedder.backlog() == 0
    first = threading.Thread(target=embedder.embed_many, args=(["a", "b"],))
    first.start()
    assert entered.wait(10)  # the model holds "a" and "b"
    second = threading.Thread(target=embedder.embed_one, args=("c",))
    second.start()
    wait_until(lambda: embedder.backlog() == 3, message="c queued behind a and b")
    gate.set()
    first.join()
    second.join()
    assert embedder.backlog() == 0
