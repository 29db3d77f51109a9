"""A narrow adapter over confluent-kafka's AdminClient.

Only what streamplane needs, with Kafka errors turned into ``streamplane.KafkaError``
(code, retriable, fatal kept) and partial failures returned per resource.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from streamplane.exceptions import KafkaError

# librdkafka logs connection errors to stderr by default; streamplane reports errors itself.
QUIET: Mapping[str, Any] = {"log_level": 0}


def to_kafka_error(exc: BaseException, context: str) -> KafkaError:
    """Wrap a confluent-kafka exception, keeping the broker's code and flags."""
    err = exc.args[0] if exc.args else None
    if err is not None and hasattr(err, "code") and hasattr(err, "str"):
        return KafkaError(
            f"{context}: {err.str()}",
            code=err.name(),
            retriable=bool(err.retriable()),
            fatal=bool(err.fatal()),
        )
    return KafkaError(f"{context}: {exc}")


@dataclass(frozen=True)
class BrokerMeta:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class TopicMeta:
    name: str
    partitions: dict[int, list[int]] = field(default_factory=dict)  # partition -> replicas


@dataclass(frozen=True)
class ClusterMeta:
    cluster_id: str | None
    controller_id: int
    brokers: dict[int, BrokerMeta]
    topics: dict[str, TopicMeta]


class KafkaAdmin:
    """Admin operations on one Kafka cluster."""

    def __init__(self, bootstrap: str, extra_config: Mapping[str, Any] | None = None) -> None:
        self.bootstrap = bootstrap
        conf: dict[str, Any] = {"bootstrap.servers": bootstrap, **QUIET}
        conf.update(extra_config or {})
        self._admin = AdminClient(conf)

    def metadata(self, timeout: float = 5.0) -> ClusterMeta:
        try:
            md = self._admin.list_topics(timeout=timeout)
        except KafkaException as exc:
            raise to_kafka_error(exc, f"metadata from {self.bootstrap}") from exc
        brokers = {b.id: BrokerMeta(b.id, b.host or "", b.port) for b in md.brokers.values()}
        topics = {
            name: TopicMeta(name, {p.id: list(p.replicas) for p in t.partitions.values()})
            for name, t in md.topics.items()
        }
        return ClusterMeta(md.cluster_id, md.controller_id, brokers, topics)

    def describe_cluster(self, timeout: float = 5.0) -> ClusterMeta:
        """Metadata including each broker's rack (DescribeCluster)."""
        try:
            desc = self._admin.describe_cluster(request_timeout=timeout).result(timeout=timeout)
        except KafkaException as exc:
            raise to_kafka_error(exc, f"describe cluster {self.bootstrap}") from exc
        brokers = {n.id: BrokerMeta(n.id, n.host, n.port, n.rack) for n in desc.nodes}
        controller = desc.controller.id if desc.controller is not None else -1
        return ClusterMeta(desc.cluster_id, controller, brokers, {})

    def create_topics(
        self,
        topics: Iterable[tuple[str, int, int, Mapping[str, str]]],
        timeout: float = 30.0,
    ) -> dict[str, KafkaError | None]:
        """Create (name, partitions, replication, configs) topics; per-topic result."""
        new = [
            NewTopic(name, num_partitions=p, replication_factor=r, config=dict(cfg))
            for name, p, r, cfg in topics
        ]
        if not new:
            return {}
        futures = self._admin.create_topics(new, operation_timeout=timeout, request_timeout=timeout)
        return _results(futures, "create topic", timeout)

    def delete_topics(
        self, names: Iterable[str], timeout: float = 30.0
    ) -> dict[str, KafkaError | None]:
        names = list(names)
        if not names:
            return {}
        futures = self._admin.delete_topics(
            names, operation_timeout=timeout, request_timeout=timeout
        )
        return _results(futures, "delete topic", timeout)

    def create_partitions(
        self, topic: str, total: int, timeout: float = 30.0
    ) -> dict[str, KafkaError | None]:
        futures = self._admin.create_partitions(
            [NewPartitions(topic, total)], operation_timeout=timeout, request_timeout=timeout
        )
        return _results(futures, "create partitions", timeout)

    def describe_topic_configs(self, topic: str, timeout: float = 10.0) -> dict[str, str]:
        return self._describe_configs(ConfigResource(ConfigResource.Type.TOPIC, topic), timeout)

    def describe_broker_configs(self, broker_id: int, timeout: float = 10.0) -> dict[str, str]:
        resource = ConfigResource(ConfigResource.Type.BROKER, str(broker_id))
        return self._describe_configs(resource, timeout)

    def _describe_configs(self, resource: Any, timeout: float) -> dict[str, str]:
        futures = self._admin.describe_configs([resource], request_timeout=timeout)
        try:
            entries = next(iter(futures.values())).result(timeout=timeout)
        except KafkaException as exc:
            raise to_kafka_error(exc, f"describe configs {resource}") from exc
        return {name: entry.value for name, entry in entries.items()}

    def raw(self) -> AdminClient:
        """The underlying AdminClient, for adapters that need more."""
        return self._admin


def _results(futures: Mapping[str, Any], what: str, timeout: float) -> dict[str, KafkaError | None]:
    out: dict[str, KafkaError | None] = {}
    for name, fut in futures.items():
        try:
            fut.result(timeout=timeout)
            out[name] = None
        except KafkaException as exc:
            out[name] = to_kafka_error(exc, f"{what} {name}")
    return out
