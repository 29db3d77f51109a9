"""Retries and dead letters inside a StreamConsumer, without Kafka (``harness``)."""

from __future__ import annotations

from streamplane.client.provenance import read_provenance
from tests.unit.client.harness import Clock, DlqBroker, consumer_of, poll


def test_a_record_out_of_attempts_settles_only_once_its_dead_letter_is_acked(
    clock: Clock,
) -> None:
    broker = DlqBroker()
    c, state = consumer_of(3, broker)
    for m in poll(c, clock, 0):
        m.ack() if m.offset != 1 else m.nack("boom")
    retried = poll(c, clock, 0.2)
    assert [m.offset for m in retried] == [1]
    retried[0].nack("boom again")
    poll(c, clock, 0.2)  # housekeeping: out of attempts, written to the dlq

    assert len(broker.written) == 1
    value, headers = broker.written[0]
    assert value == b"1"
    provenance = read_provenance(headers)
    assert (provenance["offset"], provenance["attempts"]) == ("1", "2")
    assert provenance["error"] == "max attempts (2) reached: boom again"
    assert state.unsettled() == 1  # written, not acked yet: not settled
    assert state.progress(0).low_watermark == 1

    broker.deliver()
    poll(c, clock, 0.2)
    assert state.unsettled() == 0
    progress = state.progress(0)
    assert progress.low_watermark == 3
    assert c.stats["dlq"] == 1 and c.stats["rejected"] == 1
    assert c._dlq_pending == 0


def test_a_failed_dlq_write_hands_the_record_out_again_and_loses_nothing(
    clock: Clock,
) -> None:
    broker = DlqBroker()
    c, state = consumer_of(2, broker)
    for m in poll(c, clock, 0):
        m.ack() if m.offset == 0 else m.nack("boom")
    poll(c, clock, 0.2)[0].nack("boom")
    poll(c, clock, 0.2)
    broker.fail_next = True
    broker.deliver()  # the dlq write fails

    assert poll(c, clock, 0.5) == []  # settled? no: waits a second, then again
    again = poll(c, clock, 0.6)
    assert [m.offset for m in again] == [1]
    assert state.unsettled() == 1 and c.stats["dlq"] == 0
    again[0].nack("still boom")
    poll(c, clock, 0.2)  # out of attempts: written again
    assert len(broker.written) == 2
    broker.deliver()
    poll(c, clock, 0.2)
    assert state.unsettled() == 0 and c.stats["dlq"] == 1
    assert state.progress(0).low_watermark == 2


def test_records_nacked_together_come_back_together_after_their_backoff(
    clock: Clock,
) -> None:
    c, state = consumer_of(6, DlqBroker())
    for m in poll(c, clock, 0):
        m.nack() if m.offset % 2 else m.ack()
    assert poll(c, clock, 0.05) == []  # backoff 0.1 s not over
    retried = poll(c, clock, 0.1)
    assert [m.offset for m in retried] == [1, 3, 5]
    for m in retried:
        m.ack()
    poll(c, clock, 0.1)
    assert state.unsettled() == 0 and state.progress(0).low_watermark == 6


def test_a_record_nacked_after_its_partition_was_given_up_is_not_retried(
    clock: Clock,
) -> None:
    c, state = consumer_of(2, DlqBroker())
    handed = poll(c, clock, 0)
    state.revoked = True  # given up (to another member) while the handler ran
    for m in handed:
        m.nack("boom")
    assert poll(c, clock, 0.2) == []
    assert poll(c, clock, 1.0) == []
    assert len(c._retries) == 0
