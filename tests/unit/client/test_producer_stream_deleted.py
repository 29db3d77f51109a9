"""A ``StreamProducer`` whose stream is deleted with records queued: they can never be
delivered (the stream's topics went with it), so they are purged as the producer hears
of the deletion, and ``flush``/``close`` raise at once instead of waiting their timeout.

Without Kafka: real librdkafka producers whose bootstrap is a closed local port (nothing
is ever acknowledged, as for a topic that no longer exists), the deletion told as the
routing watch tells it. Found by an exploratory run: ``send`` raised NotFound 5.3 s
after ``streams delete``, then leaving the ``with`` block blocked 30.12 s (the whole
default Kubernetes grace period) and raised "12 records of stream 'del5' not
acknowledged after 30s".
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from streamplane.client.producer import StreamProducer, _OwnReport
from streamplane.core.routing import new_routing_table
from streamplane.exceptions import NotFound, ProduceError
from tests.unit.client.test_producer_close import PURGED, Reports, unanswered_producer

DELETED = "stream 's14' was deleted (stream 's14' not found)"
# Far above what the purged records' reports take: the code before waited all of it.
TIMEOUT_S = 10.0


def deleted_error(raised: pytest.ExceptionInfo[ProduceError], records: int) -> str:
    """The message of ``raised``, checked to tell of the deletion: a ProduceError that
    is also a NotFound (as ``send`` raises), naming how many records were not delivered."""
    msg = str(raised.value)
    assert isinstance(raised.value, NotFound), msg
    assert msg.startswith(
        f"{records} records of stream 's14' undelivered: {DELETED} while they were queued"
    ), msg
    assert "after" not in msg  # not "not acknowledged after 10s": nothing was waited for
    return msg


def test_close_after_the_deletion_gives_up_on_queued_records_at_once() -> None:
    producer = unanswered_producer()
    reports = Reports()
    for n in range(12):
        producer.send(b"%d" % n, on_delivery=reports.callback(n))
    producer._on_gone(DELETED)
    with pytest.raises(NotFound, match="was deleted"):
        producer.send(b"after")
    with pytest.raises(ProduceError) as closed:
        producer.close(TIMEOUT_S)
    assert "_PURGE_QUEUE (never sent)" in deleted_error(closed, 12)
    # Every record's callback ran, each failed as purged.
    assert sorted(reports.codes) == list(range(12))
    assert set(reports.codes.values()) <= PURGED
    counts = producer._counts["sp.s14.realtime.e1"]
    assert (counts.sent, counts.failed) == (12, 12)
    assert producer._producers == {}
    producer.close(TIMEOUT_S)  # closed already: nothing more


def test_flush_after_the_deletion_raises_at_once_and_only_once() -> None:
    """Sent without callbacks: ``flush`` raises the deletion's ProduceError (the failures
    are raised, not kept), a second ``flush`` and ``close`` have nothing left to say."""
    producer = unanswered_producer(delivery_reports="errors")
    for n in range(40):
        producer.send(b"%d" % n)
    producer._on_gone(DELETED)
    with pytest.raises(ProduceError) as flushed:
        producer.flush(TIMEOUT_S)
    deleted_error(flushed, 40)
    assert producer.queued() == 0
    assert producer.take_failures() == []
    producer.flush(TIMEOUT_S)
    producer.close(TIMEOUT_S)


def test_a_flush_waiting_when_the_deletion_is_heard_returns_at_once() -> None:
    """The watch thread hears of the deletion while ``flush`` waits: it purges, and the
    flush returns as soon as the purged records' reports are served."""
    producer = unanswered_producer()
    reports = Reports()
    for n in range(25):
        producer.send(b"%d" % n, on_delivery=reports.callback(n))
    watch = threading.Timer(0.2, producer._on_gone, args=(DELETED,))
    watch.start()
    try:
        with pytest.raises(ProduceError) as flushed:
            producer.flush(TIMEOUT_S)
    finally:
        watch.join()
    deleted_error(flushed, 25)
    assert sorted(reports.codes) == list(range(25))
    assert set(reports.codes.values()) <= PURGED
    producer.close(TIMEOUT_S)


class DeletedWhileClosing:
    """The control plane as the routing watch sees it: the stream is there until the
    producer starts closing, then deleted (the long poll answers 404)."""

    def __init__(self, producer: StreamProducer) -> None:
        self.producer = producer

    def routing(self, stream: str) -> Any:
        return new_routing_table(stream, ["realtime"], "local-b", 3)

    def watch_routing(self, stream: str, epoch: int, timeout: float) -> Any:
        closing = threading.Event()
        while not self.producer._closed:
            closing.wait(0.01)
        raise NotFound(f"stream {stream!r} not found")


def test_a_deletion_heard_while_close_waits_ends_the_wait() -> None:
    """``close`` kept the routing watch going while it waits: before, it stopped the
    watch first, and waited its whole timeout for records of a deleted stream."""
    producer = unanswered_producer()
    producer._watcher._client = DeletedWhileClosing(producer)  # type: ignore[assignment]
    producer._watcher.start()
    producer._watcher.add_gone_listener(producer._on_gone)  # as ``open`` does
    reports = Reports()
    for n in range(30):
        producer.send(b"%d" % n, on_delivery=reports.callback(n))
    with pytest.raises(ProduceError) as closed:
        producer.close(TIMEOUT_S)
    deleted_error(closed, 30)
    assert sorted(reports.codes) == list(range(30))
    assert set(reports.codes.values()) <= PURGED


def test_a_record_queued_as_the_deletion_was_heard_is_purged_too() -> None:
    """A ``send`` on another thread that had its route before the deletion was heard
    queues its record after the watch thread purged: ``close`` purges it as well."""
    producer = unanswered_producer()
    reports = Reports()
    producer.send(b"0", on_delivery=reports.callback(0))
    route = producer._routes["realtime"]
    producer._on_gone(DELETED)
    # What that ``send`` does once it has its route.
    route.producer.produce(route.topic, b"1", on_delivery=_OwnReport(producer, reports.callback(1)))
    route.counts.sent += 1
    with pytest.raises(ProduceError) as closed:
        producer.close(TIMEOUT_S)
    deleted_error(closed, 2)
    assert sorted(reports.codes) == [0, 1]


def test_close_of_an_idle_producer_whose_stream_was_deleted_raises_nothing() -> None:
    """Nothing was queued: nothing was lost, so nothing to raise (as a consumer's
    ``close`` after the deletion)."""
    producer = unanswered_producer()
    producer._on_gone(DELETED)
    producer.close(TIMEOUT_S)
