"""The HTTP API's request models: each operation's JSON body or query string, checked by
pydantic and refused with the API's 400 messages."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from psirag_kb.serving import openai_compat as chat
from psirag_kb.storage.backup import NAME, BackupError, backup_name

__all__ = ["Invalid", "parse", "parse_query"]

MAX_K = 1000
MAX_SCOPES = 100
MAX_HISTORY = 200
"""Earlier turns or messages an /api/ask body may carry."""
MAX_NEIGHBOURS = 20
_KINDS = {"string_type": "str", "int_type": "int", "bool_type": "bool", "list_type": "list",
          "dict_type": "dict", "float_type": "float"}
"""A pydantic type error -> the type named in "field 'x' must be of type T"."""


class Invalid(Exception):
    """A request the API refuses with 400 and this message."""


def _refuse(message: str) -> PydanticCustomError:
    return PydanticCustomError("refused", message)


def check_text(key: str, value: str) -> None:
    """Refuse a string holding a lone surrogate escape (it has no UTF-8 form)."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise Invalid(f"field {key!r} is not valid Unicode (a lone surrogate "
                          "escape)") from None


def _k(k: int | None) -> int | None:
    if k is not None and not 1 <= k <= MAX_K:
        raise _refuse(f"k must be between 1 and {MAX_K}")
    return k


def _scopes(value: list[Any] | None) -> list[str] | None:
    """The "in" field: absolute paths of folders or files results must lie under."""
    if value is None:
        return None
    if not value or len(value) > MAX_SCOPES:
        raise _refuse(f"field 'in' must list 1 to {MAX_SCOPES} paths")
    for item in value:
        if not isinstance(item, str):
            raise _refuse("field 'in' must be a list of strings")
        _checked("in", item)
        if not item.startswith("/") or "\x00" in item:
            raise _refuse(f"field 'in' takes absolute paths; got {item!r}")
    return value


def _paths(value: list[Any] | None) -> list[str] | None:
    """A list of grant paths."""
    if value is None:
        return None
    if len(value) > MAX_SCOPES or not all(isinstance(v, str) for v in value):
        raise _refuse(f"field 'read' must list up to {MAX_SCOPES} path strings")
    for item in value:
        _checked("read", item)
    return value


def _checked(key: str, value: str) -> None:
    try:
        check_text(key, value)
    except Invalid as exc:
        raise _refuse(str(exc)) from None


class Body(BaseModel):
    """A JSON body: strict types, no unknown fields, null taken as absent when optional."""

    model_config = ConfigDict(strict=True, extra="forbid", populate_by_name=True)

    def args(self) -> dict[str, Any]:
        """The keyword arguments of the app method it calls."""
        return self.model_dump()


class QueryBody(Body):
    """POST /api/query."""

    text: str
    mode: str | None = None
    k: int | None = None
    summarize: bool | None = None
    within: list[Any] | None = Field(None, alias="in",
                                     description="absolute paths results must lie under")

    _k = field_validator("k")(_k)
    _in = field_validator("within")(_scopes)

    def args(self) -> dict[str, Any]:
        """text, mode, k, summarize (false when absent) and within."""
        return {"text": self.text, "mode": self.mode, "k": self.k,
                "summarize": bool(self.summarize or False), "within": self.within}


class PathBody(Body):
    """POST /api/reindex and /api/forget."""

    path: str


class AnswerBody(Body):
    """POST /api/answer."""

    text: str
    k: int | None = None

    _k = field_validator("k")(_k)

    @model_validator(mode="after")
    def _asked(self) -> AnswerBody:
        if not self.text.strip():
            raise _refuse("the query is empty")
        return self


class UserBody(Body):
    """POST /api/users."""

    name: str
    role: str | None = None
    read: list[Any] | None = None

    _read = field_validator("read")(_paths)


class GrantBody(Body):
    """POST /api/users/{name}/grant and /ungrant."""

    read: list[Any]

    _read = field_validator("read")(_paths)

    @model_validator(mode="after")
    def _some(self) -> GrantBody:
        if not self.read:
            raise _refuse("field 'read' must list at least one path")
        return self


class TitleBody(Body):
    """POST /api/conversations (the title defaults to the first question)."""

    title: str | None = None

    def args(self) -> dict[str, Any]:
        """The title ("" when absent)."""
        return {"title": self.title or ""}


class RenameBody(Body):
    """PATCH /api/conversations/{conversation_id}."""

    title: str


class TurnBody(Body):
    """POST /api/conversations/{conversation_id}/turns."""

    question: str = Field(alias="q")
    mode: str | None = None
    k: int | None = None
    within: list[Any] | None = Field(None, alias="in",
                                     description="absolute paths results must lie under")

    _k = field_validator("k")(_k)
    _in = field_validator("within")(_scopes)

    @model_validator(mode="after")
    def _asked(self) -> TurnBody:
        if not self.question.strip():
            raise _refuse("field 'q' is empty")
        return self

    def args(self) -> dict[str, Any]:
        """question, mode and k, and within when given."""
        extra = {} if self.within is None else {"within": self.within}
        return {"question": self.question, "mode": self.mode, "k": self.k, **extra}


