"""Topic creation on a cluster with a broker that is not live: the broker is found from
the metadata (it holds replicas, and is not listed live), and the topic is made with an
explicit assignment over the live brokers; with every broker live, Kafka places it."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from confluent_kafka import KafkaError as ConfluentKafkaError
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from streamplane.kafka.admin import QUIET, BrokerMeta, ClusterMeta, KafkaAdmin, TopicMeta


def _meta(live: list[int], replicas: dict[int, list[int]]) -> ClusterMeta:
    return ClusterMeta(
        "id",
        live[0],
        {b: BrokerMeta(b, "127.0.0.1", 9000 + b, "abc"[i]) for i, b in enumerate(live)},
        {"__consumer_offsets": TopicMeta("__consumer_offsets", replicas)},
    )


def test_a_broker_holding_replicas_but_not_listed_is_not_live() -> None:
    assert _meta([1, 2], {0: [1, 3], 1: [2, 3], 2: [1, 2]}).replica_holders_not_live == {3}
    assert _meta([1, 2, 3], {0: [1, 3], 1: [2, 3]}).replica_holders_not_live == set()


class _RecordingAdminClient:
    """Stands for confluent-kafka's AdminClient: records the topics it is asked to create
    and fails each (only the request matters here). A real AdminClient (of a cluster
    that is not there) checks them first: it refuses some shapes before sending."""

    def __init__(self) -> None:
        self.asked: list[NewTopic] = []
        self._checks = AdminClient({"bootstrap.servers": "127.0.0.1:1", **QUIET})

    def create_topics(self, new: list[NewTopic], **_: Any) -> dict[str, Future[None]]:
        self._checks.create_topics(new, request_timeout=0.1)  # ValueError if malformed
        self.asked.extend(new)
        futures: dict[str, Future[None]] = {}
        for topic in new:
            futures[topic.topic] = Future()
            error = ConfluentKafkaError(ConfluentKafkaError.POLICY_VIOLATION)
            futures[topic.topic].set_exception(KafkaException(error))
        return futures


class _FakeAdmin(KafkaAdmin):
    """A KafkaAdmin whose cluster answers with ``meta``."""

    def __init__(self, meta: ClusterMeta) -> None:
        super().__init__("127.0.0.1:1")
        self._meta = meta
        self.client = _RecordingAdminClient()
        self._admin = self.client  # type: ignore[assignment]

    def metadata(self, timeout: float = 5.0) -> ClusterMeta:
        return self._meta

    def describe_cluster(self, timeout: float = 5.0) -> ClusterMeta:
        return ClusterMeta(self._meta.cluster_id, self._meta.controller_id, self._meta.brokers, {})


def _asked(meta: ClusterMeta, replicas: int) -> NewTopic:
    fake = _FakeAdmin(meta)
    fake.create_topics([("sp.orders.realtime.e2", 12, replicas, {})], timeout=0.1)
    (topic,) = fake.client.asked
    return topic


def test_with_a_broker_down_the_topic_is_placed_on_the_live_brokers() -> None:
    topic = _asked(_meta([1, 2], {0: [1, 2, 3], 1: [2, 3, 1]}), 2)
    assert topic.replica_assignment is not None
    assert len(topic.replica_assignment) == topic.num_partitions == 12
    assert {b for r in topic.replica_assignment for b in r} == {1, 2}
    assert sorted(r[0] for r in topic.replica_assignment).count(1) == 6


def test_with_every_broker_live_kafka_places_the_topic() -> None:
    topic = _asked(_meta([1, 2, 3], {0: [1, 2, 3]}), 3)
    assert not topic.replica_assignment
    assert (topic.num_partitions, topic.replication_factor) == (12, 3)


def test_more_replicas_than_live_brokers_is_left_to_kafka() -> None:
    topic = _asked(_meta([1, 2], {0: [1, 2, 3]}), 3)
    assert not topic.replica_assignment
    assert (topic.num_partitions, topic.replication_factor) == (12, 3)
