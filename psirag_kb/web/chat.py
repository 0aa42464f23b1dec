"""The chat view: a person's conversations, each a series of questions and cited answers."""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from psirag_kb.access import Access
from psirag_kb.web.render import cited
from psirag_kb.web.sessions import Session, same_token
from psirag_kb.web.site import MAX_QUERY_CHARS, Web, WebError

CHAT_PASSAGES = 5
"""Passages a chat turn finds (and shows numbered)."""


class Chat:
    """/chat and /chat/<id>: list, open and continue the person's conversations."""

    def __init__(self, web: Web) -> None:
        self.web = web

    async def chat(self, request: Request, session: Session, access: Access) -> Response:
        """GET /chat: the person's conversations and a box that starts a new one."""
        listed = await self.web.call(lambda: self.web.daemon.conversations(access=access))
        return self.web.render(request, "chat.html", session=session, current=None, turns=[],
                               conversations=listed["conversations"])

    async def chat_open(self, request: Request, session: Session, access: Access) -> Response:
        """GET /chat/<id>: one of the person's conversations, its turns and the box that
        continues it (anyone else's id is "not found", as an id that never existed)."""
        ident = conversation_id(request.path_params["conversation"])
        found, listed = await self.web.call(lambda: (
            self.web.daemon.conversation(ident, access=access),
            self.web.daemon.conversations(access=access)))
        return self.web.render(request, "chat.html", session=session, current=found,
                               turns=[chat_turn(t) for t in found["turns"]],
                               conversations=listed["conversations"])

    async def chat_ask(self, request: Request, session: Session, access: Access) -> Response:
        """POST /chat and /chat/<id>: the question `q` asked as the next turn (a new
        conversation without an id), then back to the conversation's page."""
        fields = await self.web.form(request)
        if not same_token(fields.get("csrf"), session.csrf):
            raise WebError(403, "the form's token is wrong; reload the page")
        q = fields.get("q", "").strip()[:MAX_QUERY_CHARS]
        if not q:
            raise WebError(400, "the question is empty")
        raw = request.path_params.get("conversation")
        ident = None if raw is None else conversation_id(raw)

        def run() -> str:
            target = ident or self.web.daemon.new_conversation("", access=access)["id"]
            self.web.daemon.ask(q, conversation=target, mode="agent", k=CHAT_PASSAGES,
                                access=access)
            return target

        target = await self.web.call(run)
        return RedirectResponse(f"/chat/{target}#turn-last", 303)


def chat_turn(turn: dict[str, Any]) -> dict[str, Any]:
    """A stored turn as the chat page shows it: numbered passages, the answer's [n] linked to
    their source view, passages no longer readable marked as withheld."""
    passages = []
    for index, passage in enumerate(turn.get("passages") or [], start=1):
        passages.append({**passage, "number": int(passage.get("number") or index),
                         "id": passage.get("chunk_id")})
    numbers = {p["number"]: p for p in passages if not p.get("withheld")}
    answer = turn.get("answer")
    return {**turn, "passages": passages,
            "answer_html": cited(answer, numbers) if isinstance(answer, str) and answer
            else None}


def conversation_id(raw: str) -> str:
    """A conversation id from a page address (404 for one that cannot be an id)."""
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", raw):
        raise WebError(404, f"no conversation {raw!r}")
    return raw
