"""The declarative route table: typed path parameters, literal segments first, duplicates."""

from __future__ import annotations

import pytest

from psirag_kb.service.api import OPEN_PATHS, Endpoints
from psirag_kb.service.routes import NotFound, Route, match, route, routes_of


def handler() -> None:
    """A stand-in handler."""


def test_typed_parameters_bind_or_say_not_found() -> None:
    entry = Route(("GET",), "/api/tree/{node_id:signed}", handler, "x", noun="tree node")
    (found, raw), = match([entry], "/api/tree/-3")
    assert found is entry and entry.bind(raw) == {"node_id": -3}
    (_, raw), = match([entry], "/api/tree/abc")
    with pytest.raises(NotFound, match="no tree node abc"):
        entry.bind(raw)
    assert match([entry], "/api/tree/") == [] and match([entry], "/api/tree/1/2") == []


def test_a_literal_segment_wins_over_a_parameter() -> None:
    named = Route(("DELETE",), "/api/users/{name}", handler, "x")
    literal = Route(("GET",), "/api/users/me", handler, "x")
    assert [e for e, _ in match([named, literal], "/api/users/me")] == [literal]
    assert [e for e, _ in match([named, literal], "/api/users/ann")] == [named]


def test_two_routes_for_one_method_and_path_are_refused() -> None:
    class Twice:
        @route("GET", "/api/a/{x:int}", "one")
        def one(self) -> None: ...

        @route("GET", "/api/a/{y}", "two")
        def two(self) -> None: ...

    with pytest.raises(ValueError, match="two routes"):
        routes_of(Twice)


def test_the_served_table_has_every_core_route_once() -> None:
    served = {(m, e.path) for e in Endpoints.table for m in e.methods}
    assert ("GET", "/api/health") in served and ("POST", "/api/users/{name}/grant") in served
    assert len(served) == sum(len(e.methods) for e in Endpoints.table)
    assert OPEN_PATHS == ("/api/health",)
    assert all(e.summary and e.handler.__doc__ for e in Endpoints.table)
