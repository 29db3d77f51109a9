"""Dead letters bound for different clusters: the dlq lane failed over from local-a
(down, a batch of dead letters stuck in its Kafka producer) to local-b. Without Kafka
(``harness``): each cluster's Kafka producer is a ``DlqBroker`` holding its writes until
told, and the failover is applied to the dlq producer as its routing watch does."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from confluent_kafka import Message

import streamplane.client.consumer as consumer_module
from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.partition_state import PartitionState
from streamplane.client.producer import Record, SentBatch
from streamplane.core.routing import DLQ_LANE, move_lanes, new_routing_table
from tests.unit.client.harness import KEY, Clock, DlqBroker, consumer_of, poll, stand_in_consumer

LANES = pytest.mark.parametrize(
    "lanes", [("default", DLQ_LANE), (DLQ_LANE,)], ids=["whole stream", "dlq lane alone"]
)


def fail_over_to_local_b(c: StreamConsumer, lanes: tuple[str, ...]) -> DlqBroker:
    """Move ``lanes`` of stream ``s`` from local-a to local-b in the dlq producer's
    routing; local-b's Kafka producer. Moving the dlq lane alone keeps local-a's
    producer in use (the default lane is still there); moving both retires it."""
    assert c._dlq is not None
    producer = c._dlq.producer
    b = DlqBroker()
    b.on_delivery = producer._on_delivery
    producer._producers["local-b"] = b  # type: ignore[assignment]  # a stand-in
    table = new_routing_table("s", ["default"], "local-a", 1)
    producer._apply(move_lanes(table, lanes, "local-b"))
    assert producer._routes[DLQ_LANE].cluster == "local-b"
    return b


def rejected_on_a(
    clock: Clock, records: int = 4
) -> tuple[StreamConsumer, PartitionState, DlqBroker, list[StreamMessage]]:
    """A consumer of ``records`` records whose record 1 was rejected: its dead letter is
    in flight to local-a (which does not answer). The records handed out, 0 and the
    last one acked, the others held by the application."""
    a = DlqBroker()
    c, state = consumer_of(records, a)
    handed = poll(c, clock, 0)
    handed[0].ack()
    handed[-1].ack()
    handed[1].reject("bad")
    poll(c, clock, 0)  # housekeeping: the batch goes out
    assert values(a) == [b"1"]
    return c, state, a, handed


def values(broker: DlqBroker) -> list[bytes | None]:
    return [value for value, _headers in broker.written]


def settled(state: PartitionState, offset: int) -> bool:
    return offset < state.progress(0).low_watermark or offset in state.settled_now()


def everything(_msg: object) -> bool:
    return True


@LANES
def test_a_dead_letter_for_a_healthy_cluster_does_not_wait_behind_a_stuck_batch(
    clock: Clock, lanes: tuple[str, ...]
) -> None:
    """Record 2's dead letter goes to local-b at once and settles when local-b acks
    it, while record 1's stays stuck on local-a; before, it waited until local-a's
    batch was done, up to librdkafka's message.timeout.ms (5 minutes by default)."""
    clock_start = clock.now
    c, state, a, handed = rejected_on_a(clock)
    b = fail_over_to_local_b(c, lanes)

    handed[2].reject("bad too")
    poll(c, clock, 0.1)
    poll(c, clock, 0)
    assert values(b) == [b"2"]  # not held back by local-a's batch
    b.deliver()
    poll(c, clock, 0)
    assert settled(state, 2) and not settled(state, 1)
    assert c.stats["dlq"] == 1 and state.parked == {1}
    assert clock.now - clock_start < 1.0

    # local-a answers at last: record 1 settles, written once.
    a.deliver()
    poll(c, clock, 0)
    assert settled(state, 1) and state.unsettled() == 0
    assert state.progress(0).low_watermark == 4
    assert values(a) == [b"1"] and values(b) == [b"2"]
    assert c._dlq is not None and c._dlq.pending == 0


@LANES
def test_a_stuck_batch_that_times_out_is_written_again_to_the_new_cluster(
    clock: Clock, lanes: tuple[str, ...]
) -> None:
    c, state, a, handed = rejected_on_a(clock)
    b = fail_over_to_local_b(c, lanes)
    handed[2].reject("bad too")
    poll(c, clock, 0.1)
    poll(c, clock, 0)
    b.deliver()
    poll(c, clock, 0)

    a.deliver(fail=everything)  # message.timeout.ms passed: reported failed
    # Its letter is written again, to the new active segment; record 1 is not handed
    # to the application again (its attempts are spent: it was handed out again
    # before, and rejected once more, attempts past max_attempts).
    again = poll(c, clock, 1.1) + poll(c, clock, 0.1) + poll(c, clock, 0)
    assert again == []
    assert values(b) == [b"2", b"1"]  # the new active segment
    b.deliver()
    poll(c, clock, 0)
    assert state.unsettled() == 0 and state.progress(0).low_watermark == 4
    assert c.stats["dlq"] == 2 and values(a) == [b"1"]


