"""Prompts of the retrieve-and-answer agent and of summaries (after the paper's Appendix C.3)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psirag_kb.locations import place

THOUGHT_WORDS = 120
"""Upper bound on the words of the agent's reasoning."""
SUMMARY_WORDS = 200
"""Upper bound on the words of a summary."""

EXAMPLE_FIRST = """\
User:
Retrieved documents:
[1] (Hotel Tallcorn) The Hotel Tallcorn is located in Marshalltown, Iowa...
[2] (Hotel Bond) Hotel Bond is a historic hotel, built in two stages in 1913 and 1921...
Question: The Oberoi family is part of a hotel company that has a head office in what city?
Retrieval attempts remaining: 2
Assistant:
"""
"""The one-shot example's first turn (shared by both protocols)."""
EXAMPLE_SECOND = """\
User:
Retrieved documents:
[3] (The Oberoi Group) The Oberoi Group is a hotel company with its head office in Delhi...
[4] (Mohan Singh Oberoi) Rai Bahadur Mohan Singh Oberoi founded Oberoi Hotels & Resorts...
Question: The Oberoi family is part of a hotel company that has a head office in what city?
Retrieval attempts remaining: 1
Assistant:
"""
"""The one-shot example's second turn."""

EXAMPLE_ENTITIES = frozenset(
    "Tallcorn Marshalltown Iowa Oberoi Mohan Singh Bahadur Delhi Hartford Resorts".split())
"""Names of the one-shot example an answer may hold only when the passages or question do."""

AGENT_SYSTEM = """\
You are a careful reading-comprehension and retrieval agent. You answer the user's question \
from numbered documents, reasoning step by step and asking for more documents when needed.

Rules:
1. Begin with "Thought: " and reason step by step about what the documents say and what is \
still missing. When you rely on a document, cite its number in square brackets, e.g. [2].
2. Some documents are given to you at the start. You may ask for more documents at most the \
number of times stated as "Retrieval attempts remaining". If a fact you need is missing, or the \
question mentions something you cannot place, reply "Retrieve: <query>", where <query> is one \
precise sub-question or search phrase that must be resolved to answer the user's question. \
Enrich it with what you already know (for example "the American film producer David Gest" \
rather than "David Gest") so the search finds the right documents.
3. New documents arrive as "Retrieved documents: ...". Continue reasoning from the question, \
your earlier reasoning and every document so far. Use as few retrievals as you can; if new \
documents did not help, rephrase your query instead of repeating it.
4. If no retrieval attempts remain and the documents still do not contain the answer, reply \
"Answer: Not mentioned" and nothing else. Never guess or add uncertain information.
5. End your reply with exactly one final line: "Answer: <answer>" or "Retrieve: <query>". \
An answer is usually a short phrase or a name; avoid hedges like "approximately".
6. Keep the Thought under {thought_words} words.

Example.
""" + EXAMPLE_FIRST + """\
Thought: I first need the hotel company the Oberoi family belongs to. Neither document \
mentions the Oberoi family.
Retrieve: Which hotel company is the Oberoi family of India part of?
""" + EXAMPLE_SECOND + """\
Thought: Mohan Singh Oberoi founded Oberoi Hotels & Resorts [4], whose company, The Oberoi \
Group, has its head office in Delhi [3].
Answer: Delhi"""

AGENT_SYSTEM_JSON = """\
You are a careful reading-comprehension and retrieval agent. You answer the user's question \
from numbered documents, asking for more documents when needed.

Reply with one JSON object and nothing else: \
{{"action": "answer" or "retrieve" or "not_mentioned", "text": "...", "cited": [numbers]}}
- "answer": the documents answer the question. "text" is the answer, usually a short phrase or \
a name, with no hedges; "cited" lists the numbers of the documents it rests on.
- "retrieve": a fact you need is missing, or the question mentions something you cannot place. \
"text" is one precise sub-question or search phrase that must be resolved to answer the \
question, enriched with what you already know (for example "the American film producer David \
Gest" rather than "David Gest"). You may retrieve at most the number of times stated as \
"Retrieval attempts remaining"; if new documents did not help, rephrase instead of repeating.
- "not_mentioned": no retrieval attempts remain and the documents do not contain the answer. \
Never guess or add uncertain information.

Example.
""" + EXAMPLE_FIRST + """\
{{"action": "retrieve", "text": "Which hotel company is the Oberoi family of India part of?", \
"cited": []}}
""" + EXAMPLE_SECOND + """\
{{"action": "answer", "text": "Delhi", "cited": [3, 4]}}"""

