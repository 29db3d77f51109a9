"""`dlq replay`'s group: one per stream, and the progress of the group every stream's
replays shared before taken over (over fake Kafka clients; the real fleet's tests:
tests/integration/client/test_dlq_replay.py).

An exploratory run (/tmp/explore-client/t08_two_replays.py) replayed two streams at
the same time: one failed with "group 'sp-dlq-replay' consumes stream 'rpb' lanes
['dlq'] (members still live); a member asked for 'rpa'" (a group reads one stream at a
time, and every stream's replay was the group sp-dlq-replay)."""

from __future__ import annotations

import threading
import time
from typing import Any, ClassVar

import pytest
from confluent_kafka import KafkaError as RawKafkaError
from confluent_kafka import KafkaException, TopicPartition

import streamplane.client.dlq as dlq
from streamplane.client.partition_state import PartitionKey
from streamplane.core.routing import Segment, SegmentState
from streamplane.exceptions import KafkaError
from tests.unit.client.test_dlq_replay import (
    DLQ_TOPIC,
    DlqPartition,
    FakeAdmin,
    FakeClient,
    FakeConsumer,
    FakeProducer,
    dlq_segment,
)

SHARED = "sp-dlq-replay"  # the group every stream's replays shared before
NONE = -1001  # librdkafka's offset for "nothing committed"


class FakeKafkaConsumer:
    """confluent-kafka's Consumer, for committed offsets only: ``commits[(bootstrap,
    group)][(topic, partition)]`` is (offset, metadata). A ``down`` cluster raises; a
    ``hanging`` one does not answer until ``release`` is set."""

    commits: ClassVar[dict[tuple[str, str], dict[tuple[str, int], tuple[int, str | None]]]] = {}
    down: ClassVar[set[str]] = set()
    hanging: ClassVar[set[str]] = set()
    release: ClassVar[threading.Event] = threading.Event()
    calls: ClassVar[list[tuple[str, str, str]]] = []  # (bootstrap, group, what)

    def __init__(self, config: dict[str, Any]) -> None:
        self.bootstrap = config["bootstrap.servers"]
        self.group = config["group.id"]
        self.closed = False

    def _check(self, what: str) -> None:
        assert not self.closed
        self.calls.append((self.bootstrap, self.group, what))
        if self.bootstrap in self.hanging:
            assert self.release.wait(30)
        if self.bootstrap in self.down:
            raise KafkaException(RawKafkaError(RawKafkaError._TRANSPORT))

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        self._check("committed")
        mine = self.commits.get((self.bootstrap, self.group), {})
        out = []
        for tp in tps:
            offset, metadata = mine.get((tp.topic, tp.partition), (NONE, None))
            out.append(
                TopicPartition(tp.topic, tp.partition, offset)
                if metadata is None  # (as librdkafka: None, and TopicPartition refuses it)
                else TopicPartition(tp.topic, tp.partition, offset, metadata=metadata)
            )
        return out

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> list[TopicPartition]:
        assert not asynchronous
        self._check("commit")
        mine = self.commits.setdefault((self.bootstrap, self.group), {})
        for tp in offsets:
            mine[(tp.topic, tp.partition)] = (tp.offset, tp.metadata)
        return offsets

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def kafka(monkeypatch: pytest.MonkeyPatch) -> type[FakeKafkaConsumer]:
    FakeKafkaConsumer.commits = {}
    FakeKafkaConsumer.down = set()
    FakeKafkaConsumer.hanging = set()
    FakeKafkaConsumer.release = threading.Event()
    FakeKafkaConsumer.calls = []
    monkeypatch.setattr(dlq, "Consumer", FakeKafkaConsumer, raising=False)
    return FakeKafkaConsumer


def segment(cluster: str, epoch: int, partitions: int = 2) -> Segment:
    return Segment("dlq", cluster, f"sp.s.dlq.e{epoch}", partitions, SegmentState.ACTIVE, epoch)


def test_each_stream_has_a_replay_group_of_its_own() -> None:
    from streamplane.core.routing import dlq_replay_group

    assert dlq_replay_group("rpa") == "sp-dlq-replay.rpa"
    assert dlq_replay_group("rpb") == "sp-dlq-replay.rpb"
    longest = dlq_replay_group("a" * 63)
    assert len(longest) <= 200  # what a StreamConsumer's group may be


