"""The declarative route table of the HTTP API: each route's methods, typed path, handler and
description, matched on the undecoded path; the OpenAPI document is generated from it."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["NotFound", "PARAM_TYPES", "Route", "match", "route", "routes_of"]

PARAM_TYPES: dict[str, str] = {"str": r"[^/]+", "int": r"\d{1,18}", "signed": r"-?\d{1,18}"}
"""A path parameter's type -> the pattern its segment must match (else 404)."""
_PARAM = re.compile(r"^\{([a-z_][a-z0-9_]*)(?::(str|int|signed))?\}$")


class NotFound(Exception):
    """A path parameter that is not of its type (answered 404 "no <noun> <segment>")."""


@dataclass(frozen=True)
class Route:
    """One route: methods, path pattern (`/api/tree/{node_id:signed}`), handler and docs."""

    methods: tuple[str, ...]
    path: str
    handler: Callable[..., Any]
    summary: str
    body: dict[str, type] | None = None
    """The JSON body's fields and types (checked by `validate` when the handler reads it)."""
    required: tuple[str, ...] = ()
    query: dict[str, type] = field(default_factory=dict)
    """Query-string parameters (documented; the handler parses them)."""
    response: str = "a JSON object"
    media: str = "application/json"
    """The success response's media type (NDJSON or server-sent events when streamed)."""
    open: bool = False
    """Served without a token (its handler must show an anonymous caller less)."""
    noun: str = ""
    """What a typed path parameter names, for its 404 ("tree node")."""
    schema: dict[str, Any] | None = None
    """A request body schema for OpenAPI when the body is not a flat field dict."""
    errors: str = "json"
    """The error shape of this route: "json" ({"error": message}) or "openai"."""

    @property
    def segments(self) -> tuple[tuple[str, str | None], ...]:
        """The path's segments: (literal, None) or (name, type)."""
        out: list[tuple[str, str | None]] = []
        for part in self.path.strip("/").split("/"):
            param = _PARAM.match(part)
            out.append((param.group(1), param.group(2) or "str") if param else (part, None))
        return tuple(out)

    @property
    def params(self) -> dict[str, str]:
        """Path parameter name -> type."""
        return {name: kind for name, kind in self.segments if kind is not None}

    def bind(self, raw: dict[str, str]) -> dict[str, Any]:
        """The path parameters converted to their types (NotFound when one is not)."""
        out: dict[str, Any] = {}
        for name, kind in self.params.items():
            value = raw[name]
            if not re.fullmatch(PARAM_TYPES[kind], value):
                raise NotFound(f"no {self.noun or name} {value}")
            out[name] = value if kind == "str" else int(value)
        return out


def match(table: Iterable[Route], path: str) -> list[tuple[Route, dict[str, str]]]:
    """The routes whose pattern fits `path` (raw segments), the most literal ones only."""
    parts = path.strip("/").split("/") if path.startswith("/") else None
    if parts is None:
        return []
    found: list[tuple[int, Route, dict[str, str]]] = []
    for entry in table:
        segments = entry.segments
        if len(segments) != len(parts) or path.endswith("/") != entry.path.endswith("/"):
            continue
        raw: dict[str, str] = {}
        literals = 0
        for (name, kind), part in zip(segments, parts, strict=True):
            if kind is None:
                if name != part:
                    break
                literals += 1
            elif not part:
                break
            else:
                raw[name] = part
        else:
            found.append((literals, entry, raw))
    if not found:
        return []
    best = max(literals for literals, _, _ in found)
    return [(entry, raw) for literals, entry, raw in found if literals == best]


def route(methods: str | tuple[str, ...], path: str, summary: str,
          **details: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a handler method as serving `methods` on `path` (see `Route` for details)."""
    verbs = (methods,) if isinstance(methods, str) else tuple(methods)

    def mark(handler: Callable[..., Any]) -> Callable[..., Any]:
        declared = getattr(handler, "__routes__", ())
        handler.__routes__ = (*declared, (verbs, path, summary, details))  # type: ignore[attr-defined]
        return handler

    return mark


def routes_of(cls: type) -> tuple[Route, ...]:
    """Every route declared with `@route` on the methods of `cls`, in definition order."""
    table: list[Route] = []
    for klass in reversed(cls.__mro__):
        for handler in vars(klass).values():
            for verbs, path, summary, details in getattr(handler, "__routes__", ()):
                table.append(Route(verbs, path, handler, summary, **details))
    seen: set[tuple[str, str]] = set()
    for entry in table:
        for verb in entry.methods:
            key = (verb, re.sub(r"\{[^}]*\}", "{}", entry.path))
            if key in seen:
                raise ValueError(f"two routes for {verb} {entry.path}")
            seen.add(key)
    return tuple(table)
