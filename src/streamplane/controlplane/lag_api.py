"""Time lag over HTTP: the lag monitor's API, Prometheus ``/metrics`` and the dashboard.

``create_app`` includes ``lag_router`` with one line and brackets its lifespan with
``start_lag_plane`` / ``LagPlane.stop``. The lag plane of an app holds:

- the ``LagMonitor`` over the store's clusters and routing tables (started when
  ``settings.lag_monitor`` is true; its snapshots go to ``settings.lag_snapshot_dir``,
  by default a ``lag/`` directory next to a SQLite store, else
  ``.streamplane/lag/<host>-<port>`` of the replica's advertised URL);
- the app's own Prometheus registry (lag families built at scrape time, HTTP request
  counters), served at ``/metrics``;
- the request counter, installed around the app's ASGI stack at start-up (so every
  route is counted, labelled by its template).

Routes (reads, open like every read of the control plane):

| method and path | answer |
| --- | --- |
| ``GET /v1/lag?group=&stream=`` | per partition lag and per group aggregates |
| ``GET /v1/groups?stream=`` | one summary per group (across clusters) |
| ``GET /v1/groups/{group}/lag/history`` | the group's lag chart data (404 if untracked) |

Group totals (``offset_lag``) count a partition whose end offset could not be read at
its last known end: ``stale_end_offsets`` says how many did (``unknown_offset_lag`` how
many are not in the total at all), and each partition says ``end_offset_stale`` and
``end_offset_age_s``; the history's points say the same per bucket.

A group that is not tracked is no error in ``/v1/lag`` (the monitor may not have seen
its commits yet): its lists are empty. A ``stream`` filter naming no stream (none in the
store and no tracked partition labelled with it) is 404; an empty filter value
(``?group=``) is 422. The history route takes any group id, ``/`` included
(``/v1/groups/team%2Fa/lag/history``: the ``{group:path}`` converter, anchored by the
``/lag/history`` suffix, so it matches no other route).
| ``GET /v1/lag/readers`` | the ``__consumer_offsets`` readers, one per cluster |
| ``GET /v1/lag/dlq`` | records written to each dlq segment |
| ``GET /metrics`` | Prometheus text format |
| ``GET /ui`` | the dashboard (``streamplane.controlplane.dashboard``) |

With the monitor off every lag list is empty (and history is 404).
"""

# No ``from __future__ import annotations``: FastAPI reads the endpoint annotations.
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import sqlalchemy as sa
from fastapi import APIRouter, FastAPI, Query, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel
from sqlalchemy.engine import make_url

from streamplane.controlplane.dashboard import router as dashboard_router
from streamplane.controlplane.metrics import RequestMetrics, new_registry
from streamplane.controlplane.schemas import STREAM_NAME_PATTERN, ErrorResponse
from streamplane.controlplane.service import ControlPlaneService
from streamplane.controlplane.store import Store, error_line, is_outage
from streamplane.core.routing import RoutingTable, validate_stream_name
from streamplane.exceptions import NotFound
from streamplane.lag.monitor import (
    GroupSummary,
    LabelledLag,
    LagMonitor,
    MonitorSettings,
    TopologyUnavailable,
    summarize,
)
from streamplane.lag.reader import ReaderStatus

log = logging.getLogger(__name__)

__all__ = ["LagPlane", "StoreTopology", "lag_router", "start_lag_plane"]