MUST_ANSWER = (
    "Retrieval attempts remaining: 0. You cannot retrieve any more: reply with your Thought and "
    "end with \"Answer: <answer>\", or \"Answer: Not mentioned\" if the documents do not say."
)
MUST_ANSWER_JSON = (
    "Retrieval attempts remaining: 0. You cannot retrieve any more: reply with action "
    "\"answer\", or \"not_mentioned\" if the documents do not say."
)
NO_RETRIEVAL_LEFT = (
    "No retrieval attempts remain, so that retrieval was not run. Answer from the documents "
    "above: end with \"Answer: <answer>\", or \"Answer: Not mentioned\" if they do not say."
)
NO_RETRIEVAL_LEFT_JSON = (
    "No retrieval attempts remain, so that retrieval was not run. Answer from the documents "
    "above with action \"answer\", or \"not_mentioned\" if they do not say."
)
FORMAT_REMINDER = (
    "Your reply did not end with a line \"Answer: <answer>\" or \"Retrieve: <query>\". Reply "
    "again: \"Thought: ...\" and then exactly one of those two lines."
)
FORMAT_REMINDER_JSON = (
    "Your reply could not be used ({problem}). Reply again with only one JSON object: "
    "{{\"action\": \"answer\" or \"retrieve\" or \"not_mentioned\", \"text\": \"...\", "
    "\"cited\": [numbers]}}."
)
QUERY_IS_QUESTION = (
    "That query is the question itself, so it was not run: it would find the same documents. "
    "Retrieve one precise fact that is still missing (a name, a place, a sub-question), or "
    "answer: end with \"Retrieve: <query>\" or \"Answer: <answer>\"."
)
QUERY_IS_QUESTION_JSON = (
    "That query is the question itself, so it was not run: it would find the same documents. "
    "Retrieve one precise fact that is still missing (a name, a place, a sub-question), or "
    "answer, with one JSON object."
)
NOTHING_NEW = "none new (the best matches are documents {numbers} above)."

SUMMARY_SYSTEM = """\
You are a careful reading-comprehension agent writing summaries. The user gives a request and \
documents retrieved for it; each document starts with an [ID] that gives its order in the \
collection, so together they are a condensed version of a longer text.

Requirements:
1. Arrange the documents into one logically ordered summary of the main content that answers \
the request.
2. Make it complete and coherent: a single self-contained paragraph that lets the user grasp \
the content without the documents. Cite the IDs you draw on in square brackets, e.g. [3].
3. Add nothing the documents do not say: no guesses, no outside knowledge.
4. Write no more than {summary_words} words and start directly with the summary."""


def label(passage: dict[str, Any]) -> str:
    """Where a passage comes from: `source slide 3` or `source:first-last` for files, the corpus
    id otherwise."""
    return place(passage)


def documents(passages: Sequence[tuple[int, dict[str, Any]]]) -> str:
    """Numbered documents, each with its source: `[n] (source) text`."""
    return "\n".join(f"[{n}] ({label(p)}) {' '.join(str(p['text']).split())}"
                     for n, p in passages)


def agent_system(structured: bool = False) -> str:
    """The agent's system prompt, for JSON replies or for the text protocol."""
    if structured:
        return AGENT_SYSTEM_JSON.format()
    return AGENT_SYSTEM.format(thought_words=THOUGHT_WORDS)


def agent_turn(question: str, docs: str, remaining: int, structured: bool = False) -> str:
    """One user turn: the new documents, the question and the retrieval budget left."""
    must = MUST_ANSWER_JSON if structured else MUST_ANSWER
    budget = must if remaining <= 0 else f"Retrieval attempts remaining: {remaining}"
    return f"Retrieved documents:\n{docs}\nQuestion: {question}\n{budget}"


def no_retrieval_left(structured: bool = False) -> str:
    """The turn refusing a retrieval asked for at the cap."""
    return NO_RETRIEVAL_LEFT_JSON if structured else NO_RETRIEVAL_LEFT


def query_is_question(structured: bool = False) -> str:
    """The turn refusing a retrieval whose query is the question again."""
    return QUERY_IS_QUESTION_JSON if structured else QUERY_IS_QUESTION


def format_reminder(problem: str, structured: bool = False) -> str:
    """The turn asking again after a reply that could not be used."""
    return FORMAT_REMINDER_JSON.format(problem=problem) if structured else FORMAT_REMINDER


def summary_messages(request: str, passages: Sequence[tuple[int, dict[str, Any]]]
                     ) -> list[dict[str, str]]:
    """The chat asking for a summary of passages given in corpus order."""
    body = "\n".join(f"[{n}] {' '.join(str(p['text']).split())}" for n, p in passages)
    return [
        {"role": "system", "content": SUMMARY_SYSTEM.format(summary_words=SUMMARY_WORDS)},
        {"role": "user", "content": f"Documents:\n{body}\n\nRequest: {request}"},
    ]