@LANES
def test_a_failed_write_to_the_healthy_cluster_is_not_blamed_on_the_stuck_batch(
    clock: Clock, lanes: tuple[str, ...]
) -> None:
    """A failure report names its topic (one per segment, so per cluster), and fails
    only its own batch's records: local-b's failed write of record 3 has record 3's
    letter written again, not record 1's, stuck on local-a with the same key and value
    (a report carries no headers), which settles once local-a acks it."""
    a = DlqBroker()
    c = stand_in_consumer(a)
    state = c._states[KEY]
    same = {1: b"same", 3: b"same"}
    fetched = [
        Message(topic=KEY.topic, partition=0, offset=o, value=same.get(o, b"%d" % o))
        for o in range(5)
    ]
    c._accept(KEY.cluster, fetched)
    handed = poll(c, clock, 0)
    handed[0].ack()
    handed[4].ack()
    handed[1].reject("bad")
    poll(c, clock, 0)
    b = fail_over_to_local_b(c, lanes)
    handed[2].reject("bad")
    handed[3].reject("bad")
    poll(c, clock, 0.1)
    poll(c, clock, 0)
    assert values(a) == [b"same"] and values(b) == [b"2", b"same"]
    b.deliver(fail=lambda msg: msg.value() == b"same")
    poll(c, clock, 0)
    assert settled(state, 2) and not settled(state, 3) and not settled(state, 1)

    a.deliver()
    poll(c, clock, 0)
    assert settled(state, 1)
    assert poll(c, clock, 1.1) + poll(c, clock, 0.1) + poll(c, clock, 0) == []
    assert values(a) == [b"same"]
    assert values(b) == [b"2", b"same", b"same"]  # record 3's letter, written again
    b.deliver()
    poll(c, clock, 0)
    assert settled(state, 3) and state.unsettled() == 0


@LANES
def test_each_cluster_has_one_batch_in_flight_at_a_time(
    clock: Clock, lanes: tuple[str, ...]
) -> None:
    """The batch rule holds per cluster: local-b's next batch goes once its batch in
    flight is in (however long local-a's takes), at most every batch interval."""
    c, state, a, handed = rejected_on_a(clock, records=5)
    b = fail_over_to_local_b(c, lanes)
    handed[2].reject("bad")
    poll(c, clock, 0.1)
    poll(c, clock, 0)
    handed[3].reject("bad")
    poll(c, clock, 0.1)
    poll(c, clock, 0)
    assert values(b) == [b"2"]  # record 3 waits for local-b's batch in flight
    b.deliver()
    poll(c, clock, 0.1)
    poll(c, clock, 0)
    assert values(b) == [b"2", b"3"]
    b.deliver()
    poll(c, clock, 0)
    assert settled(state, 2) and settled(state, 3) and not settled(state, 1)
    assert values(a) == [b"1"]


class Ticking:
    """The consumer's clock for ``close``: each reading moves it 0.05 s on."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def monotonic(self) -> float:
        self.clock.now += 0.05
        return self.clock.now

    def time(self) -> float:
        return self.clock.time()

    def sleep(self, seconds: float) -> None:
        self.clock.now += seconds


@LANES
def test_closing_writes_and_settles_the_dead_letters_for_a_healthy_cluster(
    clock: Clock, monkeypatch: pytest.MonkeyPatch, lanes: tuple[str, ...]
) -> None:
    """``close`` (its ``_flush_dlq``) writes the waiting dead letters to local-b and
    settles them while local-a's batch stays stuck; before, they were not even written
    (left unsettled for the next member to dead-letter again)."""
    c, state, _a, handed = rejected_on_a(clock)
    b = fail_over_to_local_b(c, lanes)
    b.ack_at_poll = True
    handed[2].reject("bad too")
    monkeypatch.setattr(consumer_module, "time", Ticking(clock))
    c._flush_dlq(0.3)
    assert values(b) == [b"2"]
    assert settled(state, 2) and not settled(state, 1)
    assert c._dlq is not None and c._dlq.pending == 1  # record 1, on local-a


def test_a_batch_queued_while_the_routing_changes_is_taken_for_where_it_went(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failover lands between the writer's look at the routing (local-a) and
    ``send_batch``'s (local-b): the batch went to local-b. Taken for local-a's, it
    would settle at once (local-a has nothing queued) and be lost when local-b fails
    it; ``send_batch`` says where it went."""
    a = DlqBroker()
    c, state = consumer_of(3, a)
    assert c._dlq is not None
    producer = c._dlq.producer
    send_batch = producer.send_batch
    moved: list[DlqBroker] = []

    def failover_then_send(records: Iterable[Record], lane: str | None = None) -> SentBatch:
        if not moved:
            moved.append(fail_over_to_local_b(c, ("default", DLQ_LANE)))
        return send_batch(records, lane)

    monkeypatch.setattr(producer, "send_batch", failover_then_send)
    handed = poll(c, clock, 0)
    handed[0].ack()
    handed[2].ack()
    handed[1].reject("bad")
    poll(c, clock, 0)
    b = moved[0]
    assert values(a) == [] and values(b) == [b"1"]
    poll(c, clock, 0)
    assert not settled(state, 1)  # local-a has nothing queued, but local-b holds it

    b.deliver(fail=everything)
    poll(c, clock, 0)
    assert not settled(state, 1) and c.stats["dlq"] == 0
    again = poll(c, clock, 1.1) + poll(c, clock, 0.1) + poll(c, clock, 0)
    assert again == []  # its letter is written again: not lost, not handled again
    b.deliver()
    poll(c, clock, 0)
    assert state.unsettled() == 0 and values(b) == [b"1", b"1"] and c.stats["dlq"] == 1
