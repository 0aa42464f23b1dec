"""Leaf signatures: two trees' nodes over exactly the same chunks match, others do not."""

from __future__ import annotations

from types import SimpleNamespace

from psirag_kb.tree.coverage import signatures


def tree(children: dict[int, list[int]], layer: dict[int, int]) -> SimpleNamespace:
    """The two attributes `signatures` reads of a live tree (leaves are -chunk_id)."""
    return SimpleNamespace(children=children, layer=layer)


def test_the_same_chunks_under_another_grouping_have_the_same_signature() -> None:
    old = tree({1: [-1, -2], 2: [-3, -4], 3: [-5], 4: [1, 2], 5: [4, 3]},
               {1: 1, 2: 1, 3: 1, 4: 2, 5: 3})
    new = tree({7: [-2, -1], 8: [-4, -3, -5], 9: [8, 7]}, {7: 1, 8: 1, 9: 2})
    before, after = signatures(old), signatures(new)
    assert after[7] == before[1]  # {1, 2}, in another order
    assert after[9] == before[5] and after[9][1] == 5  # the roots: every chunk
    assert after[8] not in before.values()  # {3, 4, 5} is no old node's
    assert before[4][1] == 4 and before[4] not in after.values()


def test_signatures_tell_near_sets_apart() -> None:
    sets = [[-i for i in range(start, start + size)] for start in range(1, 60)
            for size in (1, 2, 3, 7)]
    live = tree({n + 1: kids for n, kids in enumerate(sets)}, {n + 1: 1 for n in range(len(sets))})
    found = signatures(live)
    assert len(set(found.values())) == len(sets)
    swapped = tree({1: [-2, -1, -3]}, {1: 1})
    assert signatures(swapped)[1] == found[3]  # chunks 1, 2, 3 in any order
