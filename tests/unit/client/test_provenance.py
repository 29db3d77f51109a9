"""Provenance headers of dead letters, written and read back."""

from __future__ import annotations

from typing import Any

from streamplane.client.provenance import (
    FIELDS,
    PREFIX,
    dlq_headers,
    read_provenance,
    source_headers,
)

SOURCE = source_headers("orders", "realtime", "local-a", "sp.orders.realtime.e1", 3)


def headers_of(own: list[tuple[str, bytes]] | None, attempts: int, error: str) -> list[Any]:
    return dlq_headers(
        SOURCE, own, offset=12345, attempts=attempts, error=error, first_seen_ms=1_700_000_000_123
    )


def test_every_field_round_trips_and_own_headers_are_kept() -> None:
    own = [("trace", b"abc"), (PREFIX + "offset", b"stale from an earlier dead letter")]
    headers = headers_of(own, 5, "max attempts (5) reached: boom")
    assert headers[0] == ("trace", b"abc")
    assert [k for k, _ in headers[1:]] == [PREFIX + f for f in FIELDS]
    assert read_provenance(headers) == {
        "stream": "orders",
        "lane": "realtime",
        "cluster": "local-a",
        "topic": "sp.orders.realtime.e1",
        "partition": "3",
        "offset": "12345",
        "attempts": "5",
        "error": "max attempts (5) reached: boom",
        "first-seen-ms": "1700000000123",
    }


def test_no_own_headers_and_a_long_error_is_cut() -> None:
    headers = headers_of(None, 1, "x" * 5000)
    assert len(headers) == len(FIELDS)
    assert read_provenance(headers)["error"] == "x" * 2000
    # Each call builds its own list: the cached per-partition part is not shared.
    again = headers_of(None, 2, "y")
    assert headers is not again and read_provenance(headers)["attempts"] == "1"
