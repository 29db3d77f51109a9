"""Provenance headers of a dead-lettered record, and reading them back."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

PREFIX = "sp-dlq-"
FIELDS = (
    "stream",
    "lane",
    "cluster",
    "topic",
    "partition",
    "offset",
    "attempts",
    "error",
    "first-seen-ms",
)


class _Source(Protocol):
    @property
    def stream(self) -> str: ...
    @property
    def lane(self) -> str: ...
    @property
    def cluster(self) -> str: ...
    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...

    @property
    def headers(self) -> list[tuple[str, bytes]] | None: ...

    offset: int
    first_seen_ms: int


def dlq_headers(msg: _Source, *, attempts: int, error: str) -> list[tuple[str, bytes]]:
    """The record's own headers plus ``sp-dlq-*`` provenance headers."""
    own = [(k, v) for k, v in (msg.headers or []) if not k.startswith(PREFIX)]
    values = {
        "stream": msg.stream,
        "lane": msg.lane,
        "cluster": msg.cluster,
        "topic": msg.topic,
        "partition": str(msg.partition),
        "offset": str(msg.offset),
        "attempts": str(attempts),
        "error": error[:2000],
        "first-seen-ms": str(msg.first_seen_ms),
    }
    return own + [(PREFIX + k, values[k].encode()) for k in FIELDS]


def read_provenance(headers: Iterable[tuple[str, bytes | None]] | None) -> dict[str, str]:
    """The ``sp-dlq-*`` headers of a dlq record, without the prefix."""
    out: dict[str, str] = {}
    for k, v in headers or []:
        if k.startswith(PREFIX) and v is not None:
            out[k[len(PREFIX) :]] = v.decode(errors="replace")
    return out
