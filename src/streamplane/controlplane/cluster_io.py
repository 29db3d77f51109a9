"""What the control plane's failover tasks ask of a Kafka cluster: a thin adapter.

- ``probe``: metadata, then one record produced to every partition of the health topic
  ``__streamplane_health`` (created on demand with a partition per broker, so each broker
  leads one, and replicated as a stream's topics are, ``streamplane.core.replication``:
  ``min.insync.replicas`` 2 of 3), all within a short timeout. Each write needs its
  leader only (``acks=1``, which ``min.insync.replicas`` does not bind): the probe asks
  whether the cluster takes writes, not whether every replica is in sync. Losing one
  broker of several leaves the cluster taking writes: the probe reports which
  partitions failed (the cluster is ``degraded``), and fails only when no write is
  acknowledged (with ``acks=all`` a dead follower held every write of the partitions
  it replicated until the controller fenced it, ~9 s, longer than the 3 s after which
  a cluster is down: a healthy 3-broker cluster that lost one broker had its streams
  failed over);
- ``end_offsets``: the end offset of every partition of a topic (to seal a segment);
- ``committed``: per consumer group, its committed offsets on some topics (to retire one);
- ``fence``: make a retired segment's topic refuse every write (``FENCED_TOPIC_CONFIG``).

Errors are ``streamplane.KafkaError``. ``ClusterIO`` is the protocol the tasks use; unit
tests give a stub.

``ControlPlaneAdmin`` is the service's ``TopicAdmin``: ``KafkaAdmin`` plus
``describe_topic`` (partitions, replication factor and the configs set on the topic
itself), which decides whether an existing topic of a new epoch may be adopted.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import KafkaError as ConfluentKafkaError
from confluent_kafka import (
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ConfigSource,
    OffsetSpec,
)

from streamplane.core.replication import (
    MIN_INSYNC_REPLICAS,
    min_insync_replicas,
    replication_factor,
)
from streamplane.exceptions import KafkaError
from streamplane.kafka.admin import (
    QUIET,
    STALE_LEADER_EPOCH,
    KafkaAdmin,
    await_future,
    refresh_metadata,
    to_kafka_error,
)
from streamplane.ops.kafka_ops import ConfigChange, KafkaOpsAdmin

HEALTH_TOPIC = "__streamplane_health"
# A fenced topic refuses every write: no record batch fits in 0 bytes, so the broker
# answers MESSAGE_TOO_LARGE (a producer's delivery report fails at once, not retried);
# reads and replication are not affected.
FENCED_TOPIC_CONFIG = {"max.message.bytes": "0"}
_HEALTH_RETENTION_MS = str(3600 * 1000)


class ClusterIO(Protocol):
    def probe(self, timeout: float) -> str | None:
        """None when every write was acknowledged; what failed when some were (the
        cluster takes writes); raises ``KafkaError`` when none was."""
        ...

    def end_offsets(self, topic: str, partitions: int, timeout: float) -> dict[int, int]: ...

    def committed(
        self, topics: Mapping[str, int], timeout: float
    ) -> dict[str, dict[str, dict[int, int]]]: ...

    def fence(self, topic: str, timeout: float) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class TopicDescription:
    """An existing topic as its cluster describes it."""

    name: str
    partitions: int
    # The distinct replica counts of its partitions (one, unless a reassignment changed some).
    replication_factors: tuple[int, ...]
    # The configs set on the topic itself (at creation or since), not the cluster's defaults.
    overrides: Mapping[str, str] = field(default_factory=dict)


class ControlPlaneAdmin(KafkaAdmin):
    """``KafkaAdmin`` with what the control plane's service asks besides: ``describe_topic``."""

    def describe_topic(self, topic: str, timeout: float = 10.0) -> TopicDescription:
        admin = self.raw()
        what = f"describe topic {topic}"
        try:
            meta = admin.list_topics(topic=topic, timeout=timeout).topics.get(topic)
        except KafkaException as exc:
            raise to_kafka_error(exc, what) from exc
        if meta is None or meta.error is not None or not meta.partitions:
            error = meta.error if meta is not None else None
            raise KafkaError(
                f"{what}: {error.str() if error is not None else 'unknown topic'}",
                code=error.name() if error is not None else "UNKNOWN_TOPIC_OR_PART",
            )
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        try:
            futures = admin.describe_configs([resource], request_timeout=timeout)
        except KafkaException as exc:
            raise to_kafka_error(exc, what) from exc
        entries = await_future(next(iter(futures.values())), timeout, f"{what} configs")
        overrides = {
            name: str(entry.value)
            for name, entry in entries.items()
            if _source(entry) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value and entry.value is not None
        }
        counts = sorted({len(p.replicas) for p in meta.partitions.values()})
        return TopicDescription(topic, len(meta.partitions), tuple(counts), overrides)