def test_replay_reads_as_the_streams_group_after_taking_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The consumer is the stream's group, opened once the earlier progress is taken
    over (it reads where to start when it opens)."""
    log = DlqPartition(3)
    FakeAdmin.down, FakeAdmin.slow, FakeAdmin.logs = set(), set(), {"a": log}
    monkeypatch.setattr(dlq, "KafkaAdmin", FakeAdmin)
    events: list[object] = []

    def consumer(stream: str, group: str, *a: Any, **k: Any) -> FakeConsumer:
        events.append(("consumer", stream, group))
        return FakeConsumer(log)

    def take_over(client: Any, stream: str, segments: list[Segment], timeout: float) -> Any:
        events.append(("take over", stream, [s.topic for s in segments]))
        return frozenset()

    monkeypatch.setattr(dlq, "StreamConsumer", consumer)
    monkeypatch.setattr(dlq, "StreamProducer", lambda *a, **k: FakeProducer(log))
    monkeypatch.setattr(dlq, "take_over_legacy_progress", take_over, raising=False)
    client: Any = FakeClient([dlq_segment()])
    assert dlq.replay_dead_letters(client, "s", idle_s=0.3).replayed == 3
    assert events == [("take over", "s", [DLQ_TOPIC]), ("consumer", "s", "sp-dlq-replay.s")]


def test_the_shared_groups_progress_is_taken_over_where_the_group_has_none(
    kafka: type[FakeKafkaConsumer],
) -> None:
    """Offset and commit-log state copied as they are, partition by partition: only
    where the stream's group has committed nothing (its own progress is newer)."""
    kafka.commits = {
        ("a", SHARED): {("sp.s.dlq.e1", 0): (700, "state-0"), ("sp.s.dlq.e1", 1): (5, "s1")},
        ("a", "sp-dlq-replay.s"): {("sp.s.dlq.e1", 1): (9, "mine")},
        ("b", SHARED): {("sp.s.dlq.e2", 1): (42, None), ("sp.other.dlq.e1", 0): (3, None)},
    }
    client: Any = FakeClient([])
    unknown = dlq.take_over_legacy_progress(
        client, "s", [segment("a", 1), segment("b", 2)], timeout=5
    )
    assert unknown == frozenset()
    assert kafka.commits[("a", "sp-dlq-replay.s")] == {
        ("sp.s.dlq.e1", 0): (700, "state-0"),
        ("sp.s.dlq.e1", 1): (9, "mine"),
    }
    assert kafka.commits[("b", "sp-dlq-replay.s")] == {("sp.s.dlq.e2", 1): (42, None)}
    assert kafka.commits[("a", SHARED)][("sp.s.dlq.e1", 0)] == (700, "state-0")  # read only

    # Once taken over, the shared group is not asked again.
    kafka.calls.clear()
    assert dlq.take_over_legacy_progress(client, "s", [segment("a", 1)], timeout=5) == set()
    assert kafka.calls == [("a", "sp-dlq-replay.s", "committed")]


def test_nothing_is_committed_without_progress_to_take_over(
    kafka: type[FakeKafkaConsumer],
) -> None:
    client: Any = FakeClient([])
    assert dlq.take_over_legacy_progress(client, "s", [segment("a", 1)], timeout=5) == set()
    assert [what for _, _, what in kafka.calls] == ["committed", "committed"]
    assert ("a", "sp-dlq-replay.s") not in kafka.commits


def test_partitions_of_a_cluster_that_does_not_answer_are_unknown(
    kafka: type[FakeKafkaConsumer],
) -> None:
    """Whether they have progress to take over is not known: returned (a replay then
    leaves them alone) after the timeout at most; the other clusters' are taken over."""
    kafka.commits = {("c", SHARED): {("sp.s.dlq.e3", 0): (7, None)}}
    kafka.down.add("a")
    kafka.hanging.add("b")
    client: Any = FakeClient([])
    started = time.monotonic()
    unknown = dlq.take_over_legacy_progress(
        client, "s", [segment("a", 1), segment("b", 2, 1), segment("c", 3, 1)], timeout=0.5
    )
    assert time.monotonic() - started < 2
    assert unknown == {
        PartitionKey("a", "sp.s.dlq.e1", 0),
        PartitionKey("a", "sp.s.dlq.e1", 1),
        PartitionKey("b", "sp.s.dlq.e2", 0),
    }
    assert kafka.commits[("c", "sp-dlq-replay.s")] == {("sp.s.dlq.e3", 0): (7, None)}
    kafka.release.set()
    for thread in threading.enumerate():
        if thread.name.startswith("sp-dlq-takeover-"):
            thread.join(5)


def test_a_partition_not_taken_over_is_not_replayed_but_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where it should start is not known (the shared group may have replayed part of
    it): its letters are left alone, and the run fails naming it (replay again)."""
    log = DlqPartition(20)
    FakeAdmin.down, FakeAdmin.slow, FakeAdmin.logs = set(), set(), {"a": log}
    monkeypatch.setattr(dlq, "KafkaAdmin", FakeAdmin)
    producer = FakeProducer(log)
    monkeypatch.setattr(dlq, "StreamConsumer", lambda *a, **k: FakeConsumer(log))
    monkeypatch.setattr(dlq, "StreamProducer", lambda *a, **k: producer)
    monkeypatch.setattr(
        dlq, "take_over_legacy_progress", lambda *a: frozenset({log.key}), raising=False
    )
    client: Any = FakeClient([dlq_segment()])
    with pytest.raises(
        KafkaError,
        match=rf"replayed 0 records, but 1 of the dlq partitions on a could not be read: "
        rf"{DLQ_TOPIC}\[0\]",
    ):
        dlq.replay_dead_letters(client, "s", idle_s=0.3)
    assert producer.delivered == []
    assert log.acked == set()
