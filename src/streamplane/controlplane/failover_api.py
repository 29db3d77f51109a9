"""HTTP endpoints of the failover protocol (included by ``app.py``).

- ``POST /v1/streams/{name}/producers/{producer_id}/heartbeat`` ``{epoch}``: a producer
  says which routing epoch it writes with (the sealer waits for every live one);
- ``DELETE /v1/streams/{name}/producers/{producer_id}``: a producer closed (the sealer
  stops waiting for it at once, not after ``producer_liveness``);
- ``POST /v1/streams/{name}/segments/drained`` ``{group, cluster, topic}``: a group has
  settled a sealed segment (the sealer retires it once every reading group has);
- ``POST /v1/streams/{name}/segments/lost`` ``{cluster, reason}``: an operator declares
  the draining or sealed segments of a dead cluster lost (audited);
- ``GET /v1/streams/{name}/segments``: segments with their drained reports and the live
  producers' epochs;
- ``GET /v1/health/clusters``: every cluster's health, and whether this replica leads.
"""

# No ``from __future__ import annotations``: FastAPI reads the endpoint annotations.
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Response
from pydantic import BaseModel, ConfigDict, Field

from streamplane.controlplane.failover_runtime import FailoverRuntime
from streamplane.controlplane.schemas import (
    NOT_A_BOOLEAN,
    STREAM_NAME_PATTERN,
    ClusterName,
    ErrorResponse,
    RoutingOut,
    SegmentOut,
)
from streamplane.controlplane.store import AuditEntry
from streamplane.core.routing import SegmentState, validate_stream_name
from streamplane.exceptions import ConfigError, NotFound

_GROUP_PATTERN = r"^[A-Za-z0-9._:-]{1,255}$"
_PRODUCER_PATTERN = r"^[A-Za-z0-9._:@-]{1,128}$"

StreamPath = Annotated[
    str, Path(description="A stream name.", json_schema_extra={"pattern": STREAM_NAME_PATTERN})
]
ProducerPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=128,
        pattern=_PRODUCER_PATTERN,
        description="The producer's id (stable for its life).",
    ),
]


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {c: {"model": ErrorResponse} for c in codes}


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProducerHeartbeatIn(_In):
    epoch: Annotated[
        int, Field(ge=0, le=2**53, description="The epoch it writes with."), NOT_A_BOOLEAN
    ]


class ProducerHeartbeatOut(BaseModel):
    stream: str
    producer_id: str
    epoch: int = Field(description="The epoch the producer reported.")
    stream_epoch: int = Field(description="The stream's current epoch.")


class DrainedIn(_In):
    group: Annotated[str, Field(min_length=1, max_length=255, pattern=_GROUP_PATTERN)]
    cluster: ClusterName
    topic: Annotated[str, Field(min_length=1, max_length=249)]


class DrainedOut(BaseModel):
    stream: str
    cluster: str
    topic: str
    drained_by: list[str]


class LostIn(_In):
    cluster: ClusterName = Field(description="The dead cluster.")
    reason: Annotated[str, Field(max_length=1000)] = ""


class SegmentDetail(SegmentOut):
    drained_by: list[str] = Field(description="Groups that reported this segment drained.")


class SegmentsOut(BaseModel):
    stream: str
    epoch: int
    segments: list[SegmentDetail] = Field(
        description="By lane priority (the dlq lane last), then epoch, then cluster."
    )
    producers: dict[str, int] = Field(description="Live producers and their epochs.")


class ClusterHealthEntry(BaseModel):
    name: str
    health: str = Field(description="ok, degraded, down, or unknown (not probed).")
    since: datetime | None
    last_error: str | None
    updated_at: datetime | None
    probed_by: str | None = Field(description="The replica (the leader) that probed it.")


class HealthOverview(BaseModel):
    replica: str
    leader: bool = Field(description="Whether this replica runs the health loop and sealer.")
    health_enabled: bool
    clusters: list[ClusterHealthEntry]


