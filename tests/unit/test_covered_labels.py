"""Labels checked against the text: 2-5 words most of a branch's passages hold, few stray ones."""

from __future__ import annotations

from psirag_kb.abstracts import covered
from psirag_kb.abstracts.covered import (
    MIN_COVER,
    WORDS_MAX,
    WORDS_MIN,
    Sample,
    label_batch,
    label_children,
    root_label,
)
from psirag_kb.abstracts.labels import Work, child_profile, phrase_key
from psirag_kb.abstracts.routing import LabelBM25, terms
from psirag_kb.tree.sample import spread_leaves

GC = [f"Garbage collection pass {n} frees unreachable objects; the collector tracks memory "
      f"in generations." for n in range(10)]
WEB = [f"URL routing rule {n} maps each request to a view; HTTP caching headers travel with "
       f"the response." for n in range(10)]
LICENCE = [f"The licence grants permission {n} to copy and distribute the software without "
           f"warranty." for n in range(10)]
STRAY = "Doujin gamer ethic and computer magazines appear in this one passage."


def words(label: list[str]) -> list[str]:
    return [phrase_key(w) for item in label for w in terms(item)]


def test_a_stray_phrase_of_one_passage_never_labels_its_branch() -> None:
    branch = [*GC[:9], f"{GC[9]} {STRAY}"]
    labels = label_children(["doujin gamer ethic, garbage collection, computer magazines",
                             "URL routing, HTTP caching"], [branch, WEB])
    assert not {"doujin", "gamer", "ethic", "computer", "magazine"} & set(words(labels[0]))
    assert "garbage" in words(labels[0]) or "collection" in words(labels[0])


def assert_covered_rules(labels: list[list[str]], texts: list[list[str]]) -> None:
    """Each label holds WORDS_MIN to WORDS_MAX words, each held by MIN_COVER of its branch."""
    for label, branch in zip(labels, texts, strict=True):
        found = words(label)
        assert WORDS_MIN <= len(found) <= WORDS_MAX, label
        sample = Sample.of(branch)
        assert all(sample.cover(w) >= MIN_COVER for w in found), label


def test_labels_hold_two_to_five_words_each_in_most_of_the_branch() -> None:
    texts = [GC, WEB, LICENCE]
    assert_covered_rules(label_children(["garbage collection", "URL routing", "licence"], texts),
                         texts)


def test_two_forms_of_one_word_never_share_a_label() -> None:
    cities = [f"The city {n} and its cities' population grew." for n in range(10)]
    labels = label_children(["city, cities", "URL routing"], [cities, WEB])
    assert not {"city", "citie"} <= set(words(labels[0])), labels


def test_a_month_or_a_weekday_never_labels_a_branch() -> None:
    lives = [f"The painter {n} was born on 3 August and died on a Monday in August; her "
             f"portraits hang in galleries." for n in range(10)]
    labels = label_children(["August, painter", "URL routing"], [lives, WEB])
    assert not {"august", "monday"} & set(words(labels[0])), labels
    assert "painter" in words(labels[0]) or "portrait" in words(labels[0]), labels


def test_a_transcripts_markers_and_words_of_speech_never_label_a_branch() -> None:
    meeting = [f"Project Manager: Yeah, {{disfmarker}} I think the remote control {n} needs "
               f"buttons, you know. {{vocalsound}} Okay." for n in range(10)]
    labels = label_children(["remote control, buttons", "URL routing"], [meeting, WEB])
    assert not {"yeah", "think", "know", "okay", "disfmarker", "vocalsound"} & set(
        words(labels[0])), labels
    assert {"remote", "button"} & set(words(labels[0])), labels


def test_what_a_contraction_leaves_never_labels_a_branch() -> None:
    notes = [f"Don't squash commit {n}; don't amend it." for n in range(10)]
    labels = label_children(["squash, commit", "URL routing"], [notes, WEB])
    assert "don" not in words(labels[0]), labels  # "Don" was its third word
    assert {"squash", "commit"} <= set(words(labels[0])), labels


def test_siblings_never_share_their_leading_word() -> None:
    shared = " Python Software Foundation notice."
    texts = [[t + shared for t in GC], [t + shared for t in WEB], [t + shared for t in LICENCE]]
    labels = label_children(["Python Software Foundation"] * 3, texts)
    leads = [phrase_key(label[0].lower()) for label in labels]
    assert len(set(leads)) == 3, labels
    for label in labels:  # every sibling holds it: in no label
        assert not {"python", "software", "foundation"} & set(words(label)), label


def test_a_child_whose_only_phrase_leads_a_sibling_is_named_by_its_passages() -> None:
    big = Sample.of([f"Valgrind documentation, chapter {n}: the core." for n in range(12)])
    small = Sample.of([f"Valgrind documentation: memcheck finds leaks in block {n}."
                       for n in range(6)])
    labels = covered.distinct_leads([["Valgrind Documentation"], ["Valgrind Documentation"]],
                                    [big, small])
    assert labels[0] == ["Valgrind Documentation"], labels
    assert len(labels[1]) == WORDS_MIN and phrase_key(labels[1][0].lower()) not in {
        "valgrind documentation"}, labels
    assert set(words(labels[1])) <= {"memcheck", "leak", "block", "find"}, labels


def test_names_recurring_in_every_branch_name_none_of_them() -> None:
    """Changelog entries by the same authors in each release's branch: the authors name no
    branch; what each branch is about does."""
    authors = " Reported by Nguyen Thai Ngoc Duy and Johannes Schindelin."
    releases = [[f"Release 1.{n}: merge fixes a crash.{authors}" for n in range(12)],
                [f"Valgrind memcheck finds leaks in block {n}.{authors}" for n in range(12)]]
    labels = label_children(["Nguyen Thai Ngoc Duy, Johannes Schindelin"] * 2, releases)
    for label in labels:
        assert not {"nguyen", "thai", "ngoc", "duy", "johannes", "schindelin"} & set(
            words(label)), label
    assert "valgrind" in words(labels[1]) or "memcheck" in words(labels[1])