class AskBody(Body):
    """POST /api/ask: a turn after the earlier ones given."""

    question: str = Field(alias="q")
    history: list[Any] | None = None
    mode: str | None = None
    k: int | None = None
    within: list[Any] | None = Field(None, alias="in",
                                     description="absolute paths results must lie under")

    _k = field_validator("k")(_k)
    _in = field_validator("within")(_scopes)

    @model_validator(mode="after")
    def _asked(self) -> AskBody:
        if not self.question.strip():
            raise _refuse("field 'q' is empty")
        return self

    @field_validator("history")
    @classmethod
    def _bounded(cls, value: list[Any] | None) -> list[Any] | None:
        if value is not None and len(value) > MAX_HISTORY:
            raise _refuse(f"field 'history' holds at most {MAX_HISTORY} turns")
        return value

    def args(self) -> dict[str, Any]:
        """The turn's arguments and its history."""
        extra = {} if self.within is None else {"within": self.within}
        return {"question": self.question, "mode": self.mode, "k": self.k,
                "history": self.history or [], **extra}


class NameBody(Body):
    """POST /api/me/tokens."""

    name: str


class BackupBody(Body):
    """POST /api/backup: the backup's name; it lands in the daemon's [backup] dir."""

    name: str = Field(pattern=f"^{NAME.pattern}$", min_length=1, max_length=64,
                      description="the backup's folder name under the daemon's [backup] dir "
                                  "(a name, not a path)")

    @field_validator("name", mode="before")
    @classmethod
    def _named(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                backup_name(value)
            except BackupError as exc:
                raise _refuse(str(exc)) from None
        return value


class ReembedBody(Body):
    """POST /api/reembed: {"model": NAME_OR_FOLDER} or {"cancel": true}; the daemon takes a
    folder only inside its [embedding] models_dir (service/model_folders.py)."""

    model: str | None = None
    cancel: bool | None = None

    @model_validator(mode="after")
    def _either(self) -> ReembedBody:
        if not self.cancel and not self.model:
            raise _refuse('give "model" (a model name or folder) or "cancel": true')
        return self

    def args(self) -> dict[str, Any]:
        """model ("" to cancel) and cancel."""
        return {"model": self.model or "", "cancel": bool(self.cancel)}


class ChunkQuery(BaseModel):
    """GET /api/chunk/{chunk_id}'s query string."""

    model_config = ConfigDict(extra="ignore")

    neighbours: int = Field(0, ge=0, le=MAX_NEIGHBOURS,
                            description="chunks each side in the file")

    @field_validator("neighbours", mode="before")
    @classmethod
    def _whole(cls, raw: Any) -> int:
        if isinstance(raw, str) and (not raw.isdigit() or int(raw) > MAX_NEIGHBOURS):
            raise _refuse(f"neighbours must be a whole number from 0 to {MAX_NEIGHBOURS}")
        return int(raw)

    def args(self) -> dict[str, Any]:
        """neighbours."""
        return self.model_dump()


class ChatMessage(BaseModel):
    """One message of a chat-completions request."""

    model_config = ConfigDict(extra="allow")

    role: Literal[chat.ROLES]  # type: ignore[valid-type]
    content: str | list[Any] | None = None


class ChatBody(BaseModel):
    """POST /v1/chat/completions (read by openai_compat.parse, in OpenAI's error shape);
    sampling options (temperature, max_tokens, ...) are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: Literal[chat.MODEL]  # type: ignore[valid-type]
    stream: bool | None = None
    messages: list[ChatMessage] = Field(min_length=1, max_length=chat.MAX_MESSAGES)


def parse(model: type[Body], body: Any) -> Body:
    """A JSON body checked against `model` (Invalid with the API's message when it is not)."""
    if not isinstance(body, dict):
        raise Invalid("the body must be a JSON object")
    try:
        return _checked_text(model.model_validate(body), body)
    except ValidationError as exc:
        raise Invalid(_message(model, exc, body)) from None


def _checked_text(parsed: Body, body: dict[str, Any]) -> Body:
    for key, value in body.items():
        if isinstance(value, str):
            check_text(key, value)
    return parsed


def parse_query(model: type[BaseModel], params: dict[str, str]) -> BaseModel:
    """A query string checked against `model`."""
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        raise Invalid(_message(model, exc, params)) from None


def _message(model: type[BaseModel], exc: ValidationError, body: dict[str, Any]) -> str:
    """The API's message for the first of a body's errors: unknown fields, then missing ones,
    then a wrong type or text without a UTF-8 form (in the body's order), then values out of
    bounds."""
    known = [field.alias or name for name, field in model.model_fields.items()]
    errors = exc.errors()
    unknown = sorted(str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden")
    if unknown:
        return f"unknown field(s) {', '.join(unknown)}; known: {', '.join(known)}"
    for error in errors:
        if error["type"] == "missing":
            return f"missing field {error['loc'][0]!r}"
    kinds = {e["loc"][0]: _KINDS[e["type"]] for e in errors
             if e["type"] in _KINDS and len(e["loc"]) == 1}
    for key, value in body.items():
        if key in kinds:
            return f"field {key!r} must be of type {kinds[key]}"
        if isinstance(value, str):
            try:
                check_text(key, value)
            except Invalid as refused:
                return str(refused)
    first = errors[0]
    if first["type"] == "refused":
        return str(first["msg"])
    where = ".".join(str(part) for part in first["loc"])
    return f"field {where!r}: {first['msg']}" if where else str(first["msg"])
