"""Commits on a thread of their own: the consuming thread never waits for one unless
asked to, newer snapshots replace older ones, failures are committed again."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from streamplane.client.committer import Committer
from streamplane.client.consumer import StreamConsumer
from streamplane.client.partition_state import PartitionKey
from streamplane.core.commitlog import PartitionProgress
from streamplane.exceptions import KafkaError
from tests.unit.client.harness import KEY, Clock, DlqBroker, consumer_of, poll

Items = Sequence[tuple[str, int, PartitionProgress]]


class Store:
    """A cluster's commits: records each call's (topic, partition, low watermark);
    ``hold`` makes the next call wait until ``release``; ``fail`` makes calls raise."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[str, int, int]]] = []
        self.entered = threading.Event()
        self.released = threading.Event()
        self.released.set()
        self.fail: BaseException | None = None

    def hold(self) -> None:
        self.entered.clear()
        self.released.clear()

    def commit(self, items: Items) -> None:
        self.entered.set()
        self.released.wait(10)
        if self.fail is not None:
            raise self.fail
        self.calls.append([(t, p, progress.low_watermark) for t, p, progress in items])


def progress(low_watermark: int) -> PartitionProgress:
    return PartitionProgress(low_watermark=low_watermark, commit_time_ms=0)


def all_acked(records: int, clock: Clock) -> tuple[StreamConsumer, Store]:
    """A stand-in consumer that has acked ``records`` records and commits to a Store."""
    c, _ = consumer_of(records, DlqBroker())
    store = Store()
    c._commit_stores["local-a"] = store  # type: ignore[assignment]
    for m in poll(c, clock, 0):
        m.ack()
    return c, store


def test_housekeeping_does_not_wait_for_its_commit(clock: Clock) -> None:
    c, store = all_acked(3, clock)
    store.hold()
    clock.now += c.commit_interval_s
    c.poll_batch(100, 0)  # housekeeping: the commit is due
    assert store.entered.wait(10)  # running on the committer's thread ...
    assert store.calls == []  # ... and still held: poll_batch returned before it ended
    store.released.set()
    c.commit()  # waits for everything submitted so far
    assert store.calls == [[(KEY.topic, KEY.partition, 3)]]


def test_a_newer_snapshot_replaces_one_not_committed_yet() -> None:
    store = Store()
    committer = Committer({"local-a": store}, "test-commit")
    other = PartitionKey("local-a", KEY.topic, 1)
    store.hold()
    committer.submit([(KEY, progress(1))], wait=False)
    assert store.entered.wait(10)
    committer.submit([(KEY, progress(2)), (other, progress(7))], wait=False)
    committer.submit([(KEY, progress(3))], wait=False)
    store.released.set()
    committer.submit([], wait=True)
    assert store.calls == [
        [(KEY.topic, 0, 1)],
        [(KEY.topic, 0, 3), (KEY.topic, 1, 7)],  # 2 was replaced before it was committed
    ]
    committer.stop()


def test_stop_commits_what_was_submitted_first() -> None:
    store = Store()
    committer = Committer({"local-a": store}, "test-commit")
    store.hold()
    committer.submit([(KEY, progress(5))], wait=False)
    assert store.entered.wait(10)
    committer.submit([(KEY, progress(6))], wait=False)
    store.released.set()
    committer.stop()
    assert store.calls == [[(KEY.topic, 0, 5)], [(KEY.topic, 0, 6)]]


def test_a_failed_commit_is_reported_and_the_thread_keeps_committing() -> None:
    store = Store()
    committer = Committer({"local-a": store}, "test-commit")
    store.fail = RuntimeError("a bug in a commit")
    committer.submit([(KEY, progress(1))], wait=True)
    assert committer.take_failed() == [KEY]
    assert committer.take_failed() == []
    store.fail = None
    committer.submit([(KEY, progress(2))], wait=True)
    assert store.calls == [[(KEY.topic, 0, 2)]]
    committer.stop()


def test_the_partitions_of_a_failed_commit_are_committed_again(clock: Clock) -> None:
    c, store = all_acked(2, clock)
    store.fail = KafkaError("coordinator moved")
    c.commit()
    store.fail = None
    c.commit()  # nothing acked since: only the failure makes the partition dirty
    assert store.calls == [[(KEY.topic, KEY.partition, 2)]]


def test_a_commit_that_does_not_return_holds_up_no_other_cluster() -> None:
    """librdkafka holds a synchronous commit until a coordinator answers: a dead
    cluster's commit must not stop the others', nor ``submit(wait=True)``."""
    dead, alive = Store(), Store()
    dead.hold()
    committer = Committer({"local-a": dead, "local-b": alive}, "test-commit", cluster_wait_s=0.2)
    on_a, on_b = KEY, PartitionKey("local-b", KEY.topic, 0)
    committer.submit([(on_a, progress(1)), (on_b, progress(1))], wait=True)
    assert dead.entered.is_set() and alive.calls == [[(KEY.topic, 0, 1)]]
    assert committer.take_failed() == [on_a]
    assert set(committer.busy()) == {"local-a"}
    # While it is stuck, its cluster is skipped at once and the other goes on.
    committer.submit([(on_a, progress(2)), (on_b, progress(2))], wait=True)
    assert alive.calls[-1] == [(KEY.topic, 0, 2)]
    assert committer.take_failed() == [on_a]
    dead.released.set()  # the coordinator answers: the stuck commit returns
    committer.busy()["local-a"].join(5)
    assert committer.busy() == {}
    committer.submit([(on_a, progress(3))], wait=True)
    assert dead.calls[-1] == [(KEY.topic, 0, 3)]
    assert committer.take_failed() == []
    committer.stop()


def test_a_commit_goes_out_only_for_the_partitions_committable_when_it_is_sent() -> None:
    """Submitted before the member was stopped, sent after it resumed: a partition its
    lease lost meanwhile is not committed (its new holder's progress stays)."""
    store = Store()
    ours = PartitionKey("local-a", "t", 0)
    lost = PartitionKey("local-a", "t", 1)
    committable: frozenset[PartitionKey] = frozenset({ours, lost})
    committer = Committer({"local-a": store}, "test", committable=lambda: committable)
    store.hold()
    committer.submit([(ours, progress(5))], wait=False)
    assert store.entered.wait(5)
    committer.submit([(ours, progress(7)), (lost, progress(9))], wait=False)
    committable = frozenset({ours})  # the lease came back without partition 1
    store.released.set()
    committer.submit([], wait=True)
    assert store.calls == [[("t", 0, 5)], [("t", 0, 7)]]
    assert committer.take_failed() == [lost]

    committable = frozenset()  # the lease ran out: nothing goes out
    committer.submit([(ours, progress(8))], wait=True)
    assert len(store.calls) == 2 and committer.take_failed() == [ours]
    committer.stop()
