"""The table of operations: typed path parameters, duplicates refused, roles, handlers."""

from __future__ import annotations

import pytest

from psirag_kb.service.endpoints import Endpoints
from psirag_kb.service.handlers import HANDLERS
from psirag_kb.serving.ops import MONITOR_PATHS, OPEN_PATHS, OPS, NotFound, Op, _unique, op


def test_typed_parameters_bind_or_say_not_found() -> None:
    entry = Op("node", "GET", "/api/tree/{node_id:signed}", "x", noun="tree node")
    assert entry.bind({"node_id": "-3"}) == {"node_id": -3}
    assert entry.template == "/api/tree/{node_id}"
    with pytest.raises(NotFound, match="no tree node abc"):
        entry.bind({"node_id": "abc"})


def test_path_parameters_are_passed_under_the_app_methods_names() -> None:
    entry = op("conversation_rename")
    assert entry.bind({"conversation_id": "c1"}) == {"conversation": "c1"}
    assert entry.url({"conversation": "a/b", "title": "t"}) == "/api/conversations/a%2Fb"


def test_two_operations_for_one_method_and_path_are_refused() -> None:
    twice = (Op("one", "GET", "/api/a/{x:int}", "one"), Op("two", "GET", "/api/a/{y}", "two"))
    with pytest.raises(ValueError, match="two operations"):
        _unique(twice)


def test_the_served_table_has_every_core_route_once() -> None:
    served = {(e.method, e.path) for e in OPS}
    assert ("GET", "/api/health") in served and ("POST", "/api/users/{name}/grant") in served
    assert len(served) == len(OPS)
    assert OPEN_PATHS == ("/api/health", "/api/ready")  # readiness probes send no token
    assert MONITOR_PATHS == ("/api/health", "/api/ready", "/metrics")
    assert all(e.summary for e in OPS)
    assert all(e.target or (e.name in HANDLERS and HANDLERS[e.name].__doc__) for e in OPS)
    assert {r.path for r in Endpoints.routes} == {e.template for e in OPS}


def test_roles_the_table_enforces() -> None:
    assert op("users_list").refusal("ann", "editor") == (
        "ann is a editor; only an admin manages people")
    assert op("users_list").refusal("root", "admin") is None
    assert op("metrics_text").refusal("mon", "monitor") is None
    assert "monitor" in (op("status").refusal("mon", "monitor") or "")
    assert op("maintain").refusal("ann", "reader") is None  # the daemon checks it
