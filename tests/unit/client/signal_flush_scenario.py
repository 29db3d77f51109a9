"""Run by ``test_forwarding_races`` in a process of its own (``python -m
tests.unit.client.signal_flush_scenario`` from the repository's root): a signal
handler that serves the output producer's reports (``drain``, as ``flush``/``close``
do first) lands, again and again, while the main thread forwards records with
``send(..., source=msg)`` and acks them. A handler landing while the main thread holds
the consumer's ``_forward_lock`` runs a report whose ``delivered`` takes that lock
again on the same thread: with a non-reentrant lock the process hangs for good.

Prints ``no deadlock: ...`` and exits 0 when every source is settled; a hang is
ended by faulthandler after ``HANG_S`` (every thread's stack on stderr, exit 1)."""

from __future__ import annotations

import collections
import faulthandler
import signal
import sys
import time
from typing import Any

from confluent_kafka import Message

from tests.unit.client.harness import DlqBroker, consumer_of, output_producer, unsettled

RECORDS = 40_000
INTERVAL_S = 0.0005  # a signal every 0.5 ms: hundreds land inside the forward lock
HANG_S = 40.0


class ReentrantOutputBroker:
    """The output stream's Kafka producer (every record reported), safe to poll from a
    signal handler that interrupts a poll: reports wait in a deque (``popleft`` is
    atomic), so no lock of the stand-in's own is held when a signal lands, and each
    report is served once, by whichever poll takes it."""

    def __init__(self) -> None:
        self.callbacks: list[Any] = []
        self.due: collections.deque[int] = collections.deque()

    def produce(self, topic: str, value: Any, key: Any, partition: int, callback: Any,
                on_delivery: Any, timestamp: int, headers: Any) -> None:  # fmt: skip
        self.callbacks.append(callback)
        self.due.append(len(self.callbacks) - 1)

    def poll(self, timeout: float = 0) -> int:
        served = 0
        while True:
            try:
                i = self.due.popleft()
            except IndexError:
                return served
            self.callbacks[i](None, Message(topic="out"))
            served += 1

    def flush(self, timeout: float = 0) -> int:
        self.poll()
        return len(self.due)

    def __len__(self) -> int:
        return len(self.due)


def main() -> int:
    faulthandler.dump_traceback_later(HANG_S, exit=True)
    broker = ReentrantOutputBroker()
    producer = output_producer(broker)  # type: ignore[arg-type]
    consumer, _ = consumer_of(RECORDS, DlqBroker(ack_at_poll=True))
    signals = 0
    in_handler = False

    def on_signal(signum: int, frame: Any) -> None:
        # A process's SIGTERM handler runs once; this one is called every 0.5 ms, so it
        # does not nest (a signal landing in the handler returns at once).
        nonlocal signals, in_handler
        if in_handler:
            return
        in_handler = True
        try:
            signals += 1
            producer.drain(0)
        finally:
            in_handler = False

    signal.signal(signal.SIGALRM, on_signal)
    signal.setitimer(signal.ITIMER_REAL, INTERVAL_S, INTERVAL_S)
    forwarded = 0
    try:
        while forwarded < RECORDS:
            batch = consumer.poll_batch(100, 0)
            for msg in batch:
                producer.send(b"result", source=msg)
                msg.ack()
                forwarded += 1
            if not batch:
                producer.drain(0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
    deadline = time.monotonic() + 10
    while unsettled(consumer) and time.monotonic() < deadline:
        producer.drain(0)
        consumer.poll_batch(100, 0)
    left = unsettled(consumer)
    producer._closed = True  # ends the report server
    faulthandler.cancel_dump_traceback_later()
    if left:
        print(f"{left} of {RECORDS} sources never settled", file=sys.stderr)
        return 1
    print(f"no deadlock: {RECORDS} records forwarded, {signals} signal handlers ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
