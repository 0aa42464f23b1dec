"""The OpenAPI 3.1 description of the HTTP API, generated from its route table."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from psirag_kb.service.routes import PARAM_TYPES, Route

__all__ = ["openapi"]

_TYPES: dict[type, dict[str, Any]] = {
    str: {"type": "string"}, int: {"type": "integer"}, bool: {"type": "boolean"},
    float: {"type": "number"}, list: {"type": "array", "items": {"type": "string"}},
    dict: {"type": "object"},
}
_ERRORS = {
    "json": {"type": "object", "required": ["error"],
             "properties": {"error": {"type": "string"}}},
    "openai": {"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["message", "type"],
        "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                       "code": {"type": ["string", "null"]},
                       "param": {"type": ["string", "null"]}}}}},
}
_UNAVAILABLE = {
    "type": "object", "description": "While the daemon starts: what runs (state `waiting`, "
    "`restoring`, `starting` or `migrating`) and why, on /api/ready as `reasons`, on every other "
    "route as `error`.",
    "properties": {"error": {"type": "string"}, "state": {"type": "string"},
                   "ready": {"type": "boolean"},
                   "reasons": {"type": "array", "items": {"type": "string"}}},
}
_STARTING = ("the daemon is not serving yet (waiting for a restore or a command, migrating the "
             "schema, opening its stores) or an index is rebuilt: the reason, and Retry-After")


def openapi(table: Iterable[Route], version: str, url: str | None = None) -> dict[str, Any]:
    """The OpenAPI 3.1 document of every route in `table`."""
    paths: dict[str, dict[str, Any]] = {}
    for entry in table:
        item = paths.setdefault(_template(entry), {})
        for method in entry.methods:
            item[method.lower()] = _operation(entry, method)
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "psirag-kb", "version": version,
                 "description": "The knowledge base daemon's JSON API (/api) and its "
                                "OpenAI-compatible endpoint (/v1)."},
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "api.token or a person's token"}},
            "schemas": {"Error": _ERRORS["json"], "OpenAIError": _ERRORS["openai"],
                        "Unavailable": _UNAVAILABLE},
        },
        "security": [{"bearer": []}],
    }
    if url:
        document["servers"] = [{"url": url}]
    return document


def _template(entry: Route) -> str:
    """The path as an OpenAPI template: `{node_id:signed}` -> `{node_id}`."""
    return "/" + "/".join(f"{{{name}}}" if kind else name for name, kind in entry.segments)


def _operation(entry: Route, method: str) -> dict[str, Any]:
    name = getattr(entry.handler, "__name__", "handler")
    operation: dict[str, Any] = {
        "operationId": name if len(entry.methods) == 1 else f"{name}_{method.lower()}",
        "summary": entry.summary,
        "tags": [entry.path.strip("/").split("/")[0]],
        "responses": {
            "200": {"description": entry.response,
                    "content": {entry.media: {"schema": {} if entry.media != "application/json"
                                              else {"type": "object"}}}},
            "503": {"description": _STARTING, "headers": {"Retry-After": {
                        "schema": {"type": "integer"}, "description": "seconds"}},
                    "content": {"application/json": {"schema": {
                        "$ref": "#/components/schemas/"
                                + ("OpenAIError" if entry.errors == "openai"
                                   else "Unavailable")}}}},
            "default": {"description": "an error",
                        "content": {"application/json": {"schema": {
                            "$ref": "#/components/schemas/"
                                    + ("OpenAIError" if entry.errors == "openai"
                                       else "Error")}}}},
        },
    }
    if entry.open:
        operation["security"] = [{}, {"bearer": []}]
    parameters = [
        {"name": name, "in": "path", "required": True,
         "schema": {"type": "string"} if kind == "str"
         else {"type": "integer", **({"minimum": 0} if kind == "int" else {})},
         "description": f"pattern {PARAM_TYPES[kind]}"}
        for name, kind in entry.params.items()
    ]
    parameters += [{"name": name, "in": "query", "required": False,
                    "schema": _TYPES.get(kind, {})} for name, kind in entry.query.items()]
    if parameters:
        operation["parameters"] = parameters
    body = entry.schema if entry.schema is not None else _body(entry)
    if body is not None:
        operation["requestBody"] = {"required": True,
                                    "content": {"application/json": {"schema": body}}}
    return operation


def _body(entry: Route) -> dict[str, Any] | None:
    if entry.body is None:
        return None
    schema: dict[str, Any] = {
        "type": "object", "additionalProperties": False,
        "properties": {key: _nullable(_TYPES.get(kind, {})) if key not in entry.required
                       else _TYPES.get(kind, {}) for key, kind in entry.body.items()},
    }
    if entry.required:
        schema["required"] = list(entry.required)
    return schema


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """An optional field's schema: null is accepted as absent."""
    if "type" not in schema:
        return schema
    return {**schema, "type": [schema["type"], "null"]}
