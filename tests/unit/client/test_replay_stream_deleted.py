"""A replay whose stream is deleted while it runs (over the fakes of test_dlq_replay.py).

An exploratory run: ``dlq replay r10`` went on 36 s after the stream was deleted, then
failed with "500 records could not be delivered to stream 'r10'; first: Local: Unknown
partition", never saying that the stream was deleted: the producer's NotFound went
through its close, which waited 30 s for copies to topics that were gone."""

from __future__ import annotations

from typing import Any

import pytest

import streamplane.client.dlq as dlq
from streamplane.client.dlq import replay_dead_letters
from streamplane.exceptions import NotFound, ProduceError
from tests.unit.client.test_dlq_replay import (
    DlqPartition,
    FakeAdmin,
    FakeClient,
    FakeConsumer,
    Letter,
    Routing,
    dlq_segment,
)

DELETED = "stream 's' was deleted (stream 's' not found)"


class DeletedAfter:
    """A producer whose stream is deleted once ``accepted`` copies were sent: nothing
    queued is delivered from then on, and, once its routing watch has told it (``told``),
    ``send`` and ``active_topic`` raise NotFound. Closing it with a timeout waits for
    the undeliverable copies and fails as librdkafka fails them (after ~30 s)."""

    routing = Routing()

    def __init__(self, accepted: int, told: bool = True) -> None:
        self.accepted = accepted
        self.told = told
        self.sent = 0
        self.queued = 0
        self.delivered = 0
        self.closed_with: list[float] = []

    def __enter__(self) -> DeletedAfter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _gone(self) -> bool:
        return self.sent >= self.accepted

    def _check(self) -> None:
        if self._gone() and self.told:
            raise NotFound(f"{DELETED}: records cannot be sent to it")

    def send(self, value: bytes | None, key: Any, headers: Any, lane: str) -> None:
        self._check()
        self.sent += 1
        self.queued += 1

    def active_topic(self, lane: str | None = None) -> str:
        self._check()
        return "sp.s.realtime.e1"

    def drain(self, timeout: float) -> int:
        if not self._gone():
            self.delivered += self.queued
            self.queued = 0
        return self.queued

    def raise_failures(self) -> None:
        pass

    def flush(self, timeout: float = 30.0) -> None:
        if self.drain(timeout):
            raise self._unknown_partition()

    def close(self, timeout: float = 30.0) -> None:
        if self.closed_with:
            return
        self.closed_with.append(timeout)
        if self.queued:
            raise self._unknown_partition()

    def _unknown_partition(self) -> ProduceError:
        return ProduceError(
            f"{self.queued} records could not be delivered to stream 's'; first: Local: "
            "Unknown partition"
        )


class DeletedConsumer(FakeConsumer):
    """Its routing watch says the stream is deleted once ``told_at`` records were
    handed out: polls raise NotFound from then on."""

    def __init__(self, log: DlqPartition, told_at: int) -> None:
        super().__init__(log)
        self.told_at = told_at

    def poll_batch(self, max_records: int, timeout: float) -> list[Letter]:
        if self.position >= self.told_at:
            raise NotFound(f"{DELETED}: the consumer stops")
        return super().poll_batch(max_records, timeout)


@pytest.mark.parametrize(
    ("accepted", "producer_told", "consumer_told_at", "replayed"),
    [
        (600, True, 10**9, 500),  # the producer is told between two sends
        (500, True, 10**9, 0),  # ... while the first batch's delivery is awaited
        (10**9, False, 500, 500),  # the consumer is told first
    ],
    ids=["while-sending", "while-delivering", "consumer-first"],
)
def test_replay_stops_at_once_saying_the_stream_was_deleted(
    monkeypatch: pytest.MonkeyPatch,
    accepted: int,
    producer_told: bool,
    consumer_told_at: int,
    replayed: int,
) -> None:
    log = DlqPartition(2000)
    FakeAdmin.down, FakeAdmin.slow, FakeAdmin.logs = set(), set(), {"a": log}
    producer = DeletedAfter(accepted, told=producer_told)
    monkeypatch.setattr(dlq, "KafkaAdmin", FakeAdmin)
    monkeypatch.setattr(dlq, "take_over_legacy_progress", lambda *a, **k: frozenset())
    monkeypatch.setattr(
        dlq, "StreamConsumer", lambda *a, **k: DeletedConsumer(log, consumer_told_at)
    )
    monkeypatch.setattr(dlq, "StreamProducer", lambda *a, **k: producer)
    client: Any = FakeClient([dlq_segment("a")])
    with pytest.raises(NotFound) as raised:
        replay_dead_letters(client, "s", idle_s=0.5)
    assert str(raised.value) == (
        "stream 's' was deleted during the replay, its dlq lane with it: "
        f"{replayed} records replayed before it was"
    )
    assert producer.closed_with == [0.0]  # the copies queued are given up on, not waited for
    assert len(log.acked) == replayed == producer.delivered
