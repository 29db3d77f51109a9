"""Topics made while a broker of their cluster is down have no replica on it.

The reported run: broker 3 of a three-broker cluster (racks a, b, c) killed, 14 s later a
failover there. The new topics got 2 replicas (capped at the live brokers: right) and
min.insync.replicas 1, but Kafka put followers on the fenced broker 3 (replicas [1,3],
ISR [1]) for 4 of 12 partitions: those took records with one copy from the start.

Its own fleet (one cluster of three brokers, racks a, b, c: a broker is killed, so not the
session's) and its own control plane (health checks off: a failover by hand only).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

from streamplane.exceptions import KafkaError
from streamplane.kafka.admin import KafkaAdmin
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.local.fleet import FleetSpec, LocalFleet
from tests.waiting import wait_for

CLUSTER = "downed"
DEAD = 3


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    data_dir = tmp_path_factory.mktemp("broker-down-fleet")
    fleet = LocalFleet(data_dir)
    spec = FleetSpec(
        data_dir=data_dir,
        clusters=1,
        brokers_per_cluster=3,
        racks=("a", "b", "c"),
        names=(CLUSTER,),
        heap_mb=384,
    )
    fleet.up(spec)
    try:
        yield fleet
    finally:
        fleet.down(purge=True)


@pytest.fixture(scope="module")
def control_plane(
    tmp_path_factory: pytest.TempPathFactory, fleet: LocalFleet
) -> Iterator[ControlPlaneProcess]:
    cp = ControlPlaneProcess(
        tmp_path_factory.mktemp("broker-down-control-plane"),
        token=f"tok-{uuid.uuid4().hex}",
        extra_args=["--no-health"],
    )
    cp.start()
    try:
        with cp.client() as client:
            client.register_cluster(CLUSTER, fleet.descriptor().bootstrap(CLUSTER))
        yield cp
    finally:
        cp.stop()


def _live_brokers(bootstrap: str) -> int | None:
    """A new client each time: one made before the kill kept asking the dead broker
    ("Timed out waiting for controller") for 60 s and more."""
    try:
        return KafkaAdmin(bootstrap).live_broker_count()
    except KafkaError:
        return None


def _replicas(admin: KafkaAdmin, topic: str) -> dict[int, list[int]]:
    return admin.metadata().topics[topic].partitions


def test_a_failover_and_a_stream_made_with_a_broker_down_have_no_replica_on_it(
    fleet: LocalFleet, control_plane: ControlPlaneProcess
) -> None:
    admin = KafkaAdmin(fleet.descriptor().bootstrap(CLUSTER))
    name = f"placed-{uuid.uuid4().hex[:8]}"
    with control_plane.client() as cp:
        cp.create_stream(name, CLUSTER, lanes=["realtime"], partitions=6)
        assert {b for r in _replicas(admin, f"sp.{name}.realtime.e1").values() for b in r} == {
            1,
            2,
            3,
        }
        fleet.kill_broker(CLUSTER, DEAD)
        # Fenced by the controller (broker.session.timeout.ms, 9 s): no longer live.
        wait_for("broker 3 fenced", lambda: _live_brokers(admin.bootstrap) == 2, timeout=60)

        moved = cp.failover(name, CLUSTER, partitions=12, reason="a broker is down")
        new = [s.topic for s in moved.segments if s.epoch == moved.epoch]
        assert new == [f"sp.{name}.realtime.e2"]
        created = cp.create_stream(f"{name}-new", CLUSTER, lanes=["realtime", "bulk"])
        for topic in [*new, *(s.topic for s in created.segments)]:
            replicas = _replicas(admin, topic)
            assert replicas and all(sorted(r) == [1, 2] for r in replicas.values()), (
                topic,
                replicas,
            )
            leaders = Counter(r[0] for r in replicas.values())
            assert abs(leaders[1] - leaders[2]) <= 1, (topic, leaders)
        entry = cp.audit(name)[0]
        assert entry["action"] == "stream.failover"
        detail = entry["detail"]
        assert (
            detail["replication_factor"],
            detail["min_insync_replicas"],
            detail["stream_replication_factor"],
            detail["live_brokers"],
        ) == (2, 1, 3, 2)
