"""``StreamProducer.send(..., source=msg)``: a consume-then-produce service's source
record is acked only once its outputs are delivered (``harness``, no Kafka).

The exploratory run this comes from: a service forwarding each record's result to a
second stream (``producer.send`` in the handler, ``run`` acking on return) stopped while
that stream's cluster was down; ``close`` gave up on 585 results, and their inputs were
committed already: lost, in neither stream nor dlq."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message

from streamplane.client.producer import StreamProducer, _Route, _TopicCounts
from streamplane.exceptions import ConfigError
from tests.unit.client.harness import DlqBroker, consumer_of
from tests.unit.client.test_close_hand_out import closable_consumer_of


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


def eventually(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


@pytest.fixture
def out() -> Any:
    broker = OutputBroker()
    producer = output_producer(broker)
    yield producer, broker
    producer._closed = True  # ends the report server


def test_the_source_is_acked_once_its_output_is_delivered(out: Any) -> None:
    producer, broker = out
    c, _ = consumer_of(3, DlqBroker())
    first, second, third = c.poll_batch(10, 0)
    producer.send(b"result", source=first)
    first.ack()  # what ``run`` does as the handler returns
    second.ack()
    third.ack()
    assert unsettled(c) == 1  # the first waits for its output
    broker.report(0)  # delivered: the report server serves it
    eventually(lambda: unsettled(c) == 0, "the source's ack")
    assert c.stats["nacked"] == 0


def test_a_source_with_two_outputs_waits_for_both(out: Any) -> None:
    producer, broker = out
    c, _ = consumer_of(1, DlqBroker())
    (msg,) = c.poll_batch(10, 0)
    producer.send(b"a", source=msg)
    producer.send(b"b", source=msg)
    msg.ack()
    broker.report(1)
    time.sleep(0.1)
    assert unsettled(c) == 1
    broker.report(0)
    eventually(lambda: unsettled(c) == 0, "the source's ack")


def test_a_failed_output_nacks_the_source_to_be_handled_again(out: Any) -> None:
    producer, broker = out
    c, _ = consumer_of(1, DlqBroker())
    (msg,) = c.poll_batch(10, 0)
    producer.send(b"result", source=msg)
    msg.ack()
    broker.report(0, KafkaError._MSG_TIMED_OUT)
    eventually(lambda: c.stats["nacked"] == 1 if unsettled(c) == 1 else False, "the nack")
    assert msg.last_error is not None
    assert "not delivered" in msg.last_error and "MSG_TIMED_OUT" in msg.last_error
    # Counted as a failed delivery, not collected for ``flush`` to raise: the source
    # is handled again, which sends the output again.
    assert producer._failed_reports == 1 and not producer.take_failures()


def test_the_handlers_nack_settles_the_source_at_once(out: Any) -> None:
    producer, broker = out
    c, _ = consumer_of(1, DlqBroker())
    (msg,) = c.poll_batch(10, 0)
    producer.send(b"result", source=msg)
    msg.nack(ValueError("downstream refused"))  # what ``run`` does when the handler raises
    assert unsettled(c) == 1
    assert c.stats["nacked"] == 1
    broker.report(0)  # the output's report comes after: it changes nothing
    time.sleep(0.1)
    assert c.stats["nacked"] == 1 and c.stats["acked"] == 0
    assert c._forwarding == 0


def test_sending_with_a_source_needs_every_report_and_an_unsettled_source() -> None:
    c, _ = consumer_of(1, DlqBroker())
    (msg,) = c.poll_batch(10, 0)
    with pytest.raises(ConfigError, match="delivery_reports='all'"):
        output_producer(OutputBroker(), reports="errors").send(b"r", source=msg)
    msg.ack()
    producer = output_producer(OutputBroker())
    with pytest.raises(ConfigError, match="settled already"):
        producer.send(b"r", source=msg)
    producer._closed = True


def test_close_commits_a_source_whose_output_is_delivered_while_it_waits(out: Any) -> None:
    producer, broker = out
    c, commits = closable_consumer_of(2)
    first, second = c.poll_batch(10, 0)
    producer.send(b"result", source=first)
    first.ack()
    second.ack()
    threading.Timer(0.2, broker.report, (0,)).start()  # delivered during the close
    c.close()
    (*_, (_, _, progress)) = commits.committed
    assert progress.low_watermark == 2


def test_close_leaves_a_source_unsettled_when_its_output_is_not_delivered(
    out: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import streamplane.client.consumer as consumer_module

    monkeypatch.setattr(consumer_module, "_FORWARD_WAIT_S", 0.2)
    producer, _ = out
    c, commits = closable_consumer_of(2)
    first, second = c.poll_batch(10, 0)
    producer.send(b"result", source=first)
    first.ack()
    second.ack()
    c.close()  # the output's cluster is down: no report
    (*_, (_, _, progress)) = commits.committed
    assert progress.low_watermark == 0  # the first is read again after a restart
    assert "1 record whose outputs (sent with source=) were not delivered" in caplog.text
