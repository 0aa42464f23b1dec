"""Topic labels: distinctive among siblings, heading-like, never shared, 3-5 phrases."""

from __future__ import annotations

import pytest

from psirag_kb.abstracts.labels import (
    LABEL_MAX,
    LABEL_MIN,
    Profile,
    Work,
    child_profile,
    is_heading_like,
    label_batch,
    offline_abstracts,
    passage_profile,
    phrase_key,
    sibling_labels,
)
from psirag_kb.abstracts.routing import LabelBM25

BOILERPLATE = ("This page is part of the Project Handbook. Copyright Notice applies to every "
               "page of the Project Handbook; see the Copyright Notice for details.")

TOPICS = {
    "memory": [
        "Garbage collection frees unreachable objects. The garbage collector runs in generations.",
        "Reference counting keeps each object alive while references exist; garbage collection "
        "breaks reference cycles.",
        "## Memory allocators\nMemory allocators hand out memory blocks; reference counting and "
        "garbage collection give them back.",
    ],
    "web": [
        "HTTP caching keeps responses near the client. A cache validates responses with ETags.",
        "Request routing maps each URL to a view; HTTP caching headers travel with responses.",
        "## URL routing\nURL routing picks a view for every request; HTTP caching applies to GET.",
    ],
    "licences": [
        "The software licence grants permission to copy and distribute the work without warranty.",
        "Disclaimer of warranty: the licence gives no warranty; the licensor is not liable.",
        "## Patent licence\nThe software licence includes a patent licence from each contributor.",
    ],
}


def topic_profiles(boilerplate: bool = True) -> list[Profile]:
    return [passage_profile([f"{text}\n{BOILERPLATE}" if boilerplate else text
                             for text in texts]) for texts in TOPICS.values()]


def words_of(label: list[str]) -> str:
    return " ".join(label).lower()


def test_a_distinctive_phrase_wins_over_boilerplate_every_sibling_shares() -> None:
    labels = sibling_labels(topic_profiles())
    for label in labels:
        assert "handbook" not in words_of(label) and "copyright" not in words_of(label)
    assert "garbage collection" in words_of(labels[0])
    assert "http caching" in words_of(labels[1])
    assert "licence" in words_of(labels[2])


def test_boilerplate_is_heavier_than_any_topic_yet_left_out() -> None:
    profiles = topic_profiles()
    handbook = phrase_key("Project Handbook")
    for profile in profiles:  # the boilerplate is every child's heaviest phrase...
        assert profile.weights[handbook] >= max(profile.weights.values()) * 0.5
    for label in sibling_labels(profiles):  # ...and no label names it
        assert all("Handbook" not in phrase for phrase in label)


def test_no_phrase_or_word_sequence_is_repeated_across_siblings() -> None:
    shared = "Garbage collection and HTTP caching and the software licence are all here. "
    profiles = [passage_profile([shared * 2 + t for t in texts]) for texts in TOPICS.values()]
    labels = sibling_labels(profiles)
    keys = [{phrase_key(p) for p in label} for label in labels]
    for i, mine in enumerate(keys):
        for j, theirs in enumerate(keys):
            if i == j:
                continue
            assert not mine & theirs
            for a in mine:
                for b in theirs:
                    assert not set(a.split()) <= set(b.split()), (a, b)


def test_display_labels_hold_three_to_five_phrases() -> None:
    assert (LABEL_MIN, LABEL_MAX) == (3, 5)
    for label in sibling_labels(topic_profiles()):
        assert LABEL_MIN <= len(label) <= LABEL_MAX
        assert len({phrase_key(p) for p in label}) == len(label)


CODE_PASSAGE = """Guessing game
The guessing game compares a secret number with each guess.

```rust
pub struct Guess {
    value: i32,
}
impl Guess { pub fn new(value: i32) -> Guess { Guess { value } } }
```

Call `Guess::new` or `self.data.items()` to build one; PyMem_RawMalloc and getElementById
and MT19937 are identifiers, https://example.org/docs/guess.html is a link.
    let secret_number = rand::thread_rng().gen_range(1..=100);
The guessing game ends when a guess matches the secret number.
"""


def test_no_code_fragment_identifier_or_link_becomes_a_phrase() -> None:
    profile = passage_profile([CODE_PASSAGE])
    phrases = [profile.form(k) for k in profile.weights]
    assert "guessing game" in profile.weights and "secret number" in profile.weights
    joined = " | ".join(phrases).lower()
    for fragment in ("pub struct", "struct guess", "value", "impl", "self", "pymem",
                     "rawmalloc", "getelementbyid", "mt19937", "https", "example.org",
                     "secret_number", "thread_rng", "gen_range", "let"):
        assert fragment not in joined.split(" | "), fragment
        assert not any(fragment in p.split() for p in joined.split(" | ")
                       if fragment not in ("value",)), fragment


