"""A dead letter whose write fails is written again, its record parked, not handed back
to the application (an exploratory run: with the dlq topic deleted under a running
consumer, each failed write handed its record out again, its attempts rose past
``max_attempts`` up to 8, and the failure was first logged 25 s after the deletion).
Without Kafka (``harness``)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from streamplane.client import dlq_writer
from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.partition_state import PartitionState
from tests.unit.client.harness import Clock, DlqBroker, consumer_of, poll

MISSING = KafkaError.UNKNOWN_TOPIC_OR_PART


class DeletedTopicBroker(DlqBroker):
    """A dlq producer that, while ``refusing``, refuses writes as librdkafka does once it
    knows the topic to be missing: ``produce`` raises ``_UNKNOWN_TOPIC``."""

    refusing = False

    def produce(self, topic: str, *args: Any, **kwargs: Any) -> None:
        if self.refusing:
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_TOPIC))
        super().produce(topic, *args, **kwargs)


def dead_lettered(
    clock: Clock, broker: DlqBroker, records: int = 4
) -> tuple[StreamConsumer, PartitionState, list[StreamMessage]]:
    """Record 1 out of attempts (nacked twice, ``max_attempts=2``), its dead letter
    written; records 0 and 2 acked, record 3 held by the application."""
    c, state = consumer_of(records, broker)
    handed = poll(c, clock, 0)
    handed[0].ack()
    handed[2].ack()
    handed[1].nack("boom")
    retried = poll(c, clock, 0.2)
    assert [m.offset for m in retried] == [1]
    retried[0].nack("boom again")
    poll(c, clock, 0.2)  # out of attempts: its dead letter goes out
    assert [value for value, _ in broker.written] == [b"1"]
    return c, state, handed


def fail_as_missing(broker: DlqBroker) -> None:
    """Every write ``broker`` holds fails: its topic does not exist."""
    broker.deliver(fail=lambda _msg: True, code=MISSING)


def handed_out_over(c: StreamConsumer, clock: Clock, seconds: float) -> list[StreamMessage]:
    """Poll every 0.1 s for ``seconds``: what is handed out meanwhile."""
    out: list[StreamMessage] = []
    for _ in range(round(seconds / 0.1)):
        clock.now += 0.1
        out += c.poll_batch(100, 0)
    return out


def test_a_failed_dead_letter_is_written_again_not_handed_out_again(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    broker = DlqBroker()
    c, state, _handed = dead_lettered(clock, broker)
    fail_as_missing(broker)  # the dlq topic was deleted
    caplog.clear()
    assert poll(c, clock, 0.1) == []  # the failure is in

    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1, errors
    assert errors[0].startswith("the dlq topic sp.s.dlq.e1 of stream 's' is missing (deleted?)")
    assert "1 dead letter not written; their records wait unsettled" in errors[0]

    # Failing for 30 s: the record is never handed to the application again, and its
    # letter is written again, backing off.
    written_at = [clock.now]
    for _ in range(300):
        clock.now += 0.1
        assert c.poll_batch(100, 0) == []
        if len(broker.written) > len(written_at):
            written_at.append(clock.now)
            fail_as_missing(broker)
    gaps = [round(b - a, 1) for a, b in itertools.pairwise(written_at)]
    print(f"rewrites after the first failure, seconds apart: {gaps}")
    # (Polled every 0.1 s: a rewrite is seen up to 0.1 s after it is due.)
    assert [round(gap) for gap in gaps] == [1, 2, 4, 8, 8]
    assert len([r for r in caplog.records if r.levelname == "ERROR"]) == 1  # not per write
    assert state.unsettled() == 2  # record 1 (its letter unwritten) and record 3
    assert state.progress(0).low_watermark == 1 and c.stats["dlq"] == 0

    # The topic is back: the letter is written and its record settles.
    clock.now += 8.0
    c.poll_batch(100, 0)
    broker.deliver()
    c.poll_batch(100, 0)
    assert c.stats["dlq"] == 1
    assert state.unsettled() == 1 and state.progress(0).low_watermark == 3
    assert any("is written again: 1 dead letter in" in r.getMessage() for r in caplog.records)


def test_the_partitions_other_records_flow_while_a_dead_letter_waits(clock: Clock) -> None:
    broker = DlqBroker()
    c, state, handed = dead_lettered(clock, broker, records=6)
    fail_as_missing(broker)
    handed[3].ack()
    handed[4].nack("once")  # a retry of another record still comes back to the handler
    again = handed_out_over(c, clock, 1.0)
    assert [m.offset for m in again] == [4]
    assert again[0].attempts == 1
    again[0].ack()
    handed[5].ack()
    c.poll_batch(100, 0)
    assert state.unsettled() == 1  # only record 1, its letter waiting
    assert state.progress(0).low_watermark == 1


def test_a_write_refused_as_it_is_queued_waits_too(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """librdkafka, once it knows the topic is missing, refuses ``produce`` itself: the
    consumer's poll does not raise, and the letter waits like a failed one."""
    broker = DeletedTopicBroker()
    c, state = consumer_of(2, broker)
    broker.refusing = True
    handed = poll(c, clock, 0)
    handed[0].ack()
    handed[1].reject("bad")
    assert handed_out_over(c, clock, 3.0) == []
    assert any("is missing (deleted?)" in r.getMessage() for r in caplog.records)
    assert state.unsettled() == 1 and broker.written == []
    broker.refusing = False
    assert handed_out_over(c, clock, 8.0) == []
    assert [value for value, _ in broker.written] == [b"1"]
    broker.deliver()
    c.poll_batch(100, 0)
    assert state.unsettled() == 0 and c.stats["dlq"] == 1


def test_the_backoff_doubles_up_to_its_cap_per_topic_and_ends_with_a_success() -> None:
    backoff = dlq_writer.RewriteBackoff()
    delays = [backoff.failed("t1", now=float(i)) for i in range(6)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert backoff.waits("t1", 5.0 + 7.9) and not backoff.waits("t1", 5.0 + 8.0)
    assert not backoff.waits("t2", 5.0)  # a dlq lane failed over writes elsewhere at once
    assert not backoff.succeeded("t2")
    assert backoff.succeeded("t1") and not backoff.waits("t1", 5.0)
    assert backoff.failed("t1", now=20.0) == 1.0


def test_a_lasting_failure_is_logged_once_a_minute() -> None:
    backoff = dlq_writer.RewriteBackoff()
    logged = []
    for now in range(0, 130, 8):
        backoff.failed("t", float(now))
        logged.append(backoff.should_log(float(now)))
    assert [now for now, told in zip(range(0, 130, 8), logged, strict=True) if told] == [
        0,
        64,
        128,
    ]