class StoreTopology:
    """The control plane's store as the monitor's ``Topology``. A database outage is
    ``TopologyUnavailable`` (the store logs it once); other database errors are one
    line without the statement."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def clusters(self) -> dict[str, str]:
        with _reading():
            return {c.name: c.bootstrap for c in self._store.list_clusters()}

    def routing_tables(self) -> list[RoutingTable]:
        tables = []
        with _reading():
            for s in self._store.list_streams():
                try:
                    tables.append(self._store.routing(s.name))
                except NotFound:
                    continue  # deleted meanwhile
        return tables


@contextmanager
def _reading() -> Iterator[None]:
    try:
        yield
    except sa.exc.SQLAlchemyError as exc:
        if is_outage(exc):
            raise TopologyUnavailable(error_line(exc)) from exc
        raise RuntimeError(error_line(exc)) from exc


def default_snapshot_dir(db_url: str, replica_url: str | None = None) -> Path:
    """``lag/`` next to a SQLite database file (one replica per file); for another
    database (several replicas share it) ``.streamplane/lag/<host>-<port>``, by the
    replica's advertised URL: replicas started from one directory each keep their own
    snapshots (they overwrote each other's in ``.streamplane/lag``)."""
    base = Path(".streamplane") / "lag"
    try:
        url = make_url(db_url)
    except Exception:
        url = None
    if (
        url is not None
        and url.get_backend_name() == "sqlite"
        and url.database not in (None, "", ":memory:")
    ):
        return Path(str(url.database)).parent / "lag"
    replica = _replica_dir_name(replica_url)
    return base / replica if replica else base


def _replica_dir_name(replica_url: str | None) -> str | None:
    """``http://127.0.0.1:21101`` -> ``127.0.0.1-21101`` (None without a URL)."""
    if not replica_url:
        return None
    parts = urlsplit(replica_url)
    try:
        port = parts.port
    except ValueError:
        port = None
    host = parts.hostname or replica_url
    name = f"{host}-{port}" if port is not None else host
    return re.sub(r"[^A-Za-z0-9._-]", "_", name).strip(".") or None


class LagPlane:
    """The lag monitor, the metrics registry and the request counter of one app."""

    def __init__(self) -> None:
        self.monitor: LagMonitor | None = None
        self.registry: CollectorRegistry = new_registry(lambda: self.monitor)
        self._requests: RequestMetrics | None = None

    def install_request_metrics(self, app: FastAPI) -> None:
        if self._requests is None and app.middleware_stack is not None:
            self._requests = RequestMetrics(
                app.middleware_stack, lambda: list(app.routes), self.registry
            )
            app.middleware_stack = self._requests

    def stop(self) -> None:
        monitor, self.monitor = self.monitor, None
        if monitor is not None:
            monitor.stop()


def lag_plane(app: Any) -> LagPlane:
    """The app's lag plane (created on first use)."""
    plane = getattr(app.state, "lag_plane", None)
    if plane is None:
        plane = app.state.lag_plane = LagPlane()
    assert isinstance(plane, LagPlane)
    return plane


def start_lag_plane(app: FastAPI, settings: Any, service: ControlPlaneService) -> LagPlane:
    """At start-up: count requests, and start the monitor if ``settings.lag_monitor``."""
    plane = lag_plane(app)
    plane.install_request_metrics(app)
    if getattr(settings, "lag_monitor", False) and plane.monitor is None:
        configured = getattr(settings, "lag_snapshot_dir", None)
        failover = getattr(settings, "failover", None)
        replica_url = getattr(failover, "advertise_url", None)
        snapshot_dir = (
            Path(configured) if configured else default_snapshot_dir(settings.db_url, replica_url)
        )
        plane.monitor = LagMonitor(
            StoreTopology(service.store), MonitorSettings(snapshot_dir=snapshot_dir)
        )
        plane.monitor.start()
        log.info("lag monitor started (snapshots in %s)", snapshot_dir)
    return plane


# ---------------------------------------------------------------------- documents
class PartitionLagOut(BaseModel):
    group: str
    cluster: str
    stream: str | None
    lane: str | None
    topic: str
    partition: int
    committed_offset: int | None
    end_offset: int | None
    offset_lag: int | None
    time_lag_s: float | None
    status: str
    last_commit_ms: int | None
    # The end offset is the last known one (not read at the last poll: a broker down, a
    # leader moving), and how old it is: offset_lag counts from it, a lower bound.
    end_offset_stale: bool = False
    end_offset_age_s: float | None = None

    @classmethod
    def of(cls, p: LabelledLag) -> "PartitionLagOut":
        lag = p.lag
        return cls(
            group=lag.group,
            cluster=p.cluster,
            stream=lag.labels.stream,
            lane=lag.labels.lane,
            topic=lag.topic,
            partition=lag.partition,
            committed_offset=lag.committed_offset,
            end_offset=lag.end_offset,
            offset_lag=lag.offset_lag,
            time_lag_s=lag.time_lag_s,
            status=lag.status.name,
            last_commit_ms=lag.last_commit_ms,
            end_offset_stale=lag.end_offset_stale,
            end_offset_age_s=lag.end_offset_age_s,
        )


class GroupLagOut(BaseModel):
    group: str
    clusters: list[str]
    streams: list[str]
    partitions: int
    offset_lag: int
    max_time_lag_s: float | None
    unknown_time_lag: int
    status: str
    last_commit_ms: int | None
    # Partitions whose offset lag is unknown (``offset_lag`` sums the known ones).
    unknown_offset_lag: int = 0
    # Partitions whose offset lag counts from a stale end offset (included in
    # ``offset_lag`` at their last known end), and the age of the oldest such end.
    stale_end_offsets: int = 0
    stale_end_offset_age_s: float | None = None

    @classmethod
    def of(cls, s: GroupSummary) -> "GroupLagOut":
        return cls(
            group=s.group,
            clusters=list(s.clusters),
            streams=list(s.streams),
            partitions=s.partitions,
            offset_lag=s.offset_lag,
            max_time_lag_s=s.max_time_lag_s,
            unknown_time_lag=s.unknown_time_lag,
            status=s.status.name,
            last_commit_ms=s.last_commit_ms,
            unknown_offset_lag=s.unknown_offset_lag,
            stale_end_offsets=s.stale_end_offsets,
            stale_end_offset_age_s=s.stale_end_offset_age_s,
        )


class LagOut(BaseModel):
    now_ms: int
    monitor: bool
    groups: list[GroupLagOut]
    partitions: list[PartitionLagOut]


class PartitionHistoryOut(BaseModel):
    cluster: str
    topic: str
    partition: int
    stream: str | None
    lane: str | None
    # [time ms, time lag s, offset lag, the end offset was stale]
    samples: list[tuple[int, float | None, int | None, bool]]


class HistoryOut(BaseModel):
    group: str
    interval_s: float
    # [time ms, worst time lag s, total offset lag, partitions of that total counted
    # from a stale end offset, partitions whose offset lag was unknown (not in it)]
    series: list[tuple[int, float | None, int | None, int, int]]
    partitions: list[PartitionHistoryOut]


class ReaderOut(BaseModel):
    cluster: str
    bootstrap: str
    resumed_from_snapshot: bool
    snapshot_commits: int
    records_read: int
    commits_tracked: int
    caught_up: bool
    catch_up_s: float | None
    undecodable: int
    last_error: str | None
    last_record_ms: int | None

    @classmethod
    def of(cls, r: ReaderStatus) -> "ReaderOut":
        return cls(**{name: getattr(r, name) for name in cls.model_fields})


# ---------------------------------------------------------------------- routes
lag_router = APIRouter()
lag_router.include_router(dashboard_router)

# min_length=1: an empty filter (``?group=``) is a 422, not a filter on the empty string.
StreamFilter = Annotated[
    str | None,
    Query(min_length=1, max_length=63, json_schema_extra={"pattern": STREAM_NAME_PATTERN}),
]
GroupFilter = Annotated[
    str | None, Query(min_length=1, max_length=255, description="A consumer group id.")
]


def _monitor(request: Request, stream: str | None = None) -> LagMonitor | None:
    if stream is not None:
        validate_stream_name(stream)  # ConfigError: 400, like every name the API takes
    return lag_plane(request.app).monitor


def _known_stream(request: Request, stream: str | None, found: bool) -> None:
    """NotFound (404) for a ``stream`` filter that matched nothing and names no stream
    in the store. A stream with tracked partitions is known even if the store no longer
    has it (deleted a moment ago: the monitor relabels on its next registry refresh)."""
    if stream is None or found:
        return
    service = getattr(request.app.state, "service", None)
    if isinstance(service, ControlPlaneService):
        service.store.get_stream(stream)  # NotFound: "unknown stream 'x'"


_422: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "An invalid stream name."},
    422: {"model": ErrorResponse, "description": "The request does not match the schema."},
}
_404: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorResponse, "description": "The group is not tracked."}
}
_404_STREAM: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorResponse, "description": "No such stream (the stream filter)."}
}


