"""Whatever a handler does (ack, nack, reject, hold a record a while) and however the
dlq lane's writes fare, every record settles exactly once: nothing is handed out again
after it settled, and in the end each partition's low watermark is past every record.
Property-based, on the consumer without Kafka (``harness``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streamplane.client.consumer as consumer_module
from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.core.commitlog import PartitionProgress
from tests.unit.client.harness import KEY, Clock, DlqBroker, stand_in_consumer

ACTIONS = ("ack", "nack", "reject", "hold")


def fetched(c: StreamConsumer, partitions: int, records: int) -> None:
    """Feed ``records`` records per partition, each value naming its partition and offset."""
    c._accept(
        KEY.cluster,
        [
            Message(
                topic=KEY.topic, partition=p, offset=o, value=b"%d:%d" % (p, o), timestamp=(1, o)
            )
            for p in range(partitions)
            for o in range(records)
        ],
    )


def where(value: bytes | None) -> tuple[int, int]:
    p, o = (value or b"").split(b":")
    return int(p), int(o)


def at_even_offset(msg: Message) -> bool:
    """The dlq writes that fail when the dlq lane fails: those of even offsets."""
    return where(msg.value())[1] % 2 == 0


class CommitLog:
    """The commit store: checks every commit against what the application finished. A
    commit must never count as settled a record that is not finished (acked, or its
    dead letter written): after a crash it would be lost. (Commits run on the
    committer's thread, which logs an exception and goes on: what is wrong is kept in
    ``lost`` for the test to assert.)"""

    def __init__(self, finished: set[tuple[int, int]]) -> None:
        self.finished = finished
        self.low_watermarks: dict[int, int] = {}  # the last commit's, by partition
        self.lost: list[str] = []

    def commit(self, items: list[tuple[str, int, PartitionProgress]]) -> None:
        for _topic, p, progress in items:
            low = self.low_watermarks[p] = progress.low_watermark
            claimed = [*range(low), *(o for a, b in progress.settled.ranges() for o in range(a, b))]
            lost = [o for o in claimed if (p, o) not in self.finished]
            if lost:
                self.lost.append(f"partition {p} committed {lost} as settled before they were")
            if set(progress.retries) & set(claimed):
                self.lost.append(f"partition {p} committed retry counts of settled records")


class Handler:
    """The application's side: what it did with each record, and what settled."""

    def __init__(self, broker: DlqBroker) -> None:
        self.broker = broker
        self.held: list[StreamMessage] = []
        self.finished: set[tuple[int, int]] = set()  # acked, or dead letter written
        self.dead_lettered: set[tuple[int, int]] = set()

    def take(self, batch: list[StreamMessage], act: Callable[[tuple[int, int]], str]) -> None:
        for m in batch:
            at = (m.partition, m.offset)
            assert at not in self.finished, f"{at} handed out again after it settled"
            self.act(m, act(at))

    def act(self, m: StreamMessage, action: str) -> None:
        if action == "ack":
            m.ack()
            self.finished.add((m.partition, m.offset))
        elif action == "nack":
            m.nack("boom")
        elif action == "reject":
            m.reject("bad")
        else:
            self.held.append(m)

    def deliver(self, fails: Callable[[Message], bool]) -> None:
        """The dlq lane acknowledges (or fails) every write it holds."""
        failing = {where(msg.value()) for msg in self.broker.pending if fails(msg)}
        for msg in self.broker.pending:
            at = where(msg.value())
            if at not in failing:
                self.dead_lettered.add(at)
                self.finished.add(at)
        self.broker.deliver(fail=lambda msg: where(msg.value()) in failing)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    partitions=st.integers(1, 3),
    records=st.integers(1, 20),
    max_attempts=st.integers(1, 3),
)
def test_every_record_settles_exactly_once_whatever_the_handler_and_the_dlq_do(
    data: st.DataObject, partitions: int, records: int, max_attempts: int
) -> None:
    clock = Clock()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(consumer_module, "time", clock)
        broker = DlqBroker()
        c = stand_in_consumer(broker, partitions, max_attempts=max_attempts, retry_backoff=0.1)
        fetched(c, partitions, records)
        app = Handler(broker)
        log = c._commit_stores[KEY.cluster] = CommitLog(app.finished)  # type: ignore[assignment]

        for _ in range(data.draw(st.integers(1, 30), label="steps")):
            room = data.draw(st.integers(1, 2 * records), label="room")
            app.take(
                c.poll_batch(room, 0),
                lambda at: data.draw(st.sampled_from(ACTIONS), label=f"do {at}"),
            )
            if len(app.held) > 0 and data.draw(st.booleans(), label="finish held"):
                m = app.held.pop(data.draw(st.integers(0, len(app.held) - 1), label="which"))
                app.act(m, data.draw(st.sampled_from(ACTIONS[:3]), label="held does"))
            if len(broker.pending) > 0 and data.draw(st.booleans(), label="dlq answers"):
                failing = data.draw(st.booleans(), label="dlq fails")
                app.deliver(at_even_offset if failing else (lambda msg: False))
            if data.draw(st.booleans(), label="commit"):
                c.commit()  # the low watermarks move on, and what is below them is trimmed
                assert not log.lost
            clock.now += data.draw(st.sampled_from([0.0, 0.06, 0.2, 1.1]), label="wait")

        # From here on the handler acks everything and the dlq lane is healthy.
        for m in app.held:
            app.act(m, "ack")
        app.held.clear()
        for _ in range(100):
            app.take(c.poll_batch(1000, 0), lambda at: "ack")
            app.deliver(lambda msg: False)
            clock.now += 0.3
            states = c._states.values()
            if all(s.unsettled() == 0 for s in states) and not len(c._retries):
                assert c._dlq is not None
                if c._dlq.pending == 0:
                    break
        else:
            pytest.fail("records were still unsettled after 100 rounds")

        c.commit()
        c._committer.stop()
        assert not log.lost
        assert log.low_watermarks == dict.fromkeys(range(partitions), records)
        assert app.finished == {(p, o) for p in range(partitions) for o in range(records)}
        assert c.stats["dlq"] == len(app.dead_lettered)
