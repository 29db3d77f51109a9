"""A spilled commit whose side topic is missing falls back to its truncated state at
once, and says so (an exploratory run: after `sp.<stream>.__commitlog` was deleted, the
first record came 10.3 s after a restart instead of 1.1 s, and the consumer logged that
the healthy cluster "has not said in 2 s where to start 2 partitions"). Without Kafka:
the store's clients are stand-ins."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streamplane.client import commit_store
from streamplane.client.commit_store import CommitStore
from streamplane.core.commitlog import (
    PartitionProgress,
    SpillPointer,
    encode_full,
    encode_spill_pointer,
)
from streamplane.core.rangeset import RangeSet

TOPIC = "sp.orders.default.e1"
BUDGET = 200


def spilled_commit(partition: int) -> tuple[TopicPartition, int]:
    """A committed offset whose metadata points at a spilled state (1,000 scattered
    offsets settled above the stuck low watermark 10), and how many settled offsets its
    truncated state does not carry."""
    scattered = random.Random(partition).sample(range(11, 5011), 1000)
    settled = RangeSet.from_offsets(sorted(scattered))
    progress = PartitionProgress.from_settled(10, settled, commit_time_ms=1_700_000_000_000)
    pointer = SpillPointer.for_blob(0, 5, encode_full(progress))
    encoded = encode_spill_pointer(progress, pointer, BUDGET)
    assert encoded.truncated and encoded.dropped_settled > 0
    return TopicPartition(TOPIC, partition, 10, metadata=encoded.metadata), encoded.dropped_settled


class SideTopicGone:
    """The store's consumer and its spill reader on a cluster without the side topic:
    metadata names it with UNKNOWN_TOPIC_OR_PART (as Kafka does: measured), a read of it
    returns nothing (librdkafka's poll, also measured) or, with ``read_error``, that
    error. Counts the seconds polls were asked to wait."""

    committed_offsets: ClassVar[list[TopicPartition]] = []
    read_error = False
    waited = 0.0

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        pass

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return self.committed_offsets

    def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
        gone = SimpleNamespace(error=KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART), partitions={})
        return SimpleNamespace(topics={topic: gone})

    def assign(self, tps: list[TopicPartition]) -> None: ...

    def unassign(self) -> None: ...

    def poll(self, timeout: float) -> Any:
        type(self).waited += timeout
        if self.read_error:
            error = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
            return SimpleNamespace(error=lambda: error)
        return None

    def close(self) -> None: ...


class MetadataSilent(SideTopicGone):
    """Its metadata cannot be had: only the read's error tells the topic is missing."""

    read_error = True

    def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT))


@pytest.mark.parametrize("reader", [SideTopicGone, MetadataSilent], ids=["metadata", "read"])
def test_a_missing_side_topic_falls_back_at_once_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, reader: type[SideTopicGone]
) -> None:
    commits = [spilled_commit(p) for p in (0, 1)]
    reader.committed_offsets = [tp for tp, _ in commits]
    reader.waited = 0.0
    monkeypatch.setattr(commit_store, "Consumer", reader)
    store = CommitStore(reader(), "127.0.0.1:18620", "orders", "g")  # type: ignore[arg-type]

    restored = store.load([(TOPIC, 0), (TOPIC, 1)])

    print(f"reads waited {reader.waited:.1f} s for the missing side topic")
    assert reader.waited <= 0.5  # before: 10 s a partition (20 polls of 0.5 s)
    for p in (0, 1):
        progress, offset = restored[(TOPIC, p)]
        assert offset == 10 and progress is not None and progress.low_watermark == 10
    dropped = sum(n for _, n in commits)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        "commit-log side topic sp.orders.__commitlog is missing on 127.0.0.1:18620 "
        f"(deleted?): {TOPIC}[0], {TOPIC}[1] fall back to the truncated state in their "
        f"commit metadata; {dropped} settled records it does not carry may be handed out "
        "again"
    ]
