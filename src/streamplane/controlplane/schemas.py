"""The HTTP API's request and response documents (pydantic), as served in /openapi.json."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from streamplane.controlplane.failover_store import HealthRecord
from streamplane.controlplane.service import (
    MAX_PARTITIONS,
    MAX_RECORD_BYTES,
    MAX_REPLICATION_FACTOR,
    TAG_KEY_PATTERN,
    StreamSpec,
    topic_config,
)
from streamplane.controlplane.store import AuditEntry, ClusterRecord, StreamRecord
from streamplane.core import routing as core_routing
from streamplane.core.routing import (
    DEFAULT_LANES,
    MAX_LANES,
    RoutingTable,
    SegmentState,
    routing_to_json,
)

# The name rules of streamplane.core.routing, documented in the schema. They are checked
# by the service (not by pydantic), so a bad name gets the core's own one-line message.
STREAM_NAME_PATTERN = core_routing._STREAM_NAME.pattern
CLUSTER_NAME_PATTERN = core_routing._CLUSTER_NAME.pattern
LANE_NAME_PATTERN = core_routing._LANE_NAME.pattern


def _named(pattern: str, max_length: int, example: str) -> Any:
    return Field(
        min_length=1,
        max_length=max_length,
        examples=[example],
        json_schema_extra={"pattern": pattern},
    )


ClusterName = Annotated[str, _named(CLUSTER_NAME_PATTERN, 63, "local-a")]
StreamName = Annotated[str, _named(STREAM_NAME_PATTERN, 63, "logs-intake")]
LaneName = Annotated[str, _named(LANE_NAME_PATTERN, 31, "realtime")]
Bootstrap = Annotated[
    str,
    Field(
        min_length=1,
        max_length=1024,
        examples=["127.0.0.1:9092"],
        description="host:port[,host:port...]",
    ),
]
Tags = Annotated[
    dict[str, Annotated[str, Field(max_length=255)]],
    Field(max_length=64),
    WithJsonSchema(
        {
            "type": "object",
            "propertyNames": {"pattern": TAG_KEY_PATTERN},
            "additionalProperties": {"type": "string", "maxLength": 255},
            "maxProperties": 64,
        }
    ),
]


def _not_a_boolean(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("a boolean is not an integer")
    return value


# Follows the constraints of an integer of a request body (``Annotated[int, Field(...),
# NOT_A_BOOLEAN]``; first, it hid them from the OpenAPI schema): JSON true was taken as
# 1, a stream of one partition. (Not pydantic's strict mode: JSON Schema counts 6.0 as
# an integer.)
NOT_A_BOOLEAN = BeforeValidator(_not_a_boolean)
Partitions = Annotated[int, Field(ge=1, le=MAX_PARTITIONS), NOT_A_BOOLEAN]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorResponse(BaseModel):
    detail: str = Field(description="One line saying what went wrong.")


class Health(BaseModel):
    status: Literal["ok"]
    version: str
    schema_version: int


# ---------------------------------------------------------------------- clusters
class ClusterIn(_In):
    name: ClusterName
    bootstrap: Bootstrap
    tags: Tags = Field(default_factory=dict)


class ClusterPatch(_In):
    bootstrap: Bootstrap | None = None
    tags: Tags | None = Field(default=None, description="Replaces all of the cluster's tags.")


class ClusterHealthOut(BaseModel):
    """What the leader's probes last showed (``unknown``: not probed, health checks off)."""

    state: Literal["ok", "degraded", "down", "unknown"] = "unknown"
    since: datetime | None = None
    last_error: str | None = None
    checked_at: datetime | None = None

    @classmethod
    def of(cls, r: HealthRecord | None) -> ClusterHealthOut:
        if r is None or r.health not in ("ok", "degraded", "down"):
            return cls()
        return cls(
            state=r.health,  # type: ignore[arg-type]
            since=r.since,
            last_error=r.last_error,
            checked_at=r.updated_at,
        )


class ClusterOut(BaseModel):
    name: str
    bootstrap: str
    tags: dict[str, str]
    kafka_cluster_id: str | None = Field(
        description="The Kafka cluster the name stands for (its cluster id), as it answered "
        "at registration or at the last bootstrap change; null while not known yet (it "
        "did not answer then: recorded the first time it does)."
    )
    created_at: datetime
    updated_at: datetime
    health: ClusterHealthOut = Field(default_factory=ClusterHealthOut)

    @classmethod
    def of(cls, c: ClusterRecord, health: HealthRecord | None = None) -> ClusterOut:
        return cls(
            name=c.name,
            bootstrap=c.bootstrap,
            tags=dict(c.tags),
            kafka_cluster_id=c.kafka_cluster_id,
            created_at=c.created_at,
            updated_at=c.updated_at,
            health=ClusterHealthOut.of(health),
        )


# ---------------------------------------------------------------------- routing
class SegmentOut(BaseModel):
    lane: str
    cluster: str
    topic: str
    partitions: int
    state: SegmentState
    epoch: int
    sealed_end_offsets: dict[str, int]


class RoutingOut(BaseModel):
    """The wire form of ``streamplane.core.routing.RoutingTable`` (``routing_to_json``)."""

    stream: str
    epoch: int
    lanes: list[str]
    segments: list[SegmentOut]

    @classmethod
    def of(cls, table: RoutingTable) -> RoutingOut:
        return cls.model_validate(routing_to_json(table))


