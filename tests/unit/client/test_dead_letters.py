"""Retries and dead letters inside a StreamConsumer, without Kafka: fetches are fed in,
the clock is virtual and the dlq lane's Kafka producer is a stand-in whose writes are
acked (or failed) when the test says so."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, Message

import streamplane.client.consumer as consumer_module
from streamplane.client.consumer import StreamConsumer, StreamMessage, _LaneBuffer
from streamplane.client.partition_state import PartitionKey, PartitionState
from streamplane.client.producer import StreamProducer, _Route, _TopicCounts
from streamplane.client.provenance import read_provenance
from streamplane.core.routing import DLQ_LANE

KEY = PartitionKey("local-a", "sp.s.default.e1", 0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1.7e9 + self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class DlqBroker:
    """The dlq lane's Kafka producer: holds each write until ``deliver``."""

    def __init__(self) -> None:
        self.written: list[tuple[bytes | None, list[tuple[str, bytes]]]] = []
        self.pending: list[Any] = []
        self.fail_next = False

    def produce(  # confluent-kafka's signature: positional or keyword
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        callback: Any = None,
        on_delivery: Any = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        self.written.append((value, headers))
        self.pending.append((callback or on_delivery, Message(topic=topic, value=value)))

    def deliver(self) -> None:
        callbacks, self.pending = self.pending, []
        for callback, msg in callbacks:
            callback(KafkaError(KafkaError._MSG_TIMED_OUT) if self.fail_next else None, msg)
        self.fail_next = False

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        return len(self.pending)

    def __len__(self) -> int:
        return len(self.pending)


class NoKafka:
    def pause(self, partitions: object) -> None: ...

    def resume(self, partitions: object) -> None: ...

    def commit(self, items: object) -> None: ...


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(consumer_module, "time", c)
    return c


def consumer_of(records: int, broker: DlqBroker) -> tuple[StreamConsumer, PartitionState]:
    c = StreamConsumer("s", "g", None, assigner=False, max_attempts=2, retry_backoff=0.1)  # type: ignore[arg-type]
    c._lanes, c._lane_order, c._buffers = ["default"], {"default": 0}, [_LaneBuffer()]
    dlq = StreamProducer("s", None, lane=DLQ_LANE, delivery_reports="all")  # type: ignore[arg-type]
    route = _Route(broker, "sp.s.dlq.e1", "local-a", 1, _TopicCounts(broker, ("s", DLQ_LANE)))  # type: ignore[arg-type]
    dlq._producers, dlq._routes = {"local-a": broker}, {DLQ_LANE: route}  # type: ignore[dict-item]
    dlq._max_record_bytes, dlq._default_lane, dlq._opened = 1 << 20, DLQ_LANE, True
    c._dlq = dlq
    c._opened = True
    c._consumers = {"local-a": NoKafka()}  # type: ignore[dict-item]
    c._commit_stores = {"local-a": NoKafka()}  # type: ignore[dict-item]
    state = PartitionState(KEY, "default", 0)
    state.restore(None, 0)
    c._states[KEY] = state
    c._states_by_cluster["local-a"] = {(KEY.topic, KEY.partition): state}
    fetch = [
        Message(topic=KEY.topic, partition=0, offset=o, value=b"%d" % o, timestamp=(1, o))
        for o in range(records)
    ]
    c._accept("local-a", fetch)
    c._fetch = lambda timeout: None  # type: ignore[method-assign]
    return c, state


def poll(c: StreamConsumer, clock: Clock, seconds: float) -> list[StreamMessage]:
    """Poll (its housekeeping applies what was acked and nacked), let ``seconds`` pass,
    poll again; what both hand out."""
    out = c.poll_batch(100, 0)
    clock.now += seconds
    return out + c.poll_batch(100, 0)


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
