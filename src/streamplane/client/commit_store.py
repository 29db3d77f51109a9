"""Commits the commit log to Kafka for one cluster, and reads it back.

The committed offset is the low watermark; the metadata is the codec's string, within
the broker's ``offset.metadata.max.bytes`` (read from the brokers, the smallest wins).
When the full state does not fit, it is written to the compacted side topic
``sp.<stream>.__commitlog`` (key: group, topic, partition) and the metadata carries a
pointer to that record plus as much of the state as fits. Reading back follows the
pointer and checks the blob's checksum; if the side record cannot be read, the
truncated state in the metadata is used, which is always safe (only redelivery). The
side topic is replicated as a stream's topics are (``streamplane.core.replication``:
min(3, live brokers) replicas, ``min.insync.replicas`` 2 with 3 or more, else 1).

A side topic that is missing (deleted by hand: deleting the stream deletes it with the
stream) is told at once, from the reader's metadata or the read's error, and said so,
with how many settled records the truncated state does not carry (handed out again).
Before, the read waited for a record of a topic that does not exist for 10 s, long
enough for the consumer to log that a healthy cluster "has not said where to start"
its partitions.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka import KafkaError as _RawKafkaError
from confluent_kafka import KafkaException as _RawKafkaException

from streamplane.client.metrics import METRICS
from streamplane.core.commitlog import (
    DEFAULT_MAX_BYTES,
    DecodedCommit,
    EncodedProgress,
    PartitionProgress,
    SpillPointer,
    decode,
    decode_full,
    encode,
    encode_complete,
    encode_full,
    encode_spill_pointer,
)
from streamplane.core.replication import (
    MIN_INSYNC_REPLICAS,
    min_insync_replicas,
    replication_factor,
)
from streamplane.core.routing import commitlog_topic
from streamplane.core.text import counted
from streamplane.exceptions import CodecError, KafkaError
from streamplane.kafka.admin import KafkaAdmin, to_kafka_error
from streamplane.kafka.clients import consumer_config, producer_config

log = logging.getLogger(__name__)

# Where partitions start: (committed progress, committed offset) by (topic, partition).
Restored = dict[tuple[str, int], tuple[PartitionProgress | None, int | None]]

# Errors that only mean "ask again shortly" while a group coordinator moves or loads.
_COORDINATOR_MOVING = frozenset(
    {
        "NOT_COORDINATOR",
        "COORDINATOR_LOAD_IN_PROGRESS",
        "COORDINATOR_NOT_AVAILABLE",
        "_TIMED_OUT",
        "_TRANSPORT",
        "REQUEST_TIMED_OUT",
    }
)

# How often a budget that could not be read (the brokers did not answer: the fallback of
# 4096 is in use) is read again.
_BUDGET_RETRY_S = 30.0

SIDE_TOPIC_CONFIG = {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000"}


def side_topic_config(replicas: int) -> dict[str, str]:
    """The configs of a side topic made with ``replicas`` replicas: ``SIDE_TOPIC_CONFIG``
    and the ``min.insync.replicas`` a stream's topics get (``min_insync_replicas``: 2 of
    3), so a spilled state acknowledged (``acks=all``) is held by two copies."""
    return {**SIDE_TOPIC_CONFIG, MIN_INSYNC_REPLICAS: str(min_insync_replicas(replicas))}


# How long a spilled record is waited for: ``_SPILL_POLLS`` polls of ``_SPILL_POLL_S``.
_SPILL_POLLS = 20
_SPILL_POLL_S = 0.5
# How long the side topic's metadata is waited for before its records are read anyway.
_SIDE_METADATA_TIMEOUT_S = 5.0

# Error codes of a read (or of a topic in metadata) that mean the topic is not there.
_TOPIC_MISSING_CODES = frozenset(
    {
        _RawKafkaError.UNKNOWN_TOPIC_OR_PART,
        _RawKafkaError._UNKNOWN_TOPIC,
        _RawKafkaError._UNKNOWN_PARTITION,
    }
)


def side_topic_missing(metadata: Any, topic: str, partition: int) -> bool:
    """Does ``metadata`` (a ``ClusterMetadata`` from ``list_topics(topic)``) say that
    ``topic``, or its ``partition``, does not exist? A cluster without auto-creation
    names an unknown topic with the error UNKNOWN_TOPIC_OR_PART, or leaves it out."""
    found = metadata.topics.get(topic)
    if found is None:
        return True
    if found.error is not None:
        return bool(found.error.code() in _TOPIC_MISSING_CODES)
    return partition not in found.partitions


def is_topic_missing_error(error: _RawKafkaError | None) -> bool:
    """Does a read's ``error`` mean that its topic (or partition) does not exist?"""
    return error is not None and error.code() in _TOPIC_MISSING_CODES