def test_an_abstract_phrase_whose_words_all_qualify_stands_for_them() -> None:
    labels = label_children(["garbage collection, memory", "URL routing"], [GC, WEB])
    assert "garbage collection" in [item.lower() for item in labels[0]], labels


def test_a_child_labelled_by_its_abstract_avoids_its_siblings_words_while_it_can() -> None:
    """A child too like its siblings to have words of its own is named by its abstract's
    phrases that its passages hold: those without a sibling's label word first."""
    profile = child_profile("copyright notice, garbage collection, memory pools, licence")
    own = Sample.of([f"Copyright notice {n}: the licence covers garbage collection of memory "
                     "pools." for n in range(10)])
    assert covered._fallback(profile, own) == ["copyright notice", "garbage collection"]
    assert covered._fallback(profile, own, {"copyright"}) == ["garbage collection",
                                                              "memory pools"]
    # every phrase holds a sibling's word: the best ones all the same
    assert covered._fallback(profile, own, {"copyright", "garbage", "memory", "licence"}) == [
        "copyright notice", "garbage collection"]


def test_a_child_with_one_word_of_its_own_is_completed_by_what_its_passages_hold() -> None:
    debates = [[f"Members from {place} debate the budget and the housing plan {n}."
                for n in range(10)] for place in ("Quebec", "Ontario")]
    labels = label_children(["", ""], debates)
    for label, own in zip(labels, ("quebec", "ontario"), strict=True):
        found = words(label)
        assert found[0] == own and WORDS_MIN <= len(found) <= WORDS_MAX, labels
    assert_covered_rules(labels, debates)


def test_a_child_whose_abstract_its_passages_do_not_hold_is_named_by_their_words() -> None:
    """A title's phrases lead the abstract, but the passages do not repeat them: the label is
    the words the passages hold most, never the whole abstract."""
    profile = child_profile("meeting 7 transcript, meeting, transcript, speaker, minutes, "
                            "agenda item, notes taken")
    own = Sample.of([f"The grant proposal for acoustic model {n} is due in spring."
                     for n in range(10)])
    label = covered._fallback(profile, own, {"grant"})
    assert words(label) == ["acoustic", "due", "model"], label
    rest = covered._fallback(profile, own, {"proposal", "acoustic", "model", "due", "spring"})
    assert words(rest) == ["grant", "acoustic", "due"], rest  # the siblings' words last


def test_a_child_whose_passages_hold_no_word_gets_a_short_label_not_its_abstract() -> None:
    profile = child_profile("table of figures, results table, column totals, row sums, "
                            "appendix tables, numbered rows")
    own = Sample.of(["12 40 7 | 3 9 1"] * 10)
    label = covered._fallback(profile, own, ())
    assert label and len(words(label)) <= WORDS_MAX, label


def test_labels_route_the_passages_they_were_chosen_from() -> None:
    texts = [GC, WEB, LICENCE]
    labels = label_children(["", "", ""], texts)
    bm25 = LabelBM25([", ".join(label) for label in labels])
    for number, branch in enumerate(texts):
        assert all(bm25.best(text) == number for text in branch), labels


def test_the_root_names_what_most_passages_hold() -> None:
    samples = [Sample.of(GC), Sample.of(WEB), Sample.of(LICENCE)]
    label = root_label(samples, [800, 100, 100], child_profile("garbage collection"))
    assert WORDS_MIN <= len(words(label)) <= WORDS_MAX
    assert words(label)[0] in {"garbage", "collection", "collector", "memory", "generation"}


def three_children_work() -> Work:
    """A batch of one node (9) over three children, each with a sample of ten passages."""
    return Work(nodes=[9], groups=[["garbage collection", "URL routing", "licence"]], shapes={},
                keep_dirty=set(), layer=2, contexts=[], kids=[[1, 2, 3]],
                sizes=[[10, 10, 10]], root=9, samples=[[list(range(1, 11)),
                                                        list(range(11, 21)),
                                                        list(range(21, 31))]])


def test_a_batch_reads_its_samples_and_labels_children_and_root() -> None:
    texts = {n: t for n, t in enumerate(GC + WEB + LICENCE, start=1)}
    work = three_children_work()
    asked: list[int] = []

    def read(ids):
        ids = list(ids)
        asked.extend(ids)
        return {i: texts[i] for i in ids if i in texts}

    labels = label_batch(work, read)[9]
    assert set(labels) == {1, 2, 3, 9}
    assert sorted(asked) == list(range(1, 31))  # the samples only, read once
    assert "garbage" in labels[1].lower() and "routing" in labels[2].lower()


def test_leaves_are_spread_over_a_subtree_by_size() -> None:
    children = {1: [2, 3], 2: [-1, -2, -3, -4, -5, -6], 3: [-7, -8]}
    sizes = {2: 6, 3: 2}
    picked = spread_leaves(1, 4, children.__getitem__, sizes.__getitem__)
    assert picked == [-2, -4, -6, -8]  # 3 of the 6, 1 of the 2, evenly spaced
    assert spread_leaves(1, 20, children.__getitem__, sizes.__getitem__) == [
        -1, -2, -3, -4, -5, -6, -7, -8]
    assert spread_leaves(1, 0, children.__getitem__, sizes.__getitem__) == []


def test_the_sample_per_child_shrinks_with_many_children() -> None:
    assert covered.sample_size(2) == covered.SAMPLE
    assert covered.SAMPLE_MIN <= covered.sample_size(40) < covered.SAMPLE
