"""The control plane's domain operations: cluster registry, streams, routing, failover.

Synchronous and framework-free: the HTTP layer (``app.py``) calls it from worker
threads. Kafka is reached only through a ``TopicAdmin`` made by the ``admin_factory``
given to the constructor (``ControlPlaneAdmin`` by default; tests pass a stub), and routing
changes are computed only by the pure functions of ``streamplane.core.routing``.

Ordering rules that keep clients safe:

- topics are created *before* the routing that names them is saved, so a client never
  sees a segment whose topic does not exist; if creation fails nothing is saved and the
  topics this call created are deleted again; a topic that exists already is taken only
  if it is exactly what the stream would create, empty (``_create_topics``);
- every routing change goes through ``Store.save_routing`` (compare-and-set on the
  epoch) with its audit entry, and then the listeners (the watch hub) are told. A lane
  added to a live stream (``add_lane``) is such a change: its topic first, then the
  epoch that names it.

A stream's topics get min(3, live brokers) replicas unless it asks for a number (kept
with the stream), and ``min.insync.replicas`` 2 of 3 unless its config sets it
(``streamplane.core.replication``); a failover, and a lane added to a live stream, cap
both at the target's live brokers.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from streamplane.controlplane.cluster_io import ControlPlaneAdmin, TopicDescription
from streamplane.controlplane.store import (
    AuditEntry,
    ClusterRecord,
    Store,
    StreamRecord,
    utcnow,
)
from streamplane.core.replication import (
    MIN_INSYNC_REPLICAS,
    check_min_insync_replicas,
    parse_min_insync_replicas,
    replication_factor,
    topic_min_insync_replicas,
)
from streamplane.core.routing import (
    DEFAULT_LANES,
    RoutingTable,
    SegmentState,
    add_lane,
    commitlog_topic,
    home_cluster,
    move_lanes,
    new_routing_table,
    topic_max_message_bytes,
    transition,
    validate_cluster_name,
    validate_lane_name,
    validate_lanes,
    validate_stream_name,
)
from streamplane.exceptions import ConfigError, Conflict, KafkaError, NotFound

log = logging.getLogger(__name__)

# Record timestamps must be ingestion times: time lag is measured from them.
TIMESTAMP_TYPE = "LogAppendTime"
MANAGED_TOPIC_CONFIGS = ("message.timestamp.type", "max.message.bytes")

# How a cluster change refused by a check of its bootstrap ends.
_NOT_REGISTERED = "not registered (to register it anyway: --force, force=true in the API)"
_NOT_CHANGED = "not changed (to change it anyway: --force, force=true in the API)"

MAX_PARTITIONS = 10_000
MAX_REPLICATION_FACTOR = 32
MAX_RECORD_BYTES = 1 << 30

_TOPIC_CONFIG_KEY = re.compile(r"^[a-z][a-z0-9.]{0,127}$")
TAG_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$"
_TAG_KEY = re.compile(TAG_KEY_PATTERN)
_BOOTSTRAP_SERVER = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]{0,252}):(\d{1,5})$")

# Broker answers that mean the request was wrong (4xx), not that Kafka failed (5xx).
_BAD_REQUEST_CODES = frozenset(
    {
        "INVALID_REPLICATION_FACTOR",
        "INVALID_PARTITIONS",
        "INVALID_CONFIG",
        "POLICY_VIOLATION",
        "INVALID_REQUEST",
        "INVALID_TOPIC_EXCEPTION",
        "INVALID_REPLICA_ASSIGNMENT",
    }
)
_TOPIC_GONE_CODES = frozenset({"UNKNOWN_TOPIC_OR_PART", "UNKNOWN_TOPIC_ID"})
# A topic another attempt has just created answers these until its partitions have
# leaders (and the metadata has spread): describing it is tried again meanwhile.
_NOT_OPEN_YET_CODES = frozenset(
    {
        "_NOENT",
        "_UNKNOWN_PARTITION",
        "_UNKNOWN_TOPIC",
        "UNKNOWN_TOPIC_OR_PART",
        "NOT_LEADER_FOR_PARTITION",
        "LEADER_NOT_AVAILABLE",
        "UNKNOWN_LEADER_EPOCH",
    }
)
# How long a topic found existing may take to answer like that (a just-created topic's
# leaders are elected within a second or two).
EXISTING_TOPIC_WAIT_S = 5.0


class TopicAdmin(Protocol):
    """The part of ``ControlPlaneAdmin`` the control plane uses (one cluster)."""

    def create_topics(
        self,
        topics: Iterable[tuple[str, int, int, Mapping[str, str]]],
        timeout: float = ...,
    ) -> dict[str, KafkaError | None]: ...

    def delete_topics(
        self, names: Iterable[str], timeout: float = ...
    ) -> dict[str, KafkaError | None]: ...

    def end_offsets(self, topic: str, timeout: float = ...) -> dict[int, int]: ...

    def live_broker_count(self, timeout: float = ...) -> int: ...

    def describe_topic(self, topic: str, timeout: float = ...) -> TopicDescription: ...

    def cluster_id(self, timeout: float = ...) -> str: ...


AdminFactory = Callable[[str], TopicAdmin]
ChangeListener = Callable[[str, int | None], None]  # (stream, new epoch or None if deleted)


@dataclass(frozen=True)
class StreamSpec:
    """What ``create_stream`` is asked for (validated by ``validate``). A
    ``replication_factor`` of None is the default: ``replication_factor`` of
    ``streamplane.core.replication`` for the cluster's live brokers, min(3, brokers)."""

    name: str
    cluster: str
    lanes: tuple[str, ...] = DEFAULT_LANES
    partitions: int = 6
    dlq_partitions: int = 1
    replication_factor: int | None = None
    config: Mapping[str, str] = field(default_factory=dict)
    max_record_bytes: int = 1_048_576

    def validate(self) -> None:
        validate_stream_name(self.name)
        validate_cluster_name(self.cluster)
        validate_lanes(self.lanes)
        for what, value, high in (
            ("partitions", self.partitions, MAX_PARTITIONS),
            ("dlq_partitions", self.dlq_partitions, MAX_PARTITIONS),
            ("replication_factor", self.replication_factor, MAX_REPLICATION_FACTOR),
            ("max_record_bytes", self.max_record_bytes, MAX_RECORD_BYTES),
        ):
            if value is not None and not 1 <= value <= high:
                raise ConfigError(f"{what} must be between 1 and {high}, got {value}")
        validate_topic_config(self.config)


