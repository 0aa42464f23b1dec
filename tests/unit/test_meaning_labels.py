"""Labels chosen by meaning: covered words whose embedding lies nearest the branch's passages."""

from __future__ import annotations

import numpy as np
from test_covered_labels import (
    GC,
    LICENCE,
    WEB,
    assert_covered_rules,
    three_children_work,
    words,
)

from psirag_kb.abstracts import covered, meaning
from psirag_kb.abstracts.covered import Sample
from psirag_kb.abstracts.labels import child_profile, phrase_key
from psirag_kb.abstracts.routing import nearest, terms
from tests.conftest import FakeEmbedder


def choose(texts: list[list[str]], embed=None, vectors=None) -> list[list[str]]:
    fake = FakeEmbedder()
    embed = embed or fake.embed
    vectors = vectors or [fake.embed(branch) for branch in texts]
    return meaning.sibling_labels([Sample.of(t) for t in texts],
                                  [child_profile("") for _ in texts], vectors, embed)


def test_labels_keep_the_covered_rules() -> None:
    texts = [GC, WEB, LICENCE]
    labels = choose(texts)
    leads = {phrase_key(label[0].lower()) for label in labels}
    assert len(leads) == 3, labels
    assert_covered_rules(labels, texts)


def test_labels_route_their_passages_by_meaning() -> None:
    fake = FakeEmbedder()
    texts = [GC, WEB, LICENCE]
    labels = choose(texts)
    targets = fake.embed([", ".join(label) for label in labels])
    for number, branch in enumerate(texts):
        assert nearest(targets, fake.embed(branch)) == [number] * len(branch), labels


def test_a_word_meaning_a_sibling_s_topic_does_not_lead() -> None:
    """"fruit" is in every passage of the first branch, "apple" in most, yet "fruit" means what
    the second branch's passages mean: by meaning "apple" leads, by coverage "fruit" does."""
    first = [f"Fruit note {n}: apple orchard." if n < 7 else f"Fruit note {n}." for n in range(10)]
    second = [f"Engine part {n}: motor and gearbox." for n in range(10)]
    axes = {"apple": 0, "orchard": 0, "fruit": 1, "engine": 1, "motor": 1, "gearbox": 1}

    def embed(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), 4))
        for row, text in enumerate(texts):
            for word in terms(text):
                out[row, axes.get(word, 3)] += 1.0
        return out

    vectors = [np.tile([1.0, 0.0, 0.0, 0.0], (10, 1)), np.tile([0.0, 1.0, 0.0, 0.0], (10, 1))]
    by_meaning = choose([first, second], embed, vectors)
    by_words = covered.sibling_labels([Sample.of(first), Sample.of(second)],
                                      [child_profile(""), child_profile("")])
    assert phrase_key(by_words[0][0].lower()) == "fruit", by_words
    assert phrase_key(by_meaning[0][0].lower()) in {"apple", "orchard"}, by_meaning


def test_word_vectors_embed_each_text_once_and_keep_the_latest() -> None:
    asked: list[str] = []
    fake = FakeEmbedder()

    def embed(texts: list[str]) -> np.ndarray:
        asked.extend(texts)
        return fake.embed(texts)

    kept = meaning.WordVectors(embed, limit=2)
    first = kept(["memory", "routing"])
    again = kept(["routing", "memory", "licence"])
    assert asked == ["memory", "routing", "licence"]
    assert np.allclose(again[1], first[0])
    assert list(kept.kept) == ["memory", "licence"]  # "routing" was used least recently


def test_a_batch_reads_its_samples_vectors() -> None:
    fake = FakeEmbedder()
    texts = {n: t for n, t in enumerate(GC + WEB + LICENCE, start=1)}
    work = three_children_work()
    asked: list[int] = []

    def vectors(ids: list[int]) -> dict[int, np.ndarray]:
        asked.extend(ids)
        return dict(zip(ids, fake.embed([texts[i] for i in ids]), strict=True))

    labels = meaning.label_batch(work, lambda ids: {i: texts[i] for i in ids if i in texts},
                                 vectors, fake.embed)[9]
    assert set(labels) == {1, 2, 3, 9}
    assert sorted(asked) == list(range(1, 31))
    for kid, branch in zip((1, 2, 3), (GC, WEB, LICENCE), strict=True):
        assert set(words([labels[kid]])) <= set(terms(" ".join(branch))), labels


def test_two_forms_of_one_word_never_share_a_label() -> None:
    cities = [f"The city {n} and its cities' population grew." for n in range(10)]
    labels = choose([cities, WEB])
    keys = words(labels[0])
    assert not {"city", "citie"} <= set(keys), labels
    assert covered.kin("city", "citie") and covered.kin("class", "classe")
    assert not covered.kin("model", "modern") and not covered.kin("bus", "bust")
