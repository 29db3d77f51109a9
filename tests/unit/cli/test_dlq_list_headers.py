"""`dlq list` shows each dead letter's own headers (``content-type``,
``sp-replayed-from``, ...): the JSON listed only its provenance (the ``sp-dlq-*``
headers), so neither the original headers nor which letters were replayed copies could
be seen without a raw read (an exploratory run, /tmp/explore-app/dlq_headers.py)."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

import streamplane.client.dlq as client_dlq
from streamplane.client.dlq import DeadLetter, list_dead_letters
from streamplane.client.provenance import dlq_headers, read_provenance, source_headers
from streamplane.core.routing import RoutingTable, new_routing_table
from tests.unit.cli.dlq_listing import dlq_list_of

TOPIC = "sp.s.dlq.e1"


def headers_of(offset: int, own: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """A dead letter's headers as the consumer writes them: its own, then provenance."""
    source = source_headers("s", "realtime", "local-a", "sp.s.realtime.e1", 0)
    return dlq_headers(source, own, offset=offset, attempts=2, error="bad", first_seen_ms=1)


RAW = [
    headers_of(0, [("content-type", b"application/json"), ("trace", b"\xff\x00")]),
    headers_of(1, [("content-type", b"text/plain"), ("sp-replayed-from", b"sp.s.dlq.e1:0:0")]),
    headers_of(2, []),
    # Replayed twice: each replay appended its own sp-replayed-from; an empty value.
    headers_of(
        3,
        [
            ("sp-replayed-from", b"sp.s.dlq.e1:0:0"),
            ("empty", b""),
            ("sp-replayed-from", b"sp.s.dlq.e1:0:1"),
        ],
    ),
]


def letters() -> list[DeadLetter]:
    return [
        DeadLetter(
            "local-a",
            TOPIC,
            0,
            i,
            None,
            b"v",
            read_provenance(h),
            tuple((k, v) for k, v in h if not k.startswith("sp-dlq-")),
        )
        for i, h in enumerate(RAW)
    ]


@pytest.fixture
def listed(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``listed(*args)``: the output of ``dlq list s *args`` over letters()."""
    return dlq_list_of(monkeypatch, letters())


def test_json_lists_each_letters_own_headers(listed: Any) -> None:
    records = json.loads(listed("--json"))
    assert records[0]["headers"] == [
        {"name": "content-type", "value": "application/json"},
        {"name": "trace", "value_base64": base64.b64encode(b"\xff\x00").decode()},
    ]
    assert records[1]["headers"] == [
        {"name": "content-type", "value": "text/plain"},
        {"name": "sp-replayed-from", "value": "sp.s.dlq.e1:0:0"},
    ]
    assert records[2]["headers"] == []
    assert records[3]["headers"][1] == {"name": "empty", "value": ""}
    # The provenance stays where it was, and is not listed twice.
    assert records[0]["provenance"]["offset"] == 0
    assert all(not h["name"].startswith("sp-dlq-") for r in records for h in r["headers"])


def test_json_says_which_letters_are_replayed_copies(listed: Any) -> None:
    records = json.loads(listed("--json"))
    assert [r["replayed_from"] for r in records] == [
        None,
        "sp.s.dlq.e1:0:0",
        None,
        "sp.s.dlq.e1:0:1",  # the latest replay's
    ]


def test_the_table_marks_replayed_copies(listed: Any) -> None:
    rows = listed().splitlines()[2:6]
    assert ["(replayed)" in row for row in rows] == [False, True, False, True]
    assert rows[1].startswith(f"{TOPIC}[0]@1 ")


@dataclass
class _Msg:
    offset: int
    headers: list[tuple[str, bytes]] | None
    cluster: str = "local-a"
    topic: str = TOPIC
    partition: int = 0
    key: bytes | None = None
    value: bytes | None = b"v"
    acked: list[int] = field(default_factory=list)

    def ack(self) -> None:
        self.acked.append(self.offset)


def test_list_dead_letters_keeps_the_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = [_Msg(i, h) for i, h in enumerate(RAW)] + [_Msg(len(RAW), None)]

    class Browser:
        def __init__(self, *args: object, **kwargs: object) -> None:
            self.left = list(messages)

        def __enter__(self) -> Browser:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def poll(self, timeout: float) -> _Msg | None:
            return self.left.pop(0) if self.left else None

        def unfinished_partitions(self) -> list[Any]:
            return []

    class ControlPlane:  # a stream without retired dlq segments
        def routing(self, stream: str) -> RoutingTable:
            return new_routing_table(stream, ["realtime"], "local-a", 1)

    monkeypatch.setattr(client_dlq, "StreamConsumer", Browser)
    listing = list_dead_letters(ControlPlane(), "s", limit=10, idle_s=0.3)  # type: ignore[arg-type]
    got = listing.letters
    assert [d.headers for d in got] == [
        tuple((k, v) for k, v in h if not k.startswith("sp-dlq-")) for h in RAW
    ] + [()]
    assert got[0].headers == (("content-type", b"application/json"), ("trace", b"\xff\x00"))
    assert got[0].provenance["offset"] == "0"
    assert [d.replayed_from for d in got] == [
        None,
        "sp.s.dlq.e1:0:0",
        None,
        "sp.s.dlq.e1:0:1",
        None,
    ]
