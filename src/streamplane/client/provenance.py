"""Provenance headers of a dead-lettered record, and reading them back."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
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
# The per-record fields, after the five every dead letter of a partition shares.
_OFFSET, _ATTEMPTS, _ERROR, _FIRST_SEEN = (PREFIX + f for f in FIELDS[5:])


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

    @property
    def first_seen_ms(self) -> int: ...

    offset: int


def dlq_headers(msg: _Source, *, attempts: int, error: str) -> list[tuple[str, bytes]]:
    """The record's own headers plus ``sp-dlq-*`` provenance headers."""
    own = msg.headers
    headers = [h for h in own if not h[0].startswith(PREFIX)] if own else []
    headers += _source_headers(msg.stream, msg.lane, msg.cluster, msg.topic, msg.partition)
    headers += (
        (_OFFSET, b"%d" % msg.offset),
        (_ATTEMPTS, b"%d" % attempts),
        (_ERROR, error[:2000].encode()),
        (_FIRST_SEEN, b"%d" % msg.first_seen_ms),
    )
    return headers


@lru_cache(maxsize=4096)
def _source_headers(
    stream: str, lane: str, cluster: str, topic: str, partition: int
) -> tuple[tuple[str, bytes], ...]:
    """The headers every dead letter of one partition shares (cached: dead-lettering
    is on the retry path of every poison pill)."""
    values = (stream, lane, cluster, topic, str(partition))
    return tuple((PREFIX + k, v.encode()) for k, v in zip(FIELDS[:5], values, strict=True))


def read_provenance(headers: Iterable[tuple[str, bytes | None]] | None) -> dict[str, str]:
    """The ``sp-dlq-*`` headers of a dlq record, without the prefix."""
    out: dict[str, str] = {}
    for k, v in headers or []:
        if k.startswith(PREFIX) and v is not None:
            out[k[len(PREFIX) :]] = v.decode(errors="replace")
    return out
