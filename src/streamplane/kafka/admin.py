"""A narrow adapter over confluent-kafka's AdminClient.

Only what streamplane needs, with Kafka errors turned into ``streamplane.KafkaError``
(code, retriable, fatal kept) and partial failures returned per resource.
"""

from __future__ import annotations

import contextlib
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from streamplane.core.replication import replica_assignment
from streamplane.exceptions import KafkaError

# What ListOffsets answers for a partition just created: the client or the leader does
# not know it yet, or the leader has not opened it yet.
_NOT_OPEN_YET = frozenset(
    {
        "_NOENT",  # librdkafka: no leader found in its metadata
        "_UNKNOWN_PARTITION",
        "_UNKNOWN_TOPIC",
        "_TIMED_OUT",
        "UNKNOWN_TOPIC_OR_PART",
        "NOT_LEADER_FOR_PARTITION",  # NOT_LEADER_OR_FOLLOWER in Kafka
        "LEADER_NOT_AVAILABLE",
        "REPLICA_NOT_AVAILABLE",
        "REQUEST_TIMED_OUT",
        "UNKNOWN_TOPIC_ID",
        "UNKNOWN_LEADER_EPOCH",
    }
)

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

    @property
    def replica_holders_not_live(self) -> set[int]:
        """Brokers that hold replicas of some topic but are not among ``brokers`` (the
        live ones, as the metadata lists them): dead, or fenced by the controller. A broker
        not live that holds no replica at all is not seen here."""
        holders = {b for t in self.topics.values() for r in t.partitions.values() for b in r}
        return holders - set(self.brokers)


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
            future = self._admin.describe_cluster(request_timeout=timeout)
        except KafkaException as exc:
            raise to_kafka_error(exc, f"describe cluster {self.bootstrap}") from exc
        desc = await_future(future, timeout, f"describe cluster {self.bootstrap}")
        brokers = {n.id: BrokerMeta(n.id, n.host, n.port, n.rack) for n in desc.nodes}
        controller = desc.controller.id if desc.controller is not None else -1
        return ClusterMeta(desc.cluster_id, controller, brokers, {})

    def cluster_id(self, timeout: float = 5.0) -> str:
        """The Kafka cluster's id (raises KafkaError if it does not answer)."""
        return self.describe_cluster(timeout).cluster_id or ""

    def live_broker_count(self, timeout: float = 5.0) -> int:
        """How many brokers the cluster has alive (registered and not fenced), as
        DescribeCluster answers (raises KafkaError if it does not answer)."""
        return len(self.describe_cluster(timeout).brokers)

    def live_brokers_when_some_are_not(self, timeout: float = 5.0) -> dict[int, str | None] | None:
        """The live brokers (id -> rack) when the cluster also has brokers that are not
        live (``ClusterMeta.replica_holders_not_live``); None when every broker is live, or
        when the cluster does not answer (topic creation then says why it failed). The
        racks come from DescribeCluster; without its answer (librdkafka asks the broker it
        holds for the controller, which may be the dead one) the brokers have none."""
        try:
            meta = self.metadata(timeout)
        except KafkaError:
            return None
        if not meta.replica_holders_not_live:
            return None
        try:
            described = self.describe_cluster(timeout).brokers
        except KafkaError:
            described = {}
        return {b: described[b].rack if b in described else None for b in meta.brokers}

    def create_topics(
        self,
        topics: Iterable[tuple[str, int, int, Mapping[str, str]]],
        timeout: float = 30.0,
    ) -> dict[str, KafkaError | None]:
        """Create (name, partitions, replication, configs) topics; per-topic result.

        A topic reported created is writable: every partition's leader has answered a
        ListOffsets request for it. The controller answers CreateTopics before the
        leaders have opened the partitions, and an idempotent producer's first batch
        to a partition that is not open yet can be acknowledged without being written
        (a later batch becomes the partition's first record; seen on Kafka 4.4 with
        librdkafka 2.16, about one topic in 60 of 12 partitions). A topic created but
        not writable within ``timeout`` is deleted again and reported as an error.

        No replica goes to a broker that is not live: on a cluster with such a broker
        (``live_brokers_when_some_are_not``), a topic whose replicas the live brokers can
        hold gets an explicit assignment over them (``core.replication.replica_assignment``,
        leaders spread evenly) instead of Kafka's placement, which put followers on a
        fenced broker (a partition then took records with one copy only)."""
        wanted = [(name, p, r, dict(cfg)) for name, p, r, cfg in topics]
        if not wanted:
            return {}
        deadline = time.monotonic() + timeout
        live = self.live_brokers_when_some_are_not(min(timeout, 5.0))
        new = [_new_topic(n, p, r, c, live) for n, p, r, c in wanted]
        futures = self._admin.create_topics(new, operation_timeout=timeout, request_timeout=timeout)
        results = _results(futures, "create topic", timeout)
        created = [
            TopicPartition(n, i) for n, p, _, _ in wanted if results[n] is None for i in range(p)
        ]
        not_writable = await_writable(self._list_offsets, created, deadline)
        if not_writable:
            results.update(not_writable)
            self.delete_topics(not_writable, timeout)  # best effort: a retry creates them anew
        return results

    def _list_offsets(
        self, partitions: Sequence[TopicPartition], timeout: float
    ) -> dict[TopicPartition, KafkaError | None]:
        """ListOffsets (latest) for ``partitions``, from each one's leader.

        The client's metadata of each topic is refreshed first: ListOffsets looks the
        leaders up in its cache, and a topic cached as unknown before it was created
        (its offsets asked for while it did not exist) stayed "no leaders found" for
        20 s and more: 39 topics in 40 without the refresh, 0 in 40 with it."""
        timeout = max(timeout, 0.1)
        for topic in dict.fromkeys(tp.topic for tp in partitions):
            with contextlib.suppress(KafkaException):
                self._admin.list_topics(topic=topic, timeout=timeout)
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        futures = self._admin.list_offsets(
            dict.fromkeys(partitions, latest), request_timeout=timeout
        )
        out: dict[TopicPartition, KafkaError | None] = {}
        for tp, fut in futures.items():
            try:
                await_future(fut, timeout + 1.0, f"offsets of {tp.topic} [{tp.partition}]")
                out[tp] = None
            except KafkaError as err:
                if err.code in _NOT_OPEN_YET:  # librdkafka flags some of these final
                    err = KafkaError(str(err), code=err.code, retriable=True)
                out[tp] = err
        return out

    def end_offsets(self, topic: str, timeout: float = 10.0) -> dict[int, int]:
        """Each partition's end (latest) offset; {} when the topic does not exist."""
        meta = self._admin.list_topics(topic=topic, timeout=timeout).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            return {}
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        futures = self._admin.list_offsets(
            {TopicPartition(topic, p): latest for p in meta.partitions}, request_timeout=timeout
        )
        return {
            tp.partition: int(await_future(fut, timeout + 1.0, f"offsets of {topic}").offset)
            for tp, fut in futures.items()
        }

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
        """Grow ``topic`` to ``total`` partitions; like ``create_topics``, it returns
        once every partition's leader answers for it (or reports that it did not)."""
        deadline = time.monotonic() + timeout
        futures = self._admin.create_partitions(
            [NewPartitions(topic, total)], operation_timeout=timeout, request_timeout=timeout
        )
        results = _results(futures, "create partitions", timeout)
        if results.get(topic) is None:
            partitions = [TopicPartition(topic, i) for i in range(total)]
            results.update(await_writable(self._list_offsets, partitions, deadline))
        return results

    def describe_topic_configs(self, topic: str, timeout: float = 10.0) -> dict[str, str]:
        return self._describe_configs(ConfigResource(ConfigResource.Type.TOPIC, topic), timeout)

    def describe_broker_configs(self, broker_id: int, timeout: float = 10.0) -> dict[str, str]:
        resource = ConfigResource(ConfigResource.Type.BROKER, str(broker_id))
        return self._describe_configs(resource, timeout)

    def _describe_configs(self, resource: Any, timeout: float) -> dict[str, str]:
        futures = self._admin.describe_configs([resource], request_timeout=timeout)
        entries = await_future(
            next(iter(futures.values())), timeout, f"describe configs {resource}"
        )
        return {name: entry.value for name, entry in entries.items()}

    def raw(self) -> AdminClient:
        """The underlying AdminClient, for adapters that need more."""
        return self._admin


