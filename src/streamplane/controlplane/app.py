"""The control plane's HTTP API (FastAPI): ``create_app(settings) -> FastAPI``.

Reads are open; mutations need ``Authorization: Bearer <token>`` (401 without one, 403
with a wrong one). Every error is JSON ``{"detail": "<one line>"}``: streamplane
errors map to 400 (ConfigError), 404 (NotFound), 409 (Conflict) and 502 (KafkaError,
the cluster failed), request validation to 422, a database that does not answer to 503
(with ``Retry-After``; one warning per outage in the log), anything else to 500 (one
traceback in the log). Handlers that touch the store or Kafka
are plain ``def`` (FastAPI runs them in worker threads); the routing watch is ``async``
and waits on the ``WatchHub`` without holding a thread.
"""

# No ``from __future__ import annotations`` here: FastAPI reads the endpoint annotations
# at runtime, and some refer to names local to ``create_app``.
import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import FastAPI, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from streamplane import __version__
from streamplane.controlplane.assigner import AssignerService
from streamplane.controlplane.auth import Actor, TokenCheck, require_token
from streamplane.controlplane.body_limit import DEFAULT_MAX_BODY_BYTES, BodyLimitMiddleware
from streamplane.controlplane.failover_api import failover_router
from streamplane.controlplane.failover_runtime import FailoverRuntime, FailoverSettings
from streamplane.controlplane.groups_api import groups_router
from streamplane.controlplane.lag_api import lag_router, start_lag_plane
from streamplane.controlplane.leader_proxy import LeaderProxy
from streamplane.controlplane.schemas import (
    CLUSTER_NAME_PATTERN,
    STREAM_NAME_PATTERN,
    AuditOut,
    ClusterIn,
    ClusterOut,
    ClusterPatch,
    ErrorResponse,
    FailoverIn,
    Health,
    LaneIn,
    RoutingOut,
    SegmentTransitionIn,
    StreamDetail,
    StreamIn,
    StreamOut,
)
from streamplane.controlplane.service import ControlPlaneService, parse_tag_filter
from streamplane.controlplane.store import Store, error_line, is_outage, unavailable_reason
from streamplane.controlplane.tags_api import tags_router
from streamplane.controlplane.watch import WatchHub
from streamplane.core.assignment import AssignerConfig
from streamplane.core.routing import SegmentState
from streamplane.exceptions import (
    ConfigError,
    Conflict,
    KafkaError,
    NotFound,
    StreamplaneError,
    Unauthorized,
)

log = logging.getLogger(__name__)

# Retry-After of a 503 while the database does not answer.
DATABASE_RETRY_AFTER_S = 5


