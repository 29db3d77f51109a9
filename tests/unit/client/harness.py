"""A StreamConsumer without Kafka, for unit tests and ``bench/poison_cost.py``:
fetches are fed in, the clock is virtual (``Clock``, patched over the consumer module's
``time``; the ``clock`` fixture in conftest.py) and the dlq lane's Kafka producer is a
stand-in (``DlqBroker``) whose writes are acked (or failed) when the caller says so, or
at its next poll, reporting failures only, as librdkafka does for it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, Message

from streamplane.client.consumer import (
    _DLQ_BATCH_INTERVAL_S,
    StreamConsumer,
    StreamMessage,
    _LaneBuffer,
)
from streamplane.client.dlq_writer import DlqWriter
from streamplane.client.partition_state import PartitionKey, PartitionState
from streamplane.client.producer import StreamProducer, _Route, _TopicCounts
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
    """The dlq lane's Kafka producer (failures reported only): holds each write until
    ``deliver`` (or, with ``ack_at_poll``, delivers what it holds at every poll). A
    failed write's report (its key and value, no headers) waits for the next poll and
    counts in ``len`` until then. ``keep_written=False`` keeps no copy of the writes
    (benchmarks: a librdkafka producer copies them into C, and the Python objects die
    at once; kept, they made the collector run ~2x as often)."""

    def __init__(self, ack_at_poll: bool = False, keep_written: bool = True) -> None:
        self.ack_at_poll = ack_at_poll
        self.keep_written = keep_written
        self.written: list[tuple[bytes | None, list[tuple[str, bytes]]]] = []
        self.pending: list[Message] = []
        # Failed writes and their error codes, reported at the next poll.
        self.reports: list[tuple[Message, int]] = []
        self.fail_next = False  # the next ``deliver`` fails every write it holds
        # The producer's delivery callback (set by ``stand_in_consumer``).
        self.on_delivery: Callable[[KafkaError, Message], None] | None = None

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
        assert callback is None and on_delivery is None, "the dlq reports failures only"
        if self.keep_written:
            self.written.append((value, headers))
        self.pending.append(Message(topic=topic, value=value, key=key))

    def deliver(
        self,
        *,
        fail: Callable[[Message], bool] | None = None,
        code: int = KafkaError._MSG_TIMED_OUT,
    ) -> None:
        """Deliver every held write; those ``fail`` picks (or all, after
        ``fail_next``) fail with error ``code``."""
        for msg in self.pending:
            if self.fail_next or (fail is not None and fail(msg)):
                self.reports.append((msg, code))
        self.pending = []
        self.fail_next = False

    def poll(self, timeout: float = 0) -> int:
        if self.ack_at_poll:
            self.deliver()
        reports, self.reports = self.reports, []
        for msg, code in reports:
            assert self.on_delivery is not None
            self.on_delivery(KafkaError(code), msg)
        return len(reports)

    def flush(self, timeout: float = 0) -> int:
        self.poll()
        return len(self)

    def __len__(self) -> int:
        return len(self.pending) + len(self.reports)


class NoKafka:
    def pause(self, partitions: object) -> None: ...

    def resume(self, partitions: object) -> None: ...

    def commit(self, items: object) -> None: ...


def stand_in_consumer(
    broker: DlqBroker, partitions: int = 1, *, max_attempts: int = 2, retry_backoff: float = 0.1
) -> StreamConsumer:
    """An opened StreamConsumer of stream ``s`` reading ``partitions`` partitions of
    ``KEY.topic`` on ``local-a``, its dlq lane writing to ``broker``; feed it with
    ``_accept`` (``_fetch`` does nothing until replaced)."""
    c = StreamConsumer(
        "s",
        "g",
        None,  # type: ignore[arg-type]
        assigner=False,
        max_attempts=max_attempts,
        retry_backoff=retry_backoff,
    )
    c._lanes, c._lane_order, c._buffers = ["default"], {"default": 0}, [_LaneBuffer()]
    dlq = StreamProducer("s", None, lane=DLQ_LANE)  # type: ignore[arg-type]
    broker.on_delivery = dlq._on_delivery
    route = _Route(broker, "sp.s.dlq.e1", "local-a", 1, _TopicCounts(broker, ("s", DLQ_LANE)))  # type: ignore[arg-type]
    dlq._producers, dlq._routes = {"local-a": broker}, {DLQ_LANE: route}  # type: ignore[dict-item]
    dlq._max_record_bytes, dlq._default_lane, dlq._opened = 1 << 20, DLQ_LANE, True
    c._dlq = DlqWriter(dlq, _DLQ_BATCH_INTERVAL_S, c._dead_letter_write)
    c._opened = True
    c._consumers = {("local-a", 0): NoKafka()}  # type: ignore[dict-item]
    c._commit_stores["local-a"] = NoKafka()  # type: ignore[assignment]
    for p in range(partitions):
        state = PartitionState(PartitionKey(KEY.cluster, KEY.topic, p), "default", 0)
        state.restore(None, 0)
        c._states[state.key] = state
        c._states_by_cluster.setdefault(KEY.cluster, {})[(KEY.topic, p)] = state
    c._fetch = lambda timeout: None  # type: ignore[method-assign]
    return c


def consumer_of(records: int, broker: DlqBroker) -> tuple[StreamConsumer, PartitionState]:
    """A one-partition ``stand_in_consumer`` that has fetched ``records`` records
    (offsets 0, 1, ...; each value is its offset)."""
    c = stand_in_consumer(broker)
    fetch = [
        Message(topic=KEY.topic, partition=0, offset=o, value=b"%d" % o, timestamp=(1, o))
        for o in range(records)
    ]
    c._accept(KEY.cluster, fetch)
    return c, c._states[KEY]


# The realtime and bulk partitions of ``two_lane_consumer``.
REALTIME = PartitionKey("local-a", "sp.s.realtime.e1", 0)
BULK = PartitionKey("local-a", "sp.s.bulk.e1", 0)


def two_lane_consumer() -> StreamConsumer:
    """A stand-in consumer reading lanes realtime and bulk of stream ``s`` (one
    partition each, ``REALTIME`` and ``BULK``, from offset 0) on local-a."""
    c = stand_in_consumer(DlqBroker(), partitions=0)
    c._lanes, c._lane_order = ["realtime", "bulk"], {"realtime": 0, "bulk": 1}
    c._buffers = [_LaneBuffer(), _LaneBuffer()]
    for key, lane, priority in ((REALTIME, "realtime", 0), (BULK, "bulk", 1)):
        state = PartitionState(key, lane, priority)
        state.restore(None, 0)
        c._states[key] = state
        c._states_by_cluster.setdefault(key.cluster, {})[(key.topic, key.partition)] = state
    return c


def fetched(key: PartitionKey, first: int, n: int) -> list[Message]:
    """``n`` records of ``key`` from offset ``first``, as a fetch returns them."""
    return [
        Message(
            topic=key.topic, partition=key.partition, offset=o, value=b"%d" % o, timestamp=(1, o)
        )
        for o in range(first, first + n)
    ]


def poll(c: StreamConsumer, clock: Clock, seconds: float) -> list[StreamMessage]:
    """Poll (its housekeeping applies what was acked and nacked), let ``seconds`` pass,
    poll again; what both hand out."""
    out = c.poll_batch(100, 0)
    clock.now += seconds
    return out + c.poll_batch(100, 0)


class Unreachable:
    """A control plane that must not be called: any attribute asked of it fails the test
    (and is listed in ``calls``)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.calls.append(name)
        raise AssertionError(f"the control plane was called: {name}")


