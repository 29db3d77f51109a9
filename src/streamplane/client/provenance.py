"""Provenance headers of a dead-lettered record, and reading them back; the headers a
replay gives each copy it sends back to a lane."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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

# The headers a replay gives each copy it sends back (not provenance: a copy that is
# dead-lettered again keeps them among its own headers, and its next replay replaces
# them rather than adding its own).
# The original record the copy stands for, ``cluster:topic:partition:offset``: the one
# first dead-lettered, named by its dead letter's provenance; a copy of a copy keeps it.
# Duplicates of a dead letter (at-least-once) name the same record: a consumer drops
# repeats by it.
ORIGIN = "sp-origin"
# The dead letter the copy was replayed from, ``topic:partition:offset`` of the dlq record.
REPLAYED_FROM = "sp-replayed-from"
# Provenance fields that name the record a dead letter was written for.
_WHERE = ("cluster", "topic", "partition", "offset")


def dlq_headers(
    source: tuple[tuple[str, bytes], ...],
    own: list[tuple[str, bytes]] | None,
    *,
    offset: int,
    attempts: int,
    error: str,
    first_seen_ms: int,
) -> list[tuple[str, bytes]]:
    """A dead letter's headers: the record's own ones (``own``), its partition's
    ``source_headers``, then the per-record provenance. Own headers named ``sp-dlq-*``
    are left out: the prefix is provenance's, so what a dead letter says of its origin
    is only ever what was written for it (a record re-produced from a dead letter,
    headers and all, would otherwise carry a stale provenance, or a made-up one)."""
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


def record_id(cluster: str, topic: str, partition: int | str, offset: int | str) -> str:
    """A record's identity, ``cluster:topic:partition:offset`` (neither a cluster's nor
    a topic's name can hold a colon)."""
    return f"{cluster}:{topic}:{partition}:{offset}"


def origin_of(
    headers: Iterable[tuple[str, bytes | None]] | None,
    provenance: Mapping[str, str],
    dlq_record: str,
) -> str:
    """The identity (``record_id``) of the original record behind a dlq record, which
    its replayed copy carries as ``sp-origin``: the ``sp-origin`` among its ``headers``
    (a replayed copy, dead-lettered again), else the record its ``provenance`` names
    (``read_provenance``), else the dlq record itself (``dlq_record``: written to the
    dlq lane directly, it has no other origin). A copy dead-lettered again by an older
    version of the library, without ``sp-origin``, is named by its own provenance: the
    copy, not the record first dead-lettered."""
    for k, v in headers or []:
        if k == ORIGIN and v:
            return v.decode(errors="replace")
    if all(provenance.get(field) for field in _WHERE):
        return record_id(*(provenance[field] for field in _WHERE))
    return dlq_record


def replay_headers(
    headers: Iterable[tuple[str, bytes]] | None, origin: str, dlq_record: str
) -> list[tuple[str, bytes]]:
    """The headers of a dlq record's replayed copy: its own ``headers`` in order, less
    its provenance and the ``sp-origin`` and ``sp-replayed-from`` of an earlier replay,
    then ``sp-origin`` (``origin``, from ``origin_of``) and ``sp-replayed-from``
    (``dlq_record``, ``topic:partition:offset``). One of each, whatever the generation:
    each replay used to add a ``sp-replayed-from``, and a third one carried three."""
    own = [
        (k, v)
        for k, v in headers or []
        if not k.startswith(PREFIX) and k != ORIGIN and k != REPLAYED_FROM
    ]
    own += ((ORIGIN, origin.encode()), (REPLAYED_FROM, dlq_record.encode()))
    return own