def _source(entry: Any) -> int:
    """A config entry's source as ConfigSource's value (librdkafka gives an int)."""
    return int(getattr(entry.source, "value", entry.source))


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
                "acks": 1,
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
        self._ops: KafkaOpsAdmin | None = None  # committed offsets, fences (kafka-python)

    def close(self) -> None:
        self._producer.purge()
        self._producer.flush(0)
        if self._ops is not None:
            with contextlib.suppress(Exception):
                self._ops.close()
            self._ops = None

    def probe(self, timeout: float) -> str | None:
        with self._lock:
            deadline = time.monotonic() + timeout
            try:
                md = self._admin.list_topics(timeout=timeout)
            except KafkaException as exc:
                raise to_kafka_error(exc, "metadata") from exc
            if not md.brokers:
                raise KafkaError("metadata: no broker answered")
            topic = md.topics.get(HEALTH_TOPIC)
            if topic is None or topic.error is not None or not topic.partitions:
                if not self._topic_ready:
                    self._create_health_topic(len(md.brokers), timeout)
                partitions = list(range(len(md.brokers)))
            else:
                partitions = sorted(topic.partitions)
                if len(partitions) < len(md.brokers):  # brokers added since: one each
                    self._add_health_partitions(len(md.brokers), timeout)
            self._topic_ready = True
            failed: dict[int, str] = {}

            def delivered(err: Any, msg: Any) -> None:
                if err is not None:
                    failed[msg.partition()] = str(err.str())

            value = str(time.time()).encode()
            unknown = self._produce_each(partitions, value, delivered)
            if unknown:
                # Partitions added since the producer last read the topic (a broker joined,
                # or another replica added them): it refused them at once ("Unknown
                # partition") and would until its next metadata refresh (5 minutes), and the
                # probe failed whole: a healthy cluster read as down and was failed over.
                refresh_metadata(
                    self._producer, max(0.05, deadline - time.monotonic()), HEALTH_TOPIC
                )
                for partition in self._produce_each(unknown, value, delivered):
                    failed[partition] = "unknown partition (the producer's metadata is stale)"
            left = self._producer.flush(max(0.05, deadline - time.monotonic()))
            if left:
                self._producer.purge()
                self._producer.flush(0)  # serves the purged writes' reports: failed
            if len(failed) < len(partitions):
                if not failed:
                    return None
                first = min(failed)
                return (
                    f"{len(failed)} of {len(partitions)} {HEALTH_TOPIC} partitions took no "
                    f"write in {timeout:g}s (partition {first}: {failed[first]})"
                )
            errors = list(failed.values())
            if any("UNKNOWN_TOPIC" in e.upper() or "Unknown topic" in e for e in errors):
                self._topic_ready = False
            if left:
                raise KafkaError(f"produce to {HEALTH_TOPIC}: no acknowledgement in {timeout:g}s")
            raise KafkaError(f"produce to {HEALTH_TOPIC}: {errors[0]}")

    def _produce_each(
        self, partitions: list[int], value: bytes, delivered: Callable[[Any, Any], None]
    ) -> list[int]:
        """Write ``value`` to each partition of the health topic; the partitions the
        producer refused as unknown to it (its metadata predates them)."""
        unknown = []
        for partition in partitions:
            try:
                self._producer.produce(
                    HEALTH_TOPIC, value, partition=partition, on_delivery=delivered
                )
            except KafkaException as exc:
                if exc.args[0].code() != ConfluentKafkaError._UNKNOWN_PARTITION:
                    raise
                unknown.append(partition)
        return unknown

    def _create_health_topic(self, brokers: int, timeout: float) -> None:
        from confluent_kafka.admin import NewTopic

        replicas = replication_factor(brokers)
        topic = NewTopic(
            HEALTH_TOPIC,
            num_partitions=brokers,
            replication_factor=replicas,
            config={
                "retention.ms": _HEALTH_RETENTION_MS,
                MIN_INSYNC_REPLICAS: str(min_insync_replicas(replicas)),
            },
        )
        fut = self._admin.create_topics([topic], request_timeout=timeout)[HEALTH_TOPIC]
        try:
            await_future(fut, timeout, f"create {HEALTH_TOPIC}")
        except KafkaError as err:
            if err.code != "TOPIC_ALREADY_EXISTS":
                raise

    def _add_health_partitions(self, brokers: int, timeout: float) -> None:
        from confluent_kafka.admin import NewPartitions

        fut = self._admin.create_partitions(
            [NewPartitions(HEALTH_TOPIC, brokers)], request_timeout=timeout
        )[HEALTH_TOPIC]
        try:
            await_future(fut, timeout, f"add partitions to {HEALTH_TOPIC}")
        except KafkaError as err:  # another replica did it first; or try again next probe
            if err.code != "INVALID_PARTITIONS":
                raise

    def end_offsets(self, topic: str, partitions: int, timeout: float) -> dict[int, int]:
        try:
            return self._end_offsets(topic, partitions, timeout)
        except KafkaError as err:
            if err.code not in STALE_LEADER_EPOCH:
                raise
        refresh_metadata(self._admin, timeout)  # a broker restarted: learn its new epoch
        return self._end_offsets(topic, partitions, timeout)

    def _end_offsets(self, topic: str, partitions: int, timeout: float) -> dict[int, int]:
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        wanted = {TopicPartition(topic, p): latest for p in range(partitions)}
        try:
            futures = self._admin.list_offsets(wanted, request_timeout=timeout)
        except KafkaException as exc:
            raise to_kafka_error(exc, f"end offsets of {topic}") from exc
        what = f"end offsets of {topic}"
        return {
            tp.partition: int(await_future(f, timeout, what).offset) for tp, f in futures.items()
        }

    def committed(
        self, topics: Mapping[str, int], timeout: float
    ) -> dict[str, dict[str, dict[int, int]]]:
        """Group -> topic -> partition -> committed offset, for groups that committed on
        at least one of ``topics`` (topic -> partition count).

        Read over kafka-python (``KafkaOpsAdmin.committed_offsets``), not this object's
        confluent-kafka AdminClient: librdkafka 2.16 aborts the whole process (assertion
        ``eonce->refcnt > 0``) when a ListConsumerGroupOffsets call times out while the
        group's coordinator is down, which took the control plane down with a cluster.
        A client that failed is dropped and a new one connects on the next call."""
        with self._ops_admin(timeout) as admin:
            return admin.committed_offsets(topics)

    def fence(self, topic: str, timeout: float) -> None:
        """Set ``FENCED_TOPIC_CONFIG`` on ``topic`` (idempotent)."""
        with self._ops_admin(timeout) as admin:
            change = ConfigChange("topic", topic, set=FENCED_TOPIC_CONFIG)
            error = admin.alter_configs([change]).get(("topic", topic))
        if error is not None:
            raise error

    @contextlib.contextmanager
    def _ops_admin(self, timeout: float) -> Iterator[KafkaOpsAdmin]:
        """The kafka-python admin (made on first use); dropped when a call through it
        fails, so that the next call connects afresh."""
        try:
            if self._ops is None:
                self._ops = KafkaOpsAdmin(
                    self.bootstrap, request_timeout_s=timeout, attempts=1, retry_s=0.0
                )
            yield self._ops
        except KafkaError:
            if self._ops is not None:
                with contextlib.suppress(Exception):
                    self._ops.close()
                self._ops = None
            raise
