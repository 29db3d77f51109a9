"""Reading and replaying a stream's dlq lane."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.partition_state import PartitionKey
from streamplane.client.producer import StreamProducer
from streamplane.client.provenance import PREFIX, read_provenance
from streamplane.core.routing import DLQ_LANE
from streamplane.core.text import counted
from streamplane.exceptions import ConfigError, KafkaError, RecordTooLarge

REPLAY_GROUP = "sp-dlq-replay"


@dataclass(frozen=True)
class DeadLetter:
    cluster: str
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    provenance: dict[str, str]


@dataclass(frozen=True)
class DlqListing:
    """What ``list_dead_letters`` read, and the dlq partitions it could not read to
    their end (their cluster is down: it did not say where to start, or stopped
    answering mid-read), so a listing is never silently short."""

    letters: list[DeadLetter]
    unread: list[PartitionKey]


def describe_unread(unread: list[PartitionKey]) -> str:
    """``unread`` partitions for a message: how many, on which clusters."""
    clusters = sorted({k.cluster for k in unread})
    return f"{len(unread)} dlq partitions on {', '.join(clusters)} could not be read"


def _drain(consumer: StreamConsumer, idle_s: float, each: Callable[[StreamMessage], bool]) -> None:
    """Hand records to ``each`` until it returns False or nothing arrives for ``idle_s``."""
    last = time.monotonic()
    while time.monotonic() - last < idle_s:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        last = time.monotonic()
        if not each(msg):
            return


def list_dead_letters(
    client: ControlPlaneClient, stream: str, limit: int = 100, idle_s: float = 2.0
) -> DlqListing:
    """Up to ``limit`` records of the dlq lane, oldest first, and the partitions that
    could not be read. Commits nothing."""
    out: list[DeadLetter] = []
    consumer = StreamConsumer(
        stream, f"sp-dlq-list-{time.time_ns()}", client, lanes=[DLQ_LANE], read_only=True
    )
    with consumer:

        def each(msg: StreamMessage) -> bool:
            out.append(
                DeadLetter(
                    msg.cluster,
                    msg.topic,
                    msg.partition,
                    msg.offset,
                    msg.key,
                    msg.value,
                    read_provenance(msg.headers),
                )
            )
            msg.ack()  # nothing is committed (read-only); it keeps the in-flight window open
            return len(out) < limit

        _drain(consumer, idle_s, each)
        unread = consumer.unfinished_partitions() if len(out) < limit else []
    return DlqListing(out, unread)


def replay(
    client: ControlPlaneClient,
    stream: str,
    to_lane: str | None = None,
    idle_s: float = 2.0,
    progress: Callable[[int], None] = lambda _: None,
) -> int:
    """Send every dlq record back to ``to_lane`` (default: the lane it came from).

    Each dlq record is acked only after its copy is delivered, under the group
    ``sp-dlq-replay``, so an interrupted replay resumes where it stopped and loses nothing.
    Raises KafkaError, once the rest is replayed and committed, if some dlq partitions
    could not be read (their cluster is down): running it again replays those. Raises
    RecordTooLarge, once the rest is replayed, if some dead letters cannot be: written
    without their record (``sp-dlq-dropped``: it was over the stream's bound, and stays
    on its origin topic until retention) or over the bound themselves. Those are left
    unsettled in the replay group: every replay names them again.
    """
    if to_lane == DLQ_LANE:
        raise ConfigError("cannot replay the dlq lane into itself")
    replayed = 0
    with (
        StreamConsumer(stream, REPLAY_GROUP, client, lanes=[DLQ_LANE]) as consumer,
        StreamProducer(stream, client) as producer,
    ):
        lanes = producer.routing.lanes
        if to_lane is not None and to_lane not in lanes:
            raise ConfigError(
                f"stream {stream!r} has no lane {to_lane!r} (lanes: {', '.join(lanes)})"
            )
        batch: list[StreamMessage] = []
        not_replayable: list[tuple[StreamMessage, str]] = []

        def each(msg: StreamMessage) -> bool:
            nonlocal replayed
            origin = read_provenance(msg.headers)
            if "dropped" in origin:
                not_replayable.append((msg, f"its record ({origin['dropped']} bytes) was not kept"))
                return True
            lane = to_lane or origin.get("lane") or lanes[0]
            if lane not in lanes:
                lane = lanes[0]
            headers = [(k, v) for k, v in (msg.headers or []) if not k.startswith(PREFIX)]
            headers.append(
                ("sp-replayed-from", f"{msg.topic}:{msg.partition}:{msg.offset}".encode())
            )
            try:
                producer.send(msg.value, key=msg.key, headers=headers, lane=lane)
            except RecordTooLarge as exc:
                not_replayable.append((msg, str(exc)))
                return True
            batch.append(msg)
            if len(batch) >= 500:
                producer.flush()
                for m in batch:
                    m.ack()
                replayed += len(batch)
                progress(replayed)
                batch.clear()
            return True

        _drain(consumer, idle_s, each)
        producer.flush()
        for m in batch:
            m.ack()
        replayed += len(batch)
        progress(replayed)
        unread = consumer.unfinished_partitions()
    if unread:
        raise KafkaError(
            f"replayed {counted(replayed, 'record')}, but {describe_unread(unread)} (the "
            "cluster does not answer): replay again once it does"
        )
    if not_replayable:
        msg, why = not_replayable[0]
        origin = read_provenance(msg.headers)
        raise RecordTooLarge(
            f"replayed {counted(replayed, 'record')}, but not "
            f"{counted(len(not_replayable), 'dead letter')}, left in the dlq lane; the "
            f"first, {msg.topic}[{msg.partition}]@{msg.offset} (from "
            f"{origin.get('topic', '?')}[{origin.get('partition', '?')}]"
            f"@{origin.get('offset', '?')} on {origin.get('cluster', '?')}): {why}"
        )
    return replayed
