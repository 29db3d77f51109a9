"""A StreamProducer whose cluster's only broker dies while it sends: ``flush`` names the
cluster and keeps the records queued; ``close`` gives up on them, and every record's
``on_delivery`` has run (acknowledged, or failed as purged) before it raises.

Found by an SRE: ``close()`` raised "2611 records of stream 's14' still undelivered
after 30s" (no cluster named), and none of those 2,611 callbacks ever ran, so the
application could not tell which records to send again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message

from streamplane.client.producer import StreamProducer
from streamplane.exceptions import ProduceError
from streamplane.local.fleet import LocalFleet, wait_healthy

PURGED = {KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT}
BEFORE_KILL = 1000  # sent just before the broker is killed: some may be acknowledged
AFTER_KILL = 2000  # sent to the dead broker
TOTAL = BEFORE_KILL + AFTER_KILL


class Reports:
    """Delivery reports by record: None (acknowledged) or the error code; ``twice``
    lists records reported more than once."""

    def __init__(self) -> None:
        self.codes: dict[int, int | None] = {}
        self.twice: list[int] = []

    def callback(self, n: int) -> Callable[[KafkaError | None, Message], None]:
        def done(err: KafkaError | None, msg: Message) -> None:
            if n in self.codes:
                self.twice.append(n)
            self.codes[n] = None if err is None else err.code()

        return done


@contextlib.contextmanager
def sending_while_local_b_dies(
    local_fleet: LocalFleet, control_plane: Any, stream_factory: Callable[..., str]
) -> Iterator[tuple[str, StreamProducer, Reports]]:
    """A stream on local-b and a producer of it (a report per record): send BEFORE_KILL
    records, kill local-b's only broker, send AFTER_KILL more (each with its callback);
    the broker is started again on the way out (the session's fleet serves other
    tests)."""
    stream = stream_factory("local-b", partitions=3)
    producer = StreamProducer(stream, control_plane.client(), delivery_reports="all").open()
    reports = Reports()
    producer.send(b"warm-up", on_delivery=reports.callback(-1))
    producer.flush(30)  # connected, the topic's partitions known
    assert reports.codes == {-1: None}
    for n in range(BEFORE_KILL):
        producer.send(b"%d" % n, key=b"%d" % (n % 7), on_delivery=reports.callback(n))
    broker = local_fleet.descriptor().cluster("local-b").brokers[0]
    local_fleet.kill_broker("local-b", broker.node_id)
    try:
        for n in range(BEFORE_KILL, TOTAL):
            producer.send(b"%d" % n, key=b"%d" % (n % 7), on_delivery=reports.callback(n))
        yield stream, producer, reports
    finally:
        with contextlib.suppress(ProduceError):
            producer.close(0.5)  # no-op when the test closed it
        local_fleet.start_broker("local-b", broker.node_id)
        wait_healthy(local_fleet.descriptor().cluster("local-b"), timeout_s=60)


def test_flush_names_the_cluster_and_keeps_the_records_queued(
    local_fleet: LocalFleet, control_plane: Any, stream_factory: Callable[..., str]
) -> None:
    dying = sending_while_local_b_dies(local_fleet, control_plane, stream_factory)
    with dying as (stream, producer, reports):
        with pytest.raises(ProduceError) as flushed:
            producer.flush(1.0)
        waiting = TOTAL + 1 - len(reports.codes)  # no report: still queued
        assert waiting >= AFTER_KILL
        print(f"\n{flushed.value}")
        assert (
            f"{waiting} records of stream {stream!r} still undelivered after 1s: "
            f"{waiting} queued for local-b. They stay queued" in str(flushed.value)
        )
        assert producer.queued() >= waiting
        with pytest.raises(ProduceError, match=f"{waiting} queued for local-b"):
            producer.flush(0.5)  # still there for a later flush
        assert len(reports.codes) == TOTAL + 1 - waiting


def test_close_reports_every_record_and_names_the_cluster(
    local_fleet: LocalFleet, control_plane: Any, stream_factory: Callable[..., str]
) -> None:
    dying = sending_while_local_b_dies(local_fleet, control_plane, stream_factory)
    with dying as (stream, producer, reports):
        producer.poll(0)
        acked = len(reports.codes) - 1
        with pytest.raises(ProduceError) as closed:
            producer.close(2.0)
    print(f"\n{acked} acknowledged before the close; {closed.value}")
    # Every record's callback ran, once: acknowledged, or failed as purged at close.
    assert not reports.twice
    assert sorted(reports.codes) == list(range(-1, TOTAL))
    failed = [n for n, code in reports.codes.items() if code is not None]
    assert {reports.codes[n] for n in failed} <= PURGED
    assert len(failed) >= AFTER_KILL
    msg = str(closed.value)
    assert (
        f"{len(failed)} records of stream {stream!r} not acknowledged after 2s: "
        f"{len(failed)} for local-b. Given up on at close: purged" in msg
    )
    assert "may have been written" in msg  # not acknowledged is not lost
