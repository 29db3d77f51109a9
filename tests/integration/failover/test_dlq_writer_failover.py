"""Dead letters across a failover of the dlq lane off a dead cluster, on real Kafka.

A consumer rejects a record just after local-a's broker is killed: its dead letter is
queued for local-a's dlq segment, where it waits for the broker (librdkafka's
``message.timeout.ms``: 5 minutes). The control plane fails the stream over to local-b;
records rejected afterwards are dead-lettered to local-b and must settle at once, not
behind local-a's batch. Once local-a is back, its dead letter is delivered too: every
rejected record is in the dlq lane exactly once.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.dlq import list_dead_letters
from streamplane.core.routing import DLQ_LANE
from streamplane.local.fleet import LocalFleet
from tests.integration.failover.conftest import producer_for
from tests.waiting import wait_for

ON_B = 5  # records rejected after the failover


def test_dead_letters_to_the_new_cluster_do_not_wait_for_the_dead_one(
    fo_fleet: LocalFleet, fo_client: ControlPlaneClient, fo_stream: Callable[..., str]
) -> None:
    stream = fo_stream("local-a", partitions=1)
    producer = producer_for(fo_client, stream)
    try:
        producer.send(b"a-0")
        producer.send(b"a-1")
        producer.flush(30)
    finally:
        producer.close(5)
    consumer = StreamConsumer(stream, "dlq-failover", control_plane=fo_client)
    broker = fo_fleet.descriptor().cluster("local-a").brokers[0]
    with consumer:
        got: list[StreamMessage] = []

        def polled() -> bool:
            """Poll once (housekeeping included): what it hands out goes to ``got``."""
            msg = consumer.poll(0.1)
            if msg is not None:
                got.append(msg)
            return True

        wait_for("local-a's records handed out", lambda: polled() and len(got) >= 2, 60)
        held, got[:] = list(got), []
        held[0].ack()
        assert consumer._dlq is not None
        dlq = consumer._dlq
        fo_fleet.kill_broker("local-a", broker.node_id)
        try:
            held[1].reject("bad on local-a")
            wait_for(
                "the dead letter queued for local-a",
                lambda: polled() and dlq.pending == 1 and not dlq._waiting,
                5,
            )
            assert dlq.producer.routing.active(DLQ_LANE).cluster == "local-a"
            wait_for(
                "the failover to local-b, seen by the dlq producer",
                lambda: polled() and dlq.producer.routing.active(DLQ_LANE).cluster == "local-b",
                30,
            )
            assert got == []
            producer = producer_for(fo_client, stream)
            try:
                for i in range(ON_B):
                    producer.send(b"b-%d" % i)
                producer.flush(30)
            finally:
                producer.close(5)
            started = time.monotonic()

            def rejected_and_settled() -> bool:
                """Reject each record of local-b as it comes: its dead letter goes to
                local-b. Whether they all settled."""
                polled()
                for msg in got[len(rejected) :]:
                    msg.reject("bad on local-b")
                    rejected.append(msg)
                return consumer.stats["dlq"] >= ON_B

            rejected: list[StreamMessage] = []
            wait_for(
                f"{ON_B} dead letters settled on local-b while local-a is down",
                rejected_and_settled,
                30,
            )
            took = time.monotonic() - started
            print(f"\n{ON_B} dead letters to local-b settled {took:.2f}s after they were sent")
            assert sorted(m.value or b"" for m in rejected) == [b"b-%d" % i for i in range(ON_B)]
            assert consumer.stats["dlq"] == ON_B and dlq.pending == 1  # local-a's, waiting
        finally:
            fo_fleet.start_broker("local-a", broker.node_id)
        wait_for(
            "local-a's dead letter delivered once it is back",
            lambda: polled() and consumer.stats["dlq"] == ON_B + 1,
            120,
        )
    # Every rejected record in the dlq lane once, on the cluster it was queued for.
    listing = list_dead_letters(fo_client, stream)
    assert not listing.unread
    letters = sorted((d.cluster, d.provenance["cluster"], d.value) for d in listing.letters)
    assert letters == [("local-a", "local-a", b"a-1")] + [
        ("local-b", "local-b", b"b-%d" % i) for i in range(ON_B)
    ]