def _new_topic(
    name: str,
    partitions: int,
    replicas: int,
    config: dict[str, str],
    live_brokers: Mapping[int, str | None] | None,
) -> NewTopic:
    """A topic to create: placed by Kafka, or over ``live_brokers`` only when given and
    they can hold ``replicas`` (more than they can, or no partition, is Kafka's to refuse
    or place)."""
    if live_brokers is None or partitions < 1 or not 1 <= replicas <= len(live_brokers):
        return NewTopic(name, num_partitions=partitions, replication_factor=replicas, config=config)
    first = zlib.crc32(name.encode()) % len(live_brokers)  # each topic's leaders start apart
    assignment = replica_assignment(partitions, live_brokers, replicas, first)
    return NewTopic(name, num_partitions=partitions, replica_assignment=assignment, config=config)


ListOffsets = Callable[
    [Sequence[TopicPartition], float], Mapping[TopicPartition, KafkaError | None]
]


def await_writable(
    list_offsets: ListOffsets,
    partitions: Sequence[TopicPartition],
    deadline: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, KafkaError]:
    """Ask for the partitions' offsets until every leader has answered, or ``deadline``
    (``clock`` time) passes; returns the topics that are not writable, with why.

    ``list_offsets(partitions, timeout)`` answers None (the leader answered) or the
    error per partition. A retriable error (no leader known yet, or the leader has not
    opened the partition) is asked again after a short backoff; any other error is
    final for its topic. A partition left without an answer counts as retriable."""
    pending = list(partitions)
    failed: dict[str, KafkaError] = {}
    backoff = 0.01
    while pending:
        answers = list_offsets(pending, deadline - clock())
        waiting: dict[TopicPartition, KafkaError] = {}
        for tp in pending:
            if tp in answers and answers[tp] is None:
                continue
            err = answers.get(tp) or KafkaError("no answer", retriable=True)
            if err.retriable:
                waiting[tp] = err
            else:
                failed.setdefault(tp.topic, err)
        pending = [tp for tp in waiting if tp.topic not in failed]
        if not pending:
            break
        if clock() + backoff > deadline:
            for tp in pending:
                failed.setdefault(
                    tp.topic,
                    KafkaError(
                        f"topic {tp.topic} was created, but partition {tp.partition} is "
                        f"not writable yet ({waiting[tp]})",
                        code=waiting[tp].code or "LEADER_NOT_AVAILABLE",
                        retriable=True,
                    ),
                )
            break
        sleep(backoff)
        backoff = min(backoff * 2, 0.2)
    return failed


