"""A forwarded record retried, or rejected, while its outputs are on their way (``harness``)."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import KafkaError

from streamplane.client.consumer import _Redelivery
from tests.unit.client.harness import (
    Clock,
    DlqBroker,
    OutputBroker,
    consumer_of,
    output_producer,
    unsettled,
)
from tests.waiting import wait_for


def test_a_late_report_of_the_first_attempt_does_not_settle_the_retry(clock: Clock) -> None:
    """Attempt 1 sends two outputs; the first fails (the source is nacked at once, the
    second still on its way); the retry is released (``_done`` reset) and handled
    again; the first attempt's second report then comes: it changes nothing. The
    retry's own output settles it (through ``retry_acks``)."""
    broker = OutputBroker()
    producer = output_producer(broker)
    try:
        c, state = consumer_of(1, DlqBroker())
        c.max_attempts = 5
        (msg,) = c.poll_batch(10, 0)
        producer.send(b"a", source=msg)
        producer.send(b"b", source=msg)
        msg.ack()
        broker.report(0, KafkaError._MSG_TIMED_OUT)
        wait_for("report 0 served", lambda: not broker.due, 10)
        with c._lock:
            c._apply_acks()
        assert c.stats["nacked"] == 1
        clock.now += 10
        (again,) = c.poll_batch(10, 0)
        assert again is msg and isinstance(again, _Redelivery) and again._done is False
        broker.report(1)  # attempt 1's second output, late
        wait_for("report 1 served", lambda: not broker.due, 10)
        time.sleep(0.05)
        assert again._done is False and unsettled(c) == 1
        producer.send(b"a2", source=again)
        again.ack()
        assert unsettled(c) == 1
        broker.report(2)
        wait_for("the retry's ack", lambda: unsettled(c) == 0, 10)
        assert c._forwarding == 0 and c.stats["acked"] == 1 and not state.parked
    finally:
        producer._closed = True


def test_reject_by_the_handler_while_outputs_are_on_their_way(clock: Any) -> None:
    broker = OutputBroker()
    producer = output_producer(broker)
    try:
        c, _ = consumer_of(1, DlqBroker(ack_at_poll=True))
        (msg,) = c.poll_batch(10, 0)
        producer.send(b"a", source=msg)
        msg.reject("bad")
        broker.report(0)
        wait_for("report served", lambda: not broker.due, 10)
        time.sleep(0.05)
        assert c._forwarding == 0 and c.stats["acked"] == 0
    finally:
        producer._closed = True