def check_lanes(lanes: Sequence[str]) -> tuple[str, ...]:
    for lane in lanes:
        validate_lane_name(lane)
    return tuple(lanes)


def validate_topic_config(config: Mapping[str, str]) -> None:
    for key, value in config.items():
        if not _TOPIC_CONFIG_KEY.fullmatch(key):
            raise ConfigError(f"invalid topic config key {key!r}")
        if key == "max.message.bytes":
            raise ConfigError("do not set max.message.bytes: set max_record_bytes instead")
        if key == "message.timestamp.type" and value != TIMESTAMP_TYPE:
            raise ConfigError(
                f"message.timestamp.type must be {TIMESTAMP_TYPE} (time lag relies on "
                "ingestion timestamps)"
            )
        if len(value) > 1024 or any(ord(c) < 32 for c in value):
            raise ConfigError(f"invalid value for topic config {key!r}")
        if key == MIN_INSYNC_REPLICAS:
            parse_min_insync_replicas(value)


def topic_config(
    config: Mapping[str, str], max_record_bytes: int, replication_factor: int = 1
) -> dict[str, str]:
    """The configs every topic of a stream gets, made with ``replication_factor``
    replicas (1 when not given): the user's plus the managed ones.
    ``min.insync.replicas`` is managed unless the user's config sets it
    (``topic_min_insync_replicas``: 2 with 3 replicas or more; either way capped at
    ``replication_factor``)."""
    return {
        **config,
        MIN_INSYNC_REPLICAS: topic_min_insync_replicas(
            config.get(MIN_INSYNC_REPLICAS), replication_factor
        ),
        "message.timestamp.type": TIMESTAMP_TYPE,
        # The producer bounds its batches by the same function (a batch over it is
        # refused whole: librdkafka does not split it).
        "max.message.bytes": str(topic_max_message_bytes(max_record_bytes)),
    }


def topic_differences(
    found: TopicDescription, partitions: int, replication_factor: int, configs: Mapping[str, str]
) -> list[str]:
    """How an existing topic differs from the one a stream would create (``partitions``,
    ``replication_factor``, ``configs`` from ``topic_config``); empty when it does not.
    The topic's own configs must be exactly ``configs``: a managed one missing, or a
    retention, cleanup.policy or min.insync.replicas the stream does not set, differs."""
    out = []
    if found.partitions != partitions:
        out.append(f"{found.partitions} partitions (the stream's: {partitions})")
    if found.replication_factors != (replication_factor,):
        have = "/".join(map(str, found.replication_factors))
        out.append(f"replication factor {have} (the stream's: {replication_factor})")
    for key in sorted(set(configs) | set(found.overrides)):
        have_value, want = found.overrides.get(key), configs.get(key)
        if have_value != want:
            shown = "the cluster's default" if have_value is None else have_value
            out.append(f"{key}={shown} (the stream's: {want or 'the default'})")
    return out


def validate_bootstrap(bootstrap: str) -> str:
    servers = [s.strip() for s in bootstrap.split(",")]
    if not bootstrap.strip() or len(bootstrap) > 1024:
        raise ConfigError("bootstrap must list host:port servers, separated by commas")
    for server in servers:
        m = _BOOTSTRAP_SERVER.fullmatch(server)
        if m is None or not 1 <= int(m.group(2)) <= 65535:
            raise ConfigError(f"invalid bootstrap server {server!r}: expected host:port")
    return ",".join(servers)


def validate_tags(tags: Mapping[str, str]) -> dict[str, str]:
    if len(tags) > 64:
        raise ConfigError("at most 64 tags per cluster")
    for key, value in tags.items():
        if not _TAG_KEY.fullmatch(key):
            raise ConfigError(
                f"invalid tag key {key!r}: use 1-63 letters, digits, '.', '_', '/' and '-'"
            )
        if len(value) > 255 or any(ord(c) < 32 for c in value):
            raise ConfigError(f"invalid value for tag {key!r}: at most 255 printable characters")
    return dict(tags)


