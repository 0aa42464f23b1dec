"""Contents and index listings rank below the text they point to.

A chunk's contents score is taken once, as it is stored (`storage/contents.py`); here a result
list is only reordered by it: a listing (score at least `LISTING`) gives its place to the next
`DEMOTION` passages ranked below it that are not listings. It is demoted, not removed: it still
shows when little else matches, and not at all demoted for a question that asks for contents.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from psirag_kb.storage.contents import LISTING
from psirag_kb.storage.records import Hit, Ranking

DEMOTION = 10
"""Places a listing gives up to passages that are not listings."""
ASKS_FOR_CONTENTS = re.compile(r"\b(?:(?:table of )?contents|toc|chapters|index pages?)\b", re.I)
"""A question that asks for a contents or index listing (its listings keep their places)."""


def is_listing(hit: Hit | None) -> bool:
    """Whether a chunk is a contents or index listing (by its stored score)."""
    return hit is not None and hit.contents >= LISTING


def below_their_text(ranking: Ranking, hits: Mapping[int, Hit], question: str) -> Ranking:
    """The ranking with every listing moved `DEMOTION` places down among the passages that
    are not listings (their scores are kept, so a listing's may exceed the one above it)."""
    if not len(ranking.ids) or ASKS_FOR_CONTENTS.search(question):
        return ranking
    ids = ranking.ids.tolist()
    listing = [is_listing(hits.get(i)) for i in ids]
    if not any(listing):
        return ranking
    others_above = np.cumsum([not flag for flag in listing])
    # a listing at place p goes after the DEMOTION-th passage below it that is not a listing
    keys = [(others_above[p] + DEMOTION if flag else others_above[p], flag, p)
            for p, flag in enumerate(listing)]
    order = [p for *_, p in sorted(keys)]
    return Ranking(ranking.ids[order], ranking.scores[order])
