"""``StreamConsumer.run`` without Kafka (``harness``)."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Message

from streamplane.client.consumer import StreamMessage
from tests.unit.client.harness import KEY, DlqBroker, consumer_of


def record(offset: int) -> Message:
    return Message(topic=KEY.topic, partition=0, offset=offset, value=b"v", timestamp=(1, offset))


def test_stopping_a_key_ordered_run_puts_back_the_records_it_queued() -> None:
    """Records queued behind their key when ``stop`` is set are not started (run went
    on with all of them: 15.5 s after stop in an exploratory run), nor lost (they were
    once submitted to a pool already shut down: never handled, never settled, holding
    the low watermark): they are put back, unsettled, for the next poll."""
    c, state = consumer_of(5, DlqBroker())
    entry = c._buffers[0].entries[0]
    assert not isinstance(entry, list)  # a fetch's run, not retries
    for msg in entry.messages:  # one key for all five
        msg.set_key(b"k")
    stop = threading.Event()
    handled: list[int] = []

    def handler(msg: StreamMessage) -> None:
        if msg.offset == 0:
            time.sleep(0.2)  # the others are handed out and queued behind it meanwhile
            stop.set()
        elif msg.offset == 1:
            time.sleep(0.3)
        handled.append(msg.offset)

    c.run(handler, concurrency=2, key_ordered=True, stop=stop)
    assert handled == [0]
    c._apply_acks()
    assert state.unsettled() == 4
    assert [m.offset for m in c.poll_batch(100, 0)] == [1, 2, 3, 4]


def test_a_sequential_run_stops_at_the_next_record_and_keeps_the_rest() -> None:
    """``stop`` is seen within a few records (checks at 1, 2, 4, 8, ... records into a
    batch, then every 32, and when the batch's time is up), not after the whole fetched
    batch (500 records: a minute with a slow handler); the rest stay buffered."""
    c, _ = consumer_of(50, DlqBroker())
    stop = threading.Event()
    handled: list[int] = []

    def handler(msg: StreamMessage) -> None:
        handled.append(msg.offset)
        if msg.offset == 2:
            stop.set()

    c.run(handler, stop=stop)
    assert handled == [0, 1, 2, 3]  # the check before record 4 saw it
    assert [m.offset for m in c.poll_batch(100, 0)] == list(range(4, 50))


def test_leaving_an_iteration_puts_the_unseen_records_back() -> None:
    """They were handed out and never settled: the low watermark stood still until a
    restart, and no later poll returned them."""
    c, _ = consumer_of(10, DlqBroker())
    for msg in c:
        msg.ack()
        break
    assert [m.offset for m in c.poll_batch(100, 0)] == list(range(1, 10))


def test_a_slow_handler_gets_small_batches() -> None:
    """A batch holds ~50 ms of the handler's work, so housekeeping (commits, retries,
    the realtime lane) runs between them; before, a whole fetch went out per poll."""
    c, _ = consumer_of(0, DlqBroker())
    fed = [0]

    def fetch(timeout: float) -> None:  # ten more records each time the buffer is empty
        first = fed[0]
        fed[0] += 10
        c._accept(KEY.cluster, [record(o) for o in range(first, first + 10)])

    c._fetch = fetch  # type: ignore[method-assign]
    asked: list[int] = []
    poll_batch = c.poll_batch

    def spy(max_records: int = 500, timeout: float = 1.0) -> list[StreamMessage]:
        asked.append(max_records)
        return poll_batch(max_records, timeout)

    c.poll_batch = spy  # type: ignore[method-assign]
    stop = threading.Event()

    def handler(msg: StreamMessage) -> None:
        time.sleep(0.01)
        if msg.offset == 29:
            stop.set()

    c.run(handler, stop=stop)
    assert asked[0] == 500
    assert all(1 <= n <= 5 for n in asked[1:]), asked  # 50 ms of 10 ms records
