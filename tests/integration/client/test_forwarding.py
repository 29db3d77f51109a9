"""A consume-then-produce service on the real fleet: ``send(..., source=msg)`` acks each
input only once its output is delivered, so an output cluster that is down when the
service stops loses nothing (the inputs are handled again after the restart).

The exploratory run this comes from (results forwarded to a stream on local-b, whose
broker was killed before a SIGTERM): ``run`` acked each input as its handler queued the
result, the consumer committed them on close, and ``producer.close(20)`` then gave up on
585 results: in neither stream nor the dlq."""

from __future__ import annotations

import contextlib
import threading
import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message

from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.producer import StreamProducer
from streamplane.exceptions import ProduceError
from streamplane.local.fleet import LocalFleet, wait_healthy
from tests.waiting import wait_for

from .records import produce_numbers

FIRST = 600  # forwarded while local-b is up
SECOND = 600  # forwarded after its broker was killed


def test_inputs_whose_outputs_were_not_delivered_are_handled_again(
    local_fleet: LocalFleet, control_plane: Any, stream_factory: Any
) -> None:
    client = control_plane.client()
    inputs = stream_factory("local-a", partitions=3)
    outputs = stream_factory("local-b", partitions=3)
    group = f"fwd-{uuid.uuid4().hex[:6]}"
    delivered: set[int] = set()
    handled: list[int] = []
    lock = threading.Lock()

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            with lock:
                delivered.add(int(msg.value() or b"-1"))

    out = StreamProducer(outputs, client, delivery_reports="all").open()

    def forward(msg: StreamMessage) -> None:
        with lock:
            handled.append(int(msg.value or b"-1"))
        out.send(msg.value, key=msg.key, source=msg, on_delivery=on_delivery)

    produce_numbers(client, inputs, FIRST)
    broker = local_fleet.descriptor().cluster("local-b").brokers[0]
    stop = threading.Event()
    consumer = StreamConsumer(inputs, group, client, assigner=False)
    runner = threading.Thread(
        target=consumer.run, args=(forward,), kwargs={"concurrency": 4, "stop": stop}
    )
    runner.start()
    try:
        wait_for("the first outputs delivered", lambda: len(delivered) >= FIRST, 60)
        local_fleet.kill_broker("local-b", broker.node_id)
        with StreamProducer(inputs, client) as more:
            for i in range(FIRST, FIRST + SECOND):
                more.send(str(i).encode(), key=str(i).encode())
        wait_for("every input handled", lambda: len(set(handled)) >= FIRST + SECOND, 60)
        stop.set()
        runner.join(30)
        consumer.close()  # waits a few seconds for the outputs, then commits what is acked
        with pytest.raises(ProduceError):
            out.close(1)  # gives up on the outputs queued for local-b
    finally:
        stop.set()
        runner.join(30)
        consumer.close()
        with contextlib.suppress(ProduceError):
            out.close(0.5)
        local_fleet.start_broker("local-b", broker.node_id)
        wait_healthy(local_fleet.descriptor().cluster("local-b"), timeout_s=60)

    lost = set(range(FIRST + SECOND)) - delivered
    assert lost, "the kill came too late: every output was delivered"
    # The group's next member reads every input whose output was not delivered.
    again: set[int] = set()

    def read_again() -> bool:
        again.update(int(m.value or b"-1") for m in restarted.poll_batch(500, 0.2))
        return lost <= again

    with StreamConsumer(inputs, group, client, assigner=False) as restarted:
        wait_for("the undelivered inputs read again", read_again, 60)
    redone = len(again & delivered)
    print(
        f"\n{len(delivered)} outputs delivered, {len(lost)} not (their inputs read again: "
        f"{len(lost & again)}); inputs with a delivered output read again: {redone}"
    )
    assert lost <= again  # nothing lost
    # An input whose output was delivered was acked before the closing commit (the
    # broker that could still deliver one was dead by then): none is handled again.
    assert redone == 0
