"""The headers of the copies a replay run sends back: each names the record it stands
for (``sp-origin``), the same for both dead letters of a record written twice, and the
dead letter it came from (``sp-replayed-from``). (The rules, generation after
generation: test_replay_origin.py.)

An exploratory run (an application handling poison pills): after three kill -9, 714 of
2,098 poison pills were dead-lettered twice, and ``dlq replay`` sent both copies back
with only ``sp-replayed-from``, a different dlq offset for each: a consumer could not
drop the repeats."""

from __future__ import annotations

from typing import Any

import pytest

import streamplane.client.dlq as dlq
from streamplane.client.dlq import replay_dead_letters
from streamplane.client.provenance import dlq_headers, source_headers
from tests.unit.client.test_dlq_replay import (
    DLQ_TOPIC,
    DlqPartition,
    FakeAdmin,
    FakeClient,
    FakeConsumer,
    FakeProducer,
    Letter,
    dlq_segment,
)

LANE_TOPIC = "sp.s.realtime.e1"
Headers = list[tuple[str, bytes]]


def named(headers: Headers, name: str) -> list[bytes]:
    return [v for k, v in headers if k == name]


class HeaderedLetter(Letter):
    """A dead letter with the headers ``reject`` writes (the record at its offset)."""

    def __init__(self, log: DlqPartition, offset: int, value: bytes) -> None:
        super().__init__(log, offset, value)
        # Two dead letters a record: LANE_TOPIC[2]@0 twice, @1 twice, ...
        source = source_headers("s", "realtime", "local-a", LANE_TOPIC, 2)
        self.headers = dlq_headers(
            source, [("n", value)], offset=offset // 2, attempts=5, error="x", first_seen_ms=1
        )


class HeaderedConsumer(FakeConsumer):
    def poll_batch(self, max_records: int, timeout: float) -> list[Letter]:
        return [
            HeaderedLetter(self.log, m.offset, m.value)
            for m in super().poll_batch(max_records, timeout)
        ]


class HeaderKeepingProducer(FakeProducer):
    def __init__(self, log: DlqPartition) -> None:
        super().__init__(log)
        self.headers: list[Headers] = []

    def send(self, value: bytes | None, key: Any, headers: Any, lane: str) -> None:
        super().send(value, key, headers, lane)
        self.headers.append(headers)


def test_replay_sends_each_copy_with_its_records_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    log = DlqPartition(6)
    FakeAdmin.down, FakeAdmin.slow, FakeAdmin.logs = set(), set(), {"a": log}
    producer = HeaderKeepingProducer(log)
    monkeypatch.setattr(dlq, "KafkaAdmin", FakeAdmin)
    monkeypatch.setattr(dlq, "take_over_legacy_progress", lambda *a, **k: frozenset())
    monkeypatch.setattr(dlq, "StreamConsumer", lambda *a, **k: HeaderedConsumer(log))
    monkeypatch.setattr(dlq, "StreamProducer", lambda *a, **k: producer)
    client: Any = FakeClient([dlq_segment("a")])
    assert replay_dead_letters(client, "s", idle_s=0.3).replayed == 6
    origins = [named(h, "sp-origin") for h in producer.headers]
    assert origins == [[f"local-a:{LANE_TOPIC}:2:{i // 2}".encode()] for i in range(6)]
    assert [named(h, "sp-replayed-from") for h in producer.headers] == [
        [f"{DLQ_TOPIC}:0:{i}".encode()] for i in range(6)
    ]
