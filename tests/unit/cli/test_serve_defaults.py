"""`control-plane serve` defaults that users rely on."""

from __future__ import annotations

import pytest

from streamplane.cli.control_plane import serve


def test_cluster_health_checks_are_on_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STREAMPLANE_HEALTH", raising=False)
    assert serve.make_context("serve", []).params["health"] is True
    assert serve.make_context("serve", ["--no-health"]).params["health"] is False


def test_lease_ttl_is_the_assigners_default_and_bounded() -> None:
    assert serve.make_context("serve", []).params["lease_ttl"] == 1.5
    assert serve.make_context("serve", ["--lease-ttl", "4"]).params["lease_ttl"] == 4.0
    with pytest.raises(Exception, match=r"0\.1<=x<=60"):
        serve.make_context("serve", ["--lease-ttl", "0"])
