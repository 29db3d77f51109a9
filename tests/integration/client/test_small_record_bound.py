"""Streams created with a small record bound, on the real fleet: records within the
bound are written, and so are their dead letters, whole.

Found by an exploratory user run: a stream's topics take its bound + 64 KiB
(``max.message.bytes``), and the producer let a batch grow to 1 MiB. The broker refused
each such batch whole ("Message size too large") and librdkafka does not split it:
5,000 records of 900 bytes sent to a 1,000-byte stream all failed at ``flush``, none
written; on the dlq side, 1,000 dead letters of 806-byte records were all written with
their provenance alone (``sp-dlq-dropped``, "too large to write whole"), so ``dlq
replay`` could replay none of them.
"""

from __future__ import annotations

import json
import os
import random
import string
from collections.abc import Callable
from typing import Any

import pytest

from streamplane.client.consumer import StreamConsumer
from streamplane.client.dlq import list_dead_letters, replay_dead_letters
from streamplane.client.producer import StreamProducer
from streamplane.exceptions import RecordTooLarge
from streamplane.kafka.admin import KafkaAdmin
from streamplane.local.fleet import FleetDescriptor
from tests.waiting import wait_for

RECORDS = 5000


def _random_900() -> list[bytes | str]:
    return [os.urandom(900) for _ in range(RECORDS)]  # incompressible


def _json_lines() -> list[bytes | str]:
    """~600-byte JSON log lines (compressible), as an application sends them."""
    rng = random.Random(0)

    def word() -> str:
        return "".join(rng.choices(string.ascii_lowercase, k=rng.randrange(3, 9)))

    return [
        json.dumps(
            {
                "ts": 1.7e9 + i,
                "host": f"host-{rng.randrange(500)}",
                "level": rng.choice(["info", "warn", "error"]),
                "trace": "".join(rng.choices(string.hexdigits, k=32)),
                "msg": " ".join(word() for _ in range(60)),
            }
        )
        for i in range(RECORDS)
    ]


@pytest.mark.parametrize(
    ("bound", "make"), [(1000, _random_900), (4096, _json_lines)], ids=["1000-random", "4096-json"]
)
def test_records_within_a_small_bound_are_all_written_when_sent_fast(
    control_plane: Any,
    fleet: FleetDescriptor,
    stream_factory: Callable[..., str],
    bound: int,
    make: Callable[[], list[bytes | str]],
) -> None:
    stream = stream_factory("local-a", lanes=("realtime",), partitions=1, max_record_bytes=bound)
    client = control_plane.client()
    values = make()
    assert max(len(v.encode() if isinstance(v, str) else v) for v in values) <= bound
    with StreamProducer(stream, client) as producer:
        for value in values:
            producer.send(value)
        producer.flush(60)  # raised "5000 records could not be delivered ... too large"
    topic = client.routing(stream).active("realtime").topic
    assert KafkaAdmin(fleet.bootstrap("local-a")).end_offsets(topic) == {0: RECORDS}


def test_dead_letters_of_records_within_a_small_bound_are_written_whole(
    control_plane: Any, stream_factory: Callable[..., str]
) -> None:
    stream = stream_factory("local-a", lanes=("realtime",), partitions=1, max_record_bytes=1000)
    client = control_plane.client()
    values = [b"%06d" % i + os.urandom(800) for i in range(1000)]
    with StreamProducer(stream, client) as producer:
        for i, value in enumerate(values):
            producer.send(value, key=b"k%d" % (i % 7))
            if i % 20 == 19:
                producer.flush()  # small batches: the records got in before the fix too
    with StreamConsumer(stream, "rejects-all", client, max_attempts=1) as consumer:

        def all_rejected() -> bool:
            for msg in consumer.poll_batch(500, 0.2):
                msg.reject("poison")
            states = consumer.partition_states()  # none until the Assigner grants it
            return bool(states and states[0]["low_watermark"] == len(values))

        wait_for("every record dead-lettered", all_rejected, 90)
        assert consumer.stats["dlq"] == len(values)
    letters = list_dead_letters(client, stream, limit=2 * len(values)).letters
    assert len(letters) == len(values)
    stripped = [d for d in letters if "dropped" in d.provenance]
    assert not stripped, f"{len(stripped)} dead letters written without their record"
    assert sorted(d.value or b"" for d in letters) == values
    assert replay_dead_letters(client, stream).replayed == len(values)


def test_a_record_whose_headers_the_topic_cannot_take_is_refused_at_send(
    control_plane: Any, stream_factory: Callable[..., str]
) -> None:
    """Its key and value are within the bound, its headers past the 64 KiB the topics
    take above it: the producer (message.max.bytes at least 1,000,000) queued it, and
    the broker refused it at delivery, a failure found only at ``flush``."""
    stream = stream_factory("local-a", lanes=("realtime",), partitions=1, max_record_bytes=1000)
    with StreamProducer(stream, control_plane.client()) as producer:
        with pytest.raises(RecordTooLarge, match="of headers"):
            producer.send(b"x", headers=[("h", b"y" * 100_000)])
        producer.send(b"x", headers=[("h", b"y" * 10_000)])  # fits
