"""Provenance headers of a dead-lettered record, and reading them back."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

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


def dlq_headers(
    source: tuple[tuple[str, bytes], ...],
    own: list[tuple[str, bytes]] | None,
    *,
    offset: int,
    attempts: int,
    error: str,
    first_seen_ms: int,
) -> list[tuple[str, bytes]]:
    """A dead letter's headers: the record's own ones (``own``, stale ``sp-dlq-*`` ones
    left out), its partition's ``source_headers``, then the per-record provenance."""
    headers = [h for h in own if not h[0].startswith(PREFIX)] if own else []
    headers += source
    headers += (
        (_OFFSET, b"%d" % offset),
        (_ATTEMPTS, b"%d" % attempts),
        (_ERROR, error[:2000].encode()),
        (_FIRST_SEEN, b"%d" % first_seen_ms),
    )
    return headers


@lru_cache(maxsize=4096)
def source_headers(
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