class ControlPlaneSettings(BaseModel):
    """How one control-plane replica runs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    db_url: str = Field(description="SQLAlchemy URL of the store, e.g. sqlite:///cp.db")
    api_token: str = Field(min_length=8, description="The bearer token mutations need.")
    previous_api_tokens: tuple[str, ...] = Field(
        default=(),
        description="Tokens accepted too, during a rotation (the old one, while clients move).",
    )
    watch_timeout_default: float = Field(default=25.0, gt=0)
    watch_timeout_max: float = Field(default=60.0, gt=0)
    watch_poll_interval: float = Field(
        default=0.5,
        gt=0,
        description="How often waiting watches re-check the store (changes by other replicas).",
    )
    kafka_timeout: float = Field(default=15.0, gt=0, description="Seconds per Kafka admin call.")
    failover: FailoverSettings = Field(default_factory=FailoverSettings)
    lag_monitor: bool = Field(default=True, description="Run the lag monitor (time lag).")
    lag_snapshot_dir: str | None = Field(
        default=None, description="Lag reader snapshots (default: lag/ beside a SQLite store)."
    )
    lease_ttl_s: float = Field(
        default=1.5, gt=0, le=60, description="Assigner: a lease lasts this long after a heartbeat."
    )
    max_body_bytes: int = Field(
        default=DEFAULT_MAX_BODY_BYTES,
        gt=0,
        description="The largest request body accepted (413 above it, unread).",
    )

    @field_validator("api_token")
    @classmethod
    def _printable(cls, value: str) -> str:
        if not value.isascii() or not value.isprintable() or " " in value:
            raise ValueError("the API token must be printable ASCII without spaces")
        return value

    @field_validator("previous_api_tokens")
    @classmethod
    def _previous_printable(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        for value in values:
            if len(value) < 8:
                raise ValueError("a previous API token has at least 8 characters")
            cls._printable(value)
        return values


_ERROR_STATUS: tuple[tuple[type[StreamplaneError], int], ...] = (
    (NotFound, 404),
    (Conflict, 409),
    (Unauthorized, 401),
    (ConfigError, 400),
    (KafkaError, 502),
)

_DESCRIPTIONS = {
    400: "Invalid input (a name, a config, a rule of the routing state machine).",
    401: "No API token.",
    403: "Wrong API token.",
    404: "Unknown stream or cluster.",
    409: "Already exists, or the stream changed meanwhile.",
    413: "The request body is larger than the control plane's limit.",
    422: "The request does not match the schema.",
    502: "A Kafka cluster failed the operation.",
    503: "Unavailable here or now (Retry-After says when to try again).",
}


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for ``codes``, and 503: every route reads the store, which
    may not answer."""
    return {c: {"model": ErrorResponse, "description": _DESCRIPTIONS[c]} for c in (*codes, 503)}


_MUTATION = (401, 403, 413, 422)  # 413: the body limit (body_limit.py)

ClusterPath = Annotated[
    str, Path(description="A cluster name.", json_schema_extra={"pattern": CLUSTER_NAME_PATTERN})
]
StreamPath = Annotated[
    str, Path(description="A stream name.", json_schema_extra={"pattern": STREAM_NAME_PATTERN})
]


