"""A Kafka cluster that drops out and returns without a failover is told in the
producer's and the consumer's logs (one WARNING when its brokers are all down, one
INFO with the outage's length when one is back), and nothing sent meanwhile is lost.

Before, librdkafka reconnected quietly: a service's log said nothing while its
records waited."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

from streamplane.client.consumer import StreamConsumer
from streamplane.client.producer import StreamProducer
from streamplane.local.fleet import LocalFleet, wait_healthy
from tests.waiting import wait_for

SEND_EVERY_S = 0.01  # a service producing ~100 records/s


def told(caplog: pytest.LogCaptureFixture, level: int, owner: str, words: str) -> list[str]:
    """The lines of one client (its owner's prefix) at ``level`` saying ``words``."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("streamplane.client")
        and r.levelno == level
        and r.getMessage().startswith(owner + ":")
        and words in r.getMessage()
    ]


def test_a_cluster_dropping_out_and_returning_is_logged_and_loses_nothing(
    local_fleet: LocalFleet,
    control_plane: Any,
    stream_factory: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "streamplane")
    client = control_plane.client()
    stream = stream_factory("local-b", partitions=2)
    producer_says = f"stream {stream!r}"
    consumer_says = f"stream {stream!r} (group reach)"
    broker = local_fleet.descriptor().cluster("local-b").brokers[0]
    sent: list[int] = []
    seen: set[int] = set()
    stop, stop_sending = threading.Event(), threading.Event()
    consumer = StreamConsumer(stream, "reach", client, assigner=False)
    producer = StreamProducer(stream, client).open()

    def consume() -> None:
        while not stop.is_set():
            for msg in consumer.poll_batch(500, 0.2):
                seen.add(int(msg.value or b"-1"))
                msg.ack()

    def produce() -> None:
        while not stop_sending.is_set():
            producer.send(str(len(sent)).encode())
            sent.append(len(sent))
            time.sleep(SEND_EVERY_S)

    threads = [threading.Thread(target=consume), threading.Thread(target=produce)]
    for t in threads:
        t.start()
    down = False
    try:
        wait_for("the first records read", lambda: len(seen) >= 100, 60)
        local_fleet.kill_broker("local-b", broker.node_id)
        down = True
        wait_for(
            "both clients saying local-b is unreachable",
            lambda: all(
                told(caplog, logging.WARNING, owner, "'local-b' unreachable")
                for owner in (producer_says, consumer_says)
            ),
            60,
        )
        local_fleet.start_broker("local-b", broker.node_id)
        down = False
        wait_healthy(local_fleet.descriptor().cluster("local-b"), timeout_s=60)
        wait_for(
            "both clients saying local-b is back",
            lambda: all(
                told(caplog, logging.INFO, owner, "'local-b' reachable again")
                for owner in (producer_says, consumer_says)
            ),
            60,
        )
        stop_sending.set()
        threads[1].join(30)
        producer.flush(60)
        wait_for(f"every record read ({len(sent)} sent)", lambda: len(seen) >= len(sent), 60)
    finally:
        stop.set()
        stop_sending.set()
        for t in threads:
            t.join(30)
        consumer.close()
        producer.close(5)
        if down:
            local_fleet.start_broker("local-b", broker.node_id)
            wait_healthy(local_fleet.descriptor().cluster("local-b"), timeout_s=60)
    lines = [
        *told(caplog, logging.WARNING, producer_says, "local-b"),
        *told(caplog, logging.INFO, producer_says, "local-b"),
    ]
    print("\n" + "\n".join(lines))
    assert seen == set(sent)  # nothing lost
    # One line each per outage and client (the consumer's several Kafka clients of
    # local-b report it each; the first says it).
    for owner in (producer_says, consumer_says):
        assert len(told(caplog, logging.WARNING, owner, "'local-b' unreachable")) == 1
        assert len(told(caplog, logging.INFO, owner, "'local-b' reachable again")) == 1
