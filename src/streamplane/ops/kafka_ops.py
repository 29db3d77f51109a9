"""A narrow interface over the Kafka Admin API for the ops tools, and its adapter.

``OpsAdmin`` is everything the metrics fetcher, the executor, autothrottle and the
tag-placed topic creation need from a cluster, and nothing more (kafka-kit's
``kafkaadmin`` package plays the same role). ``KafkaOpsAdmin`` implements it over
kafka-python, which has the partition-reassignment APIs (KIP-455) that
confluent-kafka lacks; ``streamplane.ops.stub.StubOpsAdmin`` implements it in memory
for unit tests.

Errors: every failure of a whole call is a ``streamplane.KafkaError`` (code = the
broker's error name, ``retriable`` kept); calls over many resources return per-resource
results (``KafkaError | None``) instead of failing as a whole, so a partial failure is
data.

Storage figures come from DescribeLogDirs: partition sizes, and since version 4
(Kafka 3.3, KIP-827) each log dir's ``total_bytes`` / ``usable_bytes``. Kafka 4.x
reports both; a broker that does not (``-1``) gets ``None`` and the metrics fetcher
says so.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from streamplane.core.mapper.models import TopicPartition
from streamplane.exceptions import KafkaError

ConfigKind = Literal["broker", "topic"]


@dataclass(frozen=True, slots=True)
class BrokerNode:
    """A live broker, as the cluster describes it."""

    id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Where a partition's replicas are (leader first as assigned), and which are in sync."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int

    @property
    def key(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def in_sync(self) -> bool:
        """Every assigned replica is in the ISR."""
        return set(self.replicas) <= set(self.isr)


@dataclass(frozen=True, slots=True)
class LogDir:
    """One log directory of one broker."""

    broker_id: int
    path: str
    total_bytes: int | None
    usable_bytes: int | None
    sizes: Mapping[TopicPartition, int] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Reassignment:
    """A reassignment in progress: the full replica set while it runs, and the delta."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]

    @property
    def key(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def target(self) -> tuple[int, ...]:
        """The replicas the partition will have (Kafka lists the target first, in order)."""
        return tuple(b for b in self.replicas if b not in self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        """The replicas the partition had (and gets back if the reassignment is cancelled)."""
        return tuple(b for b in self.replicas if b not in self.adding)


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """Incremental config changes of one broker or topic: keys to set, keys to delete."""

    kind: ConfigKind
    name: str
    set: Mapping[str, str] = field(default_factory=dict)
    delete: tuple[str, ...] = ()


class OpsAdmin(Protocol):
    """What the ops tools ask of one Kafka cluster."""

    def brokers(self) -> dict[int, BrokerNode]:
        """Live brokers by id (a dead or fenced broker is absent)."""
        ...

    def partitions(
        self, topics: Collection[str] | None = None
    ) -> dict[TopicPartition, PartitionState]:
        """Partitions of ``topics`` (default: every topic, internal ones included)."""
        ...

    def log_dirs(
        self, brokers: Collection[int] | None = None
    ) -> dict[int, list[LogDir] | KafkaError]:
        """Log directories per broker (default: every live broker); a failure per broker."""
        ...

    def alter_reassignments(
        self, targets: Mapping[TopicPartition, Sequence[int] | None]
    ) -> dict[TopicPartition, KafkaError | None]:
        """Start reassignments (``None`` cancels the one in progress)."""
        ...

    def list_reassignments(self) -> dict[TopicPartition, Reassignment]:
        """Reassignments in progress."""
        ...

    def alter_configs(
        self, changes: Sequence[ConfigChange]
    ) -> dict[tuple[ConfigKind, str], KafkaError | None]:
        """Incremental config changes (IncrementalAlterConfigs), per resource."""
        ...

    def describe_configs(
        self, kind: ConfigKind, names: Collection[str]
    ) -> dict[str, dict[str, str]]:
        """Non-default config values of brokers or topics, by name."""
        ...

    def create_topic(
        self,
        name: str,
        assignment: Mapping[int, Sequence[int]],
        configs: Mapping[str, str] | None = None,
    ) -> None:
        """Create a topic with an explicit replica assignment (partition -> replicas)."""
        ...

    def bounded(self, seconds: float) -> contextlib.AbstractContextManager[None]:
        """Calls made inside give up ``seconds`` after it began, all of them together
        (each is tried at least once), instead of the adapter's usual retries."""
        ...

    def close(self) -> None: ...


# kafka-python 2.x words a failed response as "Request '<repr>' failed with response
# '<repr>'": hundreds of characters around the broker's own error_message.
_RESPONSE_ERROR_MESSAGE = re.compile(r"error_message='((?:[^'\\]|\\.)+)'")


def error_from(exc: BaseException | type[BaseException], context: str) -> KafkaError:
    """A kafka-python error (instance or class) as a ``streamplane.KafkaError``; a
    failed response is told by the broker's error messages, not its request and
    response dumps."""
    cls = exc if isinstance(exc, type) else type(exc)
    code = getattr(cls, "message", None)
    code = code if isinstance(code, str) and code else cls.__name__
    detail = cls.__name__ if isinstance(exc, type) else str(exc)
    if "failed with response" in detail:
        said = list(dict.fromkeys(_RESPONSE_ERROR_MESSAGE.findall(detail)))
        head = detail.split(":", 1)[0] if detail.startswith("[Error") else cls.__name__
        detail = f"{head}: {'; '.join(said)}" if said else head
    return KafkaError(
        f"{context}: {detail}", code=code, retriable=bool(getattr(cls, "retriable", False))
    )


class KafkaOpsAdmin:
    """``OpsAdmin`` over kafka-python's ``KafkaAdminClient`` (one cluster).

    The client connects in the constructor (kafka-python bootstraps eagerly); an
    unreachable cluster is a ``KafkaError`` there.
    """

    def __init__(
        self,
        bootstrap: str,
        *,
        request_timeout_s: float = 30.0,
        connect_timeout_s: float = 10.0,
        attempts: int = 5,
        retry_s: float = 20.0,
        extra_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self._attempts = max(1, attempts)
        self._retry_s = retry_s
        self._timeout_ms = int(request_timeout_s * 1000)
        self._conf: dict[str, Any] = {
            "bootstrap_servers": bootstrap.split(","),
            "client_id": "streamplane-ops",
            "request_timeout_ms": self._timeout_ms,
            # Reaching a bootstrap broker takes well under a second when one answers:
            # an unreachable cluster is told in seconds (it took the request timeout,
            # 30 s, with nothing printed).
            "bootstrap_timeout_ms": int(min(connect_timeout_s, request_timeout_s) * 1000),
            **(extra_config or {}),
        }
        self._bound: tuple[float, float] | None = None  # (ends at, seconds): see bounded()
        self._admin = self._connect()

    @contextlib.contextmanager
    def bounded(self, seconds: float) -> Iterator[None]:
        """Calls made inside give up ``seconds`` after it began (all of them together),
        instead of retrying for the usual ``retry_s`` and ``attempts``: each is tried at
        least once, and retried only while time is left. For a pass that must not hold
        its caller: an apply's progress, which a broker that just died (still in the
        metadata until it is fenced, refusing connections) held for 13-25 s while the
        calls that asked it were retried. A call that runs out of time is a retriable
        ``KafkaError`` saying so. (One request in flight is still bounded only by the
        client's request timeout: a broker that hangs without refusing holds it.)"""
        outer = self._bound
        ends = time.monotonic() + seconds
        if outer is not None and outer[0] < ends:
            ends, seconds = outer
        self._bound = (ends, seconds)
        try:
            yield
        finally:
            self._bound = outer

    def _connect(self) -> Any:
        from kafka.admin import KafkaAdminClient

        try:
            return KafkaAdminClient(**self._conf)
        except Exception as exc:
            raise error_from(exc, f"connect to {self.bootstrap}") from exc

    def _reconnect(self) -> None:
        """A new client, reading the cluster's metadata as it is now (the old client is
        closed once the new one is up)."""
        stale, self._admin = self._admin, self._connect()
        stale.close()

    def close(self) -> None:
        self._admin.close()

    def __enter__(self) -> KafkaOpsAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """``self._admin.<method>(*args, **kwargs)``, retried (bounded) on errors that a
        moment or fresh metadata may cure. The method is named, not bound, so that a
        retry after a reconnect goes through the new client.

        - Retriable errors (connection refused included): a broker that just died stays
          in the cluster's metadata until it is fenced (broker.session.timeout.ms, 9 s by
          default), and a KRaft cluster may name it as the "controller" that admin
          requests go to: retried for a while, forgetting the cached controller each time
          so that it is looked up again.
        - ``UnknownBrokerIdError``: kafka-python sends a broker's config and log-dir
          requests to that broker, looked up in the client's own metadata. That metadata
          dropped a broker that died, and it is read again only every
          ``metadata_max_age_ms`` (5 minutes), not on this error (which kafka-python
          does not count as retriable): a broker that came back stays unknown to a
          long-lived client while the cluster lists it. A new client reads the metadata
          again; a broker still unknown to ``attempts`` fresh clients is not in the
          cluster.
        """
        import kafka.errors as kerr

        deadline = time.monotonic() + self._retry_s
        bound = self._bound
        attempt = 0
        while True:
            try:
                return getattr(self._admin, method)(*args, **kwargs)
            except (kerr.KafkaError, OSError, ValueError) as exc:
                attempt += 1
                stale_metadata = isinstance(exc, kerr.UnknownBrokerIdError)
                retriable = (
                    stale_metadata
                    or isinstance(exc, OSError)
                    or bool(getattr(exc, "retriable", False))
                )
                gave_time = stale_metadata or time.monotonic() > deadline
                if not retriable or (attempt >= self._attempts and gave_time):
                    raise error_from(exc, f"{what} on {self.bootstrap}") from exc
                pause = 0.0 if stale_metadata else min(0.2 * 2 ** min(attempt, 4), 2.0)
                if bound is not None and time.monotonic() + pause >= bound[0]:
                    err = error_from(
                        exc, f"{what} on {self.bootstrap} (no answer within {bound[1]:g}s)"
                    )
                    err.retriable = True
                    raise err from exc
                if stale_metadata:
                    self._reconnect()
                    continue
                if hasattr(self._admin, "_controller_id"):
                    self._admin._controller_id = None
                time.sleep(pause)

    # ------------------------------------------------------------------ metadata
    def brokers(self) -> dict[int, BrokerNode]:
        desc = self._call("describe cluster", "describe_cluster")
        return {
            int(b["broker_id"]): BrokerNode(
                int(b["broker_id"]), str(b["host"]), int(b["port"]), b.get("rack") or None
            )
            for b in desc["brokers"]
            if not b.get("is_fenced", False)
        }

    def partitions(
        self, topics: Collection[str] | None = None
    ) -> dict[TopicPartition, PartitionState]:
        names = None if topics is None else sorted(topics)
        if names == []:
            return {}
        described = self._call("describe topics", "describe_topics", names)
        out: dict[TopicPartition, PartitionState] = {}
        for t in described:
            if t.get("error_code", 0):
                import kafka.errors as kerr

                err = kerr.for_code(t["error_code"])
                raise error_from(err, f"describe topic {t['name']} on {self.bootstrap}")
            for p in t["partitions"]:
                state = PartitionState(
                    topic=t["name"],
                    partition=int(p["partition_index"]),
                    replicas=tuple(p["replica_nodes"]),
                    isr=tuple(p["isr_nodes"]),
                    leader=int(p["leader_id"]),
                )
                out[state.key] = state
        return dict(sorted(out.items()))

    # ------------------------------------------------------------------ log dirs
    def log_dirs(
        self, brokers: Collection[int] | None = None
    ) -> dict[int, list[LogDir] | KafkaError]:
        ids = sorted(self.brokers()) if brokers is None else sorted(brokers)
        out: dict[int, list[LogDir] | KafkaError] = {}
        for bid in ids:
            try:
                answer = self._call(
                    f"describe log dirs of broker {bid}",
                    "describe_log_dirs",
                    None,
                    [bid],
                )
            except KafkaError as exc:
                out[bid] = exc
                continue
            dirs: list[LogDir] = []
            for entry in answer:
                for d in entry["log_dirs"]:
                    sizes = {
                        (t["name"], int(p["partition_index"])): int(p["partition_size"])
                        for t in d.get("topics", [])
                        for p in t["partitions"]
                        if not p.get("is_future_key", False)
                    }
                    total, usable = d.get("total_bytes", -1), d.get("usable_bytes", -1)
                    error = None
                    if d.get("error_code", 0):
                        import kafka.errors as kerr

                        error = kerr.for_code(d["error_code"]).__name__
                    dirs.append(
                        LogDir(
                            broker_id=bid,
                            path=str(d["log_dir"]),
                            total_bytes=int(total) if total is not None and total >= 0 else None,
                            usable_bytes=int(usable)
                            if usable is not None and usable >= 0
                            else None,
                            sizes=sizes,
                            error=error,
                        )
                    )
            out[bid] = dirs
        return out

    # ------------------------------------------------------------------ reassignments
    def alter_reassignments(
        self, targets: Mapping[TopicPartition, Sequence[int] | None]
    ) -> dict[TopicPartition, KafkaError | None]:
        from kafka import TopicPartition as KTopicPartition

        if not targets:
            return {}
        request = {
            KTopicPartition(t, p): (None if r is None else list(r)) for (t, p), r in targets.items()
        }
        answer = self._call(
            "alter partition reassignments",
            "alter_partition_reassignments",
            request,
            self._timeout_ms,
        )
        out: dict[TopicPartition, KafkaError | None] = {}
        for key in targets:
            err = answer.get(KTopicPartition(*key))
            out[key] = None if err is None else error_from(err, f"reassign {key[0]}-{key[1]}")
        return out

    def list_reassignments(self) -> dict[TopicPartition, Reassignment]:
        answer = self._call("list partition reassignments", "list_partition_reassignments")
        out = {
            (tp.topic, tp.partition): Reassignment(
                tp.topic,
                tp.partition,
                tuple(r["replicas"]),
                tuple(r["adding_replicas"]),
                tuple(r["removing_replicas"]),
            )
            for tp, r in answer.items()
        }
        return dict(sorted(out.items()))

    # ------------------------------------------------------------------ groups
    def committed_offsets(self, topics: Mapping[str, int]) -> dict[str, dict[str, dict[int, int]]]:
        """Group -> topic -> partition -> committed offset, for every group of the
        cluster that committed on at least one of ``topics`` (topic -> partition count):
        ListGroups on every broker, then one OffsetFetch per coordinator for them all.

        (Not in ``OpsAdmin``: the control plane's sealer needs it. It is here, over
        kafka-python, because confluent-kafka 2.16's ListConsumerGroupOffsets aborts the
        process, an assertion in librdkafka, when the group's coordinator dies under it.)
        """
        from kafka.structs import TopicPartition as KafkaTopicPartition

        listed = self._call("list consumer groups", "list_groups")
        groups = sorted({str(g["group_id"]) for g in listed})
        wanted = [KafkaTopicPartition(t, p) for t, n in topics.items() for p in range(n)]
        if not groups or not wanted:
            return {}
        found = self._call(
            "committed offsets",
            "list_group_offsets",
            {group: wanted for group in groups},
        )
        out: dict[str, dict[str, dict[int, int]]] = {}
        for group, offsets in found.items():
            mine: dict[str, dict[int, int]] = {}
            for tp, committed in offsets.items():
                if committed.offset >= 0:
                    mine.setdefault(tp.topic, {})[tp.partition] = int(committed.offset)
            if mine:
                out[str(group)] = mine
        return out

    # ------------------------------------------------------------------ configs
    def alter_configs(
        self, changes: Sequence[ConfigChange]
    ) -> dict[tuple[ConfigKind, str], KafkaError | None]:
        from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType

        if not changes:
            return {}
        resources = []
        for c in changes:
            configs: dict[str, Any] = {k: (AlterConfigOp.SET, v) for k, v in c.set.items()}
            configs.update({k: (AlterConfigOp.DELETE, None) for k in c.delete})
            kind = ConfigResourceType.BROKER if c.kind == "broker" else ConfigResourceType.TOPIC
            resources.append(ConfigResource(kind, c.name, configs=configs))
        answer = self._call(
            "alter configs",
            "alter_configs",
            resources,
            False,  # validate_only
            False,  # raise_on_unknown: the broker validates names itself
            True,  # incremental
        )
        out: dict[tuple[ConfigKind, str], KafkaError | None] = {}
        for c in changes:
            result = answer.get(c.kind, {}).get(c.name)
            if result == "OK":
                out[(c.kind, c.name)] = None
            else:
                out[(c.kind, c.name)] = KafkaError(
                    f"alter configs of {c.kind} {c.name}: {result or 'no answer'}",
                    code=_code_of(str(result)),
                )
        return out

    def describe_configs(
        self, kind: ConfigKind, names: Collection[str]
    ) -> dict[str, dict[str, str]]:
        from kafka.admin import ConfigResource, ConfigResourceType

        rtype = ConfigResourceType.BROKER if kind == "broker" else ConfigResourceType.TOPIC
        out: dict[str, dict[str, str]] = {}
        for name in sorted(names):
            answer = self._call(
                f"describe configs of {kind} {name}",
                "describe_configs",
                [ConfigResource(rtype, str(name))],
            )
            values = answer.get(kind, {}).get(str(name), {})
            out[str(name)] = {
                k: str(v["value"]) for k, v in values.items() if v.get("value") is not None
            }
        return out

    # ------------------------------------------------------------------ topics
    def create_topic(
        self,
        name: str,
        assignment: Mapping[int, Sequence[int]],
        configs: Mapping[str, str] | None = None,
    ) -> None:
        request = {
            name: {
                "assignments": {p: list(r) for p, r in sorted(assignment.items())},
                "configs": dict(configs or {}),
            }
        }
        self._call(f"create topic {name}", "create_topics", request, self._timeout_ms)


def _code_of(result: str) -> str | None:
    # kafka-python renders per-resource errors as "[Error N] SomethingError: detail".
    head = result.split(":", 1)[0].strip()
    return head.rsplit(" ", 1)[-1] if head.endswith("Error") else None
