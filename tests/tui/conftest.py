"""Fixtures for the TUI tests: a fake client and an app on it with a fixed clock."""

from __future__ import annotations

import pytest

from tui.app import PsiragApp

from .fakes import FakeClient

NOW = 1000.0


@pytest.fixture
def client() -> FakeClient:
    return FakeClient()


def make_app(client: FakeClient) -> PsiragApp:
    """The app on the fake client; reconnecting returns it once it is up again."""
    return PsiragApp(client, lambda: None if client.down else client, clock=lambda: NOW,
                     status_interval=0.2, reconnect_interval=0.1)


@pytest.fixture
def app(client: FakeClient) -> PsiragApp:
    return make_app(client)
