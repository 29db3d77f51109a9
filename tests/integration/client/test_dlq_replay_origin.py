"""`dlq replay` on a real fleet: what each copy says of the record it stands for, and a
replay whose stream is deleted while it runs.

- After three kill -9, 714 of 2,098 poison pills were dead-lettered twice, and replay
  sent both copies back with only ``sp-replayed-from``, a different dlq offset each: a
  consumer could not drop the repeats (an exploratory run). Each replay also added a
  ``sp-replayed-from``: a third generation carried three.
- ``dlq replay`` went on 36 s after its stream was deleted, then failed with "500
  records could not be delivered ...; first: Local: Unknown partition".
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from streamplane.client.dlq import replay_dead_letters
from streamplane.client.provenance import dlq_headers, source_headers
from streamplane.exceptions import NotFound
from streamplane.kafka.clients import consumer_config, producer_config
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.local.fleet import FleetDescriptor
from tests.integration.client.test_dlq_replay import dead_letters, end_offset, topics

Headers = list[tuple[str, bytes]]


def write(bootstrap: str, topic: str, letters: list[tuple[bytes, Headers]]) -> None:
    producer = Producer(producer_config(bootstrap))
    for value, headers in letters:
        sent: list[tuple[str, str | bytes | None]] = list(headers)
        producer.produce(topic, value, headers=sent)
    assert producer.flush(60) == 0


def copies(bootstrap: str, topic: str, start: int) -> list[tuple[int, bytes, Headers]]:
    """(offset, value, headers) of what is on ``topic`` (partition 0) from ``start``."""
    end = end_offset(bootstrap, topic)
    c = Consumer(consumer_config(bootstrap, "sp-test-copies"))
    c.assign([TopicPartition(topic, 0, start)])
    out: list[tuple[int, bytes, Headers]] = []
    deadline = time.monotonic() + 60
    try:
        while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
            for m in c.consume(100, 0.5):
                assert m.error() is None, m.error()
                out.append((m.offset(), m.value(), list(m.headers() or [])))  # type: ignore[arg-type]
    finally:
        c.close()
    assert len(out) == end - start, f"read {len(out)} of {end - start} records of {topic}"
    return out


def named(headers: Headers, name: str) -> list[bytes]:
    return [v for k, v in headers if k == name]


def letter_of(lane_topic: str, offset: int, own: Headers, attempts: int) -> Headers:
    """A dead letter's headers, as ``reject`` writes them, of ``lane_topic``[0]@``offset``."""
    source = source_headers("s", "realtime", "local-a", lane_topic, 0)
    return dlq_headers(source, own, offset=offset, attempts=attempts, error="e", first_seen_ms=1)


def test_copies_of_one_record_carry_its_identity_through_generations(
    control_plane: ControlPlaneProcess,
    fleet: FleetDescriptor,
    stream_factory: Callable[..., str],
) -> None:
    """Record 41 dead-lettered twice (a crash before the commit), record 42 once, and a
    record written to the dlq lane directly: both copies of 41 carry the same
    ``sp-origin``; a copy of 41 rejected and replayed again keeps it, with one
    ``sp-replayed-from``."""
    stream = stream_factory("local-a", lanes=("realtime",), partitions=1)
    client = control_plane.client()
    bootstrap = fleet.bootstrap("local-a")
    dlq_topic, lane_topic = topics(client, stream)
    own: Headers = [("content-type", b"text/plain")]
    write(
        bootstrap,
        dlq_topic,
        [
            (b"41", letter_of(lane_topic, 41, own, attempts=5)),
            (b"42", letter_of(lane_topic, 42, own, attempts=5)),
            (b"41", letter_of(lane_topic, 41, own, attempts=6)),  # after the restart
            (b"direct", []),
        ],
    )
    assert replay_dead_letters(client, stream).replayed == 4
    first = copies(bootstrap, lane_topic, 0)
    assert [(v, named(h, "sp-origin")) for _, v, h in first] == [
        (b"41", [f"local-a:{lane_topic}:0:41".encode()]),
        (b"42", [f"local-a:{lane_topic}:0:42".encode()]),
        (b"41", [f"local-a:{lane_topic}:0:41".encode()]),
        (b"direct", [f"local-a:{dlq_topic}:0:3".encode()]),
    ]
    assert [named(h, "sp-replayed-from") for _, _, h in first] == [
        [f"{dlq_topic}:0:{i}".encode()] for i in range(4)
    ]
    assert all(named(h, "content-type") == [b"text/plain"] for _, _, h in first[:3])

    # Generations 2 and 3: the copy of 41 rejected from where it landed, replayed again.
    offset, value, headers = first[0]
    for generation in (2, 3):
        dlq_at = end_offset(bootstrap, dlq_topic)
        lane_at = end_offset(bootstrap, lane_topic)
        write(bootstrap, dlq_topic, [(value, letter_of(lane_topic, offset, headers, attempts=5))])
        assert replay_dead_letters(client, stream).replayed == 1
        [(offset, value, headers)] = copies(bootstrap, lane_topic, lane_at)
        assert named(headers, "sp-origin") == [f"local-a:{lane_topic}:0:41".encode()], generation
        assert named(headers, "sp-replayed-from") == [f"{dlq_topic}:0:{dlq_at}".encode()]


def test_a_replay_whose_stream_is_deleted_stops_saying_so(
    control_plane: ControlPlaneProcess,
    fleet: FleetDescriptor,
    stream_factory: Callable[..., str],
) -> None:
    """The stream is deleted once the first batch is replayed: the replay stops, failing
    with NotFound that says so and how many it replayed (before: it went on until
    librdkafka gave up on the deleted topic, ~30 s, and failed with "Local: Unknown
    partition", never saying the stream was deleted)."""
    stream = stream_factory("local-a", lanes=("realtime",), partitions=1)
    client = control_plane.client()
    bootstrap = fleet.bootstrap("local-a")
    dlq_topic, _ = topics(client, stream)
    dead_letters(bootstrap, dlq_topic, 0, 20_000)
    told: list[int] = []

    def delete_at_first_batch(replayed: int) -> None:
        told.append(replayed)
        if len(told) == 1:
            client.delete_stream(stream)

    with pytest.raises(NotFound) as raised:
        replay_dead_letters(client, stream, progress=delete_at_first_batch)
    message = str(raised.value)
    assert message.startswith(
        f"stream {stream!r} was deleted during the replay, its dlq lane with it: "
    ), message
    assert message.endswith(f"{told[-1]} records replayed before it was"), (message, told)
    assert told[-1] < 20_000
