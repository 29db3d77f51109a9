"""``StreamProducer.close`` gives up on records it could not deliver by purging them, so
every one's delivery report is served (with an error) before ``ProduceError``; ``flush``
keeps them queued; both name how many wait for which cluster.

Without Kafka: real librdkafka producers whose bootstrap is a closed local port, so
nothing is ever acknowledged (as when a cluster's only broker is down). An SRE killed a
cluster's only broker under a producer with ``on_delivery`` callbacks: ``close()``
raised "2611 records of stream 's14' still undelivered after 30s", naming no cluster,
and none of those 2,611 callbacks ever ran.
"""

from __future__ import annotations

import dataclasses
import socket

import pytest
from confluent_kafka import KafkaError, Message

from streamplane.client.producer import StreamProducer
from streamplane.core.routing import SegmentState, move_lanes, new_routing_table, transition
from streamplane.exceptions import ProduceError

PURGED = {KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT}


def closed_port() -> int:
    """A local port nothing listens on (connections are refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def unanswered_producer(
    cluster: str = "local-b", delivery_reports: str = "all", stream: str = "s14"
) -> StreamProducer:
    """An opened StreamProducer of ``stream`` (lane ``realtime``) on ``cluster``, whose
    brokers never answer."""
    producer = StreamProducer(stream, None, delivery_reports=delivery_reports)  # type: ignore[arg-type]
    producer._bootstraps[cluster] = f"127.0.0.1:{closed_port()}"
    producer._max_record_bytes = 1 << 20
    producer._default_lane = "realtime"
    producer._apply(new_routing_table(stream, ["realtime"], cluster, 3))
    producer._opened = True
    return producer


class Reports:
    """Delivery reports by record: None (acknowledged) or the error code."""

    def __init__(self) -> None:
        self.codes: dict[int, int | None] = {}

    def callback(self, n: int):  # type: ignore[no-untyped-def]
        def done(err: KafkaError | None, msg: Message) -> None:
            assert n not in self.codes, f"record {n} reported twice"
            self.codes[n] = None if err is None else err.code()

        return done


def test_close_purges_what_it_gives_up_on_so_every_callback_runs() -> None:
    producer = unanswered_producer()
    reports = Reports()
    for n in range(300):
        producer.send(b"%d" % n, on_delivery=reports.callback(n))
    with pytest.raises(ProduceError) as err:
        producer.close(0.5)
    msg = str(err.value)
    assert "300 records of stream 's14' not acknowledged after 0.5s: 300 for local-b" in msg
    assert "_PURGE_INFLIGHT" in msg and "may have been written" in msg  # not "lost"
    # Every record's callback ran, each with an error saying it was purged.
    assert sorted(reports.codes) == list(range(300))
    assert set(reports.codes.values()) <= PURGED
    counts = producer._counts["sp.s14.realtime.e1"]
    assert (counts.sent, counts.failed) == (300, 300)
    producer.close(0.5)  # closed already: nothing more


def test_close_hands_purged_records_sent_without_a_callback_to_take_failures() -> None:
    producer = unanswered_producer(delivery_reports="errors")
    for n in range(50):
        producer.send(b"%d" % n)
    with pytest.raises(ProduceError, match=r"50 records .* not acknowledged .*: 50 for local-b"):
        producer.close(0.2)
    failures = producer.take_failures()
    assert len(failures) == 50
    assert {err.code() for err, _ in failures} <= PURGED
    assert sorted(int(msg.value() or b"") for _, msg in failures) == list(range(50))


def test_flush_keeps_the_records_queued_and_names_their_cluster() -> None:
    producer = unanswered_producer()
    reports = Reports()
    for n in range(20):
        producer.send(b"%d" % n, on_delivery=reports.callback(n))
    with pytest.raises(
        ProduceError,
        match=r"20 records of stream 's14' still undelivered after 1s: 20 queued for local-b\. "
        "They stay queued",
    ):
        producer.flush(1.0)
    assert reports.codes == {}  # not given up on: still queued, no report
    assert producer.queued() == 20
    with pytest.raises(ProduceError, match=r"20 records .* still undelivered"):
        producer.flush(0.1)  # flushed again: still there
    with pytest.raises(ProduceError, match="20 for local-b"):
        producer.close(0.1)
    assert len(reports.codes) == 20 and set(reports.codes.values()) <= PURGED


def test_close_names_each_cluster_the_records_wait_for() -> None:
    """Records queued for a cluster the stream left (a failover) and for the one it
    writes to now: both named, both purged."""
    producer = unanswered_producer("local-a")
    producer._bootstraps["local-b"] = f"127.0.0.1:{closed_port()}"
    reports = Reports()
    for n in range(30):
        producer.send(b"%d" % n, on_delivery=reports.callback(n))
    table = new_routing_table("s14", ["realtime"], "local-b", 3)
    producer._apply(dataclasses.replace(table, epoch=2))
    for n in range(30, 35):
        producer.send(b"%d" % n, on_delivery=reports.callback(n))
    with pytest.raises(ProduceError) as flushed:
        producer.flush(0.2)
    assert (
        "35 records of stream 's14' still undelivered after 0.2s: 5 queued for local-b; "
        "30 queued for local-a, which the stream left" in str(flushed.value)
    )
    with pytest.raises(ProduceError) as closed:
        producer.close(0.2)
    assert (
        "35 records of stream 's14' not acknowledged after 0.2s: 5 for local-b; "
        "30 for local-a, which the stream left" in str(closed.value)
    )
    assert sorted(reports.codes) == list(range(35))
    assert set(reports.codes.values()) <= PURGED
    assert producer._retired == [] and producer._producers == {}


def test_close_with_nothing_queued_raises_nothing() -> None:
    producer = unanswered_producer()
    producer.close(0.1)


class _Refused:
    """A failed delivery report's message (what ``raise_failures`` reads of it)."""

    def __init__(self, topic: str) -> None:
        self._topic = topic

    def topic(self) -> str:
        return self._topic


def test_a_write_refused_by_a_fenced_segment_is_told_as_such() -> None:
    """A retired segment's topic is fenced (``max.message.bytes=0``) once its watch is
    over: the broker's answer to a late write is "message size too large", which told
    the application nothing about what happened."""
    producer = unanswered_producer(cluster="local-a")
    table = move_lanes(new_routing_table("s14", ["realtime"], "local-a", 3), ["realtime"], "b")
    old = table.segments[0].topic
    for state in (SegmentState.SEALED, SegmentState.RETIRED):
        table = transition(table, old, "local-a", state, {0: 1})
    producer._watcher._table = table
    too_large = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
    producer._failures = [(too_large, _Refused(old))]  # type: ignore[list-item]
    with pytest.raises(ProduceError, match=rf"{old} is a retired segment, fenced: it refuses"):
        producer.raise_failures()
    active = table.active("realtime").topic
    producer._failures = [(too_large, _Refused(active))]  # type: ignore[list-item]
    with pytest.raises(ProduceError, match=rf"Message size too large \(topic {active}\)"):
        producer.raise_failures()
    producer.close(0)
