"""End offsets of a cluster whose broker restarted, read by clients opened before.

librdkafka's admin ListOffsets sends the leader epoch it cached; a broker restart bumps
it and the broker answers FENCED_LEADER_EPOCH, which librdkafka (2.16) never recovers
from by itself. The lag monitor then kept the cluster's end offsets of before the
outage (time lag 0 and dlq counts gone until the control plane restarted), and the
sealer could not seal the cluster's draining segments.
"""

from __future__ import annotations

import uuid

from confluent_kafka import Producer

from streamplane.client.control_plane import ControlPlaneClient
from streamplane.controlplane.cluster_io import KafkaClusterIO
from streamplane.kafka.admin import KafkaAdmin
from streamplane.lag.reader import LogEnds
from streamplane.local.fleet import LocalFleet
from tests.integration.failover.conftest import all_healthy
from tests.waiting import wait_for


def produce(bootstrap: str, topic: str, per_partition: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(per_partition * 2):
        producer.produce(topic, b"x", partition=i % 2)
    assert producer.flush(30) == 0


def test_end_offsets_after_a_broker_restart(
    fo_fleet: LocalFleet, fo_client: ControlPlaneClient
) -> None:
    cluster = fo_fleet.descriptor().cluster("local-a")
    bootstrap = cluster.bootstrap
    topic = f"restart-{uuid.uuid4().hex[:8]}"
    KafkaAdmin(bootstrap).create_topics([(topic, 2, 1, {})])
    produce(bootstrap, topic, 5)
    wanted = [(topic, 0), (topic, 1)]
    ends = LogEnds(bootstrap)
    sealer_io = KafkaClusterIO(bootstrap)
    assert ends.fetch(wanted) == {(topic, 0): 5, (topic, 1): 5}
    assert sealer_io.end_offsets(topic, 2, 5.0) == {0: 5, 1: 5}

    broker = cluster.brokers[0]
    fo_fleet.kill_broker("local-a", broker.node_id)
    try:
        assert ends.fetch(wanted, timeout=1.0) == {}  # down: left out, asked again later
    finally:
        fo_fleet.start_broker("local-a", broker.node_id)
    wait_for("local-a healthy again", lambda: all_healthy(fo_client), 60, every=0.2)
    produce(bootstrap, topic, 5)

    now = {(topic, 0): 10, (topic, 1): 10}
    wait_for(
        f"the lag monitor's end offsets at {now}", lambda: ends.fetch(wanted) == now, 15, every=0.2
    )
    assert sealer_io.end_offsets(topic, 2, 5.0) == {0: 10, 1: 10}