def failover_router(runtime: FailoverRuntime, require_token: Callable[..., str]) -> APIRouter:
    svc = runtime.service
    router = APIRouter()
    Actor = Annotated[str, Depends(require_token)]

    @router.post(
        "/v1/streams/{name}/producers/{producer_id}/heartbeat",
        response_model=ProducerHeartbeatOut,
        responses=_errors(400, 401, 403, 404, 422),
        tags=["failover"],
        description="A producer reports the routing epoch it writes with (about once a second).",
    )
    def producer_heartbeat(
        name: StreamPath, producer_id: ProducerPath, body: ProducerHeartbeatIn, actor: Actor
    ) -> ProducerHeartbeatOut:
        validate_stream_name(name)
        epochs = svc.store.stream_epochs([name])
        if name not in epochs:
            raise NotFound(f"unknown stream {name!r}")
        runtime.store.record_heartbeat(name, producer_id, body.epoch)
        return ProducerHeartbeatOut(
            stream=name, producer_id=producer_id, epoch=body.epoch, stream_epoch=epochs[name]
        )

    @router.delete(
        "/v1/streams/{name}/producers/{producer_id}",
        status_code=204,
        response_class=Response,
        responses=_errors(400, 401, 403, 422),
        tags=["failover"],
        description="A producer closed: it no longer counts among the stream's live "
        "producers (idempotent).",
    )
    def producer_left(name: StreamPath, producer_id: ProducerPath, actor: Actor) -> Response:
        validate_stream_name(name)
        runtime.store.forget_producer(name, producer_id)
        return Response(status_code=204)

    @router.post(
        "/v1/streams/{name}/segments/drained",
        response_model=DrainedOut,
        responses=_errors(400, 401, 403, 404, 422),
        tags=["failover"],
        description="A group has settled every record of a sealed (or draining) segment.",
    )
    def segment_drained(name: StreamPath, body: DrainedIn, actor: Actor) -> DrainedOut:
        table = svc.routing(name)
        seg = table.segment(body.cluster, body.topic)
        if seg is None:
            raise ConfigError(f"stream {name!r} has no segment {body.topic} on {body.cluster}")
        if seg.state is SegmentState.ACTIVE:
            raise ConfigError(f"segment {body.topic} on {body.cluster} is still active")
        runtime.store.record_drained(name, body.cluster, body.topic, body.group)
        drained = sorted(runtime.store.drained_groups(name, body.cluster, body.topic))
        return DrainedOut(stream=name, cluster=body.cluster, topic=body.topic, drained_by=drained)

    @router.post(
        "/v1/streams/{name}/segments/lost",
        response_model=RoutingOut,
        responses=_errors(400, 401, 403, 404, 409, 422),
        tags=["failover"],
        description=(
            "Declare every draining or sealed segment of the stream on a dead cluster lost: "
            "consumers stop waiting for it. Audited."
        ),
    )
    def segments_lost(name: StreamPath, body: LostIn, actor: Actor) -> RoutingOut:
        table = svc.routing(name)
        doomed = [
            s
            for s in table.segments
            if s.cluster == body.cluster and s.state in (SegmentState.DRAINING, SegmentState.SEALED)
        ]
        if not doomed:
            states = {s.state for s in table.segments if s.cluster == body.cluster}
            if SegmentState.ACTIVE in states:
                hint = " (fail its active segments over first)"
            elif states and states <= {SegmentState.RETIRED, SegmentState.LOST}:
                # (a failover's old segments retire once drained: the README's order of
                # commands, failover then declare-lost, met them retired)
                hint = " (its segments there are retired or lost already: nothing waits on them)"
            else:
                hint = ""
            raise ConfigError(
                f"stream {name!r} has no draining or sealed segment on {body.cluster}{hint}"
            )
        for seg in doomed:
            table = svc.transition_segment(
                name, seg.cluster, seg.topic, SegmentState.LOST, None, actor
            )
        detail = {
            "cluster": body.cluster,
            "topics": [s.topic for s in doomed],
            "reason": body.reason,
            "epoch": table.epoch,
        }
        svc.store.append_audit(AuditEntry(actor, "segment.lost", name, detail))
        return RoutingOut.of(table)

    @router.get(
        "/v1/streams/{name}/segments",
        response_model=SegmentsOut,
        responses=_errors(400, 404, 422),
        tags=["failover"],
    )
    def list_segments(name: StreamPath) -> SegmentsOut:
        table = svc.routing(name)
        order = {lane: i for i, lane in enumerate(table.all_lanes)}
        pairs = sorted(
            zip(table.segments, RoutingOut.of(table).segments, strict=True),
            key=lambda p: (order.get(p[0].lane, len(order)), p[0].epoch, p[0].cluster),
        )
        out = []
        for seg, wire in pairs:
            drained = (
                sorted(runtime.store.drained_groups(name, seg.cluster, seg.topic))
                if seg.state is not SegmentState.ACTIVE
                else []
            )
            out.append(SegmentDetail(**wire.model_dump(), drained_by=drained))
        producers = runtime.store.live_producers(name, runtime.settings.producer_liveness)
        return SegmentsOut(stream=name, epoch=table.epoch, segments=out, producers=producers)

    @router.get("/v1/health/clusters", response_model=HealthOverview, tags=["health"])
    def clusters_health() -> HealthOverview:
        records = runtime.health_records()
        entries = []
        for c in svc.store.list_clusters():
            r = records.get(c.name)
            entries.append(
                ClusterHealthEntry(
                    name=c.name,
                    health=r.health if r else "unknown",
                    since=r.since if r else None,
                    last_error=r.last_error if r else None,
                    updated_at=r.updated_at if r else None,
                    probed_by=r.replica if r else None,
                )
            )
        return HealthOverview(
            replica=runtime.replica,
            leader=runtime.is_leader,
            health_enabled=runtime.settings.health_enabled,
            clusters=entries,
        )

    return router