@pytest.mark.parametrize("phrase,ok", [
    ("Garbage collection", True), ("GNU General Public License", True),
    ("getElementById", False), ("MT19937", False), ("2.0 release", False),
    ("following", False), ("Specifically Ignoring", False), ("example values", False),
])
def test_heading_like_phrases(phrase: str, ok: bool) -> None:
    assert is_heading_like(phrase) is ok


def test_labels_route_passages_to_their_topic() -> None:
    labels = sibling_labels(topic_profiles())
    bm25 = LabelBM25([", ".join(label) for label in labels])
    for number, texts in enumerate(TOPICS.values()):
        for text in texts:
            assert bm25.best(text) == number


def test_a_batch_labels_the_children_of_each_node_and_the_root_itself() -> None:
    lists = offline_abstracts(Work(
        nodes=[1, 2, 3], groups=list(TOPICS.values()), shapes={}, keep_dirty=set(), layer=1,
        contexts=[[], [], []], kids=[], sizes=[], root=None))
    assert all(0 < len(text.split(", ")) <= 30 for text in lists)
    work = Work(nodes=[9], groups=[lists], shapes={}, keep_dirty=set(), layer=2, contexts=[],
                kids=[[1, 2, 3]], sizes=[[3, 3, 3]], root=9)
    labels = label_batch(work)[9]
    assert set(labels) == {1, 2, 3, 9}
    assert "garbage collection" in labels[1].lower()
    # the root's label names each child's topic: a phrase heading each child's list
    root = {phrase_key(p) for p in labels[9].split(", ")}
    for text in lists:
        assert root & {phrase_key(p) for p in text.split(", ")[:5]}, (labels[9], text)


def test_a_keyword_list_child_counts_its_first_phrases_most() -> None:
    profile = child_profile("alpha topic, beta topic, gamma topic")
    weights = [profile.weights[phrase_key(p)] for p in ("alpha topic", "beta topic",
                                                        "gamma topic")]
    assert weights == sorted(weights, reverse=True) and weights[0] > weights[-1]


LISTS = {  # root children's long lists (their offline abstracts) and leaves under each
    "gpl": ("License, Source Code Form, Covered Software, patent, Corresponding Source, "
            "covered work, Disclaimer of Warranty", 300),
    "spdx": ("License, Historical Permission Notice, Open Software License, Creative Commons "
             "Attribution, FSF Unlimited License, variant", 700),
    "capi": ("Python, API Reference Manual, memory block, History FAQ, Glossary, Weak "
             "references, reference counting", 800),
    "tutorial": ("Python, Classes, Class Objects, namespace, scopes, inheritance", 250),
    "flask": ("Flask, Application Context, template, Accessing Request Data, response, "
              "blueprint", 230),
}


def root_of(lists: dict[str, tuple[str, int]]) -> tuple[list[str], dict[int, str]]:
    work = Work(nodes=[9], groups=[[text for text, _ in lists.values()]], shapes={},
                keep_dirty=set(), layer=2, contexts=[], kids=[list(range(1, len(lists) + 1))],
                sizes=[[size for _, size in lists.values()]], root=9)
    labels = label_batch(work)[9]
    return labels[9].split(", "), labels


def test_the_root_names_what_groups_of_children_hold_in_one_line() -> None:
    root, labels = root_of(LISTS)
    keys = [phrase_key(p) for p in root]
    assert LABEL_MIN <= len(root) <= LABEL_MAX
    # the names several children share come first: one phrase for the licences, one for Python
    assert set(keys[:3]) == {"python", "license", "flask"}, root
    for text, _ in LISTS.values():  # every child is named by a phrase heading its list
        assert any(k in {phrase_key(p) for p in text.split(", ")[:5]} for k in keys), text
    for a in keys:  # no phrase holds another's words
        for b in keys:
            assert a == b or not set(a.split()) <= set(b.split()), (a, b)
    # the children's labels still say what sets each apart
    assert "license" not in {phrase_key(p) for p in labels[1].split(", ")}


def test_a_kind_that_ends_many_phrases_names_its_branch_in_the_root_line() -> None:
    lists = {  # one branch of dataset pages, whose first phrase is one dataset's name
        "datasets": ("newsgroups text dataset, dataset, Iris plants dataset, Wine recognition "
                     "dataset, samples, features, classes", 300),
        "rust": ("Guessing Game, Rust, secret number, Compound Types, ownership", 300),
        "licences": ("License, Source Code Form, Covered Software, patent", 300),
    }
    root, _ = root_of(lists)
    assert "dataset" in [phrase_key(p) for p in root], root
    assert not any("newsgroups" in p for p in root), root


def test_a_label_lists_its_names_and_titles_first() -> None:
    labels = sibling_labels(topic_profiles(boilerplate=False))
    for label in labels:  # the same phrases, names and titles first (routing reads a bag)
        capitals = [p[:1].isupper() for p in label]
        assert capitals == sorted(capitals, reverse=True), label
    assert any(p[:1].isupper() for p in labels[2]), labels[2]