# ---------------------------------------------------------------------- streams
TopicConfigValue = Annotated[str, Field(max_length=1024)] | int | float | bool


class StreamIn(_In):
    name: StreamName
    cluster: ClusterName
    lanes: Annotated[list[LaneName], Field(min_length=1, max_length=MAX_LANES)] = Field(
        default_factory=lambda: list(DEFAULT_LANES),
        description="Lanes in priority order (first = highest); the dlq lane is implicit.",
    )
    partitions: Partitions = 6
    dlq_partitions: Partitions = 1
    replication_factor: (
        Annotated[int, Field(ge=1, le=MAX_REPLICATION_FACTOR), NOT_A_BOOLEAN] | None
    ) = Field(
        default=None,
        description="Replicas of every topic of the stream (default: min(3, live brokers of "
        "the cluster), resolved at creation and kept with the stream).",
    )
    config: Annotated[dict[str, TopicConfigValue], Field(max_length=64)] = Field(
        default_factory=dict,
        description="Topic configs for every topic of the stream (Kafka's dotted keys). "
        "message.timestamp.type is always LogAppendTime; max.message.bytes comes from "
        "max_record_bytes; min.insync.replicas defaults to 2 with 3 replicas or more, else "
        "1, and cannot be above the replication factor.",
    )
    max_record_bytes: Annotated[int, Field(ge=1, le=MAX_RECORD_BYTES), NOT_A_BOOLEAN] = 1_048_576

    def spec(self) -> StreamSpec:
        return StreamSpec(
            name=self.name,
            cluster=self.cluster,
            lanes=tuple(self.lanes),
            partitions=self.partitions,
            dlq_partitions=self.dlq_partitions,
            replication_factor=self.replication_factor,
            config={k: _config_str(v) for k, v in self.config.items()},
            max_record_bytes=self.max_record_bytes,
        )


def _config_str(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class StreamOut(BaseModel):
    name: str
    lanes: list[str]
    partitions: int
    dlq_partitions: int
    replication_factor: int = Field(
        description="Replicas of its topics (those of a failover to a cluster with fewer "
        "live brokers have as many as it has)."
    )
    config: dict[str, str] = Field(description="The topic configs the stream was created with.")
    topic_config: dict[str, str] = Field(
        description="The configs every topic of it gets (min.insync.replicas included)."
    )
    max_record_bytes: int
    epoch: int
    created_at: datetime
    active_clusters: list[str] = Field(description="Clusters of the active segments.")

    @classmethod
    def of(cls, s: StreamRecord, active_clusters: list[str]) -> StreamOut:
        return cls(
            name=s.name,
            lanes=list(s.lanes),
            partitions=s.partitions,
            dlq_partitions=s.dlq_partitions,
            replication_factor=s.replication_factor,
            config=dict(s.config),
            topic_config=topic_config(s.config, s.max_record_bytes, s.replication_factor),
            max_record_bytes=s.max_record_bytes,
            epoch=s.epoch,
            created_at=s.created_at,
            active_clusters=active_clusters,
        )


class StreamDetail(StreamOut):
    routing: RoutingOut

    @classmethod
    def of_table(cls, s: StreamRecord, table: RoutingTable) -> StreamDetail:
        active = sorted({seg.cluster for seg in table.segments if seg.state == "active"})
        base = StreamOut.of(s, active).model_dump()
        base["epoch"] = table.epoch
        return cls(**base, routing=RoutingOut.of(table))


class FailoverIn(_In):
    cluster: ClusterName = Field(description="Where the lanes' new active segments go.")
    lanes: Annotated[list[LaneName], Field(min_length=1, max_length=MAX_LANES + 1)] | None = Field(
        default=None, description="Lanes to move; default: every lane but the dlq."
    )
    partitions: Partitions | None = Field(
        default=None, description="Partition count of the new segments (default: unchanged)."
    )
    reason: Annotated[str, Field(max_length=1000)] = ""


class LaneIn(_In):
    name: LaneName = Field(description="The new lane (not dlq: every stream has that one).")
    before: LaneName | None = Field(
        default=None,
        description="The lane the new one goes just above in the priority order (default: "
        "last, above the dlq only). A lane put first becomes the default lane of producers "
        "opened from then on.",
    )
    partitions: Partitions | None = Field(
        default=None, description="Partitions of its topic (default: the stream's)."
    )
    cluster: ClusterName | None = Field(
        default=None,
        description="Where its topic goes (default: the cluster the stream's other lanes are "
        "active on; needed when a failover has split them over several).",
    )


class SegmentTransitionIn(_In):
    cluster: ClusterName
    topic: Annotated[str, Field(min_length=1, max_length=249)]
    state: SegmentState
    sealed_end_offsets: Annotated[
        dict[str, Annotated[int, Field(ge=0), NOT_A_BOOLEAN]], Field(max_length=10_000)
    ] = Field(default_factory=dict, description="Per partition, the end offset (when sealing).")


class AuditOut(BaseModel):
    id: int
    time: datetime
    actor: str
    action: str
    stream: str | None
    detail: dict[str, Any]

    @classmethod
    def of(cls, e: AuditEntry) -> AuditOut:
        return cls(
            id=e.id or 0,
            time=e.time,
            actor=e.actor,
            action=e.action,
            stream=e.stream,
            detail=dict(e.detail),
        )
