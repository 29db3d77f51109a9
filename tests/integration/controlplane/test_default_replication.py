"""A stream's default replication on real clusters: created without a replication factor
on the three-broker cluster, its topics have 3 replicas and min.insync.replicas=2 as Kafka
describes them; failed over to a one-broker cluster, the new topics have 1 and 1 (capped,
not refused) and the audit entry says so. The topics streamplane makes besides, the
commit log's side topic (a consumer makes it after its first commit) and the health
topic (the first probe makes it), get the same rule: they were made with 3 replicas and
no min.insync.replicas of their own (the brokers' 1: one copy acknowledged a spill).

Its own control plane (health checks off) over the session's fleets: ``racked`` (3
brokers) and ``local-a`` (1 broker).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from streamplane.client.consumer import StreamConsumer
from streamplane.client.producer import StreamProducer
from streamplane.controlplane.cluster_io import HEALTH_TOPIC, ControlPlaneAdmin, KafkaClusterIO
from streamplane.core.routing import commitlog_topic
from streamplane.exceptions import KafkaError
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.local.fleet import ClusterInfo, FleetDescriptor
from tests.waiting import wait_for


@pytest.fixture(scope="module")
def rf_control_plane(
    tmp_path_factory: pytest.TempPathFactory, rack_cluster: ClusterInfo, fleet: FleetDescriptor
) -> Iterator[ControlPlaneProcess]:
    cp = ControlPlaneProcess(
        tmp_path_factory.mktemp("rf-control-plane"),
        token=f"tok-{uuid.uuid4().hex}",
        extra_args=["--no-health"],
    )
    cp.start()
    try:
        with cp.client() as client:
            client.register_cluster("racked", rack_cluster.bootstrap)
            client.register_cluster("local-a", fleet.bootstrap("local-a"))
        yield cp
    finally:
        cp.stop()


def _replication(admin: ControlPlaneAdmin, topic: str) -> tuple[tuple[int, ...], str | None]:
    found = admin.describe_topic(topic)
    return found.replication_factors, found.overrides.get("min.insync.replicas")


def test_the_default_is_3_replicas_2_in_sync_and_a_failover_to_one_broker_gets_1(
    rf_control_plane: ControlPlaneProcess, rack_cluster: ClusterInfo, fleet: FleetDescriptor
) -> None:
    name = f"rf-{uuid.uuid4().hex[:8]}"
    racked = ControlPlaneAdmin(rack_cluster.bootstrap)
    one_broker = ControlPlaneAdmin(fleet.bootstrap("local-a"))
    with rf_control_plane.client() as cp:
        table = cp.create_stream(name, "racked", lanes=["realtime"], partitions=2)
        try:
            doc = cp.describe_stream(name)
            assert doc["replication_factor"] == 3
            assert doc["topic_config"]["min.insync.replicas"] == "2"
            assert {s.topic: _replication(racked, s.topic) for s in table.segments} == {
                f"sp.{name}.realtime.e1": ((3,), "2"),
                f"sp.{name}.dlq.e1": ((3,), "2"),
            }
            moved = cp.failover(name, "local-a", reason="to a one-broker cluster")
            new = [s.topic for s in moved.segments if s.epoch == moved.epoch]
            assert {t: _replication(one_broker, t) for t in new} == {
                f"sp.{name}.realtime.e2": ((1,), "1"),  # the dlq lane stays
            }
            entry = cp.audit(name)[0]
            assert entry["action"] == "stream.failover"
            assert (
                entry["detail"]["replication_factor"],
                entry["detail"]["min_insync_replicas"],
            ) == (1, 1)
            assert cp.describe_stream(name)["replication_factor"] == 3  # the stream's own
        finally:
            cp.delete_stream(name)


def _exists(admin: ControlPlaneAdmin, topic: str) -> bool:
    return bool(admin.end_offsets(topic))


def test_the_commit_log_side_topic_gets_3_replicas_2_in_sync(
    rf_control_plane: ControlPlaneProcess, rack_cluster: ClusterInfo
) -> None:
    name = f"rf-{uuid.uuid4().hex[:8]}"
    racked = ControlPlaneAdmin(rack_cluster.bootstrap)
    side = commitlog_topic(name)
    with rf_control_plane.client() as cp:
        cp.create_stream(name, "racked", lanes=["realtime"], partitions=1)
        try:
            with StreamProducer(name, cp) as producer:
                producer.send(b"one")
                producer.flush(30)
            with StreamConsumer(name, "rf-readers", cp, lanes=["realtime"]) as consumer:
                msg = wait_for("the record", lambda: consumer.poll(0.5), 60)
                msg.ack()
                consumer.commit()  # the first commit sets the side topic up
                wait_for(f"{side} made", lambda: _exists(racked, side), 60, every=0.2)
            assert _replication(racked, side) == ((3,), "2")
            assert racked.describe_topic(side).overrides["cleanup.policy"] == "compact"
        finally:
            cp.delete_stream(name)


def test_the_health_topic_gets_3_replicas_2_in_sync(rack_cluster: ClusterInfo) -> None:
    racked = ControlPlaneAdmin(rack_cluster.bootstrap)
    if _exists(racked, HEALTH_TOPIC):  # an earlier test's probe made it: made again here
        racked.delete_topics([HEALTH_TOPIC])
        wait_for(f"{HEALTH_TOPIC} deleted", lambda: not _exists(racked, HEALTH_TOPIC), 60)
    io = KafkaClusterIO(rack_cluster.bootstrap, probe_timeout=2.0)
    try:

        def clean_probe() -> bool:
            try:  # the new topic's partitions may still be electing their leaders
                return io.probe(2.0) is None
            except KafkaError:
                return False

        wait_for("a clean probe", clean_probe, 60, every=0.5)
    finally:
        io.close()
    assert _replication(racked, HEALTH_TOPIC) == ((3,), "2")