@lag_router.get("/v1/lag", response_model=LagOut, responses={**_404_STREAM, **_422}, tags=["lag"])
def get_lag(request: Request, group: GroupFilter = None, stream: StreamFilter = None) -> LagOut:
    """Per partition lag (time lag in seconds, offset lag, status) and per group totals.

    A group not tracked (yet) has empty lists; an unknown ``stream`` is 404."""
    monitor = _monitor(request, stream)
    if monitor is None:
        _known_stream(request, stream, False)
        return LagOut(now_ms=0, monitor=False, groups=[], partitions=[])
    now = monitor.now_ms()
    parts = monitor.partitions(group=group, stream=stream, now_ms=now)
    _known_stream(request, stream, bool(parts))
    by_group: dict[str, list[LabelledLag]] = {}
    for p in parts:
        by_group.setdefault(p.lag.group, []).append(p)
    return LagOut(
        now_ms=now,
        monitor=True,
        groups=[GroupLagOut.of(summarize(g, ps)) for g, ps in sorted(by_group.items())],
        partitions=[PartitionLagOut.of(p) for p in parts],
    )


@lag_router.get(
    "/v1/groups",
    response_model=list[GroupLagOut],
    responses={**_404_STREAM, **_422},
    tags=["lag"],
)
def list_groups(request: Request, stream: StreamFilter = None) -> list[GroupLagOut]:
    """Every group with committed offsets on a registered cluster, with its lag (an
    unknown ``stream`` is 404)."""
    monitor = _monitor(request, stream)
    groups = [] if monitor is None else monitor.groups(stream=stream)
    _known_stream(request, stream, bool(groups))
    return [GroupLagOut.of(s) for s in groups]