class OutputBroker:
    """The output stream's Kafka producer, reporting every record (``delivery_reports=
    "all"``): ``report(i, error_code)`` serves record i's report at the next poll."""

    def __init__(self) -> None:
        self.callbacks: list[Any] = []
        self.due: list[tuple[int, int | None]] = []
        self.lock = threading.Lock()

    def produce(self, topic: str, value: Any, key: Any, partition: int, callback: Any,
                on_delivery: Any, timestamp: int, headers: Any) -> None:  # fmt: skip
        self.callbacks.append(callback)

    def report(self, i: int, code: int | None = None) -> None:
        with self.lock:
            self.due.append((i, code))

    def poll(self, timeout: float = 0) -> int:
        with self.lock:
            due, self.due = self.due, []
        for i, code in due:
            self.callbacks[i](None if code is None else KafkaError(code), Message(topic="out"))
        if not due:
            time.sleep(min(timeout, 0.01))
        return len(due)

    def __len__(self) -> int:
        return 0


def output_producer(broker: OutputBroker, reports: str = "all") -> StreamProducer:
    p = StreamProducer("out", None, delivery_reports=reports)  # type: ignore[arg-type]
    counts = _TopicCounts(broker, ("out", "default"))  # type: ignore[arg-type]
    route = _Route(broker, "sp.out.default.e1", "local-b", 1, counts)  # type: ignore[arg-type]
    p._producers, p._routes = {"local-b": broker}, {"default": route}  # type: ignore[dict-item]
    p._max_record_bytes, p._default_lane, p._opened = 1 << 20, "default", True
    return p


def unsettled(c: Any) -> int:
    state = next(iter(c._states.values()))
    with c._lock:
        c._apply_acks()
    return int(state.unsettled())
