"""``dlq.replay_dead_letters`` over a fake consumer, producer and cluster: where a run
stops, when it commits, and how it names what it could not read (the real fleet's
tests: tests/integration/client/test_dlq_replay.py)."""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any, ClassVar

import pytest

import streamplane.client.dlq as dlq
from streamplane.client.dlq import describe_unread, replay_dead_letters
from streamplane.client.partition_state import PartitionKey
from streamplane.core.routing import DLQ_LANE, RoutingTable, Segment, SegmentState
from streamplane.exceptions import KafkaError

STREAM = "s"
DLQ_TOPIC = "sp.s.dlq.e1"


class Letter:
    """A dead letter as the consumer hands it out."""

    def __init__(self, log: DlqPartition, offset: int, value: bytes) -> None:
        self._log = log
        self.cluster, self.topic, self.partition = log.key.cluster, log.key.topic, 0
        self.offset = offset
        self.value = value
        self.key = None
        self.headers = [("sp-dlq-lane", b"realtime")]

    def ack(self) -> None:
        self._log.acked.add(self.offset)


class DlqPartition:
    """One dlq partition, with what the replay group acked and committed. With
    ``echo``, every copy replay delivers is dead-lettered again at once (a group
    rejecting everything)."""

    def __init__(self, n: int, cluster: str = "a", echo: bool = False) -> None:
        self.key = PartitionKey(cluster, DLQ_TOPIC, 0)
        self.values = [b"%d" % i for i in range(n)]
        self.echo = echo
        self.acked: set[int] = set()
        self.committed: list[int] = []

    def low_watermark(self) -> int:
        low = 0
        while low in self.acked:
            low += 1
        return low


class FakeConsumer:
    def __init__(self, log: DlqPartition) -> None:
        self.log = log
        self.position = 0

    def __enter__(self) -> FakeConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def poll_batch(self, max_records: int, timeout: float) -> list[Letter]:
        values = self.log.values
        if self.position > 20 * 1000:
            raise AssertionError(f"replay still reading at offset {self.position}")
        if self.position >= len(values):
            time.sleep(min(timeout, 0.01))
            return []
        out = [
            Letter(self.log, i, values[i])
            for i in range(self.position, min(len(values), self.position + max_records))
        ]
        self.position += len(out)
        return out

    def poll(self, timeout: float) -> Letter | None:
        got = self.poll_batch(1, timeout)
        return got[0] if got else None

    def commit(self) -> None:
        self.log.committed.append(self.log.low_watermark())

    def partition_states(self) -> list[dict[str, Any]]:
        k = self.log.key
        return [
            {
                "cluster": k.cluster,
                "topic": k.topic,
                "partition": k.partition,
                "low_watermark": self.log.low_watermark(),
                "next_fetch": self.position,
                "in_flight": self.position - len(self.log.acked),
            }
        ]

    def unfinished_partitions(self) -> list[PartitionKey]:
        return [self.log.key] if self.position < len(self.log.values) else []


class Routing:
    lanes = ("realtime",)


class FakeProducer:
    routing = Routing()

    def __init__(self, log: DlqPartition) -> None:
        self.log = log
        self.queued: list[bytes | None] = []
        self.delivered: list[bytes | None] = []

    def __enter__(self) -> FakeProducer:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        pass

    def send(self, value: bytes | None, key: Any, headers: Any, lane: str) -> None:
        assert lane == "realtime"
        self.queued.append(value)

    def flush(self) -> None:
        self.delivered += self.queued
        if self.log.echo:
            self.log.values += [v or b"" for v in self.queued]
        self.queued = []

    def drain(self, timeout: float) -> int:
        self.flush()
        return 0

    def raise_failures(self) -> None:
        pass

    def active_topic(self, lane: str | None = None) -> str:
        return "sp.s.realtime.e1"


class FakeAdmin:
    """End offsets as the fake cluster tells them; ``down`` clusters raise, ``slow``
    ones answer too late."""

    down: ClassVar[set[str]] = set()
    slow: ClassVar[set[str]] = set()
    logs: ClassVar[dict[str, DlqPartition]] = {}
    answer: ClassVar[threading.Event] = threading.Event()

    def __init__(self, bootstrap: str) -> None:
        self.cluster = bootstrap

    def end_offsets(self, topic: str, timeout: float) -> dict[int, int]:
        if self.cluster in self.slow:
            assert self.answer.wait(30)  # (set once the caller gave up)
            raise KafkaError("too late")
        if self.cluster in self.down:
            raise KafkaError(f"{self.cluster} does not answer")
        return {0: len(self.logs[self.cluster].values)}


class FakeClient:
    def __init__(self, segments: list[Segment]) -> None:
        self.segments = segments

    def routing(self, stream: str) -> RoutingTable:
        return RoutingTable(stream, 1, ("realtime",), tuple(self.segments))

    def cluster_bootstrap(self, name: str) -> str:
        return name


