"""/api/openapi.json: generated from the route table, valid OpenAPI 3.1, and exactly the routes
the server answers (each documented method reaches a handler, every other method is 405)."""

from __future__ import annotations

import http.client
import json
import re
from typing import Any

from openapi_spec_validator import validate as validate_spec

from psirag_kb.service.endpoints import METHODS
from psirag_kb.serving.ops import OPS
from tests.unit.test_api import AUTH, api, call  # noqa: F401 - the api fixture

__all__ = ["api"]


def document(server: Any) -> dict[str, Any]:
    status, body = call(server, "GET", "/api/openapi.json")
    assert status == 200, body
    return body


def test_the_document_is_valid_openapi_31(api) -> None:  # noqa: F811
    spec = document(api[0])
    assert spec["openapi"] == "3.1.0"
    validate_spec(spec)  # raises on a structural error


def test_every_route_in_the_table_is_documented(api) -> None:  # noqa: F811
    spec = document(api[0])
    documented = {(method.upper(), path) for path, item in spec["paths"].items()
                  for method in item}
    served = {(method, re.sub(r"\{(\w+)(:\w+)?\}", r"{\1}", entry.path))
              for entry in OPS for method in (entry.method,)}
    assert documented == served
    assert ("GET", "/api/openapi.json") in documented and ("POST", "/api/query") in documented


def test_every_documented_method_is_served_and_no_other(api) -> None:  # noqa: F811
    server = api[0]
    spec = document(server)
    port = server.server_address[1]
    for path, item in spec["paths"].items():
        concrete = re.sub(r"\{\w+\}", "1", path)
        served = sorted(key.upper() for key in item if key.upper() in METHODS)
        for method in sorted(METHODS | {"OPTIONS", "TRACE", "FOO"}):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            try:
                connection.request(method, concrete, body=b"{}",
                                   headers={**AUTH, "Content-Type": "application/json"})
                response = connection.getresponse()
                raw = response.read()
            finally:
                connection.close()
            answer = json.loads(raw) if raw.startswith(b"{") else {}
            message = json.dumps(answer)
            assert "no such endpoint" not in message, (method, path)
            if method.lower() in item:
                assert response.status != 405, (method, path, answer)
            else:  # OPTIONS, TRACE or a method never heard of too: 405 naming the path's
                assert response.status == 405, (method, path, answer)
                assert response.getheader("Allow") == ", ".join(served), (method, path)


def test_an_unknown_path_is_not_documented_and_404(api) -> None:  # noqa: F811
    spec = document(api[0])
    assert "/api/nowhere" not in spec["paths"]
    assert call(api[0], "GET", "/api/nowhere")[0] == 404


def test_every_operation_documents_its_request_and_its_answer(api) -> None:  # noqa: F811
    spec = document(api[0])
    for entry in OPS:
        operation = spec["paths"][entry.template][entry.method.lower()]
        success = operation["responses"]["200"]["content"][entry.media]["schema"]
        assert entry.response is None or success["$ref"].endswith(entry.response.__name__)
        assert ("requestBody" in operation) == (entry.body is not None), entry.name
        assert operation["x-role"] == entry.role
    for name, schema in spec["components"]["schemas"].items():
        assert "$defs" not in schema, name  # every model's definitions are components
