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


def test_leader_lease_defaults_to_ten_seconds_and_outlasts_the_checks() -> None:
    from streamplane.controlplane.failover_runtime import FailoverSettings

    assert serve.make_context("serve", []).params["leader_lease"] == 10.0
    assert FailoverSettings().leader_lease == 10.0
    with pytest.raises(Exception, match=r"2\.0<=x<=300"):
        serve.make_context("serve", ["--leader-lease", "1"])
    with pytest.raises(ValueError, match="more than twice leader_interval"):
        FailoverSettings(leader_interval=2.0, leader_lease=3.0)
