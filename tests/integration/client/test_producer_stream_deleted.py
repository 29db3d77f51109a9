"""A StreamProducer whose stream is deleted under it, on the real fleet: the records
still queued for the deleted topics fail at once, and ``close``/``flush`` return
promptly instead of waiting their whole timeout for them.

Found by an exploratory run (docs/client.md): ``send`` raised NotFound 5.3 s after
``streamplane streams delete del5``, as documented; then leaving the ``with`` block
blocked 30.12 s and raised "12 records of stream 'del5' not acknowledged after 30s ...
purged": the whole default Kubernetes grace period, so the pod was SIGKILLed.

The deletion is played as the control plane does it, in two steps: the stream's topics
are deleted first (the records sent then are queued for topics that are gone), then the
stream itself, which the producer's routing watch hears of.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message

from streamplane.client.metrics import METRICS
from streamplane.client.producer import StreamProducer
from streamplane.exceptions import NotFound, ProduceError
from streamplane.kafka.admin import KafkaAdmin
from streamplane.local.fleet import FleetDescriptor
from tests.waiting import wait_for

PURGED = {KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT}
ACKED_BEFORE = 3  # acknowledged before the deletion: they stay counted as delivered
QUEUED = 12  # sent once the stream's topics are gone
# A behaviour bound, not a performance figure: before, it took the whole 30 s timeout.
PROMPT_S = 10.0


class Reports:
    """Delivery reports by record: None (acknowledged) or the error code."""

    def __init__(self) -> None:
        self.codes: dict[int, int | None] = {}

    def callback(self, n: int) -> Callable[[KafkaError | None, Message], None]:
        def done(err: KafkaError | None, msg: Message) -> None:
            assert n not in self.codes, f"record {n} reported twice"
            self.codes[n] = None if err is None else err.code()

        return done


def delete_topics_of(stream: str, client: Any, fleet: FleetDescriptor) -> None:
    """The first step of deleting ``stream``: its topics go (all on local-a), and the
    broker no longer has them (a record sent just after the deletion returned was still
    written now and then)."""
    topics = [seg.topic for seg in client.routing(stream).segments]
    admin = KafkaAdmin(fleet.bootstrap("local-a"))
    errors = admin.delete_topics(topics)
    assert not any(errors.values()), errors
    wait_for("the topics gone", lambda: not set(topics) & set(admin.metadata().topics), 30)


def told_of_the_deletion(producer: StreamProducer) -> bool:
    try:
        producer.active_topic()
    except NotFound:
        return True
    return False


def send_and_delete_topics(
    producer: StreamProducer, stream: str, client: Any, fleet: FleetDescriptor
) -> Reports:
    """ACKED_BEFORE records acknowledged, the stream's topics deleted, then QUEUED
    records sent (each with its callback: reports ``0 .. ACKED_BEFORE + QUEUED - 1``)."""
    reports = Reports()
    for n in range(ACKED_BEFORE):
        producer.send(b"%d" % n, on_delivery=reports.callback(n))
    producer.flush(30)
    assert reports.codes == dict.fromkeys(range(ACKED_BEFORE))
    delete_topics_of(stream, client, fleet)
    for n in range(ACKED_BEFORE, ACKED_BEFORE + QUEUED):
        producer.send(b"%d" % n, on_delivery=reports.callback(n))
    return reports


def check_deleted_error(raised: ProduceError, stream: str, reports: Reports) -> None:
    """``raised`` tells of the deletion and of the QUEUED records not delivered; every
    record got its report: the first acknowledged, the others failed as purged."""
    msg = str(raised)
    print(f"\n{msg}")
    assert isinstance(raised, NotFound), msg
    assert msg.startswith(
        f"{QUEUED} records of stream {stream!r} undelivered: stream {stream!r} was deleted"
    ), msg
    assert sorted(reports.codes) == list(range(ACKED_BEFORE + QUEUED))
    assert all(reports.codes[n] is None for n in range(ACKED_BEFORE))
    failed = {reports.codes[n] for n in range(ACKED_BEFORE, ACKED_BEFORE + QUEUED)}
    assert failed <= PURGED, failed


def test_leaving_the_with_block_after_the_deletion_is_prompt(
    control_plane: Any, fleet: FleetDescriptor, stream_factory: Callable[..., str]
) -> None:
    stream = stream_factory("local-a", lanes=("realtime",), partitions=1)
    client = control_plane.client()
    with (
        pytest.raises(ProduceError) as raised,
        StreamProducer(stream, client, delivery_reports="all") as producer,
    ):
        reports = send_and_delete_topics(producer, stream, client, fleet)
        client.delete_stream(stream)
        wait_for("the producer told of the deletion", lambda: told_of_the_deletion(producer), 30)
        with pytest.raises(NotFound, match="was deleted"):
            producer.send(b"after")
        leaving = time.monotonic()
    took = time.monotonic() - leaving
    print(f"\nclose after the deletion took {took:.2f} s")
    assert took < PROMPT_S, f"close took {took:.1f} s"
    check_deleted_error(raised.value, stream, reports)
    counts = producer._counts[producer.routing.active("realtime").topic]
    assert (counts.sent, counts.failed) == (ACKED_BEFORE + QUEUED, QUEUED)
    assert METRICS.delivered[(stream, "realtime")] == ACKED_BEFORE


def test_a_flush_waiting_when_the_deletion_is_heard_returns_promptly(
    control_plane: Any, fleet: FleetDescriptor, stream_factory: Callable[..., str]
) -> None:
    stream = stream_factory("local-a", lanes=("realtime",), partitions=1)
    client = control_plane.client()
    producer = StreamProducer(stream, client, delivery_reports="all").open()
    try:
        reports = send_and_delete_topics(producer, stream, client, fleet)
        deleted_at: list[float] = []

        def delete_the_stream() -> None:
            time.sleep(0.5)  # while flush waits for the records of the deleted topics
            client.delete_stream(stream)
            deleted_at.append(time.monotonic())

        deleting = threading.Thread(target=delete_the_stream)
        deleting.start()
        flushing = time.monotonic()
        try:
            with pytest.raises(ProduceError) as raised:
                producer.flush(30)
            took = time.monotonic() - flushing
        finally:
            deleting.join()
        print(f"\nflush returned {time.monotonic() - deleted_at[0]:.2f} s after the deletion")
        assert took < PROMPT_S, f"flush took {took:.1f} s"
        check_deleted_error(raised.value, stream, reports)
        producer.close(PROMPT_S)  # nothing left to raise
    finally:
        with contextlib.suppress(ProduceError):
            producer.close(1.0)  # the code before: records still queued


def test_closing_an_idle_producer_after_the_deletion_raises_nothing(
    control_plane: Any, stream_factory: Callable[..., str]
) -> None:
    """Nothing queued when the stream is deleted: nothing was lost, so ``close`` raises
    nothing (as a consumer's ``close`` after the deletion), and returns promptly."""
    stream = stream_factory("local-a", lanes=("realtime",), partitions=1)
    client = control_plane.client()
    producer = StreamProducer(stream, client).open()
    for n in range(5):
        producer.send(b"%d" % n)
    producer.flush(30)
    client.delete_stream(stream)
    wait_for("the producer told of the deletion", lambda: told_of_the_deletion(producer), 30)
    closing = time.monotonic()
    producer.close()
    took = time.monotonic() - closing
    print(f"\nclose of the idle producer took {took:.2f} s")
    assert took < PROMPT_S
    assert METRICS.delivered[(stream, "realtime")] == 5
