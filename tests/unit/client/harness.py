"""A StreamConsumer without Kafka, for unit tests: fetches are fed in, the clock is
virtual (the ``clock`` fixture in conftest.py) and the dlq lane's Kafka producer is a
stand-in whose writes are acked (or failed) when the test says so."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, Message

from streamplane.client.consumer import StreamConsumer, StreamMessage, _LaneBuffer
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
    c._commit_stores["local-a"] = NoKafka()  # type: ignore[assignment]
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
