"""``send(..., source=msg)`` under concurrency: two threads sending outputs of one source,
an output that fails to queue, a raising ``on_delivery``, ``close`` from the handler, a
signal handler flushing the output producer (a review found each; ``harness``, no Kafka)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message

import streamplane.client.consumer as consumer_module
from tests.unit.client.harness import (
    DlqBroker,
    OutputBroker,
    consumer_of,
    output_producer,
    unsettled,
)
from tests.unit.client.test_close_hand_out import closable_consumer_of
from tests.waiting import wait_for


class StrictOutputBroker(OutputBroker):
    """``OutputBroker`` checking header values as confluent-kafka 2.16 does (checked on
    a real ``Producer``: ``TypeError: expected header value to be None, binary, or
    unicode string, not int``)."""

    def produce(self, topic: str, value: Any, key: Any, partition: int, callback: Any,
                on_delivery: Any, timestamp: int, headers: Any) -> None:  # fmt: skip
        for _name, v in headers or ():
            if v is not None and not isinstance(v, (bytes, str)):
                raise TypeError(
                    "expected header value to be None, binary, or unicode string, "
                    f"not {type(v).__name__}"
                )
        super().produce(topic, value, key, partition, callback, on_delivery, timestamp, headers)


class _BothInside:
    """Stands in for the consumer's ``_forward_lock``: the first two threads to enter
    wait for each other *before* taking the real lock, i.e. both have read
    ``msg._done`` (``StreamMessage._forwarding`` reads it before it locks) before
    either sets it. This is the interleaving the GIL allows two threads that send
    outputs of one source at the same time; the barrier only makes it certain."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.barrier = threading.Barrier(2)
        self.entries = 0

    def __enter__(self) -> None:
        self.entries += 1
        if self.entries <= 2:
            self.barrier.wait(5)
        self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def test_outputs_of_one_source_sent_from_two_threads_are_all_waited_for(
    out: Any,
) -> None:
    """A handler that fans its outputs out over threads (or any two threads sending
    with the same source): ``_forwarding`` checks ``msg._done`` outside the lock, so
    both threads make a ``_Forwarded``; the first is dropped with its pending output.
    That output's failure then changes nothing: the source is acked, its output lost
    (in neither stream nor the dlq), and ``_forwarding`` never goes back to 0 (every
    ``close`` waits its 5 s and warns)."""
    producer, broker = out
    c, _ = consumer_of(1, DlqBroker())
    c._forward_lock = _BothInside()  # type: ignore[assignment]
    (msg,) = c.poll_batch(10, 0)
    senders = [
        threading.Thread(target=producer.send, args=(b"part-%d" % i,), kwargs={"source": msg})
        for i in range(2)
    ]
    for t in senders:
        t.start()
    for t in senders:
        t.join(5)
    msg.ack()  # the handler returns
    # The output whose report goes to the ``_Forwarded`` the record no longer holds
    # fails (on HEAD; with the fix both go to the same one), the other is delivered.
    orphan = next((i for i, cb in enumerate(broker.callbacks) if cb.forwarded is not msg._done), 0)
    broker.report(orphan, KafkaError._MSG_TIMED_OUT)
    broker.report(1 - orphan)
    wait_for("both reports served", lambda: not broker.due, 10)
    time.sleep(0.1)
    # (records whose outputs are on their way, records unsettled, records acked):
    # HEAD gives (1, 0, 1): a _Forwarded left behind for good (every close waits 5 s
    # for it) and the source acked although one of its outputs failed.
    assert (c._forwarding, unsettled(c), c.stats["acked"]) == (0, 1, 0)


def test_an_output_not_queued_for_any_reason_does_not_hold_its_source_forever() -> None:
    """``produce`` raising anything but ``BufferError``/``KafkaException`` (confluent-kafka
    raises TypeError for a header value that is not str/bytes/None, for instance) leaves
    the pending count the source was given: a handler that logs the failed send and goes
    on acks, and the source is never settled: the partition's low watermark stays
    there for good (commits stop moving, time lag grows, the partition pauses at
    ``max_in_flight``) and every close waits its 5 s for it."""
    broker = StrictOutputBroker()
    producer = output_producer(broker)
    c, _ = consumer_of(2, DlqBroker())
    first, second = c.poll_batch(10, 0)
    with pytest.raises(TypeError):
        producer.send(b"result", headers=[("h", 42)], source=first)  # type: ignore[list-item]
    first.ack()  # the handler logged the failed send and went on
    second.ack()
    time.sleep(0.2)
    assert c._forwarding == 0, "the source waits for an output that was never queued"
    # Settled one way or the other (acked, or nacked to be handled again): not stuck.
    producer._closed = True
    assert unsettled(c) == 0 or c.stats["nacked"] == 1


def test_an_on_delivery_that_raises_does_not_stop_the_report_server(out: Any) -> None:
    """The report server runs the callers' ``on_delivery`` too (confluent-kafka re-raises
    a callback's exception from ``poll``): one exception ends the thread, and from then
    on the sources of an idle service are never acked (nothing else polls), with no
    more than a thread traceback on stderr."""
    producer, broker = out
    c, _ = consumer_of(2, DlqBroker())
    first, second = c.poll_batch(10, 0)

    def careless(err: Any, msg: Message) -> None:
        raise RuntimeError("a bug in the caller's callback")

    producer.send(b"a", source=first, on_delivery=careless)
    first.ack()
    broker.report(0)
    wait_for("the first source's ack", lambda: unsettled(c) == 1, 10)
    producer.send(b"b", source=second)
    second.ack()
    broker.report(1)
    deadline = time.monotonic() + 2
    while unsettled(c) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert unsettled(c) == 0, "the report server died: the second source is never acked"


def test_close_from_the_handler_does_not_wait_for_its_own_record(
    out: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``close`` waits for ``_forwarding`` to be 0, which counts records whose handler
    has not returned yet. Called from the handler (or from a SIGTERM handler that
    interrupts it: a sequential ``run`` holds no poll then), it waits for its own
    record, which cannot ack before ``close`` returns: the whole 5 s, every time, and
    it warns that the record's output was not delivered, though it was."""
    monkeypatch.setattr(consumer_module, "_FORWARD_WAIT_S", 0.3)
    producer, broker = out
    c, _ = closable_consumer_of(2)
    handled: list[int] = []

    def handler(msg: Any) -> None:
        handled.append(msg.offset)
        producer.send(b"result", source=msg)
        broker.report(len(handled) - 1)
        wait_for("the output's report served", lambda: broker.due == [], 10)
        if msg.offset == 1:
            c.close()

    with caplog.at_level(logging.WARNING):
        c.run(handler)
    assert handled == [0, 1]
    assert "were not delivered" not in caplog.text, caplog.text


def test_a_signal_handler_that_flushes_the_output_producer_does_not_deadlock() -> None:
    """A real signal (SIGALRM every 0.5 ms, standing in for one SIGTERM landing at a bad
    moment) whose handler serves the output producer's reports while the main thread
    forwards records (``signal_flush_scenario``, in a process of its own): a handler
    landing while the main thread holds ``_forward_lock`` runs a report whose
    ``delivered`` takes that lock again on the same thread. With a non-reentrant lock
    the process hangs for good (checked: faulthandler shows ``drain`` under
    ``on_signal`` under ``_forwarding``, within the first second)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-m", "tests.unit.client.signal_flush_scenario"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
    )
    assert done.returncode == 0 and "no deadlock" in done.stdout, done.stderr[-3000:]