@lag_router.get(
    # {group:path}: any group id, "/" included (sent as %2F, which the server decodes
    # before routing). The fixed suffix keeps it from matching any other route.
    "/v1/groups/{group:path}/lag/history",
    response_model=HistoryOut,
    responses={**_404, **_422},
    tags=["lag"],
)
def group_history(request: Request, group: str) -> HistoryOut:
    """The group's lag history: per bucket its worst time lag and total offset lag
    (``series``: [time ms, time lag s, offset lag, stale partitions, unknown
    partitions]), and each partition's samples ([time ms, time lag s, offset lag,
    stale])."""
    monitor = _monitor(request)
    if monitor is None:
        raise NotFound(f"no tracked partitions of group {group!r} (the lag monitor is off)")
    return HistoryOut.model_validate(monitor.group_history(group))


@lag_router.get("/v1/lag/readers", response_model=list[ReaderOut], tags=["lag"])
def readers(request: Request) -> list[ReaderOut]:
    """The ``__consumer_offsets`` reader of each cluster: caught up, resumed, errors."""
    monitor = _monitor(request)
    return [] if monitor is None else [ReaderOut.of(r) for r in monitor.readers()]


class DlqOut(BaseModel):
    stream: str
    cluster: str
    topic: str
    records: int


@lag_router.get("/v1/lag/dlq", response_model=list[DlqOut], tags=["lag"])
def dlq_counts(request: Request) -> list[DlqOut]:
    """Records written to each dlq segment (log-end offsets, polled with the lag)."""
    monitor = _monitor(request)
    if monitor is None:
        return []
    return [DlqOut(stream=s, cluster=c, topic=t, records=n) for s, c, t, n in monitor.dlq_records()]


@lag_router.get("/metrics", include_in_schema=False)
def metrics(request: Request) -> Response:
    return Response(
        generate_latest(lag_plane(request.app).registry), media_type=CONTENT_TYPE_LATEST
    )
