"""Clients given both replicas' URLs ride through the loss of the one they talk to.

Two control-plane replicas over one PostgreSQL; a producer and a consumer share a
``ControlPlaneClient`` naming both, and talk to the first (the leader). It is killed
(kill -9): both go on through the other, which takes the leadership; a failover made
through that replica reaches the producer (its records go to the new cluster), and the
consumer reads every record, of the old segment and of the new. Before, each took one
URL: the producer kept writing to the old segment until the killed replica came back,
and the consumer member stayed fail-static while the new leader gave its units away.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable

import pytest

from streamplane.client.consumer import StreamConsumer
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.producer import StreamProducer
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.local.fleet import FleetDescriptor
from tests.waiting import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def replicas(replica_pair: Callable[..., list[ControlPlaneProcess]]) -> list[ControlPlaneProcess]:
    return replica_pair()


def leads(cp: ControlPlaneProcess) -> bool:
    with cp.client() as client:
        return bool(client.cluster_health()["leader"])


def test_a_producer_and_a_consumer_go_on_through_the_other_replica(
    replicas: list[ControlPlaneProcess], fleet: FleetDescriptor
) -> None:
    a, b = replicas
    a.start()
    wait_for("replica a to lead", lambda: leads(a), 10, every=0.2)
    b.start()
    stream = f"urls-{uuid.uuid4().hex[:6]}"
    total = 3000
    handled: Counter[bytes | None] = Counter()
    topics: dict[bytes | None, str] = {}

    def consume(consumer: StreamConsumer, seconds: float) -> None:
        for msg in consumer.poll_batch(500, seconds):
            handled[msg.value] += 1
            topics[msg.value] = f"{msg.cluster}/{msg.topic}"
            msg.ack()

    with ControlPlaneClient([a.url, b.url], token=a.token) as cp, b.client() as admin:
        for name in ("local-a", "local-b"):
            cp.register_cluster(name, fleet.cluster(name).bootstrap)
        cp.create_stream(stream, "local-a", lanes=["realtime"], partitions=2)
        with (
            StreamProducer(stream, cp) as producer,
            StreamConsumer(stream, "g", cp) as consumer,
        ):
            for i in range(total // 3):
                producer.send(b"%d" % i, key=b"%d" % i)
            producer.flush(30)
            deadline = time.monotonic() + 30
            while len(handled) < total // 3 and time.monotonic() < deadline:
                consume(consumer, 0.2)
            assert len(handled) == total // 3

            a.stop(kill=True)  # the replica both talk to (the leader)
            killed = time.monotonic()
            for i in range(total // 3, 2 * total // 3):
                producer.send(b"%d" % i, key=b"%d" % i)
            wait_for("replica b to lead", lambda: leads(b), 15, every=0.2)
            # the failover is made through the other replica
            moved = admin.failover(stream, "local-b", reason="test: replica a killed")
            wait_for(
                "the producer to follow the failover",
                lambda: producer.active_topic() == moved.active("realtime").topic,
                10,
            )
            followed = time.monotonic() - killed
            for i in range(2 * total // 3, total):
                producer.send(b"%d" % i, key=b"%d" % i)
            producer.flush(30)
            deadline = time.monotonic() + 60
            while len(handled) < total and time.monotonic() < deadline:
                consume(consumer, 0.2)
            assert cp.url == b.url  # both went on through b
            assert consumer._membership is None or consumer._membership.connected

    missing = [i for i in range(total) if b"%d" % i not in handled]
    assert not missing, f"{len(missing)} records never handled, first {missing[:5]}"
    twice = sum(1 for n in handled.values() if n > 1)
    assert twice == 0, f"{twice} records handled twice"
    after = {topics[b"%d" % i] for i in range(2 * total // 3, total)}
    assert after == {f"local-b/{moved.active('realtime').topic}"}
    print(f"\nproducer on the new segment {followed:.2f}s after the kill; {total} handled once")
