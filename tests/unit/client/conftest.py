from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import streamplane.client.consumer as consumer_module
import streamplane.client.membership as membership_module
from streamplane.client.producer import StreamProducer
from tests.unit.client.harness import Clock, OutputBroker, output_producer


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(consumer_module, "time", c)
    return c


class MemberTime:
    """The membership module's ``time``: the test's clock, with the process's CPU time."""

    def __init__(self, clock: Clock) -> None:
        self.monotonic = clock.monotonic
        self.process_time = time.process_time


@pytest.fixture
def member_clock(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The consumer's clock, for the membership (its lease, its release deadlines) too."""
    monkeypatch.setattr(membership_module, "time", MemberTime(clock))
    return clock


@pytest.fixture
def out() -> Iterator[tuple[StreamProducer, OutputBroker]]:
    """An output stream's producer (every delivery reported) and its stand-in broker."""
    broker = OutputBroker()
    producer = output_producer(broker)
    yield producer, broker
    producer._closed = True  # ends the report server
