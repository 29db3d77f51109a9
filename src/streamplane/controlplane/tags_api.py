"""Broker and topic tags, and topic placement by broker tags (kafka-kit's registry).

Routes (added to the app by ``create_app`` with one ``include_router``):

| method and path | body / query | answer |
| --- | --- | --- |
| ``PUT /v1/clusters/{name}/brokers/{broker_id}/tags`` | ``{tags}`` (replaced) | broker tags |
| ``GET /v1/clusters/{name}/brokers`` | ``?tag=k:v`` (repeat to AND) | live brokers, tags |
| ``PUT /v1/clusters/{name}/topics/{topic}/tags`` | ``{tags}`` (replaced) | topic tags |
| ``GET /v1/clusters/{name}/topics`` | ``?tag=k:v`` | tagged topics |
| ``POST /v1/clusters/{name}/topics`` | name, partitions, RF, broker_tags | 201 |

A broker's tags are what was stored plus its ``rack`` (its ``broker.rack``, from Kafka)
as an implicit tag: ``rack`` is reserved, one truth for listing, selection and
placement. Tags are set only on what the cluster has: a live broker, an existing topic
(404 otherwise; a cluster that does not answer is a 502 and nothing is stored). Listing
brokers asks the cluster which are alive. Creating a topic picks the live brokers having
every ``broker_tags`` entry and places replicas with the mapper (``rebuild(force=True)``:
count strategy, rack rule), then creates the topic with that explicit assignment; names
in a stream's namespace (``sp.<stream>.*``, ``core.routing.stream_owning_topic``) are
the control plane's and refused. Storage is the ``broker_tags`` / ``topic_tags`` tables
(migration 4). Kafka is reached through ``app.state.ops_admin_factory`` when set
(tests), else ``KafkaOpsAdmin``.
"""

# FastAPI reads the endpoint annotations at runtime: no ``from __future__ import annotations``.
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from streamplane.controlplane.auth import Actor
from streamplane.controlplane.schemas import CLUSTER_NAME_PATTERN, ErrorResponse, Tags
from streamplane.controlplane.service import (
    ControlPlaneService,
    parse_tag_filter,
    validate_tags,
    validate_topic_config,
)
from streamplane.controlplane.store import AuditEntry, ClusterRecord, bytewise, utcnow
from streamplane.core.mapper import (
    Broker,
    BrokerMap,
    Partition,
    PartitionMap,
    RebuildParams,
    rebuild,
)
from streamplane.core.routing import stream_owning_topic, validate_cluster_name
from streamplane.exceptions import ConfigError, Conflict, KafkaError, NotFound
from streamplane.ops.kafka_ops import KafkaOpsAdmin, OpsAdmin

TOPIC_PATTERN = r"^[A-Za-z0-9._-]{1,249}$"
_TOPIC = re.compile(TOPIC_PATTERN)
# A broker's rack is its broker.rack, shown as this tag: never stored.
RACK_TAG = "rack"
_UNKNOWN_TOPIC_CODES = frozenset({"UNKNOWN_TOPIC_OR_PARTITION", "UnknownTopicOrPartitionError"})