def side_topic_missing_warning(
    side_topic: str, bootstrap: str, partitions: Sequence[tuple[str, int]], dropped: int
) -> str:
    """The warning for ``partitions`` (topic, partition) whose spilled commit state is
    in ``side_topic``, which is missing: what they fall back to and what it costs
    (``dropped``: the settled records their truncated states do not carry)."""
    names = ", ".join(f"{topic}[{partition}]" for topic, partition in partitions)
    return (
        f"commit-log side topic {side_topic} is missing on {bootstrap} (deleted?): "
        f"{names} fall back to the truncated state in their commit metadata; "
        f"{counted(dropped, 'settled record')} it does not carry may be handed out again"
    )


class CommitStore:
    def __init__(self, consumer: Consumer, bootstrap: str, stream: str, group: str) -> None:
        self._consumer = consumer
        self._bootstrap = bootstrap
        self._stream = stream
        self._group = group
        self._budget: int | None = None
        self._budget_retry_at: float | None = None  # set while the budget is a fallback
        self._side_producer: Producer | None = None
        self._closed = False
        self._side_setup_started = False
        self._lock = threading.Lock()
        self.stats = {"commits": 0, "spills": 0, "max_metadata_bytes": 0}

    @property
    def side_topic(self) -> str:
        return commitlog_topic(self._stream)

    def prefetch_budget(self) -> None:
        """Read the budget in the background now, so the first commit need not wait for
        the brokers' configs (a concurrent read computes the same value)."""
        threading.Thread(target=self.metadata_budget, name="sp-commit-budget", daemon=True).start()

    def _set_up_side_topic(self) -> None:
        """Create the side topic and a producer connected to it, in the background after
        the first commit: a first spill then need not wait for a new topic's leader
        (measured ~0.57 s, during which no commit of the consumer lands), and a
        consumer's start (its first fetches) is left alone. A spill that comes sooner
        waits for it."""
        if not self._side_setup_started:
            self._side_setup_started = True
            threading.Thread(target=self._set_up_side, name="sp-commitlog", daemon=True).start()

    def _set_up_side(self) -> None:
        if self._closed:
            return
        try:
            self._producer()
        except (KafkaError, _RawKafkaException) as exc:
            if not self._closed:
                log.warning(
                    "side topic %s not set up (%s): a spill will retry", self.side_topic, exc
                )

    def close(self) -> None:
        """Let the side topic's producer go (every spill was flushed before its commit);
        a set-up still running in the background stops short of making one."""
        self._closed = True  # no lock: a set-up holding it may be waiting for a broker
        self._side_producer = None

    def metadata_budget(self) -> int:
        """Longest metadata the brokers accept, read once.

        That is the smallest ``offset.metadata.max.bytes`` minus one: measured against
        Kafka 4.4, a metadata string of exactly ``offset.metadata.max.bytes`` characters
        is refused (OFFSET_METADATA_TOO_LARGE), one character less is accepted. When the
        brokers do not answer (the cluster is down as the consumer starts), Kafka's
        default (4096) stands in and the read is tried again every 30 s, so a cluster
        configured lower is not sent metadata it refuses for good.
        """
        retry_at = self._budget_retry_at
        if self._budget is None or (retry_at is not None and time.monotonic() >= retry_at):
            admin = KafkaAdmin(self._bootstrap)
            try:
                ids = list(admin.metadata().brokers)
                values = [
                    int(admin.describe_broker_configs(i)["offset.metadata.max.bytes"]) for i in ids
                ]
                self._budget = (min(values) if values else DEFAULT_MAX_BYTES) - 1
                self._budget_retry_at = None
            except (KafkaError, KeyError, ValueError) as exc:
                if self._budget is None:
                    log.warning(
                        "could not read offset.metadata.max.bytes on %s (%s): assuming %d "
                        "until it can be read",
                        self._bootstrap, exc, DEFAULT_MAX_BYTES,
                    )  # fmt: skip
                    self._budget = DEFAULT_MAX_BYTES - 1
                self._budget_retry_at = time.monotonic() + _BUDGET_RETRY_S
        return self._budget

    # ------------------------------------------------------------------ commit
    def commit(self, items: Sequence[tuple[str, int, PartitionProgress]]) -> list[EncodedProgress]:
        budget = self.metadata_budget()
        offsets = []
        encoded_all = []
        for topic, partition, progress in items:
            enc = encode_complete(progress, budget) or self._spill(
                topic, partition, progress, budget
            )
            encoded_all.append(enc)
            self.stats["max_metadata_bytes"] = max(self.stats["max_metadata_bytes"], enc.size)
            offsets.append(
                TopicPartition(topic, partition, progress.low_watermark, metadata=enc.metadata)
            )
        if not offsets:
            return []
        try:
            self._consumer.commit(offsets=offsets, asynchronous=False)
        except _RawKafkaException as exc:
            raise to_kafka_error(exc, "commit") from exc
        self.stats["commits"] += 1
        self._set_up_side_topic()
        METRICS.committed(self._stream, self._bootstrap, encoded_all)  # metrics
        return encoded_all

    def _spill(
        self, topic: str, partition: int, progress: PartitionProgress, budget: int
    ) -> EncodedProgress:
        blob = encode_full(progress)
        producer = self._producer()
        key = f"{self._group}\x00{topic}\x00{partition}".encode()
        result: list[object] = []
        producer.produce(
            self.side_topic, blob, key, partition=0, on_delivery=lambda e, m: result.append((e, m))
        )
        producer.flush(30)
        if not result or result[0][0] is not None:  # type: ignore[index]
            err = result[0][0] if result else "timeout"  # type: ignore[index]
            log.warning(
                "spill of %s[%d] failed (%s): committing truncated state", topic, partition, err
            )
            return encode(progress, budget)
        msg = result[0][1]  # type: ignore[index]
        pointer = SpillPointer.for_blob(msg.partition(), msg.offset(), blob)
        self.stats["spills"] += 1
        return encode_spill_pointer(progress, pointer, budget)

    def _producer(self) -> Producer:
        """The side topic's producer, once the topic exists and the producer knows its
        leader (a new topic's leader takes a moment: measured ~0.5 s for the first
        write to a topic created just before)."""
        with self._lock:
            if self._closed:
                raise KafkaError(f"commit store of {self._stream!r} is closed")
            if self._side_producer is None:
                admin = KafkaAdmin(self._bootstrap)
                replicas = replication_factor(admin.live_broker_count())
                err = admin.create_topics(
                    [(self.side_topic, 1, replicas, side_topic_config(replicas))]
                )[self.side_topic]
                if err is not None and err.code != "TOPIC_ALREADY_EXISTS":
                    raise err
                producer = Producer(
                    producer_config(self._bootstrap, {"linger.ms": 0, "compression.type": "zstd"})
                )
                _await_leader(producer, self.side_topic)
                if self._closed:
                    raise KafkaError(f"commit store of {self._stream!r} is closed")
                self._side_producer = producer
            return self._side_producer

    # ------------------------------------------------------------------ load
    def load(self, tps: Sequence[tuple[str, int]], timeout_s: float = 30.0) -> Restored:
        """Committed (progress, offset) per partition; (None, None) when never committed.
        Raises KafkaError if the group coordinator has not answered in ``timeout_s``."""
        if not tps:
            return {}
        committed = self._committed([TopicPartition(t, p) for t, p in tps], timeout_s)
        out: Restored = {}
        # Partitions whose full state is in the side topic: (key, decoded metadata).
        spilled: list[tuple[tuple[str, int], DecodedCommit]] = []
        for tp in committed:
            offset = tp.offset if tp.offset >= 0 else None
            progress: PartitionProgress | None = None
            if offset is not None:
                try:
                    decoded = decode(tp.metadata)
                    progress = decoded.progress
                    if decoded.spill is not None and progress is not None:
                        spilled.append(((tp.topic, tp.partition), decoded))
                except CodecError as exc:
                    log.warning(
                        "commit metadata of %s[%d] unreadable (%s)", tp.topic, tp.partition, exc
                    )
                if progress is not None and progress.low_watermark != offset:
                    progress = None  # someone else committed a plain offset since
            out[(tp.topic, tp.partition)] = (progress, offset)
        if spilled:
            self._restore_spilled(spilled, out)
        return out

    def _restore_spilled(
        self, spilled: list[tuple[tuple[str, int], DecodedCommit]], out: Restored
    ) -> None:
        """Replace the truncated progress in ``out`` of the ``spilled`` partitions by
        their full state, read from the side topic; a partition whose side record cannot
        be read keeps its truncated state (safe: only redelivery). A side topic that is
        missing is told once, at once, for every such partition."""
        reader = Consumer(
            consumer_config(self._bootstrap, f"sp-spill-reader-{uuid.uuid4().hex[:8]}")
        )
        try:
            pointers = [decoded.spill for _, decoded in spilled if decoded.spill is not None]
            missing = self._side_topic_missing(reader, {pointer.partition for pointer in pointers})
            fallen_back: list[tuple[tuple[str, int], DecodedCommit]] = []
            for key, decoded in spilled:
                assert decoded.spill is not None
                full = None
                if not missing:
                    try:
                        full = self._read_spill(reader, decoded.spill)
                    except _SideTopicMissing:
                        missing = True
                progress, offset = out[key]
                if progress is None:  # the committed offset is not this metadata's
                    continue
                if full is not None:
                    out[key] = (full, offset)
                elif missing:
                    fallen_back.append((key, decoded))
            if fallen_back:
                log.warning(
                    side_topic_missing_warning(
                        self.side_topic,
                        self._bootstrap,
                        [key for key, _ in fallen_back],
                        sum(decoded.dropped_settled for _, decoded in fallen_back),
                    )
                )
        finally:
            reader.close()

    def _side_topic_missing(self, reader: Consumer, partitions: set[int]) -> bool:
        """Does the cluster say that the side topic (or one of its ``partitions``) does
        not exist? False when its metadata cannot be had: the read then tells."""
        try:
            metadata = reader.list_topics(self.side_topic, timeout=_SIDE_METADATA_TIMEOUT_S)
        except _RawKafkaException:
            return False
        return any(side_topic_missing(metadata, self.side_topic, p) for p in partitions)

    def _committed(
        self, tps: list[TopicPartition], timeout_s: float = 30.0
    ) -> list[TopicPartition]:
        """OffsetFetch, retried while the group coordinator is moving or loading."""
        deadline = time.monotonic() + timeout_s
        delay = 0.1
        while True:
            try:
                return list(self._consumer.committed(tps, timeout=min(10.0, timeout_s)))
            except _RawKafkaException as exc:
                err = to_kafka_error(exc, "read committed offsets")
                transient = err.retriable or err.code in _COORDINATOR_MOVING
                if not transient or time.monotonic() + delay > deadline:
                    raise err from exc
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _read_spill(self, reader: Consumer, pointer: SpillPointer) -> PartitionProgress | None:
        """The full state ``pointer`` names, read through ``reader``; None when it cannot
        be read (compacted away, not the blob the pointer was made for, the cluster too
        slow). Raises ``_SideTopicMissing`` when the read says the side topic does not
        exist."""
        try:
            reader.assign([TopicPartition(self.side_topic, pointer.partition, pointer.offset)])
            for _ in range(_SPILL_POLLS):
                msg = reader.poll(_SPILL_POLL_S)
                if msg is None:
                    continue
                if msg.error():
                    if is_topic_missing_error(msg.error()):
                        raise _SideTopicMissing(str(msg.error()))
                    continue
                blob = msg.value()
                if msg.offset() == pointer.offset and blob is not None and pointer.matches(blob):
                    return decode_full(blob)
                break
        except (CodecError, _RawKafkaException) as exc:
            log.warning("spilled commit state unreadable (%s): using the truncated state", exc)
        finally:
            reader.unassign()
        log.warning("spilled commit state not found at %s: using the truncated state", pointer)
        return None


class _SideTopicMissing(Exception):
    """A read of the side topic said that it does not exist."""


def _await_leader(producer: Producer, topic: str, timeout_s: float = 10.0) -> None:
    """Wait until ``producer``'s metadata names a leader for ``topic``'s partition 0 (or
    the timeout passes: a write then waits for the leader itself)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            meta = producer.list_topics(topic, timeout=max(0.1, deadline - time.monotonic()))
        except _RawKafkaException:
            time.sleep(0.05)
            continue
        found = meta.topics.get(topic)
        part = found.partitions.get(0) if found is not None and found.error is None else None
        if part is not None and part.error is None and part.leader >= 0:
            return
        time.sleep(0.05)