# FastAPI's 400 detail when reading the body failed other than by a JSON decode error.
_BODY_NOT_PARSED = "There was an error parsing the body"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _validation_detail(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            reason = (err.get("ctx") or {}).get("error", "")
            parts.append(f"the body is not valid JSON: {reason}".rstrip(": "))
            continue
        loc = [str(p) for p in err.get("loc", ()) if p != "body"]
        where = ".".join(loc) or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return _one_line("; ".join(parts) or "invalid request")


def _allowed_methods(app: FastAPI, path: str) -> list[str]:
    methods: set[str] = set()
    for route in app.routes:
        regex = getattr(route, "path_regex", None)
        if regex is not None and regex.match(path):
            methods |= set(getattr(route, "methods", None) or ())
    return sorted(methods)


def create_app(
    settings: ControlPlaneSettings, service: ControlPlaneService | None = None
) -> FastAPI:
    """The API over ``service`` (default: a service over ``Store(settings.db_url)``)."""
    owned = service is None
    if service is None:
        service = ControlPlaneService(Store(settings.db_url), kafka_timeout=settings.kafka_timeout)
    svc = service
    hub = WatchHub(svc.store.stream_epochs, settings.watch_poll_interval)
    svc.add_listener(hub.publish)
    failover_rt = FailoverRuntime(svc, settings.failover)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        lag_plane = start_lag_plane(app, settings, svc)
        failover_rt.start()
        assigner.start()
        yield
        assigner.stop()
        failover_rt.stop()
        await leader_proxy.close()
        lag_plane.stop()
        hub.close()
        if owned:
            svc.close()

    app = FastAPI(
        title="streamplane control plane",
        version=__version__,
        description="Cluster registry, streams and their routing tables, failover.",
        lifespan=lifespan,
    )
    app.state.service = svc
    app.state.hub = hub
    app.state.settings = settings
    app.include_router(lag_router)
    app.include_router(tags_router)

    @app.exception_handler(StreamplaneError)
    async def _streamplane_error(_: Request, exc: StreamplaneError) -> JSONResponse:
        status = next((s for t, s in _ERROR_STATUS if isinstance(exc, t)), 500)
        if status == 500:
            log.error("unexpected control-plane error: %s", exc)
        return JSONResponse({"detail": _one_line(str(exc))}, status_code=status)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 400 and exc.detail == _BODY_NOT_PARSED:
            # FastAPI's answer when its JSON parse raised other than a decode error:
            # arrays and objects nested past Python's recursion limit. A 422, as any
            # body that is not valid JSON (it was a 400 saying nothing of why).
            detail = "the body is not valid JSON: it could not be parsed (nested too deep?)"
            return JSONResponse({"detail": detail}, status_code=422)
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            # Starlette names only the first matching route's methods; list them all.
            headers["Allow"] = ", ".join(_allowed_methods(app, request.url.path))
        return JSONResponse(
            {"detail": _one_line(str(exc.detail))}, status_code=exc.status_code, headers=headers
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _validation_detail(exc)}, status_code=422)

    async def _database_error(request: Request, exc: Exception) -> JSONResponse:
        reason = unavailable_reason(exc)
        if reason is None:  # a bug, not an outage
            return await _unexpected(request, exc, logged=False)
        svc.store.availability.down(reason)  # one warning per outage, not per request
        return JSONResponse(
            {"detail": f"database unavailable: {reason}"},
            status_code=503,
            headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)},
        )

    async def _unexpected(request: Request, exc: Exception, logged: bool = True) -> JSONResponse:
        # Under ServerErrorMiddleware (logged=True) the server logs the traceback after
        # this answer; errors handled here directly are logged here, once.
        if not logged:
            log.error("unexpected error in %s %s", request.method, request.url.path, exc_info=exc)
        detail = f"internal error ({type(exc).__name__}): see the control plane's log"
        return JSONResponse({"detail": detail}, status_code=500)

    app.add_exception_handler(sa.exc.DBAPIError, _database_error)
    app.add_exception_handler(sa.exc.TimeoutError, _database_error)  # no pooled connection
    app.add_exception_handler(Exception, _unexpected)

    app.state.token_check = TokenCheck(settings.api_token, settings.previous_api_tokens)

    assigner = AssignerService(svc.routing, AssignerConfig(lease_ttl_s=settings.lease_ttl_s))
    failover_rt.leadership.add_listener(assigner.lead)
    app.state.assigner = assigner

    def saw_reader(stream: str, group: str, lanes: Sequence[str]) -> None:
        try:
            failover_rt.store.saw_reader(stream, group, lanes)
        except sa.exc.SQLAlchemyError as exc:  # the heartbeat is answered anyway
            if not is_outage(exc):  # an outage: the store's one warning says it
                log.warning(
                    "could not record group %s reading %s: %s", group, stream, error_line(exc)
                )

    app.include_router(
        groups_router(assigner, require_token, _errors, lambda: failover_rt.is_leader, saw_reader)
    )
    # A follower forwards the Assigner's routes to the leader (groups_router's 503 is for
    # a request that reaches a follower anyway: forwarded once already).
    leader_proxy = LeaderProxy(
        lambda: failover_rt.is_leader, failover_rt.leader_url, failover_rt.replica
    )
    app.middleware("http")(leader_proxy)
    # outermost: before the proxy, the token
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=settings.max_body_bytes)
    app.include_router(failover_router(failover_rt, require_token))

    # ------------------------------------------------------------------ health
    @app.get("/healthz", response_model=Health, tags=["health"])
    def healthz() -> Health:
        return Health(status="ok", version=__version__, schema_version=svc.store.schema_version())

    # ------------------------------------------------------------------ clusters
    @app.post(
        "/v1/clusters",
        status_code=201,
        response_model=ClusterOut,
        responses=_errors(400, 409, *_MUTATION),
        tags=["clusters"],
    )
    def register_cluster(
        body: ClusterIn,
        actor: Actor,
        force: Annotated[
            bool,
            Query(
                description="Register it even if the bootstrap does not answer or is a "
                "Kafka cluster registered under another name."
            ),
        ] = False,
    ) -> ClusterOut:
        record = svc.register_cluster(body.name, body.bootstrap, body.tags, actor, force=force)
        return ClusterOut.of(record)

    @app.get(
        "/v1/clusters",
        response_model=list[ClusterOut],
        responses=_errors(400, 422),
        tags=["clusters"],
    )
    def list_clusters(
        tag: Annotated[
            list[str] | None,
            Query(description="key:value; repeat to AND several tags."),
        ] = None,
    ) -> list[ClusterOut]:
        health = failover_rt.health_records()
        return [
            ClusterOut.of(c, health.get(c.name))
            for c in svc.list_clusters(parse_tag_filter(tag or []))
        ]

    @app.get(
        "/v1/clusters/{name}",
        response_model=ClusterOut,
        responses=_errors(400, 404, 422),
        tags=["clusters"],
    )
    def get_cluster(name: ClusterPath) -> ClusterOut:
        return ClusterOut.of(svc.get_cluster(name), failover_rt.health_records().get(name))

    @app.patch(
        "/v1/clusters/{name}",
        response_model=ClusterOut,
        responses=_errors(400, 404, 409, *_MUTATION),
        tags=["clusters"],
    )
    def update_cluster(
        name: ClusterPath,
        body: ClusterPatch,
        actor: Actor,
        force: Annotated[
            bool,
            Query(
                description="Change the bootstrap even if it does not answer, is "
                "another Kafka cluster than the registered one, or one registered under "
                "another name."
            ),
        ] = False,
        protect_segments: Annotated[
            bool,
            Query(
                description="With force: refuse (409) all the same to move the cluster to "
                "a bootstrap that is not (or cannot be told to be: it does not answer) its "
                "Kafka cluster while streams have segments on it."
            ),
        ] = False,
    ) -> ClusterOut:
        updated = svc.update_cluster(
            name, body.bootstrap, body.tags, actor, force=force, protect_segments=protect_segments
        )
        return ClusterOut.of(updated, failover_rt.health_records().get(name))

    @app.delete(
        "/v1/clusters/{name}",
        status_code=204,
        response_class=Response,
        responses=_errors(400, 404, 409, *_MUTATION),
        tags=["clusters"],
    )
    def delete_cluster(name: ClusterPath, actor: Actor) -> Response:
        svc.delete_cluster(name, actor)
        return Response(status_code=204)

    # ------------------------------------------------------------------ streams
    @app.post(
        "/v1/streams",
        status_code=201,
        response_model=StreamDetail,
        responses=_errors(400, 404, 409, 502, *_MUTATION),
        tags=["streams"],
    )
    def create_stream(body: StreamIn, actor: Actor) -> StreamDetail:
        record, table = svc.create_stream(body.spec(), actor)
        return StreamDetail.of_table(record, table)

    @app.get("/v1/streams", response_model=list[StreamOut], tags=["streams"])
    def list_streams() -> list[StreamOut]:
        return [StreamOut.of(s, active) for s, active in svc.list_streams()]

    @app.get(
        "/v1/streams/{name}",
        response_model=StreamDetail,
        responses=_errors(400, 404, 422),
        tags=["streams"],
    )
    def get_stream(name: StreamPath) -> StreamDetail:
        record, table = svc.get_stream(name)
        return StreamDetail.of_table(record, table)

    @app.delete(
        "/v1/streams/{name}",
        status_code=204,
        response_class=Response,
        responses=_errors(400, 404, 502, *_MUTATION),
        tags=["streams"],
    )
    def delete_stream(
        name: StreamPath,
        actor: Actor,
        delete_topics: Annotated[
            bool, Query(description="Also delete the stream's topics on every cluster.")
        ] = True,
    ) -> Response:
        svc.delete_stream(name, delete_topics, actor)
        # Its readers, drained reports and producers are the old stream's: a stream
        # created again under the name is held only by the groups reading it.
        failover_rt.store.forget_stream(name)
        return Response(status_code=204)

    @app.get(
        "/v1/streams/{name}/routing",
        response_model=RoutingOut,
        responses=_errors(400, 404, 422),
        tags=["routing"],
        description=(
            "The stream's routing table. With after_epoch, a long poll: answers at once if "
            "the epoch is above after_epoch, else when it changes or after `timeout` "
            "seconds, with the current table either way (compare the epochs)."
        ),
    )
    async def routing(
        name: StreamPath,
        after_epoch: Annotated[
            int | None, Query(ge=-1, le=2**62, description="The epoch the caller has.")
        ] = None,
        timeout: Annotated[
            float | None,
            Query(
                ge=0,
                le=settings.watch_timeout_max,
                allow_inf_nan=False,
                description=f"Seconds to wait (default {settings.watch_timeout_default:g}).",
            ),
        ] = None,
    ) -> RoutingOut:
        loop = asyncio.get_running_loop()
        wait = settings.watch_timeout_default if timeout is None else timeout
        deadline = loop.time() + min(wait, settings.watch_timeout_max)
        while True:
            table = await run_in_threadpool(svc.routing, name)
            remaining = deadline - loop.time()
            if after_epoch is None or table.epoch > after_epoch or remaining <= 0:
                return RoutingOut.of(table)
            await hub.wait(name, table.epoch, remaining)
            if hub.closed:
                return RoutingOut.of(await run_in_threadpool(svc.routing, name))

    @app.post(
        "/v1/streams/{name}/failover",
        response_model=RoutingOut,
        responses=_errors(400, 404, 409, 502, *_MUTATION),
        tags=["routing"],
        description=(
            "Create new topics for the lanes on the target cluster, then make them the "
            "active segments in a new epoch; the old segments drain."
        ),
    )
    def failover(name: StreamPath, body: FailoverIn, actor: Actor) -> RoutingOut:
        table = svc.failover(name, body.cluster, body.lanes, body.partitions, body.reason, actor)
        return RoutingOut.of(table)

    @app.post(
        "/v1/streams/{name}/lanes",
        status_code=201,
        response_model=RoutingOut,
        responses=_errors(400, 404, 409, 502, *_MUTATION),
        tags=["routing"],
        description=(
            "Add a lane to a live stream: its topic is created (on the cluster of the other "
            "lanes' active segments unless `cluster` says), then it is routed in a new "
            "epoch, at its place in the priority order; producers and consumers watching "
            "the routing pick it up. 409 if the stream has the lane (dlq included)."
        ),
    )
    def add_lane(name: StreamPath, body: LaneIn, actor: Actor) -> RoutingOut:
        table = svc.add_lane(name, body.name, body.before, body.partitions, body.cluster, actor)
        return RoutingOut.of(table)

    @app.post(
        "/v1/streams/{name}/segments/transition",
        response_model=RoutingOut,
        responses=_errors(400, 404, 409, *_MUTATION),
        tags=["routing"],
        description="Move one segment forward: draining -> sealed -> retired (or lost).",
    )
    def transition_segment(name: StreamPath, body: SegmentTransitionIn, actor: Actor) -> RoutingOut:
        try:
            offsets = {int(p): o for p, o in body.sealed_end_offsets.items()}
        except ValueError as exc:
            raise ConfigError("sealed_end_offsets keys must be partition numbers") from exc
        if body.state is SegmentState.RETIRED:
            table = failover_rt.retire_by_hand(name, body.cluster, body.topic, offsets, actor)
        else:
            table = svc.transition_segment(
                name, body.cluster, body.topic, body.state, offsets, actor
            )
        return RoutingOut.of(table)

    # ------------------------------------------------------------------ audit
    @app.get(
        "/v1/audit", response_model=list[AuditOut], responses=_errors(400, 422), tags=["audit"]
    )
    def audit(
        stream: Annotated[
            str | None,
            Query(max_length=63, json_schema_extra={"pattern": STREAM_NAME_PATTERN}),
        ] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> list[AuditOut]:
        return [AuditOut.of(e) for e in svc.audit(stream, limit)]

    return app