_md = sa.MetaData()
broker_tags = sa.Table(
    "broker_tags",
    _md,
    sa.Column("cluster", sa.String(63), primary_key=True),
    sa.Column("broker_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("tags", sa.JSON, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)
topic_tags = sa.Table(
    "topic_tags",
    _md,
    sa.Column("cluster", sa.String(63), primary_key=True),
    sa.Column("topic", sa.String(249), primary_key=True),
    sa.Column("tags", sa.JSON, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

ClusterPath = Annotated[
    str, Path(description="A cluster name.", json_schema_extra={"pattern": CLUSTER_NAME_PATTERN})
]
TopicPath = Annotated[
    str, Path(description="A topic name.", json_schema_extra={"pattern": TOPIC_PATTERN})
]
TagQuery = Annotated[list[str] | None, Query(description="key:value; repeat to AND several tags.")]


class TagsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tags: Tags


class BrokerTagsOut(BaseModel):
    cluster: str
    broker_id: int
    rack: str | None = None
    tags: dict[str, str]


class TopicTagsOut(BaseModel):
    cluster: str
    topic: str
    tags: dict[str, str]


class PlacedTopicIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=249, json_schema_extra={"pattern": TOPIC_PATTERN})
    partitions: int = Field(default=1, ge=1, le=10_000)
    replication_factor: int = Field(default=1, ge=1, le=32)
    broker_tags: Tags = Field(default_factory=dict)
    tags: Tags = Field(default_factory=dict)
    config: dict[str, Annotated[str, Field(max_length=1024)]] = Field(
        default_factory=dict, max_length=100
    )
    min_rack_ids: int | None = Field(default=None, ge=1, le=32)


class PlacedTopicOut(BaseModel):
    cluster: str
    topic: str
    brokers: list[int]
    assignment: dict[str, list[int]]
    tags: dict[str, str]
    warnings: list[str]


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {c: {"model": ErrorResponse} for c in codes}


def _service(request: Request) -> ControlPlaneService:
    svc: ControlPlaneService = request.app.state.service
    return svc


def _admin(request: Request, bootstrap: str) -> OpsAdmin:
    factory = getattr(request.app.state, "ops_admin_factory", None)
    if factory is not None:
        admin: OpsAdmin = factory(bootstrap)
        return admin
    timeout = float(request.app.state.settings.kafka_timeout)
    return KafkaOpsAdmin(bootstrap, request_timeout_s=timeout, attempts=2)


def _matches(tags: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    return all(tags.get(k) == v for k, v in wanted.items())


def _check_topic(topic: str) -> str:
    if not _TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise ConfigError(f"invalid topic name {topic!r}: use 1-249 of A-Z a-z 0-9 . _ -")
    return topic


def _check_broker_tags(tags: Mapping[str, str]) -> dict[str, str]:
    tags = validate_tags(tags)
    if RACK_TAG in tags:
        raise ConfigError(
            f"tag {RACK_TAG!r} is reserved: a broker's rack is its broker.rack setting, "
            "which placement uses and tags show; set broker.rack on the broker instead"
        )
    return tags


def _stored_broker_tags(svc: ControlPlaneService, cluster: str) -> dict[int, dict[str, str]]:
    with svc.store.engine.connect() as conn:
        rows = conn.execute(broker_tags.select().where(broker_tags.c.cluster == cluster)).all()
    return {int(r.broker_id): dict(r.tags) for r in rows}


def _put(
    svc: ControlPlaneService, table: sa.Table, key: dict[str, Any], tags: dict[str, str]
) -> None:
    where = sa.and_(*(table.c[k] == v for k, v in key.items()))
    with svc.store.engine.begin() as conn:
        if conn.execute(sa.select(table.c.cluster).where(where)).first() is None:
            conn.execute(table.insert().values(**key, tags=tags, updated_at=utcnow()))
        else:
            conn.execute(table.update().where(where).values(tags=tags, updated_at=utcnow()))


@contextmanager
def _cluster_admin(request: Request, cluster: ClusterRecord) -> Iterator[OpsAdmin]:
    """The cluster's ``OpsAdmin``, closed afterwards; its failures name the cluster."""
    try:
        admin = _admin(request, cluster.bootstrap)
        try:
            yield admin
        finally:
            admin.close()
    except KafkaError as exc:
        raise KafkaError(
            f"cluster {cluster.name}: {exc}", code=exc.code, retriable=exc.retriable
        ) from exc


def _live_brokers(request: Request, cluster: ClusterRecord) -> dict[int, str | None]:
    with _cluster_admin(request, cluster) as admin:
        return {b.id: b.rack for b in admin.brokers().values()}


def _require_topic(request: Request, cluster: ClusterRecord, topic: str) -> None:
    with _cluster_admin(request, cluster) as admin:
        try:
            admin.partitions([topic])
        except KafkaError as exc:
            if exc.code in _UNKNOWN_TOPIC_CODES:
                raise NotFound(f"topic {topic} does not exist on cluster {cluster.name}") from None
            raise


tags_router = APIRouter(tags=["tags"])


@tags_router.put(
    "/v1/clusters/{name}/brokers/{broker_id}/tags",
    response_model=BrokerTagsOut,
    responses=_errors(400, 401, 403, 404, 422, 502),
)
def put_broker_tags(
    request: Request,
    name: ClusterPath,
    broker_id: Annotated[int, Path(ge=0, le=2**31 - 1)],
    body: TagsIn,
    actor: Actor,
) -> BrokerTagsOut:
    svc = _service(request)
    validate_cluster_name(name)
    tags = _check_broker_tags(body.tags)
    live = _live_brokers(request, svc.get_cluster(name))
    if broker_id not in live:
        raise NotFound(
            f"broker {broker_id} is not a live broker of cluster {name} "
            f"(live: {', '.join(map(str, sorted(live))) or 'none'})"
        )
    _put(svc, broker_tags, {"cluster": name, "broker_id": broker_id}, tags)
    detail = {"cluster": name, "broker": broker_id, "tags": tags}
    svc.store.append_audit(AuditEntry(actor, "broker.tags", None, detail))
    rack = live[broker_id]
    shown = tags | ({RACK_TAG: rack} if rack else {})
    return BrokerTagsOut(cluster=name, broker_id=broker_id, rack=rack, tags=shown)


@tags_router.put(
    "/v1/clusters/{name}/topics/{topic}/tags",
    response_model=TopicTagsOut,
    responses=_errors(400, 401, 403, 404, 422, 502),
)
def put_topic_tags(
    request: Request, name: ClusterPath, topic: TopicPath, body: TagsIn, actor: Actor
) -> TopicTagsOut:
    svc = _service(request)
    validate_cluster_name(name)
    tags = validate_tags(body.tags)
    _require_topic(request, svc.get_cluster(name), _check_topic(topic))
    _put(svc, topic_tags, {"cluster": name, "topic": topic}, tags)
    detail = {"cluster": name, "topic": topic, "tags": tags}
    svc.store.append_audit(AuditEntry(actor, "topic.tags", None, detail))
    return TopicTagsOut(cluster=name, topic=topic, tags=tags)


@tags_router.get(
    "/v1/clusters/{name}/topics",
    response_model=list[TopicTagsOut],
    responses=_errors(400, 404, 422),
)
def list_topic_tags(
    request: Request, name: ClusterPath, tag: TagQuery = None
) -> list[TopicTagsOut]:
    svc = _service(request)
    validate_cluster_name(name)
    svc.get_cluster(name)
    wanted = parse_tag_filter(tag or [])
    with svc.store.engine.connect() as conn:
        rows = conn.execute(
            topic_tags.select()
            .where(topic_tags.c.cluster == name)
            .order_by(bytewise(topic_tags.c.topic))
        ).all()
    return [
        TopicTagsOut(cluster=name, topic=r.topic, tags=dict(r.tags))
        for r in rows
        if _matches(dict(r.tags), wanted)
    ]


@tags_router.get(
    "/v1/clusters/{name}/brokers",
    response_model=list[BrokerTagsOut],
    responses=_errors(400, 404, 422, 502),
)
def list_broker_tags(
    request: Request, name: ClusterPath, tag: TagQuery = None
) -> list[BrokerTagsOut]:
    svc = _service(request)
    validate_cluster_name(name)
    cluster = svc.get_cluster(name)
    wanted = parse_tag_filter(tag or [])
    return [b for b in _brokers(request, svc, cluster) if _matches(b.tags, wanted)]


def _brokers(
    request: Request, svc: ControlPlaneService, cluster: ClusterRecord
) -> list[BrokerTagsOut]:
    """The live brokers with their tags: the stored ones, and ``rack`` from Kafka (a
    ``rack`` stored before the key was reserved is not shown)."""
    stored = _stored_broker_tags(svc, cluster.name)
    out = []
    for bid, rack in sorted(_live_brokers(request, cluster).items()):
        tags = {k: v for k, v in stored.get(bid, {}).items() if k != RACK_TAG}
        if rack:
            tags[RACK_TAG] = rack
        out.append(BrokerTagsOut(cluster=cluster.name, broker_id=bid, rack=rack, tags=tags))
    return out


@tags_router.post(
    "/v1/clusters/{name}/topics",
    status_code=201,
    response_model=PlacedTopicOut,
    responses=_errors(400, 401, 403, 404, 409, 422, 502),
)
def create_placed_topic(
    request: Request, name: ClusterPath, body: PlacedTopicIn, actor: Actor
) -> PlacedTopicOut:
    svc = _service(request)
    validate_cluster_name(name)
    topic = _check_topic(body.name)
    stream = stream_owning_topic(topic)
    if stream is not None:
        raise ConfigError(
            f"topic name {topic} is reserved: sp.{stream}.* topics belong to stream "
            f"{stream!r} and only the control plane creates them (streams create, streams "
            "failover); choose a name outside sp.<stream>.*"
        )
    validate_topic_config(body.config)
    wanted = validate_tags(body.broker_tags)
    tags = validate_tags(body.tags)
    cluster = svc.get_cluster(name)
    chosen = [b for b in _brokers(request, svc, cluster) if _matches(b.tags, wanted)]
    rf = body.replication_factor
    if len(chosen) < rf:
        raise ConfigError(
            f"replication factor {rf} needs {rf} brokers but {len(chosen)} live broker(s) of "
            f"{name} match {wanted or 'no tags'}: {[b.broker_id for b in chosen]}"
        )
    ids = [b.broker_id for b in chosen]
    brokers = BrokerMap(Broker(b.broker_id, b.rack) for b in chosen)
    seed_map = PartitionMap(Partition(topic, p, tuple(ids[:rf])) for p in range(body.partitions))
    plan = rebuild(seed_map, brokers, RebuildParams(force=True, min_rack_ids=body.min_rack_ids))
    assignment = {p.partition: list(p.replicas) for p in plan.after}
    with _cluster_admin(request, cluster) as admin:
        try:
            admin.create_topic(topic, assignment, body.config)
        except KafkaError as exc:
            if exc.code in ("TOPIC_ALREADY_EXISTS", "TopicAlreadyExistsError"):
                raise Conflict(f"topic {topic} already exists on cluster {name}") from exc
            if exc.code and ("INVALID" in exc.code.upper() or "Invalid" in exc.code):
                raise ConfigError(f"cluster {name}: {exc}") from exc
            raise
    if tags:
        _put(svc, topic_tags, {"cluster": name, "topic": topic}, tags)
    detail = {"cluster": name, "topic": topic, "brokers": ids, "broker_tags": wanted}
    svc.store.append_audit(AuditEntry(actor, "topic.create", None, detail))
    return PlacedTopicOut(
        cluster=name,
        topic=topic,
        brokers=ids,
        assignment={str(p): r for p, r in sorted(assignment.items())},
        tags=tags,
        warnings=list(plan.warnings),
    )
