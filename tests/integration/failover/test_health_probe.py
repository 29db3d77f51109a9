"""The health probe on a 3-broker cluster that loses one broker: degraded, never down.

The probe wrote one record with ``acks=all`` to a one-partition health topic. With one
broker of three killed, that write waited until the controller fenced the broker (its
session timeout, ~9 s) or a new leader was elected, longer than the 3 s after which a
cluster is down: the control plane failed a healthy cluster's streams over. Now the
probe writes to a partition led by each broker, with ``acks=all`` as the streams write
and with ``acks=1`` to tell which leaders answer, and a probe in which no partition took
an ``acks=all`` write while enough brokers answer is a stall, down only after
``STALL_THRESHOLD_S`` (core/failover.py).
"""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient, NewPartitions

from streamplane.controlplane.cluster_io import HEALTH_TOPIC, KafkaClusterIO
from streamplane.exceptions import KafkaError
from streamplane.kafka.admin import QUIET
from streamplane.local.fleet import ClusterInfo, LocalFleet, wait_healthy
from tests.waiting import wait_for

WATCH_S = 15.0  # past the broker session timeout (9 s): the cluster settles meanwhile


def test_one_broker_of_three_down_leaves_the_cluster_taking_writes(
    rack_local_fleet: LocalFleet, rack_cluster: ClusterInfo
) -> None:
    io = KafkaClusterIO(rack_cluster.bootstrap, probe_timeout=1.0)
    admin = AdminClient({"bootstrap.servers": rack_cluster.bootstrap, **QUIET})
    try:

        def clean_probe() -> bool:
            try:  # the health topic's partitions may still be electing their leaders
                return io.probe(1.0) is None
            except KafkaError:
                return False

        wait_for("a clean probe", clean_probe, 60, every=0.5)
        topic = admin.list_topics(HEALTH_TOPIC, timeout=10).topics[HEALTH_TOPIC]
        leaders = {p.id: p.leader for p in topic.partitions.values()}
        brokers = {b.node_id for b in rack_cluster.brokers}
        assert set(leaders.values()) == brokers  # each broker leads a health partition
        victim = leaders[0]
        rack_local_fleet.kill_broker("racked", victim)
        try:
            outcomes: list[str] = []
            end = time.monotonic() + WATCH_S
            while time.monotonic() < end:
                started = time.monotonic()
                try:
                    problem = io.probe(1.0)
                except Exception as exc:  # the cluster would have counted as failing
                    outcomes.append(f"failed: {exc}")
                else:
                    outcomes.append("ok" if problem is None else f"partial: {problem}")
                time.sleep(max(0.0, 0.5 - (time.monotonic() - started)))
            failed = [o for o in outcomes if o.startswith("failed")]
            # No probe failed. Whether some came back partial depends on how soon the
            # controller moves the dead broker's leaderships (a write retried against the
            # new leader within the probe's timeout is acknowledged).
            assert not failed, failed
        finally:
            rack_local_fleet.start_broker("racked", victim)
            wait_healthy(rack_local_fleet.descriptor().cluster("racked"), timeout_s=120)
    finally:
        io.close()


def test_a_health_partition_added_since_the_last_probe_does_not_fail_it(
    rack_cluster: ClusterInfo,
) -> None:
    """A broker joining a cluster: the probe adds a health partition for it, and its
    producer, whose metadata predates the partition, refused the next probe's write to it
    at once ("Unknown partition") until its periodic metadata refresh: the whole probe
    failed for ~5 minutes, the cluster read as down, and its streams were failed over
    (an exploratory run, after `local add-broker`). Here another replica adds the
    partition (the same for the probe's producer)."""
    io = KafkaClusterIO(rack_cluster.bootstrap, probe_timeout=1.0)
    admin = AdminClient({"bootstrap.servers": rack_cluster.bootstrap, **QUIET})
    try:

        def clean_probe() -> bool:
            try:
                return io.probe(1.0) is None
            except KafkaError:
                return False

        wait_for("a clean probe", clean_probe, 60, every=0.5)
        topic = admin.list_topics(HEALTH_TOPIC, timeout=10).topics[HEALTH_TOPIC]
        count = len(topic.partitions) + 1
        fut = admin.create_partitions([NewPartitions(HEALTH_TOPIC, count)])[HEALTH_TOPIC]
        fut.result(timeout=10)
        wait_for(
            "the new partition in the cluster's metadata",
            lambda: (
                len(admin.list_topics(HEALTH_TOPIC, timeout=10).topics[HEALTH_TOPIC].partitions)
                == count
            ),
            30,
        )
        outcomes = []
        for _ in range(3):
            try:
                outcomes.append(io.probe(2.0))
            except Exception as exc:  # the cluster would have counted as failing
                outcomes.append(f"failed: {exc}")
        assert not [o for o in outcomes if o is not None and o.startswith("failed")], outcomes
        assert outcomes[-1] is None, outcomes  # every partition, the new one too, took a write
    finally:
        io.close()
