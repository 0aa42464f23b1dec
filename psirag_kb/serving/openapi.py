"""The OpenAPI 3.1 description of the HTTP API, generated from the table of operations and
its pydantic models."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from psirag_kb.serving.ops import PARAM_TYPES, Op

__all__ = ["openapi"]

_REF = "#/components/schemas/{model}"
_ERRORS = {
    "Error": {"type": "object", "required": ["error"],
              "properties": {"error": {"type": "string"}}},
    "OpenAIError": {"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["message", "type"],
        "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                       "code": {"type": ["string", "null"]},
                       "param": {"type": ["string", "null"]}}}}},
    "Unavailable": {
        "type": "object", "description": "While the daemon starts: what runs (state "
        "`waiting`, `restoring`, `starting` or `migrating`) and why, on /api/ready as "
        "`reasons`, on every other route as `error`.",
        "properties": {"error": {"type": "string"}, "state": {"type": "string"},
                       "ready": {"type": "boolean"},
                       "reasons": {"type": "array", "items": {"type": "string"}}}},
}
_STARTING = ("the daemon is not serving yet (waiting for a restore or a command, migrating the "
             "schema, opening its stores) or an index is rebuilt: the reason, and Retry-After")


def openapi(table: Iterable[Op], version: str, url: str | None = None) -> dict[str, Any]:
    """The OpenAPI 3.1 document of every operation in `table`."""
    table = tuple(table)
    refs, schemas = _schemas(table)
    paths: dict[str, dict[str, Any]] = {}
    for entry in table:
        paths.setdefault(entry.template, {})[entry.method.lower()] = _operation(entry, refs)
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "psirag-kb", "version": version,
                 "description": "The knowledge base daemon's JSON API (/api) and its "
                                "OpenAI-compatible endpoint (/v1)."},
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "api.token or a person's token"}},
            "schemas": {**schemas, **_ERRORS},
        },
        "security": [{"bearer": []}],
    }
    if url:
        document["servers"] = [{"url": url}]
    return document


def _schemas(table: tuple[Op, ...]) -> tuple[dict[Any, dict[str, Any]], dict[str, Any]]:
    """Each request and response model's $ref, and the component schemas they use."""
    models: list[tuple[type[BaseModel], Any]] = []
    for entry in table:
        models += [(entry.body, "validation")] if entry.body is not None else []
        models += [(entry.response, "serialization")] if entry.response is not None else []
    refs, top = models_json_schema(list(dict.fromkeys(models)), ref_template=_REF)
    return refs, top.get("$defs", {})


def _operation(entry: Op, refs: dict[Any, dict[str, Any]]) -> dict[str, Any]:
    shape = "OpenAIError" if entry.errors == "openai" else "Error"
    success = {} if entry.response is None else refs[(entry.response, "serialization")]
    operation: dict[str, Any] = {
        "operationId": entry.name,
        "summary": entry.summary,
        "tags": [entry.path.strip("/").split("/")[0]],
        "x-role": entry.role,
        "responses": {
            "200": {"description": (entry.response.__doc__ or "").strip() or entry.summary,
                    "content": {entry.media: {"schema": success}}},
            "503": {"description": _STARTING, "headers": {"Retry-After": {
                        "schema": {"type": "integer"}, "description": "seconds"}},
                    "content": {"application/json": {"schema": {
                        "$ref": _REF.format(model="OpenAIError" if entry.errors == "openai"
                                            else "Unavailable")}}}},
            "default": {"description": "an error", "content": {"application/json": {
                "schema": {"$ref": _REF.format(model=shape)}}}},
        },
    }
    if entry.role == "open":
        operation["security"] = [{}, {"bearer": []}]
    parameters = [
        {"name": name, "in": "path", "required": True,
         "schema": {"type": "string"} if kind == "str"
         else {"type": "integer", **({"minimum": 0} if kind == "int" else {})},
         "description": f"pattern {PARAM_TYPES[kind]}"}
        for name, kind in entry.params.items()
    ]
    if entry.query is not None:
        schema = entry.query.model_json_schema()
        parameters += [{"name": name, "in": "query", "required": False, "schema": field}
                       for name, field in schema.get("properties", {}).items()]
    if parameters:
        operation["parameters"] = parameters
    if entry.body is not None:
        operation["requestBody"] = {"required": True, "content": {"application/json": {
            "schema": refs[(entry.body, "validation")]}}}
    return operation
