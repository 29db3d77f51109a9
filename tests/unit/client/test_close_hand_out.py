"""``close`` during an iteration or a sequential ``run`` hands out nothing more
(``StreamConsumer`` over ``harness``).

Found by an exploratory run: the rest of the batch in hand kept going to the
application after ``close`` had committed, so those records' acks were lost and the
records handled again after a restart (``close()`` in the handler at record 100 of a
sequential run: 250 records handled, the whole fetch)."""

from __future__ import annotations

import threading

from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.core.commitlog import PartitionProgress
from tests.unit.client.harness import DlqBroker, NoKafka, consumer_of


class Closable(NoKafka):
    def __init__(self) -> None:
        self.committed: list[tuple[str, int, PartitionProgress]] = []

    def commit(self, items: list[tuple[str, int, PartitionProgress]]) -> None:  # type: ignore[override]
        self.committed += items

    def close(self) -> None: ...


def closable_consumer_of(records: int) -> tuple[StreamConsumer, Closable]:
    """A one-partition consumer that has fetched ``records`` records, and its commits."""
    c, _ = consumer_of(records, DlqBroker(ack_at_poll=True))
    c._consumers = {("local-a", 0): Closable()}  # type: ignore[dict-item]
    commits = c._commit_stores["local-a"] = Closable()  # type: ignore[assignment]
    return c, commits


def test_close_in_the_handler_of_a_sequential_run_ends_it_at_once() -> None:
    c, _ = closable_consumer_of(200)
    handled: list[int] = []

    def handler(msg: StreamMessage) -> None:
        handled.append(msg.offset)
        if msg.offset == 5:
            c.close()

    c.run(handler)
    assert handled == list(range(6))  # not the rest of the batch (200 records)


def test_close_from_another_thread_ends_an_iteration_at_the_next_record() -> None:
    """The records acked before ``close`` are in its commit, and none is handed out
    after it."""
    c, commits = closable_consumer_of(200)
    handled: list[int] = []
    for msg in c:
        handled.append(msg.offset)
        msg.ack()
        if msg.offset == 40:  # past the checks at 0, 1, 2, 4, ... 32: the next is at 64
            closing = threading.Thread(target=c.close)
            closing.start()
            closing.join(10)
            assert not closing.is_alive()
    assert handled == list(range(41))
    (*_, (_, _, progress)) = commits.committed
    assert progress.low_watermark == 41