def _results(futures: Mapping[str, Any], what: str, timeout: float) -> dict[str, KafkaError | None]:
    out: dict[str, KafkaError | None] = {}
    deadline = time.monotonic() + timeout  # for them all, not per future
    for name, fut in futures.items():
        try:
            left = max(0.0, deadline - time.monotonic())
            await_future(fut, left, f"{what} {name}", waited_s=timeout)
            out[name] = None
        except KafkaError as err:
            out[name] = err
    return out


def await_future(future: Any, timeout: float, what: str, waited_s: float | None = None) -> Any:
    """An admin future's result. Its failure, or no answer within ``timeout`` seconds
    (a cluster that is down: the future's own TimeoutError, which reached the HTTP API
    as a 500), is a KafkaError. ``waited_s``: the whole wait to name in that error when
    ``timeout`` is what was left of it (futures awaited under one deadline)."""
    try:
        return future.result(timeout=timeout)
    except KafkaException as exc:
        raise to_kafka_error(exc, what) from exc
    except TimeoutError:
        waited = timeout if waited_s is None else waited_s
        raise KafkaError(
            f"{what}: no answer in {waited:g}s", code="_TIMED_OUT", retriable=True
        ) from None


# Errors of a request sent with a leader epoch the client cached before the partition's
# leader changed (a broker restart bumps it).
STALE_LEADER_EPOCH = frozenset({"FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH"})


def refresh_metadata(
    client: AdminClient | Producer, timeout: float, topic: str | None = None
) -> None:
    """Ask for the cluster's metadata (of ``topic``, or all), so the client's cache
    learns the current leaders, their epochs and the partitions. librdkafka (2.16) sends
    ListOffsets with the leader epoch it cached and, when a broker restart has bumped it,
    fails with FENCED_LEADER_EPOCH without ever refreshing by itself: measured, an
    AdminClient kept failing for 60 s after the broker was back (a new client answered
    at once), and one metadata request made the next ListOffsets answer. A producer
    refuses a partition added since it last read the topic until its next periodic
    refresh (5 minutes). Best effort: a failure is left to the next call."""
    with contextlib.suppress(KafkaException):
        client.list_topics(topic, timeout=timeout)
