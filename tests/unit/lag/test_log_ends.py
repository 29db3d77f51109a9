"""``LogEnds`` over a fake admin client that behaves like librdkafka's (2.16, measured
with one broker of three killed):

- a ListOffsets call is answered as a whole: when one of its partitions' leader is dead,
  every future of the call resolves at the request timeout, the dead leader's partitions
  with offset -1001 and no error;
- requests go to the leaders the client cached, and only a metadata request (here
  ``list_topics``) updates them: after an election the client keeps asking the dead
  broker; after a broker restart it fails with FENCED_LEADER_EPOCH.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streamplane.lag.reader import LogEnds

T = "orders"


class FakeAdmin:
    def __init__(self, leaders: dict[int, int], ends: dict[int, int]) -> None:
        self.leaders = dict(leaders)  # the cluster's view (the controller's)
        self.cached = dict(leaders)  # the client's, updated by list_topics
        self.ends = ends
        self.dead: set[int] = set()
        self.fenced: set[int] = set()  # partitions answered FENCED_LEADER_EPOCH until refresh
        self.unlisted: set[str] = set()  # topics the metadata does not list (deleted)
        self.calls: list[set[int]] = []
        self.metadata_requests = 0

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        self.metadata_requests += 1
        self.cached = dict(self.leaders)
        self.fenced.clear()
        parts = {p: SimpleNamespace(leader=leader) for p, leader in self.leaders.items()}
        return SimpleNamespace(topics={T: SimpleNamespace(error=None, partitions=parts)})

    def list_offsets(
        self, request: dict[TopicPartition, Any], request_timeout: float
    ) -> dict[TopicPartition, Future[Any]]:
        self.calls.append({tp.partition for tp in request})
        futures: dict[TopicPartition, Future[Any]] = {tp: Future() for tp in request}

        def resolve() -> None:
            for tp, fut in futures.items():
                if tp.topic in self.unlisted:
                    err = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
                    fut.set_exception(KafkaException(err))
                elif tp.partition in self.fenced:
                    fut.set_exception(KafkaException(KafkaError(KafkaError.FENCED_LEADER_EPOCH)))
                elif self.cached[tp.partition] in self.dead:
                    fut.set_result(SimpleNamespace(offset=-1001))
                else:
                    fut.set_result(SimpleNamespace(offset=self.ends[tp.partition]))

        if any(
            tp.topic not in self.unlisted and self.cached[tp.partition] in self.dead
            for tp in request
        ):
            threading.Timer(request_timeout, resolve).start()  # answered as a whole, late
        else:
            resolve()
        return futures


def _log_ends(admin: FakeAdmin) -> LogEnds:
    ends = LogEnds("127.0.0.1:1")
    ends._admin = admin  # type: ignore[assignment]
    return ends


def test_one_dead_leader_does_not_hold_the_other_brokers_answers() -> None:
    admin = FakeAdmin({0: 1, 1: 2, 2: 3, 3: 2}, {p: 100 + p for p in range(4)})
    ends = _log_ends(admin)
    assert ends.fetch([(T, p) for p in range(4)], timeout=0.3) == {
        (T, p): 100 + p for p in range(4)
    }
    admin.dead = {2}
    started = time.monotonic()
    got = ends.fetch([(T, p) for p in range(4)], timeout=0.3)
    took = time.monotonic() - started
    # Not -1001 for the dead broker's partitions, and the others are answered.
    assert got == {(T, 0): 100, (T, 2): 102}
    assert ends.failures == {
        (T, 1): "no answer from broker 2 within 0.3s",
        (T, 3): "no answer from broker 2 within 0.3s",
    }
    assert took < 0.3 + 0.5 + 0.3  # its request timeout (and a bit), not one per kind
    assert sorted(map(sorted, admin.calls[-3:])) == [[0], [1, 3], [2]]  # one per leader


def test_after_an_election_the_new_leader_is_asked_in_the_same_pass() -> None:
    admin = FakeAdmin({0: 1, 1: 2}, {0: 100, 1: 101})
    ends = _log_ends(admin)
    assert ends.fetch([(T, 0), (T, 1)], timeout=0.3) == {(T, 0): 100, (T, 1): 101}
    admin.dead = {2}
    admin.leaders[1] = 3  # elected; the client still has broker 2 cached
    assert ends.fetch([(T, 0), (T, 1)], timeout=0.3) == {(T, 0): 100, (T, 1): 101}
    assert ends.failures == {}
    assert admin.calls[-1] == {1}  # asked again, of broker 3


def test_a_dead_leader_not_replaced_yet_is_not_asked_twice_in_a_pass() -> None:
    admin = FakeAdmin({0: 1, 1: 2}, {0: 100, 1: 101})
    ends = _log_ends(admin)
    ends.fetch([(T, 0), (T, 1)], timeout=0.3)
    admin.dead = {2}
    calls = len(admin.calls)
    ends_and_starts = ends.fetch_pass([(T, 0), (T, 1)], [(T, 1)], timeout=0.3)
    assert ends_and_starts == ({(T, 0): 100}, {})
    # Ends and starts at once, one call per (kind, leader): no retry of broker 2.
    assert sorted(map(sorted, admin.calls[calls:])) == [[0], [1], [1]]


def test_a_fenced_leader_epoch_is_answered_after_a_refresh_in_the_same_pass() -> None:
    """After a broker restart librdkafka kept its cached leader epoch and failed with
    FENCED_LEADER_EPOCH until a metadata request: now that request comes in the pass,
    and the partition is asked again at once."""
    admin = FakeAdmin({0: 1}, {0: 100})
    ends = _log_ends(admin)
    ends.fetch([(T, 0)], timeout=0.3)
    admin.fenced = {0}
    assert ends.fetch([(T, 0)], timeout=0.3) == {(T, 0): 100}


def test_a_deleted_topic_does_not_cost_a_metadata_request_at_every_poll() -> None:
    admin = FakeAdmin({0: 1}, {0: 100})
    admin.unlisted = {"gone"}
    ends = _log_ends(admin)
    for _ in range(5):
        assert ends.fetch([(T, 0), ("gone", 0)], timeout=0.3) == {(T, 0): 100}
    assert ends.failures == {("gone", 0): "UNKNOWN_TOPIC_OR_PART"}
    assert admin.metadata_requests == 1  # the first poll's; then every 10 s at most
