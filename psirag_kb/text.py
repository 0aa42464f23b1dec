"""Words of a text: the patterns that split it into words and the stop words left out of them.

Each pattern and list keeps the exact behaviour of the module it came from; they differ on
purpose (digits, inner dots, option dashes), and a change to any one changes that module's output.
"""

from __future__ import annotations

import re

LETTER_WORD = re.compile(r"[^\W\d_]+(?:[-'’][^\W\d_]+)*")
"""Letters only, joined by inner hyphens or apostrophes ("Ritz-Carlton", "don't"); no digits."""
ALNUM_RUN = re.compile(r"[^\W_]+")
"""A run of letters and digits: "debian-releases.csv" is "debian", "releases" and "csv"."""
JOINED_WORD = re.compile(r"[^\W_]+(?:['’.-][^\W_]+)*")
"""Letters and digits joined by apostrophes, dots or hyphens ("it's", "2.6.3", "x86-64")."""
TECHNICAL_WORD = re.compile(r"(?:--?(?=[^\W\d_]))?[^\W_](?:[\w.+#/'’-]*[\w+#])?", re.UNICODE)
"""A word as a technical question writes it: an option's leading dashes, inner dots, slashes,
underscores, a trailing plus or hash ("--track-origins", "ms_print", "C++", "C#", "2.6.3")."""
LOWER_WORD = re.compile(r"\b[a-z][\w'’\-]*")
"""A word written in lower case."""

STOP_WORDS = frozenset("""
a about above across after again against all almost along also although always am among an and
another any anyone anything are around as at away back be became because become becomes been
before being below between both but by can cannot could did do does doing done down during each
either else etc even ever every few for from further get gets got had has have having he her here
hers herself him himself his how however i if in including into is it its itself just known last
later least less like made make many may me might more most much must my myself near never new no
nor not now of off often on once one only onto or other others our ours ourselves out over own per
perhaps rather same several she should since so some still such than that the their theirs them
themselves then there these they this those though through thus to too toward towards under until
up upon us used using very via was we well were what when where whether which while who whom whose
why will with within without would yet you your yours yourself yourselves
according appeared based began begun born called considered created currently described died
directed established featured features followed formed founded held include included includes
joined led located married moved named opened operated owned played previously produced published
received recorded released returned said says served signed sold starred took won worked written
aren couldn didn doesn don hadn hasn haven isn ll mustn needn shouldn ve wasn weren wouldn
""".split())
"""Function words, the verbs of encyclopaedic prose ("born", "founded") and what a contraction
leaves of its first word ("don" of "don't"): never a key phrase's edge nor a label's only word."""

QUESTION_STOP_WORDS = frozenset("""a an the of in on at to for from by with without about into
onto over under and or but nor not no yes so as than then too very just also only even still yet
i me my mine we us our you your yours one ones some any all each every both either neither more
most much many few less least other others another there here please tell show give explain
describe know want need get got use used using make made list find say said mean means meant like
else thing things something anything way ways kind kinds sort type types does do done doing s
about's whats what's hows how's""".split())
"""Words of a request that say nothing about its subject ("please explain what ... means")."""

BM25_STOP_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further had
has have having he her here hers herself him himself his how i if in into is it its itself just
me more most my myself no nor not of off on once only or other our ours ourselves out over own
same she should so some such than that the their theirs them themselves then there these they
this those through to too under until up very was we were what when where which while who whom
why will with would you your yours yourself yourselves
""".split())
"""Words left out of BM25 queries (not of the index): their BM25 weight is near zero, but over a
million chunks each one's postings cost milliseconds to walk. A list of its own, shorter than
STOP_WORDS, so that the same queries keep finding the same passages."""

CLAIM_STOP_WORDS = frozenset("""
a about above after again against all also am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further had
has have having he her here hers him his how i if in into is it its itself just me more most my
no nor not now of off on once only or other our out over own same she should so some such than
that the their them then there these they this those through to too under until up very was we
were what when where which while who whom why will with would you your yours
include includes including covers cover covering describes describe described topics topic
overview summary information documents document text texts key phrases phrase various related
main general details detail list lists section sections using used use based part parts one two
many several other others new well way ways like also
""".split())
"""Words that carry no claim: function words and the vocabulary of describing a text."""
