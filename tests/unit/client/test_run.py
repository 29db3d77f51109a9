"""``StreamConsumer.run`` without Kafka (``harness``)."""

from __future__ import annotations

import threading
import time

from streamplane.client.consumer import StreamMessage
from tests.unit.client.harness import DlqBroker, consumer_of


def test_stopping_a_key_ordered_run_handles_the_records_it_queued() -> None:
    """Records queued behind their key when ``stop`` is set are still handled before
    ``run`` returns (they were submitted to a pool already shut down, and lost: never
    handled, never settled, holding the low watermark)."""
    c, state = consumer_of(5, DlqBroker())  # one key (None) for all five
    stop = threading.Event()
    handled: list[int] = []

    def handler(msg: StreamMessage) -> None:
        if msg.offset == 0:
            time.sleep(0.2)  # the others are handed out and queued behind it meanwhile
            stop.set()
        elif msg.offset == 1:
            time.sleep(0.3)  # the run sees the stop and shuts its pool down meanwhile
        handled.append(msg.offset)

    c.run(handler, concurrency=2, key_ordered=True, stop=stop)
    assert handled == [0, 1, 2, 3, 4]
    c._apply_acks()
    assert state.unsettled() == 0