def repoint_refusal(
    name: str,
    current: str,
    bootstrap: str,
    registered_id: str | None,
    answering_id: str | None,
    streams: Sequence[str],
) -> str | None:
    """Why cluster ``name`` must not be moved from ``current`` to ``bootstrap`` without an
    operator's word (None: it may), given the Kafka cluster id it is registered as
    (``registered_id``, None if not known), the one ``bootstrap`` answers with
    (``answering_id``, None if it does not answer) and the streams with segments on it.

    A move keeps every segment on the name: to another Kafka cluster, the registry takes
    that cluster's topics of the same names for its own (the sealer fenced 4 topics of a
    live stream another control plane had made there). Without segments, nothing is
    taken; the same Kafka cluster at another address is what a move is for."""
    if not streams or (registered_id is not None and answering_id == registered_id):
        return None
    if answering_id is None:
        registered = "" if registered_id is None else f" (registered: {registered_id})"
        found = (
            f"{bootstrap} does not answer, so it cannot be told to be the Kafka cluster "
            f"registered{registered}"
        )
    elif registered_id is None:
        found = (
            f"{bootstrap} is Kafka cluster {answering_id}, and the one registered is not "
            f"known ({current} does not answer)"
        )
    else:
        found = (
            f"{bootstrap} is another Kafka cluster (id {answering_id}; registered: {registered_id})"
        )
    return (
        f"cluster {name!r} not re-pointed from {current} to {bootstrap}: {found}, and the "
        f"registry holds segments of streams {', '.join(streams)} there"
    )


