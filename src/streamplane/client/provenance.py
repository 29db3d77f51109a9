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
# On a dead letter written without its record (too large to write whole): how many
# bytes of key, value and headers were left out.
DROPPED = PREFIX + "dropped"


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


def provenance_only(
    value: bytes | str | None, key: bytes | str | None, headers: list[tuple[str, bytes]] | None
) -> tuple[None, None, list[tuple[str, bytes]]]:
    """What is written for a dead letter too large to write whole (a record another
    producer wrote to the lane, over the stream's bound): no key, no value, only its
    provenance headers (``headers`` from ``dlq_headers``) and ``sp-dlq-dropped``, the
    bytes left out. The record itself stays on its origin topic until retention."""
    headers = headers or []
    dropped = sum(len(x.encode() if isinstance(x, str) else x or b"") for x in (value, key))
    dropped += sum(len(k) + len(v or b"") for k, v in headers if not k.startswith(PREFIX))
    kept = [(k, v) for k, v in headers if k.startswith(PREFIX)]
    kept.append((DROPPED, b"%d" % dropped))
    return None, None, kept


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
