"""What the control plane's failover tasks ask of a Kafka cluster: a thin adapter.

- ``probe``: metadata, then two records produced to every partition of the health topic
  ``__streamplane_health`` (created on demand with a partition per broker, so each broker
  leads one, and replicated as a stream's topics are, ``streamplane.core.replication``:
  ``min.insync.replicas`` 2 of 3, set on a topic made without it), all within a short
  timeout: one as the streams write (``acks=all``, bound by ``min.insync.replicas``),
  one to the leader only (``acks=1``: which brokers answer). A write not acknowledged
  within the timeout failed for that probe; a report that comes later counts for no
  probe. ``core.failover.judge_probe`` says what the acknowledgements mean: None when
  every partition took the ``acks=all`` write; what failed when some did (the cluster
  takes writes: ``degraded``); a ``ProbeStall`` when none did but the leaders answer
  (a dead broker stays in the in-sync replicas until the controller fences it, ~9 s:
  not down yet); ``KafkaError`` when none did and none can (fewer brokers answer than
  ``min.insync.replicas``, or none at all). A metadata read that fails once a layout
  is known (a restarting broker that accepts connections and does not answer yet) does
  not fail the probe: the writes go by the last layout read, and the probe is
  ``degraded`` at worst;
- ``end_offsets``: the end offset of every partition of a topic (to seal a segment);
- ``committed``: per consumer group, its committed offsets on some topics (to retire one);
  a listing of the groups that could leave one out (a coordinator missed) is an error,
  never a partial answer;
- ``fence``: make a retired segment's topic refuse every write (``FENCED_TOPIC_CONFIG``).

Errors are ``streamplane.KafkaError``. ``ClusterIO`` is the protocol the tasks use; unit
tests give a stub.

``ControlPlaneAdmin`` is the service's ``TopicAdmin``: ``KafkaAdmin`` plus
``describe_topic`` (partitions, replication factor and the configs set on the topic
itself), which decides whether an existing topic of a new epoch may be adopted.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from confluent_kafka import KafkaError as ConfluentKafkaError
from confluent_kafka import (
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    OffsetSpec,
)

from streamplane.core.failover import (
    PartitionProbe,
    ProbeStall,
    ProbeVerdict,
    group_listing_gap,
    judge_probe,
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

log = logging.getLogger(__name__)

HEALTH_TOPIC = "__streamplane_health"
GROUP_OFFSETS_TOPIC = "__consumer_offsets"
# The code of the error ``committed`` raises when listing the groups could miss some.
GROUP_LISTING_INCOMPLETE = "GROUP_LISTING_INCOMPLETE"
# A fenced topic refuses every write: no record batch fits in 0 bytes, so the broker
# answers MESSAGE_TOO_LARGE (a producer's delivery report fails at once, not retried);
# reads and replication are not affected.
FENCED_TOPIC_CONFIG = {"max.message.bytes": "0"}
_HEALTH_RETENTION_MS = str(3600 * 1000)


class ClusterIO(Protocol):
    def probe(self, timeout: float) -> str | None:
        """None when every write was acknowledged; what failed when some were (the
        cluster takes writes); a ``ProbeStall`` (a ``str``) when none was but the cluster
        may recover by itself; raises ``KafkaError`` when none was and none can be."""
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


@dataclass(frozen=True)
class _HealthLayout:
    """The health topic as a metadata read saw it."""

    partitions: Mapping[int, tuple[int | None, tuple[int, ...]]]  # -> leader, replicas
    brokers: frozenset[int]
    error: str | None = None  # this read failed: the layout is the previous read's

    @property
    def replication_factor(self) -> int:
        return max((len(replicas) for _, replicas in self.partitions.values()), default=1)


class _Acks:
    """The delivery reports of one probe's writes by one producer; closed when the probe
    ends, after which a report (of a write not acknowledged in time) is ignored."""

    def __init__(self) -> None:
        self.acked: set[int] = set()
        self.errors: dict[int, str] = {}
        self._open = True

    def report(self, err: Any, msg: Any) -> None:
        if not self._open:
            return
        if err is None:
            self.acked.add(msg.partition())
        else:
            self.errors[msg.partition()] = str(err.str())

    def has_all(self, partitions: Iterable[int]) -> bool:
        """Whether every write to ``partitions`` has its report."""
        return all(p in self.acked or p in self.errors for p in partitions)

    def close(self) -> None:
        self._open = False


def _produce_each(
    producer: Producer,
    partitions: Iterable[int],
    value: bytes,
    delivered: Callable[[Any, Any], None],
) -> list[int]:
    """Write ``value`` to each of ``partitions`` of the health topic; the partitions the
    producer refused as unknown to it (its metadata predates them)."""
    unknown = []
    for partition in partitions:
        try:
            producer.produce(HEALTH_TOPIC, value, partition=partition, on_delivery=delivered)
        except KafkaException as exc:
            if exc.args[0].code() != ConfluentKafkaError._UNKNOWN_PARTITION:
                raise
            unknown.append(partition)
    return unknown


class KafkaClusterIO:
    """``ClusterIO`` over one cluster (one AdminClient, one probe producer)."""

    def __init__(self, bootstrap: str, probe_timeout: float = 1.0) -> None:
        self.bootstrap = bootstrap
        # Reconnect quickly: a cluster that comes back should look healthy within a second.
        fast = {"reconnect.backoff.max.ms": 500, "reconnect.backoff.ms": 100}
        self._admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET, **fast})
        probe_producer = {
            "bootstrap.servers": bootstrap,
            "linger.ms": 0,
            "enable.idempotence": False,
            "message.timeout.ms": max(500, int(probe_timeout * 1000)),
            "socket.connection.setup.timeout.ms": max(1000, int(probe_timeout * 1000)),
            **QUIET,
            **fast,
        }
        # As the streams write (min.insync.replicas binds it), and to the leaders only.
        self._producer = Producer({**probe_producer, "acks": "all"})
        self._leader_producer = Producer({**probe_producer, "acks": 1})
        self._topic_ready = False
        self._layout: _HealthLayout | None = None  # the health topic at the last metadata read
        self._min_insync: int | None = None  # the health topic's, once checked (and set)
        self._lock = threading.Lock()
        self._ops: KafkaOpsAdmin | None = None  # committed offsets, fences (kafka-python)

    def close(self) -> None:
        for producer in (self._producer, self._leader_producer):
            producer.purge()
            producer.flush(0)
        if self._ops is not None:
            with contextlib.suppress(Exception):
                self._ops.close()
            self._ops = None

    def probe(self, timeout: float) -> str | None:
        with self._lock:
            deadline = time.monotonic() + timeout
            known = self._layout
            if known is None:  # first: the topic's partitions (made if missing)
                layout = self._read_layout(timeout, known)
                self._ensure_min_insync(layout, max(0.05, deadline - time.monotonic()))
            committed, answered = _Acks(), _Acks()
            written = (known or layout).partitions
            value = str(time.time()).encode()
            for producer, acks in ((self._producer, committed), (self._leader_producer, answered)):
                unknown = _produce_each(producer, written, value, acks.report)
                if unknown:
                    # Partitions added since the producer last read the topic (a broker
                    # joined, or another replica added them): it refused them at once
                    # ("Unknown partition") and would until its next metadata refresh (5
                    # minutes), and the probe failed whole: a healthy cluster read as down
                    # and was failed over.
                    remaining = max(0.05, deadline - time.monotonic())
                    refresh_metadata(producer, remaining, HEALTH_TOPIC)
                    for partition in _produce_each(producer, unknown, value, acks.report):
                        acks.errors[partition] = "unknown partition (stale producer metadata)"
            if known is not None:
                # Read while the writes are under way, in what is left of the timeout: a
                # broker that takes connections and does not answer (restarting, hung)
                # then costs the writes no time.
                layout = self._read_layout(max(0.05, deadline - time.monotonic()), known)
                self._ensure_min_insync(layout, max(0.05, deadline - time.monotonic()))
            # Until every write of this probe has its report, or the timeout. One not
            # acknowledged by then failed for this probe; its report comes later, to this
            # probe's closed ``_Acks``, and counts for no probe (a write is given up by
            # ``message.timeout.ms``, the probe's timeout). Before, the probe purged them
            # and said ok while some had no report yet, and their reports surfaced in a
            # later probe; with a purge, a probe also saw its own write to a partition
            # whose leader answered fail "Purged in queue" (so none is purged now).
            while True:  # serves the reports that came, at least once (after a slow read)
                left = deadline - time.monotonic()
                self._leader_producer.poll(max(0.0, min(left, 0.01)))
                self._producer.poll(0)
                if left <= 0 or (committed.has_all(written) and answered.has_all(written)):
                    break
            committed.close()
            answered.close()
            judgement = judge_probe(
                {
                    p: PartitionProbe(
                        *layout.partitions.get(p, (None, ())),
                        committed=p in committed.acked,
                        leader_answered=p in answered.acked,
                        error=committed.errors.get(p),
                    )
                    for p in written
                },
                layout.brokers,
                self._min_insync or min_insync_replicas(layout.replication_factor),
                topic=HEALTH_TOPIC,
                timeout_s=timeout,
                metadata_answered=layout.error is None,
            )
            verdict, detail = judgement.verdict, judgement.detail
            if layout.error is not None:
                detail = f"{layout.error}; the writes went by the last read: {detail or 'ok'}"
            if verdict is ProbeVerdict.OK and layout.error is None:
                return None
            if verdict is ProbeVerdict.STALLED:
                return ProbeStall(detail)
            if verdict is not ProbeVerdict.FAILED:
                return detail
            if any("UNKNOWN_TOPIC" in e.upper() for e in committed.errors.values()):
                self._topic_ready = False
                self._layout = None
            raise KafkaError(f"produce to {HEALTH_TOPIC}: {detail}")

    def _read_layout(self, timeout: float, known: _HealthLayout | None) -> _HealthLayout:
        """The health topic's partitions (made or added first when missing), their
        leaders and replicas, and the brokers, from a metadata read; ``known`` with the
        error when the read fails (raised without one)."""
        try:
            md = self._admin.list_topics(timeout=timeout)
            if not md.brokers:
                raise KafkaError("metadata: no broker answered")
        except (KafkaException, KafkaError) as exc:
            err = exc if isinstance(exc, KafkaError) else to_kafka_error(exc, "metadata")
            if known is None:
                raise err from exc
            return replace(known, error=str(err))
        brokers = frozenset(md.brokers)
        topic = md.topics.get(HEALTH_TOPIC)
        if topic is None or topic.error is not None or not topic.partitions:
            if not self._topic_ready:
                self._create_health_topic(len(md.brokers), timeout)
            self._topic_ready = True
            # Just made: its leaders are not known yet, and the next probe reads it again.
            return _HealthLayout({p: (None, ()) for p in range(len(md.brokers))}, brokers)
        if len(topic.partitions) < len(md.brokers):  # brokers added since: one each
            self._add_health_partitions(len(md.brokers), timeout)
        self._topic_ready = True
        self._layout = _HealthLayout(
            {
                p.id: (p.leader if p.leader >= 0 else None, tuple(p.replicas))
                for p in topic.partitions.values()
            },
            brokers,
        )
        return self._layout

    def _ensure_min_insync(self, layout: _HealthLayout, timeout: float) -> None:
        """Once: the health topic's ``min.insync.replicas`` as a stream's topics have it
        (``core.replication``); a topic made before it was set on creation is altered.
        Without it (the brokers' default, 1) the probe's ``acks=all`` writes went on
        where a stream's were refused. A failure is left to the next probe."""
        if self._min_insync is not None or self._layout is None or layout.error is not None:
            return
        wanted = min_insync_replicas(layout.replication_factor)
        resource = ConfigResource(ConfigResource.Type.TOPIC, HEALTH_TOPIC)
        what = f"{MIN_INSYNC_REPLICAS} of {HEALTH_TOPIC}"
        try:
            futures = self._admin.describe_configs([resource], request_timeout=timeout)
            entries = await_future(next(iter(futures.values())), timeout, what)
            entry = entries.get(MIN_INSYNC_REPLICAS)
            current = int(entry.value) if entry is not None and entry.value else 1
            if current < wanted:
                setting = ConfigEntry(
                    MIN_INSYNC_REPLICAS, str(wanted), incremental_operation=AlterConfigOpType.SET
                )
                change = ConfigResource(
                    ConfigResource.Type.TOPIC, HEALTH_TOPIC, incremental_configs=[setting]
                )
                altered = self._admin.incremental_alter_configs([change], request_timeout=timeout)
                await_future(next(iter(altered.values())), timeout, f"set {what}")
                current = wanted
        except (KafkaException, KafkaError, ValueError):
            return
        self._min_insync = current

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
        A client that failed is dropped and a new one connects on the next call.

        A group is listed (ListGroups) only by its coordinator, and kafka-python asks the
        brokers of its cached metadata, read again every 5 minutes: after its cluster
        restarted, a long-lived client knew only the brokers that had answered first,
        the groups the others coordinated were left out without an error, and sealed
        segments they had read stayed sealed (4.5 minutes in an exploratory run; a
        group that only commits could have had a segment retired unread). So the
        coordinators are read afresh first (``group_listing_gap``): a client that does
        not know one is replaced once, and a listing that would still miss one (a
        ``__consumer_offsets`` partition without a leader) is a retriable
        ``KafkaError`` (code ``GROUP_LISTING_INCOMPLETE``), not a partial answer."""
        with self._ops_admin(timeout) as admin:
            stale = _group_listing_gap(admin)
            if stale is not None:
                admin = self._reconnect_ops(timeout)
                gap = _group_listing_gap(admin)
                if gap is not None:
                    raise KafkaError(
                        f"list consumer groups on {self.bootstrap}: {gap}",
                        code=GROUP_LISTING_INCOMPLETE,
                        retriable=True,
                    )
                log.info("listing the consumer groups of %s: %s; a new client, its "
                         "metadata read now, asks them all", self.bootstrap, stale)  # fmt: skip
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
            yield self._ops if self._ops is not None else self._reconnect_ops(timeout)
        except KafkaError:
            self._drop_ops()
            raise

    def _reconnect_ops(self, timeout: float) -> KafkaOpsAdmin:
        """A new kafka-python admin (its metadata read now), in place of any other."""
        self._drop_ops()
        self._ops = KafkaOpsAdmin(
            self.bootstrap, request_timeout_s=timeout, attempts=1, retry_s=0.0
        )
        return self._ops

    def _drop_ops(self) -> None:
        if self._ops is not None:
            with contextlib.suppress(Exception):
                self._ops.close()
            self._ops = None


def _group_listing_gap(admin: KafkaOpsAdmin) -> str | None:
    """Why ``admin``'s ListGroups would leave groups out now (``group_listing_gap``):
    the leaders of ``__consumer_offsets`` read afresh (a metadata request), against the
    brokers ListGroups asks, those of the kafka-python client's cached metadata (not in
    its public API). None too when no group ever committed on the cluster."""
    try:
        partitions = admin.partitions([GROUP_OFFSETS_TOPIC])
    except KafkaError as err:
        if err.code != "UNKNOWN_TOPIC_OR_PARTITION":
            raise
        return None
    asked = {int(b.node_id) for b in admin._admin._manager.cluster.brokers()}
    return group_listing_gap(asked, {p: s.leader for (_, p), s in partitions.items()})