def parse_tag_filter(items: Iterable[str]) -> dict[str, str]:
    """``["env:prod", "zone:a"]`` -> ``{"env": "prod", "zone": "a"}`` (``key:value``)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition(":")
        if not sep or not key:
            raise ConfigError(f"invalid tag filter {item!r}: expected key:value")
        out[key] = value
    return validate_tags(out)  # a key no tag can have matched nothing, silently


class ControlPlaneService:
    """Registry, streams and routing over a ``Store``; Kafka through ``admin_factory``."""

    def __init__(
        self,
        store: Store,
        admin_factory: AdminFactory = ControlPlaneAdmin,
        *,
        kafka_timeout: float = 15.0,
    ) -> None:
        self.store = store
        self._admin_factory = admin_factory
        self._kafka_timeout = kafka_timeout
        self._admins: dict[str, TopicAdmin] = {}
        self._listeners: list[ChangeListener] = []
        self._guard = threading.Lock()
        self._stream_locks: dict[str, threading.Lock] = {}

    def close(self) -> None:
        self.store.close()

    def add_listener(self, listener: ChangeListener) -> None:
        """Called after every saved routing change (from the calling thread)."""
        self._listeners.append(listener)

    # ------------------------------------------------------------------ clusters
    def register_cluster(
        self,
        name: str,
        bootstrap: str,
        tags: Mapping[str, str] | None = None,
        actor: str = "api",
        force: bool = False,
    ) -> ClusterRecord:
        """Register a cluster. Its bootstrap must answer, and be a Kafka cluster no other
        name is registered for (by cluster id), unless ``force`` (as ``update_cluster``).
        The Kafka cluster id it answers with is recorded (forced while it does not
        answer: the first answer is, ``learn_kafka_cluster_id``)."""
        validate_cluster_name(name)
        now = utcnow()
        record = ClusterRecord(
            name=name,
            bootstrap=validate_bootstrap(bootstrap),
            tags=validate_tags(tags or {}),
            created_at=now,
            updated_at=now,
        )
        try:
            self.store.get_cluster(name)
        except NotFound:
            pass
        else:  # before asking Kafka: the name alone decides
            raise Conflict(f"cluster {name!r} is already registered")
        kafka_id: str | None
        if force:  # recorded if it answers; else the first time it does
            kafka_id = _id_if_answering(self._probe_admin(record.bootstrap), self._check_timeout)
        else:
            kafka_id = self._answering_cluster_id(name, record.bootstrap, _NOT_REGISTERED)
            self._check_registered_once(name, record.bootstrap, kafka_id, _NOT_REGISTERED)
        record = replace(record, kafka_cluster_id=kafka_id or None)
        detail = {
            "bootstrap": record.bootstrap,
            "tags": dict(record.tags),
            "kafka_cluster_id": record.kafka_cluster_id,
        }
        self.store.add_cluster(record, AuditEntry(actor, "cluster.register", None, detail))
        return record

    def update_cluster(
        self,
        name: str,
        bootstrap: str | None = None,
        tags: Mapping[str, str] | None = None,
        actor: str = "api",
        force: bool = False,
        protect_segments: bool = False,
    ) -> ClusterRecord:
        """Change a cluster's bootstrap and/or replace its tags. A new bootstrap must
        answer and be the same Kafka cluster (by cluster id: the recorded one, else the
        one the registered bootstrap answers with, if it does), unless ``force``: a
        typo made the cluster look down, and the health checks failed every stream
        over away from it within seconds. With ``protect_segments`` too, a forced move
        is refused all the same (Conflict, 409) when ``repoint_refusal`` refuses it:
        streams have segments on the cluster and the new bootstrap is not (or cannot be
        told to be) its Kafka cluster (what `clusters import-local` asks).

        The Kafka cluster id the bootstrap answers with is recorded with it (the
        cluster the name stands for from now on); a forced bootstrap that does not
        answer records none (the first answer is recorded), unless it is the same
        bootstrap. A forced update with the registered bootstrap itself takes the
        Kafka cluster answering there now as the cluster's (an operator's word after
        the sealer refused to fence on another cluster)."""
        validate_cluster_name(name)
        bootstrap = None if bootstrap is None else validate_bootstrap(bootstrap)
        tags = None if tags is None else validate_tags(tags)
        kafka_id: str | None = None
        if bootstrap is not None:
            if protect_segments:
                refusal = self.repoint_refusal(name, bootstrap)
                if refusal is not None:
                    raise Conflict(refusal)
            current = self.store.get_cluster(name)
            if force:
                kafka_id = _id_if_answering(self._probe_admin(bootstrap), self._check_timeout)
                if kafka_id is None and bootstrap == current.bootstrap:
                    kafka_id = current.kafka_cluster_id
            elif bootstrap != current.bootstrap:
                kafka_id = self._check_same_cluster(current, bootstrap)
            else:
                kafka_id = current.kafka_cluster_id
        detail: dict[str, Any] = {"cluster": name}
        if bootstrap is not None:
            detail["bootstrap"] = bootstrap
            detail["kafka_cluster_id"] = kafka_id
        if tags is not None:
            detail["tags"] = dict(tags)
        record = self.store.update_cluster(
            name, AuditEntry(actor, "cluster.update", None, detail), bootstrap, tags, kafka_id
        )
        return record

    def _check_same_cluster(self, current: ClusterRecord, bootstrap: str) -> str:
        """The Kafka cluster id ``bootstrap`` answers with, if it is the registered
        cluster ``current`` (by its recorded id; while none is recorded, by what its
        registered bootstrap answers, if it does) and no other name's; else a
        ConfigError (400) or Conflict (409)."""
        name = current.name
        new_id = self._answering_cluster_id(name, bootstrap, _NOT_CHANGED)
        old_id = current.kafka_cluster_id
        if old_id is None:  # not recorded yet; gone or down too: the new address is all
            old_id = _id_if_answering(self._admin(current.bootstrap), self._check_timeout)
        if old_id is not None and old_id != new_id:
            raise ConfigError(
                f"cluster {name!r}: {bootstrap} is another Kafka cluster (id {new_id}; "
                f"{current.bootstrap} is {old_id}); {_NOT_CHANGED}"
            )
        self._check_registered_once(name, bootstrap, new_id, _NOT_CHANGED)
        return new_id

    def repoint_refusal(self, name: str, bootstrap: str) -> str | None:
        """Why cluster ``name`` must not be moved to ``bootstrap`` without an operator's
        word, None if it may (``repoint_refusal``, the function): Kafka is asked only
        when streams have segments on it, and the registered bootstrap only while no
        Kafka cluster id is recorded."""
        current = self.store.get_cluster(name)
        bootstrap = validate_bootstrap(bootstrap)
        if bootstrap == current.bootstrap:
            return None
        streams = self.store.streams_with_segments_on(name)
        if not streams:
            return None
        registered = current.kafka_cluster_id
        if registered is None:
            registered = _id_if_answering(self._admin(current.bootstrap), self._check_timeout)
        answering = _id_if_answering(self._probe_admin(bootstrap), self._check_timeout)
        return repoint_refusal(name, current.bootstrap, bootstrap, registered, answering, streams)

    def kafka_cluster_id(self, bootstrap: str, timeout: float | None = None) -> str | None:
        """The Kafka cluster id a registered cluster's ``bootstrap`` answers with (None if
        it gives none); raises ``KafkaError`` if it does not answer."""
        admin = self._admin(bootstrap)
        return admin.cluster_id(self._check_timeout if timeout is None else timeout) or None

    def learn_kafka_cluster_id(self, cluster: ClusterRecord, timeout: float | None = None) -> None:
        """Record the Kafka cluster id of ``cluster`` (one without, registered before
        schema version 9) as its registered bootstrap answers now; nothing if it does
        not answer. Raises database errors."""
        try:
            kafka_id = self.kafka_cluster_id(cluster.bootstrap, timeout)
        except KafkaError:
            return
        if kafka_id and self.store.record_kafka_cluster_id(
            cluster.name, cluster.bootstrap, kafka_id
        ):
            log.info("cluster %s is Kafka cluster %s (recorded)", cluster.name, kafka_id)

    @property
    def _check_timeout(self) -> float:
        return min(5.0, self._kafka_timeout)

    def _answering_cluster_id(self, name: str, bootstrap: str, refused: str) -> str:
        """The Kafka cluster id ``bootstrap`` answers with; a ConfigError (400) ending
        with ``refused`` if it does not answer."""
        try:
            return self._probe_admin(bootstrap).cluster_id(self._check_timeout)
        except KafkaError as exc:
            raise ConfigError(
                f"cluster {name!r}: {bootstrap} does not answer ({exc}); {refused}"
            ) from None

    def _check_registered_once(
        self, name: str, bootstrap: str, kafka_id: str, refused: str
    ) -> None:
        """A Conflict (409) if another registered name is the Kafka cluster ``kafka_id``.
        Every other registered cluster is asked for its id, all at once; one that does
        not answer cannot be compared and is passed over."""
        others = [c for c in self.store.list_clusters() if c.name != name]
        if not kafka_id or not others:
            return

        def id_of(cluster: ClusterRecord) -> str | None:
            try:
                return self._admin(cluster.bootstrap).cluster_id(self._check_timeout)
            except KafkaError:
                return None

        with ThreadPoolExecutor(min(8, len(others)), thread_name_prefix="cluster-id") as pool:
            ids = list(pool.map(id_of, others))
        same = next((c for c, i in zip(others, ids, strict=True) if i == kafka_id), None)
        if same is not None:
            raise Conflict(
                f"cluster {name!r}: {bootstrap} is Kafka cluster {kafka_id}, already "
                f"registered as {same.name!r} ({same.bootstrap}): one name per Kafka "
                f"cluster; {refused}"
            )

    def _probe_admin(self, bootstrap: str) -> TopicAdmin:
        """The admin of a bootstrap that may be a typo: cached only if it is already."""
        with self._guard:
            known = self._admins.get(bootstrap)
        return known if known is not None else self._admin_factory(bootstrap)

    def delete_cluster(self, name: str, actor: str = "api") -> None:
        validate_cluster_name(name)
        self.store.delete_cluster(
            name, AuditEntry(actor, "cluster.delete", None, {"cluster": name})
        )

    def get_cluster(self, name: str) -> ClusterRecord:
        validate_cluster_name(name)
        return self.store.get_cluster(name)

    def list_clusters(self, tags: Mapping[str, str] | None = None) -> list[ClusterRecord]:
        """Clusters having every one of ``tags`` (all clusters when empty)."""
        wanted = dict(tags or {})
        return [
            c
            for c in self.store.list_clusters()
            if all(c.tags.get(k) == v for k, v in wanted.items())
        ]

    # ------------------------------------------------------------------ streams
    def create_stream(
        self, spec: StreamSpec, actor: str = "api"
    ) -> tuple[StreamRecord, RoutingTable]:
        """Create the stream's topics on its cluster, then save it. Without a replication
        factor in ``spec``, the topics get min(3, the cluster's live brokers) replicas
        (``core.replication``), and the stream keeps that number; a factor given is kept
        as it is (Kafka refuses one above the broker count: a ConfigError)."""
        spec.validate()
        with self._stream_lock(spec.name):
            try:
                self.store.get_stream(spec.name)
            except NotFound:
                pass
            else:
                raise Conflict(f"stream {spec.name!r} already exists")
            table = new_routing_table(
                spec.name,
                spec.lanes,
                spec.cluster,
                spec.partitions,
                spec.dlq_partitions,
                epoch=self.store.first_epoch(spec.name),
            )
            cluster = self.store.get_cluster(spec.cluster)
            refused = f"stream {spec.name!r} not created"
            replicas = spec.replication_factor
            if replicas is None:
                replicas = replication_factor(self._live_broker_count(cluster, refused))
            own_min_insync = spec.config.get(MIN_INSYNC_REPLICAS)
            if own_min_insync is not None:
                check_min_insync_replicas(own_min_insync, replicas)
            configs = topic_config(spec.config, spec.max_record_bytes, replicas)
            wanted = [(s.topic, s.partitions, replicas, configs) for s in table.segments]
            try:
                created = self._create_topics(cluster, wanted, refused)
            except (KafkaError, Conflict):
                # As in failover: another replica creating the stream at once made the
                # topics and saved first.
                if spec.name in self.store.stream_epochs([spec.name]):
                    raise Conflict(f"stream {spec.name!r} already exists") from None
                raise
            record = StreamRecord(
                name=spec.name,
                lanes=table.lanes,
                partitions=spec.partitions,
                dlq_partitions=spec.dlq_partitions,
                replication_factor=replicas,
                config=dict(spec.config),
                max_record_bytes=spec.max_record_bytes,
                epoch=table.epoch,
                created_at=utcnow(),
            )
            detail = {
                "cluster": cluster.name,
                "lanes": list(table.lanes),
                "replication_factor": replicas,
                "topics": [t[0] for t in wanted],
            }
            try:
                self.store.add_stream(
                    record, table, AuditEntry(actor, "stream.create", spec.name, detail)
                )
            except BaseException:
                self._drop_unsaved(cluster, spec.name, created)
                raise
        self._notify(spec.name, table.epoch)
        return record, table

    def delete_stream(self, name: str, delete_topics: bool = True, actor: str = "api") -> None:
        validate_stream_name(name)
        with self._stream_lock(name):
            table = self.store.routing(name)
            deleted: list[str] = []
            if delete_topics:
                for cluster_name, topics in _topics_by_cluster(table).items():
                    try:
                        cluster = self.store.get_cluster(cluster_name)
                    except NotFound:
                        continue  # only retired segments can outlive their cluster
                    # with the side topic consumers spill commit-log state to, if any
                    side = commitlog_topic(name)
                    results = self._admin(cluster.bootstrap).delete_topics(
                        [*topics, side], timeout=self._kafka_timeout
                    )
                    errors = [e for e in results.values() if e and e.code not in _TOPIC_GONE_CODES]
                    if errors:
                        raise KafkaError(
                            f"stream {name!r} not deleted: cluster {cluster_name}: {errors[0]} "
                            "(retry, or delete it keeping the topics: `streams delete "
                            "--keep-topics`, delete_topics=false in the API)",
                            code=errors[0].code,
                            retriable=errors[0].retriable,
                        )
                    deleted.extend(topics)
                    if side in results and results[side] is None:
                        deleted.append(side)
            detail = {"epoch": table.epoch, "deleted_topics": deleted}
            self.store.delete_stream(name, AuditEntry(actor, "stream.delete", name, detail))
        self._notify(name, None)

    def get_stream(self, name: str) -> tuple[StreamRecord, RoutingTable]:
        validate_stream_name(name)
        return self.store.stream_with_routing(name)

    def list_streams(self) -> list[tuple[StreamRecord, list[str]]]:
        """Every stream with the clusters of its active segments."""
        active = self.store.active_clusters()
        return [(s, active.get(s.name, [])) for s in self.store.list_streams()]

    def routing(self, name: str) -> RoutingTable:
        validate_stream_name(name)
        return self.store.routing(name)

    # ------------------------------------------------------------------ routing changes
    def failover(
        self,
        name: str,
        cluster: str,
        lanes: Sequence[str] | None = None,
        partitions: int | None = None,
        reason: str = "",
        actor: str = "api",
    ) -> RoutingTable:
        """Move ``lanes`` (default: every lane but the dlq) to new topics on ``cluster``.

        The new topics are created first; then, in one epoch, they become the lanes'
        active segments and the old ones start draining. They get the stream's
        replication factor, capped at the live brokers of ``cluster`` (and their
        ``min.insync.replicas`` likewise): a failover to a smaller cluster is not
        refused (availability first); the audit entry records the factor used and a
        warning is logged. The stream keeps its own factor for later moves.
        """
        validate_stream_name(name)
        validate_cluster_name(cluster)
        if partitions is not None and not 1 <= partitions <= MAX_PARTITIONS:
            raise ConfigError(f"partitions must be between 1 and {MAX_PARTITIONS}")
        with self._stream_lock(name):
            stream, table = self.store.stream_with_routing(name)
            target = self.store.get_cluster(cluster)
            moving = list(table.lanes) if lanes is None else list(check_lanes(lanes))
            if len(set(moving)) != len(moving):
                raise ConfigError("a lane is listed twice")
            new = move_lanes(table, moving, cluster, partitions)
            moving = [s.lane for s in new.segments if s.epoch == new.epoch]  # not already there
            refused = f"stream {name!r} not moved"
            replicas, configs, live = self._new_topic_settings(
                stream, target, refused, f"stream {name} moves to cluster {cluster}"
            )
            wanted = [
                (s.topic, s.partitions, replicas, configs)
                for s in new.segments
                if s.epoch == new.epoch
            ]
            try:
                created = self._create_topics(target, wanted, refused)
            except (KafkaError, Conflict):
                # Trouble with a topic of the new epoch is usually another replica's
                # failover of the stream, saved meanwhile (it made the topics): the
                # stream moved on, that is the answer (409), not the topic's trouble.
                self._raise_if_moved(name, table.epoch)
                raise
            detail = {
                "from_epoch": table.epoch,
                "to_epoch": new.epoch,
                "cluster": cluster,
                "lanes": moving,
                "partitions": partitions,
                "replication_factor": replicas,
                "min_insync_replicas": int(configs[MIN_INSYNC_REPLICAS]),
                "stream_replication_factor": stream.replication_factor,
                "live_brokers": live,
                "reason": reason,
                "topics": [t[0] for t in wanted],
                "draining": [
                    {"cluster": s.cluster, "topic": s.topic}
                    for s in table.segments
                    if s.lane in moving and s.state is SegmentState.ACTIVE
                ],
            }
            try:
                self.store.save_routing(
                    new, table.epoch, AuditEntry(actor, "stream.failover", name, detail)
                )
            except BaseException:
                self._drop_unsaved(target, name, created)
                raise
        self._notify(name, new.epoch)
        return new

    def add_lane(
        self,
        name: str,
        lane: str,
        before: str | None = None,
        partitions: int | None = None,
        cluster: str | None = None,
        actor: str = "api",
    ) -> RoutingTable:
        """Add ``lane`` to live stream ``name``, in the priority order just above
        ``before`` (default: last, above the dlq only), in a new epoch
        (``core.routing.add_lane``): producers and consumers watching the routing see it.

        Its topic is made as a failover's: named by the new epoch, the stream's topic
        configs, the stream's replication factor capped at the cluster's live brokers.
        It goes to the cluster every other lane is active on (``cluster`` when they are
        split over several, or to put it elsewhere), with the stream's partition count
        unless ``partitions`` says otherwise."""
        validate_stream_name(name)
        validate_lane_name(lane)
        if cluster is not None:
            validate_cluster_name(cluster)
        if partitions is not None and not 1 <= partitions <= MAX_PARTITIONS:
            raise ConfigError(f"partitions must be between 1 and {MAX_PARTITIONS}")
        with self._stream_lock(name):
            stream, table = self.store.stream_with_routing(name)
            where = cluster or home_cluster(table)
            if where is None:
                split = sorted({table.active(other).cluster for other in table.lanes})
                raise ConfigError(
                    f"stream {name!r} has lanes active on {', '.join(split)}: name the "
                    f"cluster lane {lane!r} goes to"
                )
            new = add_lane(table, lane, where, partitions or stream.partitions, before)
            target = self.store.get_cluster(where)
            refused = f"lane {lane!r} not added to stream {name!r}"
            replicas, configs, _ = self._new_topic_settings(
                stream, target, refused, f"stream {name} gets lane {lane} on cluster {where}"
            )
            segment = new.active(lane)
            wanted = [(segment.topic, segment.partitions, replicas, configs)]
            try:
                created = self._create_topics(target, wanted, refused)
            except (KafkaError, Conflict):
                self._raise_if_moved(name, table.epoch)  # as in failover
                raise
            detail = {
                "from_epoch": table.epoch,
                "to_epoch": new.epoch,
                "lane": lane,
                "lanes": list(new.lanes),
                "cluster": where,
                "topic": segment.topic,
                "partitions": segment.partitions,
                "replication_factor": replicas,
                "min_insync_replicas": int(configs[MIN_INSYNC_REPLICAS]),
            }
            try:
                self.store.save_routing(
                    new, table.epoch, AuditEntry(actor, "lane.add", name, detail)
                )
            except BaseException:
                self._drop_unsaved(target, name, created)
                raise
        self._notify(name, new.epoch)
        return new

    def transition_segment(
        self,
        name: str,
        cluster: str,
        topic: str,
        to: SegmentState,
        sealed_end_offsets: Mapping[int, int] | None = None,
        actor: str = "api",
    ) -> RoutingTable:
        """Move one segment forward in its life cycle (draining -> sealed -> retired)."""
        validate_stream_name(name)
        with self._stream_lock(name):
            table = self.store.routing(name)
            new = transition(table, topic, cluster, to, sealed_end_offsets)
            detail = {
                "from_epoch": table.epoch,
                "to_epoch": new.epoch,
                "cluster": cluster,
                "topic": topic,
                "state": to.value,
            }
            self.store.save_routing(
                new, table.epoch, AuditEntry(actor, "segment.transition", name, detail)
            )
        self._notify(name, new.epoch)
        return new

    def audit(self, stream: str | None = None, limit: int = 100) -> list[AuditEntry]:
        if stream is not None:
            validate_stream_name(stream)
        return self.store.audit(stream, limit)

    # ------------------------------------------------------------------ helpers
    @contextmanager
    def _stream_lock(self, name: str) -> Iterator[None]:
        # Serialises changes to one stream in this replica; the store's epoch
        # compare-and-set covers other replicas.
        with self._guard:
            lock = self._stream_locks.setdefault(name, threading.Lock())
        with lock:
            yield

    def _admin(self, bootstrap: str) -> TopicAdmin:
        with self._guard:
            admin = self._admins.get(bootstrap)
            if admin is None:
                admin = self._admins[bootstrap] = self._admin_factory(bootstrap)
            return admin

    def _new_topic_settings(
        self, stream: StreamRecord, target: ClusterRecord, refused: str, doing: str
    ) -> tuple[int, dict[str, str], int]:
        """The replication factor and configs of new topics of ``stream`` on ``target``
        (a failover's, a lane added's), and the cluster's live brokers: the stream's
        factor capped at those, ``min.insync.replicas`` likewise (availability first). A
        capped factor is logged as a warning starting with ``doing`` (a failover's audit
        entry holds both factors and the live brokers: the CLI warns from it); a cluster
        that does not answer is a KafkaError starting with ``refused``."""
        live = self._live_broker_count(target, refused)
        replicas = replication_factor(live, stream.replication_factor)
        configs = topic_config(stream.config, stream.max_record_bytes, replicas)
        if replicas < stream.replication_factor:
            log.warning(
                "%s with replication factor %d, not its %d: the cluster has %d live "
                "brokers (min.insync.replicas %s)",
                doing,
                replicas,
                stream.replication_factor,
                live,
                configs[MIN_INSYNC_REPLICAS],
            )
        return replicas, configs, live

    def _live_broker_count(self, cluster: ClusterRecord, what: str) -> int:
        """How many live brokers ``cluster`` has; a KafkaError starting with ``what``
        if it does not answer."""
        try:
            return self._admin(cluster.bootstrap).live_broker_count(self._kafka_timeout)
        except KafkaError as exc:
            raise KafkaError(
                f"{what}: cluster {cluster.name}: {exc}",
                code=exc.code,
                retriable=exc.retriable,
                fatal=exc.fatal,
            ) from None

    def _create_topics(
        self,
        cluster: ClusterRecord,
        topics: Sequence[tuple[str, int, int, Mapping[str, str]]],
        what: str,
    ) -> list[str]:
        """Create all of ``topics`` or none: on a failure, delete those just created.
        Returns the ones created (the others were adopted).

        ``topics`` are a new epoch's, not in any routing table yet, so no producer knows
        them: one that exists already, empty and exactly as it would be created
        (partitions, replication factor, topic configs), was left by an attempt that
        died between creating its topics and saving its routing (a control plane killed
        there made the stream's name, or its failover, unusable until someone deleted
        the topics by hand): it is adopted. Any other (one with records, or made by
        hand with other settings) is a conflict naming what differs: adopting a
        hand-made topic gave a stream a replication factor and configs it does not
        have. Another replica's attempt in progress may have made it: the store's
        compare-and-set lets one of the two save, and the loser deletes only what it
        created and the winner's table does not hold (``_drop_unsaved``)."""
        admin = self._admin(cluster.bootstrap)
        results = admin.create_topics(topics, timeout=self._kafka_timeout)
        created = [t for t, e in results.items() if e is None]
        failed = {
            t: e for t, e in results.items() if e is not None and e.code != "TOPIC_ALREADY_EXISTS"
        }
        refused: dict[str, str] = {}
        adopted: list[str] = []
        for topic, partitions, replicas, configs in topics:
            error = results.get(topic)
            if error is None or error.code != "TOPIC_ALREADY_EXISTS":
                continue
            try:
                found, ends = self._describe_existing(admin, topic)
            except KafkaError as exc:
                failed[topic] = KafkaError(
                    f"topic {topic} exists already and could not be described: {exc}",
                    code=exc.code,
                    retriable=exc.retriable,
                )
                continue
            differences = topic_differences(found, partitions, replicas, configs)
            if any(ends.values()):
                differences.insert(0, "it has held records")
            if differences:
                refused[topic] = "; ".join(differences)
            else:
                adopted.append(topic)
        if not failed and not refused:
            for topic in adopted:
                log.warning(
                    "adopting topic %s on %s: empty and as the stream would create it "
                    "(partitions, replication factor, configs), left by an unsaved change",
                    topic,
                    cluster.name,
                )
            return created
        self._delete_quietly(cluster, created)
        if refused:
            topic = min(refused)
            raise Conflict(
                f"{what}: topic {topic} already exists on cluster {cluster.name} and is not "
                f"one the stream would create: {refused[topic]} (delete the topic on "
                f"{cluster.name} and retry)"
            )
        err = failed[min(failed)]
        message = f"{what}: cluster {cluster.name}: {err}"
        if err.code in _BAD_REQUEST_CODES:
            raise ConfigError(message)
        raise KafkaError(message, code=err.code, retriable=err.retriable, fatal=err.fatal)

    def _describe_existing(
        self, admin: TopicAdmin, topic: str
    ) -> tuple[TopicDescription, dict[int, int]]:
        """A topic found existing, and its end offsets; tried again for a few seconds
        while it answers as a topic just created (by another replica's attempt: its
        partitions' leaders not elected yet, "Not leader for partition")."""
        deadline = time.monotonic() + min(EXISTING_TOPIC_WAIT_S, self._kafka_timeout)
        while True:
            try:
                found = admin.describe_topic(topic, timeout=self._kafka_timeout)
                return found, admin.end_offsets(topic, timeout=self._kafka_timeout)
            except KafkaError as exc:
                if exc.code not in _NOT_OPEN_YET_CODES or time.monotonic() >= deadline:
                    raise
            time.sleep(0.2)

    def _raise_if_moved(self, name: str, from_epoch: int) -> None:
        """``Conflict`` if stream ``name`` is no longer at ``from_epoch`` (``NotFound``
        if it was deleted meanwhile)."""
        epoch = self.store.stream_epochs([name]).get(name)
        if epoch is None:
            raise NotFound(f"unknown stream {name!r}")
        if epoch != from_epoch:
            raise Conflict(
                f"stream {name!r} moved on to epoch {epoch} while this change was prepared "
                f"from epoch {from_epoch}: retry"
            )

    def _drop_unsaved(self, cluster: ClusterRecord, stream: str, created: list[str]) -> None:
        """After a failed save: delete the topics this attempt created, except those the
        stream's current routing holds (another replica adopted them and saved first)."""
        try:
            saved = {
                s.topic for s in self.store.routing(stream).segments if s.cluster == cluster.name
            }
        except NotFound:
            saved = set()
        self._delete_quietly(cluster, [t for t in created if t not in saved])

    def _delete_quietly(self, cluster: ClusterRecord, topics: list[str]) -> None:
        if not topics:
            return
        try:
            results = self._admin(cluster.bootstrap).delete_topics(
                topics, timeout=self._kafka_timeout
            )
        except Exception:
            log.exception("cleaning up topics %s on %s failed", topics, cluster.name)
            return
        for topic, err in results.items():
            if err is not None:
                log.warning("could not delete topic %s on %s: %s", topic, cluster.name, err)

    def _notify(self, stream: str, epoch: int | None) -> None:
        for listener in self._listeners:
            try:
                listener(stream, epoch)
            except Exception:
                log.exception("routing change listener failed")


def _id_if_answering(admin: TopicAdmin, timeout: float) -> str | None:
    """The Kafka cluster id ``admin``'s cluster answers with; None if it does not answer
    (or gives none)."""
    try:
        return admin.cluster_id(timeout) or None
    except KafkaError:
        return None


def _topics_by_cluster(table: RoutingTable) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for s in table.segments:
        out.setdefault(s.cluster, []).append(s.topic)
    return out
