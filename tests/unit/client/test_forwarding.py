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
from confluent_kafka import KafkaError

from streamplane.exceptions import ConfigError
from tests.unit.client.harness import (
    DlqBroker,
    OutputBroker,
    consumer_of,
    output_producer,
    unsettled,
)
from tests.unit.client.test_close_hand_out import closable_consumer_of
from tests.waiting import wait_for


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
    wait_for("the source's ack", lambda: unsettled(c) == 0, 10)
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
    wait_for("the source's ack", lambda: unsettled(c) == 0, 10)


def test_a_failed_output_nacks_the_source_to_be_handled_again(out: Any) -> None:
    producer, broker = out
    c, _ = consumer_of(1, DlqBroker())
    (msg,) = c.poll_batch(10, 0)
    producer.send(b"result", source=msg)
    msg.ack()
    broker.report(0, KafkaError._MSG_TIMED_OUT)
    wait_for("the nack", lambda: c.stats["nacked"] == 1 if unsettled(c) == 1 else False, 10)
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
