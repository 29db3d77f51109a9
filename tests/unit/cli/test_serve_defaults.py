"""`control-plane serve` defaults that users rely on."""

from __future__ import annotations

import pytest

from streamplane.cli.control_plane import serve


def test_cluster_health_checks_are_on_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STREAMPLANE_HEALTH", raising=False)
    assert serve.make_context("serve", []).params["health"] is True
    assert serve.make_context("serve", ["--no-health"]).params["health"] is False