def dlq_segment(cluster: str = "a", topic: str = DLQ_TOPIC, **kw: Any) -> Segment:
    return Segment(DLQ_LANE, cluster, topic, 1, kw.pop("state", SegmentState.ACTIVE), 1, **kw)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``fake(log)``: replay reads ``log`` (on cluster "a") and writes to a producer."""
    FakeAdmin.down, FakeAdmin.slow, FakeAdmin.logs = set(), set(), {}
    FakeAdmin.answer = threading.Event()
    monkeypatch.setattr(dlq, "KafkaAdmin", FakeAdmin, raising=False)  # (not before the fix)
    # No progress of the replay group shared before to take over (its own tests:
    # test_dlq_replay_group.py).
    monkeypatch.setattr(
        dlq, "take_over_legacy_progress", lambda *a, **k: frozenset(), raising=False
    )

    def make(log: DlqPartition) -> tuple[FakeClient, FakeProducer]:
        FakeAdmin.logs[log.key.cluster] = log
        producer = FakeProducer(log)
        monkeypatch.setattr(dlq, "StreamConsumer", lambda *a, **k: FakeConsumer(log))
        monkeypatch.setattr(dlq, "StreamProducer", lambda *a, **k: producer)
        return FakeClient([dlq_segment(log.key.cluster)]), producer

    return make


def test_a_run_replays_the_letters_present_at_its_start(fake: Any) -> None:
    """Every copy comes straight back to the dlq lane: the run replays the 1,000
    letters it started with, once each, leaves the 1,000 copies (unacked: the group's
    committed offset stays at the first of them) and says so. (Before, it never ended.)"""
    log = DlqPartition(1000, echo=True)
    client, producer = fake(log)
    assert replay_dead_letters(client, STREAM, idle_s=0.5).replayed == 1000
    assert producer.delivered == [b"%d" % i for i in range(1000)]
    assert log.committed[-1] == 1000
    assert max(log.acked) == 999
    client, _ = fake(DlqPartition(1000, echo=True))  # the same, telling the newer ones
    assert dlq.replay_dead_letters(client, STREAM, idle_s=0.5) == dlq.ReplayResult(1000, 1000)


def test_each_batch_is_committed_once_its_copies_are_delivered(fake: Any) -> None:
    """(Before, nothing was committed until the consumer's next commit interval.)"""
    log = DlqPartition(1200)
    client, _ = fake(log)
    progress: list[tuple[int, int]] = []

    def told(k: int) -> None:
        progress.append((k, log.committed[-1] if log.committed else -1))

    assert replay_dead_letters(client, STREAM, idle_s=0.5, progress=told).replayed == 1200
    assert progress == [(500, 500), (1000, 1000), (1200, 1200)]


def test_a_cluster_that_does_not_tell_its_ends_is_not_replayed_but_named(fake: Any) -> None:
    """Its letters are not replayed (where the run would stop is not known): left for
    the next run, which the run asks for, failing with the partition's name."""
    log = DlqPartition(20)
    client, producer = fake(log)
    FakeAdmin.down.add("a")
    with pytest.raises(
        KafkaError,
        match=rf"replayed 0 records, but 1 of the dlq partitions on a could not be read: "
        rf"{DLQ_TOPIC}\[0\]",
    ):
        replay_dead_letters(client, STREAM, idle_s=0.3)
    assert producer.delivered == []
    assert log.acked == set()


def test_ends_of_sealed_segments_come_from_the_routing(fake: Any) -> None:
    """A sealed segment's ends are in the routing (its cluster is not asked); a cluster
    that answers late has its partitions unknown after the timeout, the others known."""
    fake(DlqPartition(7, cluster="b"))
    FakeAdmin.slow.add("c")
    segments = [
        dlq_segment("a", "sp.s.dlq.e1", state=SegmentState.SEALED, sealed_end_offsets={0: 5}),
        dlq_segment("b", "sp.s.dlq.e2", state=SegmentState.DRAINING),
        dlq_segment("c", "sp.s.dlq.e3"),
    ]
    started = time.monotonic()
    client: Any = FakeClient(segments)
    ends = dlq._EndsRead(client, segments, timeout=0.5).result()
    assert time.monotonic() - started < 2
    assert ends.ends == {
        PartitionKey("a", "sp.s.dlq.e1", 0): 5,
        PartitionKey("b", "sp.s.dlq.e2", 0): 7,
    }
    assert ends.unknown == {PartitionKey("c", "sp.s.dlq.e3", 0)}
    FakeAdmin.answer.set()
    for thread in threading.enumerate():
        if thread.name.startswith("sp-dlq-ends-"):
            thread.join(5)


def test_unread_partitions_are_named() -> None:
    one = [PartitionKey("local-a", "sp.s.dlq.e1", 0)]
    assert describe_unread(one) == (
        "1 of the dlq partitions on local-a could not be read: sp.s.dlq.e1[0]"
    )
    two = [PartitionKey("local-b", "sp.s.dlq.e2", 1), PartitionKey("local-a", "sp.s.dlq.e1", 0)]
    assert describe_unread(two) == (
        "2 of the dlq partitions on local-a and local-b could not be read: "
        "sp.s.dlq.e1[0] and sp.s.dlq.e2[1]"
    )
    many = [PartitionKey("local-a", "sp.s.dlq.e1", p) for p in range(8)]
    assert describe_unread(many) == (
        "8 of the dlq partitions on local-a could not be read: sp.s.dlq.e1[0], "
        "sp.s.dlq.e1[1], sp.s.dlq.e1[2], sp.s.dlq.e1[3], sp.s.dlq.e1[4] and 3 others"
    )
    assert describe_unread(many[:6]).endswith("sp.s.dlq.e1[4] and 1 other")
