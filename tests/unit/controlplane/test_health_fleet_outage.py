"""The health loop after every cluster failed at once (a fleet restart, the control plane
cut off): the first cluster back does not take the others' streams.

Probes are driven one round at a time (``probe_once``) with stub Kafka I/O and a fake
clock, as in ``test_failover_api``.
"""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient

from streamplane.controlplane.failover_runtime import FailoverRuntime, FailoverSettings
from streamplane.controlplane.leadership import SingleReplica
from streamplane.controlplane.service import ControlPlaneService
from streamplane.core.failover import ClusterHealth
from tests.unit.controlplane.conftest import create_stream
from tests.unit.controlplane.test_failover_api import Clock, StubClusterIO

THRESHOLD = 3.0
RECOVERY = 10.0


@pytest.fixture
def stub_io() -> StubClusterIO:
    return StubClusterIO()


@pytest.fixture
def fake_clock() -> Clock:
    return Clock()


@pytest.fixture
def health_runtime(
    service: ControlPlaneService, stub_io: StubClusterIO, fake_clock: Clock
) -> FailoverRuntime:
    # Probes driven by hand (health_enabled off: no prober threads).
    settings = FailoverSettings(health_threshold=THRESHOLD, health_recovery=RECOVERY)
    return FailoverRuntime(
        service,
        settings,
        leadership=SingleReplica(),
        io_factory=stub_io.for_bootstrap,
        clock=fake_clock,
    )


def probe_round(runtime: FailoverRuntime, clock: Clock, seconds: float = 1.0) -> None:
    """Probe both clusters, then let ``seconds`` pass."""
    for name in ("local-a", "local-b"):
        runtime.probe_once(name)
    clock.now += seconds


def actives(service: ControlPlaneService, stream: str) -> dict[str, str]:
    table = service.routing(stream)
    return {lane: table.active(lane).cluster for lane in table.all_lanes}


@pytest.fixture
def streams_on_both(http: TestClient, service: ControlPlaneService) -> dict[str, dict[str, str]]:
    """Stream "on-a" on local-a, "on-b" on local-b (every lane, the dlq's included)."""
    create_stream(http, "on-a", cluster="local-a")
    create_stream(http, "on-b", cluster="local-b")
    return {name: actives(service, name) for name in ("on-a", "on-b")}


def test_a_fleet_restart_moves_no_stream(
    service: ControlPlaneService,
    health_runtime: FailoverRuntime,
    stub_io: StubClusterIO,
    fake_clock: Clock,
    streams_on_both: dict[str, dict[str, str]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """local-b answers again 4 s before local-a (past the threshold: local-b is a
    trusted target by then): no stream moves (local-b took every stream of local-a at
    local-a's next probe)."""
    assert set(streams_on_both["on-a"].values()) == {"local-a"}
    for _ in range(5):
        probe_round(health_runtime, fake_clock)  # both ok for 5 s
    stub_io.down.update({"local-a", "local-b"})  # local down
    for _ in range(10):
        probe_round(health_runtime, fake_clock)
    assert health_runtime._is_down("local-a") and health_runtime._is_down("local-b")
    stub_io.down.discard("local-b")  # local up: local-b first
    with caplog.at_level(logging.WARNING):
        for _ in range(4):
            probe_round(health_runtime, fake_clock)
    stub_io.down.discard("local-a")
    for _ in range(10):
        probe_round(health_runtime, fake_clock)
    assert {name: actives(service, name) for name in streams_on_both} == streams_on_both
    assert service.routing("on-a").epoch == service.routing("on-b").epoch == 1
    assert "not failing the streams of local-a over yet" in caplog.text


def test_a_cluster_still_down_after_the_fleet_came_back_is_failed_over(
    service: ControlPlaneService,
    health_runtime: FailoverRuntime,
    stub_io: StubClusterIO,
    fake_clock: Clock,
    streams_on_both: dict[str, dict[str, str]],
) -> None:
    for _ in range(5):
        probe_round(health_runtime, fake_clock)
    stub_io.down.update({"local-a", "local-b"})
    for _ in range(10):
        probe_round(health_runtime, fake_clock)
    stub_io.down.discard("local-b")
    back = fake_clock.now
    while True:
        probe_round(health_runtime, fake_clock, seconds=0.0)
        if actives(service, "on-a")["realtime"] != "local-a":
            break
        assert fake_clock.now - back < RECOVERY, "not failed over in time"
        fake_clock.now += 1.0
    assert fake_clock.now - back == RECOVERY  # the fleet's window to come back
    assert set(actives(service, "on-a").values()) == {"local-b"}  # dlq too
    assert service.routing("on-b").epoch == 1


def test_a_single_cluster_outage_fails_over_as_soon_as_the_cluster_is_down(
    service: ControlPlaneService,
    health_runtime: FailoverRuntime,
    stub_io: StubClusterIO,
    fake_clock: Clock,
    streams_on_both: dict[str, dict[str, str]],
) -> None:
    for _ in range(5):
        probe_round(health_runtime, fake_clock)
    stub_io.down.add("local-a")
    for _ in range(int(THRESHOLD)):
        state = health_runtime.probe_once("local-a")
        assert state.health is ClusterHealth.DEGRADED
        fake_clock.now += 1.0
    assert health_runtime.probe_once("local-a").health is ClusterHealth.DOWN
    assert set(actives(service, "on-a").values()) == {"local-b"}  # at that very probe
