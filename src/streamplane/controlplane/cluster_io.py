"""What the control plane's failover tasks ask of a Kafka cluster: a thin adapter.

- ``probe``: metadata, then one record produced with ``acks=all`` to the health topic
  ``__streamplane_health`` (created on demand), both within a short timeout;
- ``end_offsets``: the end offset of every partition of a topic (to seal a segment);
- ``committed``: per consumer group, its committed offsets on some topics (to retire one).

Errors are ``streamplane.KafkaError``. ``ClusterIO`` is the protocol the tasks use; unit
tests give a stub.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from streamplane.exceptions import KafkaError
from streamplane.kafka.admin import QUIET, to_kafka_error

HEALTH_TOPIC = "__streamplane_health"
_HEALTH_RETENTION_MS = str(3600 * 1000)


class ClusterIO(Protocol):
    def probe(self, timeout: float) -> None: ...

    def end_offsets(self, topic: str, partitions: int, timeout: float) -> dict[int, int]: ...

    def committed(
        self, topics: Mapping[str, int], timeout: float
    ) -> dict[str, dict[str, dict[int, int]]]: ...

    def close(self) -> None: ...


class KafkaClusterIO:
    """``ClusterIO`` over one cluster (one AdminClient, one probe producer)."""

    def __init__(self, bootstrap: str, probe_timeout: float = 1.0) -> None:
        self.bootstrap = bootstrap
        # Reconnect quickly: a cluster that comes back should look healthy within a second.
        fast = {"reconnect.backoff.max.ms": 500, "reconnect.backoff.ms": 100}
        self._admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET, **fast})
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 0,
                "enable.idempotence": False,
                "message.timeout.ms": max(500, int(probe_timeout * 1000)),
                "socket.connection.setup.timeout.ms": max(1000, int(probe_timeout * 1000)),
                **QUIET,
                **fast,
            }
        )
        self._topic_ready = False
        self._lock = threading.Lock()

    def close(self) -> None:
        self._producer.purge()
        self._producer.flush(0)

    def probe(self, timeout: float) -> None:
        with self._lock:
            deadline = time.monotonic() + timeout
            try:
                md = self._admin.list_topics(timeout=timeout)
            except KafkaException as exc:
                raise to_kafka_error(exc, "metadata") from exc
            if not md.brokers:
                raise KafkaError("metadata: no broker answered")
            if HEALTH_TOPIC not in md.topics and not self._topic_ready:
                self._create_health_topic(len(md.brokers), timeout)
            self._topic_ready = True
            errors: list[str] = []

            def delivered(err: Any, _msg: Any) -> None:
                if err is not None:
                    errors.append(str(err.str()))

            self._producer.produce(HEALTH_TOPIC, str(time.time()).encode(), on_delivery=delivered)
            left = self._producer.flush(max(0.05, deadline - time.monotonic()))
            if left:
                self._producer.purge()
                self._producer.flush(0)
                raise KafkaError(f"produce to {HEALTH_TOPIC}: no acknowledgement in {timeout:g}s")
            if errors:
                if "UNKNOWN_TOPIC" in errors[0].upper() or "Unknown topic" in errors[0]:
                    self._topic_ready = False
                raise KafkaError(f"produce to {HEALTH_TOPIC}: {errors[0]}")

    def _create_health_topic(self, brokers: int, timeout: float) -> None:
        from confluent_kafka.admin import NewTopic

        topic = NewTopic(
            HEALTH_TOPIC,
            num_partitions=1,
            replication_factor=min(3, brokers),
            config={"retention.ms": _HEALTH_RETENTION_MS},
        )
        fut = self._admin.create_topics([topic], request_timeout=timeout)[HEALTH_TOPIC]
        try:
            fut.result(timeout=timeout)
        except KafkaException as exc:
            err = to_kafka_error(exc, f"create {HEALTH_TOPIC}")
            if err.code != "TOPIC_ALREADY_EXISTS":
                raise err from exc

    def end_offsets(self, topic: str, partitions: int, timeout: float) -> dict[int, int]:
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        wanted = {TopicPartition(topic, p): latest for p in range(partitions)}
        try:
            futures = self._admin.list_offsets(wanted, request_timeout=timeout)
            return {
                tp.partition: int(f.result(timeout=timeout).offset) for tp, f in futures.items()
            }
        except KafkaException as exc:
            raise to_kafka_error(exc, f"end offsets of {topic}") from exc

    def committed(
        self, topics: Mapping[str, int], timeout: float
    ) -> dict[str, dict[str, dict[int, int]]]:
        """Group -> topic -> partition -> committed offset, for groups that committed on
        at least one of ``topics`` (topic -> partition count)."""
        try:
            listing = self._admin.list_consumer_groups(request_timeout=timeout).result(
                timeout=timeout
            )
        except KafkaException as exc:
            raise to_kafka_error(exc, "list consumer groups") from exc
        partitions = [TopicPartition(t, p) for t, n in topics.items() for p in range(n)]
        out: dict[str, dict[str, dict[int, int]]] = {}
        for group in sorted(g.group_id for g in listing.valid):
            request = [ConsumerGroupTopicPartitions(group, partitions)]
            try:
                futures = self._admin.list_consumer_group_offsets(request, request_timeout=timeout)
                result = next(iter(futures.values())).result(timeout=timeout)
            except KafkaException as exc:
                raise to_kafka_error(exc, f"committed offsets of group {group}") from exc
            offsets: dict[str, dict[int, int]] = {}
            for tp in result.topic_partitions or []:
                if tp.error is None and tp.offset >= 0:
                    offsets.setdefault(tp.topic, {})[tp.partition] = int(tp.offset)
            if offsets:
                out[group] = offsets
        return out
