"""Retries and dead letters inside a StreamConsumer, without Kafka (``harness``)."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import KafkaError, Message

from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.producer import Record
from streamplane.client.provenance import read_provenance
from streamplane.exceptions import ConfigError
from tests.unit.client.harness import KEY, Clock, DlqBroker, consumer_of, poll, stand_in_consumer


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
    assert c._dlq is not None and c._dlq.pending == 0


def test_a_failed_dlq_write_is_written_again_and_loses_nothing(
    clock: Clock,
) -> None:
    """The record is out of attempts: its letter is written again a second later, not
    handed to the application again (``test_dlq_write_failures.py``)."""
    broker = DlqBroker()
    c, state = consumer_of(2, broker)
    for m in poll(c, clock, 0):
        m.ack() if m.offset == 0 else m.nack("boom")
    poll(c, clock, 0.2)[0].nack("boom")
    poll(c, clock, 0.2)
    broker.fail_next = True
    broker.deliver()  # the dlq write fails

    assert poll(c, clock, 0.5) == []  # waits a second, then is written again
    assert poll(c, clock, 0.6) == []
    assert state.unsettled() == 1 and c.stats["dlq"] == 0
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


def exhaust(c: StreamConsumer, clock: Clock, offsets: set[int]) -> None:
    """Nack the handed-out records at ``offsets`` until they run out of attempts (2);
    ack the rest."""
    for m in poll(c, clock, 0):
        m.nack("boom") if m.offset in offsets else m.ack()
    for m in poll(c, clock, 0.2):
        m.nack("boom")
    poll(c, clock, 0)  # housekeeping: out of attempts


def test_dead_letters_go_out_a_batch_at_a_time_and_settle_when_the_batch_is_in(
    clock: Clock,
) -> None:
    broker = DlqBroker()
    c, state = consumer_of(6, broker)
    held = []
    for m in poll(c, clock, 0):
        if m.offset == 1:
            m.nack("boom")
        elif m.offset in (3, 4):
            held.append(m)  # still being handled
        else:
            m.ack()
    poll(c, clock, 0.2)[0].nack("boom")
    poll(c, clock, 0)  # record 1 is out of attempts: the first batch goes
    assert [v for v, _ in broker.written] == [b"1"]

    # Records 3 and 4 run out of attempts while the first batch is in flight.
    for m in held:
        m.nack("boom")
    for m in poll(c, clock, 0.2):
        m.nack("boom")
    poll(c, clock, 0)
    assert [v for v, _ in broker.written] == [b"1"]  # waiting for the batch in flight
    assert state.unsettled() == 3

    broker.deliver()
    poll(c, clock, 0)  # the first batch is in: record 1 settles, the next batch goes
    assert state.unsettled() == 2
    assert [v for v, _ in broker.written] == [b"1", b"3", b"4"]
    broker.deliver()
    poll(c, clock, 0)
    assert state.unsettled() == 0 and c.stats["dlq"] == 3
    assert state.progress(0).low_watermark == 6


def test_the_next_batch_goes_out_no_sooner_than_the_batch_interval(clock: Clock) -> None:
    broker = DlqBroker()
    c, state = consumer_of(3, broker)
    handed = poll(c, clock, 0)
    handed[0].reject("bad")
    poll(c, clock, 0)
    broker.deliver()
    handed[1].reject("bad too")
    poll(c, clock, 0)  # the first batch is in; the second is not due yet
    assert [v for v, _ in broker.written] == [b"0"]
    assert state.unsettled() == 2

    clock.now += 0.1
    poll(c, clock, 0)
    assert [v for v, _ in broker.written] == [b"0", b"1"]


def test_a_failed_write_in_a_batch_is_written_again_and_the_rest_settle(
    clock: Clock,
) -> None:
    broker = DlqBroker()
    c, state = consumer_of(4, broker)
    exhaust(c, clock, {1, 2})
    assert [v for v, _ in broker.written] == [b"1", b"2"]

    broker.deliver(fail=lambda msg: msg.value() == b"2")
    poll(c, clock, 0)  # the failure is reported, the batch is in
    assert state.unsettled() == 1 and c.stats["dlq"] == 1
    assert poll(c, clock, 1.1) == []  # written again a second later, not handed out
    assert [v for v, _ in broker.written] == [b"1", b"2", b"2"]
    broker.deliver()
    poll(c, clock, 0)
    assert state.unsettled() == 0 and state.progress(0).low_watermark == 4


def test_closing_writes_the_waiting_dead_letters_and_settles_them(clock: Clock) -> None:
    broker = DlqBroker(ack_at_poll=True)
    c, state = consumer_of(2, broker)
    handed = poll(c, clock, 0)
    handed[0].reject("bad")
    poll(c, clock, 0)  # the first batch goes out
    handed[1].reject("bad too")  # waits: the next batch is not due for 0.1 s

    c._flush_dlq(1.0)  # as close() does, before its last commit
    assert [v for v, _ in broker.written] == [b"0", b"1"]
    assert state.unsettled() == 0 and c.stats["dlq"] == 2


def test_a_dead_letter_over_the_record_bound_is_written_with_its_provenance_alone(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """A record another producer wrote to the lane, over the stream's bound: its dead
    letter keeps the provenance (where the record still is) and drops the rest, so the
    record settles (before, it was handed out every second forever, holding the low
    watermark)."""
    broker = DlqBroker()
    c, state = consumer_of(12, broker)
    assert c._dlq is not None
    c._dlq.producer._max_record_bytes = 1  # values "10" and "11" are over it
    exhaust(c, clock, {1, 10})
    assert [v for v, _ in broker.written] == [b"1", None]  # the rest of the batch whole
    stub = read_provenance(broker.written[1][1])
    assert (stub["offset"], stub["dropped"]) == ("10", "2")  # the value's 2 bytes
    assert "written with their provenance alone" in caplog.text

    broker.deliver()
    poll(c, clock, 0)
    assert state.unsettled() == 0 and c.stats["dlq"] == 2
    assert state.progress(0).low_watermark == 12
    assert poll(c, clock, 1.1) == []  # not handed out again


def test_a_dead_letter_the_broker_finds_too_large_is_written_again_with_its_provenance_alone(
    clock: Clock,
) -> None:
    broker = DlqBroker()
    c, state = consumer_of(4, broker)
    exhaust(c, clock, {1, 2})
    broker.deliver(fail=lambda msg: msg.value() == b"2", code=KafkaError.MSG_SIZE_TOO_LARGE)
    poll(c, clock, 0)  # the failure is reported: record 2 goes out again at once, stripped
    poll(c, clock, 0.1)
    assert [v for v, _ in broker.written] == [b"1", b"2", None]
    assert read_provenance(broker.written[2][1])["offset"] == "2"
    broker.deliver()
    poll(c, clock, 0)
    assert state.unsettled() == 0 and c.stats["dlq"] == 2
    assert state.progress(0).low_watermark == 4


def test_a_batch_builds_each_dead_letter_once_the_one_before_is_queued(clock: Clock) -> None:
    """A dead letter (its headers: ~6 tracked objects) is built as it is written, so a
    batch of hundreds never holds them all at once (that set off collections that
    moved them into the collector's older generations)."""
    broker = DlqBroker()
    c, _state = consumer_of(3, broker)
    assert c._dlq is not None
    build = c._dlq.write_of
    queued_before_each: list[int] = []

    def counting_build(msg: StreamMessage, reason: str, attempts: int) -> Record:
        queued_before_each.append(len(broker.written))
        return build(msg, reason, attempts)

    c._dlq.write_of = counting_build
    for m in poll(c, clock, 0):
        m.reject("bad")
    poll(c, clock, 0)  # housekeeping: the batch goes out
    assert [v for v, _ in broker.written] == [b"0", b"1", b"2"]
    assert queued_before_each == [0, 1, 2]


@pytest.mark.parametrize(
    ("max_attempts", "give_up"),
    [(2, "reject"), (1, "nack")],
    ids=["rejected on its first delivery", "nacked out of its only attempt"],
)
def test_a_record_whose_dlq_write_failed_settles_once_its_letter_is_written_again(
    clock: Clock, max_attempts: int, give_up: str
) -> None:
    broker = DlqBroker()
    c = stand_in_consumer(broker, max_attempts=max_attempts)
    state = c._states[KEY]
    records = [Message(topic=KEY.topic, partition=0, offset=o, value=b"v") for o in (0, 1)]
    c._accept(KEY.cluster, records)
    for m in poll(c, clock, 0):
        if m.offset == 0:
            m.ack()
        else:
            m.reject("bad") if give_up == "reject" else m.nack("boom")
    poll(c, clock, 0.2)
    broker.fail_next = True
    broker.deliver()  # the dlq write fails
    poll(c, clock, 0.2)

    assert poll(c, clock, 1.0) == []  # not handed to the application again
    assert len(broker.written) == 2  # its letter, written again
    broker.deliver()
    poll(c, clock, 0.1)
    assert state.unsettled() == 0
    assert state.progress(0).low_watermark == 2


def test_a_record_rejected_at_once_is_parked_until_its_dead_letter_is_acked(
    clock: Clock,
) -> None:
    broker = DlqBroker()
    c, state = consumer_of(5, broker)
    for m in poll(c, clock, 0):
        m.reject("invalid") if m.offset == 2 else m.ack()
    poll(c, clock, 0.2)  # housekeeping: acks folded, the dead letter written
    assert list(state.settled.ranges()) == [(0, 5)]  # the acks fold as one run
    assert state.parked == {2} and state.unsettled() == 1
    assert state.progress(0).low_watermark == 2
    broker.deliver()
    poll(c, clock, 0.2)
    assert state.unsettled() == 0 and state.parked == set()
    assert state.progress(0).low_watermark == 5
    assert c.stats["dlq"] == 1


def test_run_rejects_a_non_retryable_error_at_once_and_retries_the_others(
    clock: Clock,
) -> None:
    broker = DlqBroker(ack_at_poll=True)
    c, state = consumer_of(4, broker)  # max_attempts=2
    stop = threading.Event()

    def fetch(timeout: float) -> None:  # nothing more to fetch: time passes
        clock.sleep(timeout)
        if clock.now > 1005:
            stop.set()

    c._fetch = fetch  # type: ignore[method-assign]
    handled: list[tuple[int, int]] = []

    def handler(m: StreamMessage) -> None:
        handled.append((m.offset, m.attempts))
        if m.offset == 1:
            raise ValueError("not JSON")
        if m.offset == 2:
            raise RuntimeError("flaky")

    c.run(handler, stop=stop, non_retryable=(ValueError,))
    assert handled == [(0, 0), (1, 0), (2, 0), (3, 0), (2, 1)]
    errors = {
        int(p["offset"]): (p["attempts"], p["error"])
        for p in (read_provenance(headers) for _, headers in broker.written)
    }
    assert errors == {
        1: ("1", "non-retryable ValueError: not JSON"),
        2: ("2", "max attempts (2) reached: RuntimeError: flaky"),  # as reject tells it
    }
    assert state.unsettled() == 0
    assert state.progress(0).low_watermark == 4


@pytest.mark.parametrize("bad", [ValueError, (KeyboardInterrupt,), ("ValueError",)])
def test_run_refuses_non_retryable_that_is_not_a_tuple_of_exception_classes(
    bad: object,
) -> None:
    c = stand_in_consumer(DlqBroker())
    with pytest.raises(ConfigError, match="non_retryable"):
        c.run(lambda m: None, non_retryable=bad)  # type: ignore[arg-type]


def test_reject_takes_an_exception_and_refuses_other_reasons(clock: Clock) -> None:
    """``reject(exc)`` (as ``nack(exc)``) is told as ``Type: message``; a reason that is
    neither is refused at the call (it was accepted, then broke every later poll)."""
    broker = DlqBroker()
    c, state = consumer_of(2, broker)
    handed = poll(c, clock, 0)
    with pytest.raises(TypeError, match="a str or an exception"):
        handed[0].reject(None)  # type: ignore[arg-type]
    handed[0].reject(ValueError("boom"))
    handed[1].ack()
    poll(c, clock, 0.2)
    ((value, headers),) = broker.written
    assert value == b"0" and read_provenance(headers)["error"] == "ValueError: boom"
    broker.deliver()
    poll(c, clock, 0)
    assert state.unsettled() == 0


def test_a_closed_consumer_is_not_opened_again() -> None:
    """Iterating, ``run`` or ``open`` after ``close`` raise: they used to start a new
    member of the group (heartbeats, partitions held) that nothing would stop."""
    c = StreamConsumer("s", "g", None, assigner=False)  # type: ignore[arg-type]
    c.close()
    with pytest.raises(ConfigError, match="is closed"):
        c.open()
    with pytest.raises(ConfigError, match="is closed"):
        next(iter(c))
    with pytest.raises(ConfigError, match="is closed"):
        c.run(lambda m: None)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lanes": "realtime"}, "lanes must be a non-empty list"),
        ({"lanes": []}, "lanes must be a non-empty list"),
        ({"max_in_flight": 0}, "max_in_flight must be a positive int"),
        ({"fetch_batch": "10"}, "fetch_batch must be a positive int"),
        ({"max_attempts": 0}, "max_attempts must be an int of at least 1"),
        ({"max_attempts": 2.5}, "max_attempts must be an int of at least 1"),
        ({"retry_backoff": float("nan")}, "retry_backoff and max_retry_backoff must be"),
        ({"max_retry_backoff": float("inf")}, "retry_backoff and max_retry_backoff must be"),
        ({"retry_backoff": 5.0, "max_retry_backoff": 1.0}, "0 <= retry_backoff <="),
        ({"commit_interval_s": 0}, "commit_interval_s must be a positive number"),
        ({"heartbeat_interval_s": float("nan")}, "heartbeat_interval_s must be a positive"),
    ],
)
def test_bad_consumer_settings_are_refused_at_construction(
    kwargs: dict[str, object], message: str
) -> None:
    """(A plain string was read as lanes 'r', 'e', ...; max_in_flight=0 paused every
    partition for good; a NaN backoff was taken.)"""
    with pytest.raises(ConfigError, match=message):
        StreamConsumer("s", "g", None, assigner=False, **kwargs)  # type: ignore[arg-type]


def test_many_attempts_back_off_to_the_ceiling() -> None:
    """max_attempts=100,000 raised OverflowError (2 ** n for every attempt)."""
    c = StreamConsumer(
        "s", "g", None, assigner=False, max_attempts=100_000, retry_backoff=0.1,  # type: ignore[arg-type]
        max_retry_backoff=30.0,
    )  # fmt: skip
    delays = c._retry_delays
    assert delays[:4] == [0.1, 0.1, 0.2, 0.4]
    assert delays[-1] == 30.0 and len(delays) < 20
