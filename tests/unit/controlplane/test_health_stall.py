"""The health loop with probes that stall (``ProbeStall``: leaders answer, no ``acks=all``
write is acknowledged): the cluster is degraded past the threshold and down, its streams
failed over, once the stall has lasted ``STALL_THRESHOLD_S``. Before, a probe that got
any write acknowledged (``acks=1``) kept the cluster degraded for good, and a cluster
whose streams took no write (two brokers of three dead) was never failed over.

Probes are driven one round at a time (``probe_once``) with stub Kafka I/O and a fake
clock, as in ``test_health_fleet_outage``.
"""

from __future__ import annotations

from fastapi.testclient import TestClient

from streamplane.controlplane.failover_runtime import FailoverRuntime
from streamplane.controlplane.service import ControlPlaneService
from streamplane.core.failover import STALL_THRESHOLD_S, ClusterHealth, ProbeStall
from tests.unit.controlplane.conftest import create_stream
from tests.unit.controlplane.test_failover_api import Clock, StubClusterIO
from tests.unit.controlplane.test_health_fleet_outage import (
    THRESHOLD,
    actives,
    fake_clock,
    health_runtime,
    probe_round,
    stub_io,
)

__all__ = ["fake_clock", "health_runtime", "stub_io"]  # the fixtures the tests take


def test_a_stalled_cluster_is_down_after_the_stall_threshold_and_failed_over(
    http: TestClient,
    service: ControlPlaneService,
    health_runtime: FailoverRuntime,
    stub_io: StubClusterIO,
    fake_clock: Clock,
) -> None:
    create_stream(http, "on-a", cluster="local-a")
    for _ in range(5):
        probe_round(health_runtime, fake_clock)  # both ok: local-b is trusted
    stub_io.partial["local-a"] = ProbeStall("no partition took an acks=all write")
    stalled_at = fake_clock.now
    while fake_clock.now - stalled_at < STALL_THRESHOLD_S:
        state = health_runtime.probe_once("local-a")
        assert state.health is ClusterHealth.DEGRADED, fake_clock.now - stalled_at
        assert state.last_error == "no partition took an acks=all write"
        health_runtime.probe_once("local-b")
        fake_clock.now += 1.0
    assert fake_clock.now - stalled_at > THRESHOLD
    assert set(actives(service, "on-a").values()) == {"local-a"}  # not before
    assert health_runtime.probe_once("local-a").health is ClusterHealth.DOWN
    assert set(actives(service, "on-a").values()) == {"local-b"}


def test_a_stall_that_ends_before_the_threshold_moves_nothing(
    http: TestClient,
    service: ControlPlaneService,
    health_runtime: FailoverRuntime,
    stub_io: StubClusterIO,
    fake_clock: Clock,
) -> None:
    """One broker of three lost: Kafka fences it (~10 s) and the writes go through."""
    create_stream(http, "on-a", cluster="local-a")
    for _ in range(5):
        probe_round(health_runtime, fake_clock)
    stub_io.partial["local-a"] = ProbeStall("no partition took an acks=all write")
    for _ in range(int(STALL_THRESHOLD_S) - 2):
        probe_round(health_runtime, fake_clock)
    del stub_io.partial["local-a"]
    assert health_runtime.probe_once("local-a").health is ClusterHealth.OK
    assert set(actives(service, "on-a").values()) == {"local-a"}
