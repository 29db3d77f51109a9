"""What a replayed copy says of the record it stands for (``sp-origin``), through
duplicated dead letters and replays of replays (``provenance.replay_headers``; a replay
run's copies: test_replay_copies.py).

An exploratory run (an application handling poison pills) had 714 of 2,098 poison pills
dead-lettered twice after three kill -9 (at-least-once, documented), and ``dlq replay``
sent both copies back, each carrying only ``sp-replayed-from`` (a different dlq offset
per copy) and none of the original provenance: a consumer could not drop the repeats.
Each replay also added a ``sp-replayed-from`` of its own (a third one carried three)."""

from __future__ import annotations

from streamplane.client.dlq import DeadLetter
from streamplane.client.provenance import (
    PREFIX,
    dlq_headers,
    origin_of,
    read_provenance,
    record_id,
    replay_headers,
    source_headers,
)
from tests.unit.client.test_dlq_replay import DLQ_TOPIC

LANE_TOPIC = "sp.s.realtime.e1"
ORIGINAL = "local-a:sp.s.realtime.e1:2:41"  # the record first dead-lettered
Headers = list[tuple[str, bytes]]


def dead_letter_of(
    offset: int, own: Headers | None, attempts: int = 5, first_seen_ms: int = 1
) -> Headers:
    """The headers of the dead letter of ``LANE_TOPIC``[2]@``offset``, as ``reject``
    writes them."""
    source = source_headers("s", "realtime", "local-a", LANE_TOPIC, 2)
    return dlq_headers(
        source, own, offset=offset, attempts=attempts, error="boom", first_seen_ms=first_seen_ms
    )


def copy_of(headers: Headers, dlq_offset: int) -> Headers:
    """The headers of the copy a replay sends back for the dead letter at
    ``DLQ_TOPIC``[0]@``dlq_offset`` whose headers are ``headers``."""
    origin = origin_of(headers, read_provenance(headers), record_id("a", DLQ_TOPIC, 0, dlq_offset))
    return replay_headers(headers, origin, f"{DLQ_TOPIC}:0:{dlq_offset}")


def named(headers: Headers, name: str) -> list[bytes]:
    return [v for k, v in headers if k == name]


def test_both_dead_letters_of_a_record_replay_with_its_identity() -> None:
    """A crash between a dead letter's write and the commit writes it twice (attempts
    and first-seen differ after the restart): both copies name the same record."""
    own: Headers = [("content-type", b"application/json")]
    first = copy_of(dead_letter_of(41, own), dlq_offset=7)
    again = copy_of(dead_letter_of(41, own, attempts=6, first_seen_ms=99), dlq_offset=3012)
    assert named(first, "sp-origin") == named(again, "sp-origin") == [ORIGINAL.encode()]
    assert named(first, "sp-replayed-from") == [f"{DLQ_TOPIC}:0:7".encode()]
    assert named(again, "sp-replayed-from") == [f"{DLQ_TOPIC}:0:3012".encode()]
    assert first[0] == ("content-type", b"application/json")  # its own headers, first
    assert not any(k.startswith(PREFIX) for k, _ in first)


def test_a_copy_of_a_copy_keeps_the_identity_and_one_replayed_from() -> None:
    """Three generations: each copy dead-lettered again (from where it landed on the
    lane) and replayed again names the record first dead-lettered, with one
    ``sp-origin`` and one ``sp-replayed-from`` (the latest replay's)."""
    headers = copy_of(dead_letter_of(41, [("trace", b"t1")]), dlq_offset=7)
    for generation, (landed_at, dlq_offset) in enumerate([(900, 20), (1800, 33)], start=2):
        source = source_headers("s", "realtime", "local-a", LANE_TOPIC, 0)
        letter = dlq_headers(
            source, headers, offset=landed_at, attempts=5, error="boom", first_seen_ms=1
        )
        headers = copy_of(letter, dlq_offset)
        assert named(headers, "sp-origin") == [ORIGINAL.encode()], generation
        assert named(headers, "sp-replayed-from") == [f"{DLQ_TOPIC}:0:{dlq_offset}".encode()]
        assert named(headers, "trace") == [b"t1"]


def test_a_letter_of_the_older_format_replays_with_one_replayed_from() -> None:
    """A copy dead-lettered again by an older version carries a ``sp-replayed-from``
    per replay and no ``sp-origin``: its copy carries one ``sp-replayed-from``, and its
    own provenance (where the earlier copy was) as its identity, the same for both
    dead letters of it."""
    own: Headers = [("sp-replayed-from", b"sp.s.dlq.e1:0:0"), ("sp-replayed-from", b"x:0:1")]
    copy = copy_of(dead_letter_of(41, own), dlq_offset=9)
    assert named(copy, "sp-replayed-from") == [f"{DLQ_TOPIC}:0:9".encode()]
    assert named(copy, "sp-origin") == [ORIGINAL.encode()]


def test_a_letter_without_provenance_is_its_own_origin() -> None:
    """Written to the dlq lane directly: a replay killed after sending it sends it
    again with the same identity (its dlq record's)."""
    copy = copy_of([("content-type", b"text/plain")], dlq_offset=5)
    assert named(copy, "sp-origin") == [f"a:{DLQ_TOPIC}:0:5".encode()]


def test_a_dead_letter_tells_the_origin_its_copy_will_carry() -> None:
    raw = dead_letter_of(41, [("sp-origin", b"local-b:sp.s.bulk.e3:0:5")])
    letter = DeadLetter(
        "a",
        DLQ_TOPIC,
        0,
        12,
        None,
        b"v",
        read_provenance(raw),
        tuple((k, v) for k, v in raw if not k.startswith(PREFIX)),
    )
    assert letter.origin == "local-b:sp.s.bulk.e3:0:5"
    bare = DeadLetter("a", DLQ_TOPIC, 0, 12, None, b"v", {"lane": "realtime"})
    assert bare.origin == f"a:{DLQ_TOPIC}:0:12"
