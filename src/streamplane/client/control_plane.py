"""``ControlPlaneClient``: the synchronous HTTP client of the control plane.

One ``httpx.Client`` (one connection pool) per instance; safe to share between
threads, so a producer can long-poll the routing in one thread while others read.

Several replicas: ``ControlPlaneClient("http://a:8470,http://b:8470")`` (or a list).
``ControlPlaneClient.from_env()`` takes the URL(s) and token from ``STREAMPLANE_URL``
(``URL_ENV``) and ``STREAMPLANE_API_TOKEN`` (``TOKEN_ENV``), the variables the CLI reads;
the constructor reads no environment.
Requests go to one replica at a time and stay on it while it answers (sticky). When it
cannot serve (connection refused or lost, a timeout, a 503, a proxy's 502/504), the
request is sent to the next replica, and the client stays on the first that answers.
Every request may move when the replica surely did not act on it (no connection, or
the control plane's own 503). After a failure that may have reached the replica (a
timeout, a dropped connection, a proxy's 502/504), a request is sent again elsewhere
only if doing it twice is harmless or recognised: reads, heartbeats, reports, deletes
(a 404 then means the first attempt deleted it), creation (a 409 "already exists" for
exactly what was asked means the first attempt made it), a failover without a
partition count (a 400 "nothing to move" means it happened), a segment transition
(the segment already in the state asked for). A failover with a partition count is
never sent twice: a repeat would make another epoch. A routing long poll whose
replica stops answering (a stopped process holds it until its read timeout) is left as
soon as another request (a producer's or a member's heartbeat) moves the client on.

Errors, always one line:

- connection refused, DNS failure, timeout, dropped connection -> ``ControlPlaneUnavailable``
  (naming the URL; with several replicas, only when none answered, naming each with
  its error), so callers can keep their cached routing (fail-static);
- 404 -> ``NotFound``; 401/403 -> ``Unauthorized``; 409 -> ``Conflict``;
- any other 4xx/5xx -> ``ControlPlaneError`` with ``status``; a 5xx names the URL and
  the server's detail (``control plane at URL: database unavailable: ...``).

Logging: httpx logs every request at INFO on its logger ``httpx`` (``HTTP Request: POST
... 200``), about 6 lines a second for a consumer service (group and producer
heartbeats, the routing watch), which flooded the application's INFO log. This
client's requests are marked while they are sent (a context variable, so per thread)
and a filter on the ``httpx`` logger drops their lines, and only theirs: the
application's own httpx requests are logged as before. Each request is logged at DEBUG
on this module's logger instead, in httpx's words. (An event hook or a transport of
our own cannot do it: the line is written by ``httpx.Client`` itself, after the
transport and whatever the hooks do; raising the ``httpx`` logger's level would hide
the application's requests too.)
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Literal, Self, TypeVar
from urllib.parse import quote

import httpx

from streamplane import __version__
from streamplane.core.routing import (
    DEFAULT_LANES,
    RoutingTable,
    routing_from_json,
    validate_stream_name,
)
from streamplane.exceptions import (
    ConfigError,
    Conflict,
    ControlPlaneError,
    ControlPlaneUnavailable,
    NotFound,
    Unauthorized,
)

DEFAULT_URL = "http://127.0.0.1:8470"
# Where the client, like the CLI, finds its URL(s) and token when not given them.
URL_ENV = "STREAMPLANE_URL"
TOKEN_ENV = "STREAMPLANE_API_TOKEN"
# Calls that create or delete topics wait for Kafka; give them more than a plain read.
KAFKA_CALL_TIMEOUT = 60.0
# A long poll may take its whole timeout; the HTTP read waits that much longer.
WATCH_SLACK = 10.0

log = logging.getLogger(__name__)

# When a request may be sent to another replica after one failed: "any" failure, or
# only one that surely did not reach the control plane's logic ("unsent").
Retry = Literal["any", "unsent"]
T = TypeVar("T")

# Set while this thread sends a request of a ControlPlaneClient: httpx's INFO line for
# it is dropped (``_DropOwnRequests``), the client logs it at DEBUG.
_SENDING_OWN_REQUEST: ContextVar[bool] = ContextVar("streamplane_own_request", default=False)


class _DropOwnRequests(logging.Filter):
    """On the ``httpx`` logger: drops the lines of requests a ControlPlaneClient sends."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _SENDING_OWN_REQUEST.get()


_DROP_OWN_REQUESTS = _DropOwnRequests()


class ControlPlaneClient:
    """A client of the control plane at ``url``; ``token`` is needed for mutations.

    ``url`` may name several replicas (of one control plane over PostgreSQL): a
    comma-separated string (``"http://a:8470,http://b:8470"``) or a list. ``timeout``
    bounds each attempt at one replica (a request that moves on may take it per replica).
    ``from_env()`` builds one from the environment, as the CLI does.
    """

    def __init__(
        self, url: str | Sequence[str], token: str | None = None, timeout: float = 10.0
    ) -> None:
        self.urls: tuple[str, ...] = parse_urls(url)
        if timeout <= 0:
            raise ConfigError("the control-plane timeout must be positive")
        self.timeout = timeout
        headers = {"User-Agent": f"streamplane/{__version__}"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        # No base URL: each request names its replica's (one pool, keyed by origin).
        self._http = httpx.Client(headers=headers, timeout=timeout)
        logging.getLogger("httpx").addFilter(_DROP_OWN_REQUESTS)  # once: a set
        self._current = 0  # the replica requests go to first (sticky)
        self._lock = threading.Lock()
        # Told each move to another replica, with the thread whose request moved (a
        # long poll is left when another request finds its replica gone: _long_poll).
        self._moved = threading.Condition(self._lock)
        self._moved_by = 0

    @property
    def url(self) -> str:
        """The URL of the replica requests go to now (the one that answered last)."""
        return self.urls[self._current]

    # ------------------------------------------------------------------ life cycle
    def close(self) -> None:
        self._http.close()

    @classmethod
    def from_env(cls, timeout: float = 10.0) -> ControlPlaneClient:
        """A client of the control plane named by ``STREAMPLANE_URL`` (several replicas'
        URLs separated by commas), with the token in ``STREAMPLANE_API_TOKEN`` if set: the
        variables the CLI reads. ``ConfigError`` when ``STREAMPLANE_URL`` is not set or
        not valid (the message names it)."""
        given = os.environ.get(URL_ENV, "")
        if not given.strip():
            raise ConfigError(
                f"{URL_ENV} is not set: set it to the control plane's URL (http(s)://host:"
                "port; several replicas' URLs separated by commas), or pass the URL: "
                "ControlPlaneClient(url, token=...)"
            )
        try:
            urls = parse_urls(given)
        except ConfigError as exc:
            raise ConfigError(f"{URL_ENV}: {exc}") from exc
        return cls(urls, os.environ.get(TOKEN_ENV, "").strip() or None, timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ControlPlaneClient({','.join(self.urls)!r})"

    # ------------------------------------------------------------------ health
    def health(self) -> dict[str, Any]:
        return self._json("GET", "/healthz")  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ clusters
    def list_clusters(self, tags: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
        """Registered clusters having all of ``tags``."""
        params = [("tag", f"{k}:{v}") for k, v in (tags or {}).items()]
        return self._json("GET", "/v1/clusters", params=params)  # type: ignore[no-any-return]

    def register_cluster(
        self,
        name: str,
        bootstrap: str,
        tags: Mapping[str, str] | None = None,
        force: bool = False,
    ) -> dict[str, Any]:
        """Register a cluster. Its bootstrap must answer and be a Kafka cluster no other
        name is registered for, unless ``force``."""
        body = {"name": name, "bootstrap": bootstrap, "tags": dict(tags or {})}
        params = {"force": "true"} if force else None

        def made_before(exc: ControlPlaneError) -> Any:
            return _made_by_earlier_attempt(
                exc,
                lambda: self.get_cluster(name),
                lambda doc: (
                    same_bootstrap(doc.get("bootstrap"), bootstrap)
                    and doc.get("tags") == dict(tags or {})
                ),
            )

        return self._json(  # type: ignore[no-any-return]
            "POST", "/v1/clusters", json=body, params=params, retry="any", settle=made_before
        )

    def update_cluster(
        self,
        name: str,
        bootstrap: str | None = None,
        tags: Mapping[str, str] | None = None,
        force: bool = False,
        protect_segments: bool = False,
    ) -> dict[str, Any]:
        """Change the bootstrap and/or replace the tags (``None`` leaves them as they are).
        A new bootstrap must answer and be the same Kafka cluster, unless ``force``; with
        ``protect_segments`` too, a forced move to another (or a silent) Kafka cluster is
        refused all the same (``Conflict``) while streams have segments on the cluster."""
        body: dict[str, Any] = {}
        if bootstrap is not None:
            body["bootstrap"] = bootstrap
        if tags is not None:
            body["tags"] = dict(tags)
        params = {"force": "true"} if force else {}
        if protect_segments:
            params["protect_segments"] = "true"
        return self._json(  # type: ignore[no-any-return]
            "PATCH", f"/v1/clusters/{_seg(name)}", json=body, params=params, retry="any"
        )

    def delete_cluster(self, name: str) -> None:
        self._json("DELETE", f"/v1/clusters/{_seg(name)}", settle=_gone_is_done)

    def get_cluster(self, name: str) -> dict[str, Any]:
        return self._json("GET", f"/v1/clusters/{_seg(name)}")  # type: ignore[no-any-return]

    def cluster_bootstrap(self, name: str) -> str:
        return str(self.get_cluster(name)["bootstrap"])

    # ------------------------------------------------------------------ streams
    def create_stream(
        self,
        name: str,
        cluster: str,
        lanes: Sequence[str] = DEFAULT_LANES,
        partitions: int = 6,
        dlq_partitions: int = 1,
        replication_factor: int | None = None,
        config: Mapping[str, str] | None = None,
        max_record_bytes: int = 1048576,
    ) -> RoutingTable:
        """Create the stream and its topics (every lane and the dlq) on ``cluster``.
        ``replication_factor`` None is the control plane's default: min(3, the cluster's
        live brokers)."""
        validate_stream_name(name)  # a ConfigError with the rule, before any request
        body: dict[str, Any] = {
            "name": name,
            "cluster": cluster,
            "lanes": list(lanes),
            "partitions": partitions,
            "dlq_partitions": dlq_partitions,
            "config": dict(config or {}),
            "max_record_bytes": max_record_bytes,
        }
        if replication_factor is not None:
            body["replication_factor"] = replication_factor

        def made_before(exc: ControlPlaneError) -> Any:
            return _made_by_earlier_attempt(
                exc, lambda: self.describe_stream(name), lambda doc: _stream_is(doc, body)
            )

        doc = self._json(
            "POST",
            "/v1/streams",
            json=body,
            timeout=KAFKA_CALL_TIMEOUT,
            retry="any",
            settle=made_before,
        )
        return self._routing(doc["routing"])

    def list_streams(self) -> list[dict[str, Any]]:
        return self._json("GET", "/v1/streams")  # type: ignore[no-any-return]

    def describe_stream(self, name: str) -> dict[str, Any]:
        """The stream's settings (``max_record_bytes``, ``lanes``, ...) and its ``routing``."""
        return self._json("GET", f"/v1/streams/{_seg(name)}")  # type: ignore[no-any-return]

    def delete_stream(self, name: str, delete_topics: bool = True) -> None:
        params = {"delete_topics": "true" if delete_topics else "false"}
        self._json(
            "DELETE",
            f"/v1/streams/{_seg(name)}",
            params=params,
            timeout=KAFKA_CALL_TIMEOUT,
            settle=_gone_is_done,
        )

    # ------------------------------------------------------------------ routing
    def routing(self, stream: str) -> RoutingTable:
        return self._routing(self._json("GET", f"/v1/streams/{_seg(stream)}/routing"))

    def watch_routing(self, stream: str, after_epoch: int, timeout: float = 25.0) -> RoutingTable:
        """Long poll: the table once its epoch is above ``after_epoch``, or after ``timeout``
        seconds the current table (whose epoch may still equal ``after_epoch``). With
        several replicas, a poll whose replica the client's other requests found gone
        is left, and the table asked of the replica they moved to (``_long_poll``)."""

        def poll() -> RoutingTable:
            doc = self._json(
                "GET",
                f"/v1/streams/{_seg(stream)}/routing",
                params={"after_epoch": after_epoch, "timeout": timeout},
                timeout=max(self.timeout, timeout + WATCH_SLACK),
            )
            return self._routing(doc)

        if len(self.urls) == 1:
            return poll()
        return self._long_poll(poll, lambda: self.routing(stream))

    def failover(
        self,
        stream: str,
        cluster: str,
        lanes: Sequence[str] | None = None,
        partitions: int | None = None,
        reason: str = "",
    ) -> RoutingTable:
        """Move ``lanes`` (default: all but the dlq) to new topics on ``cluster``."""
        body: dict[str, Any] = {"cluster": cluster, "reason": reason}
        if lanes is not None:
            body["lanes"] = list(lanes)
        if partitions is not None:
            body["partitions"] = partitions

        def moved_before(exc: ControlPlaneError) -> Any:
            # An attempt that may have reached a replica before: "nothing to move" says
            # every lane is on ``cluster`` already (that attempt moved them).
            if exc.status == 400 and "nothing to move" in str(exc):
                return self._json("GET", f"/v1/streams/{_seg(stream)}/routing")
            raise exc

        # With a partition count a repeat makes another epoch (new topics again): sent
        # to another replica only when the first surely did not act on it.
        doc = self._json(
            "POST",
            f"/v1/streams/{_seg(stream)}/failover",
            json=body,
            timeout=KAFKA_CALL_TIMEOUT,
            retry="any" if partitions is None else "unsent",
            settle=moved_before,
        )
        return self._routing(doc)

    def add_lane(
        self,
        stream: str,
        lane: str,
        before: str | None = None,
        partitions: int | None = None,
        cluster: str | None = None,
    ) -> RoutingTable:
        """Add ``lane`` to live ``stream``, just above lane ``before`` in the priority
        order (default: last, above the dlq only): its topic is created, then routed in a
        new epoch. ``partitions`` default to the stream's; ``cluster`` to the one its
        other lanes are active on."""
        body: dict[str, Any] = {"name": lane}
        for key, value in (("before", before), ("partitions", partitions), ("cluster", cluster)):
            if value is not None:
                body[key] = value

        def added_before(exc: ControlPlaneError) -> Any:
            # A 409 after an attempt that may have reached a replica: ours if the lane
            # is there as asked.
            if not isinstance(exc, Conflict):
                raise exc
            try:
                doc = self._json("GET", f"/v1/streams/{_seg(stream)}/routing")
            except ControlPlaneError:
                raise exc from None
            if _lane_is(self._routing(doc), body):
                log.info("lane %s of %s was added by an earlier attempt", lane, stream)
                return doc
            raise Conflict(f"{exc} {_EARLIER_ATTEMPT}", status=exc.status) from exc

        doc = self._json(
            "POST",
            f"/v1/streams/{_seg(stream)}/lanes",
            json=body,
            timeout=KAFKA_CALL_TIMEOUT,
            retry="any",
            settle=added_before,
        )
        return self._routing(doc)

    def transition_segment(
        self,
        stream: str,
        cluster: str,
        topic: str,
        state: str,
        sealed_end_offsets: Mapping[int, int] | None = None,
    ) -> RoutingTable:
        """Move one segment forward: draining -> sealed -> retired (or lost)."""
        body = {
            "cluster": cluster,
            "topic": topic,
            "state": state,
            "sealed_end_offsets": {str(p): o for p, o in (sealed_end_offsets or {}).items()},
        }
        path = f"/v1/streams/{_seg(stream)}/segments/transition"

        def moved_before(exc: ControlPlaneError) -> Any:
            # An attempt that may have reached a replica before: the segment already in
            # ``state`` is that attempt's doing.
            if exc.status == 400:
                doc = self._json("GET", f"/v1/streams/{_seg(stream)}/routing")
                for seg in doc.get("segments", []):
                    if (seg.get("cluster"), seg.get("topic"), seg.get("state")) == (
                        cluster,
                        topic,
                        state,
                    ):
                        return doc
            raise exc

        return self._routing(self._json("POST", path, json=body, retry="any", settle=moved_before))

    def audit(self, stream: str | None = None) -> list[dict[str, Any]]:
        """Audit entries, newest first."""
        params = {"stream": stream} if stream is not None else {}
        return self._json("GET", "/v1/audit", params=params)  # type: ignore[no-any-return]

    def epoch_changed_at(self, stream: str, epoch: int) -> datetime | None:
        """When the routing change that made ``epoch`` of ``stream`` was saved (the time
        its audit entry holds: after a failover's topics were created and before the
        table was committed), or None when no change in the last 100 audit entries of
        the stream made it."""
        for entry in self.audit(stream):
            if entry["detail"].get("to_epoch") == epoch:
                saved = datetime.fromisoformat(entry["time"])
                return saved if saved.tzinfo else saved.replace(tzinfo=UTC)
        return None

    # ------------------------------------------------------------------ groups (the Assigner)
    def group_heartbeat(
        self,
        group: str,
        member_id: str,
        stream: str,
        lanes: Sequence[str],
        *,
        cpu: float = 0.0,
        records_per_s: float = 0.0,
        units: Sequence[Mapping[str, Any]] = (),
        released: Sequence[Mapping[str, Any]] = (),
        claims: Sequence[Mapping[str, Any]] = (),
        timeout: float = 2.0,
    ) -> dict[str, Any]:
        """One heartbeat: the member's load in, its work units and lease out.

        Units are ``{"cluster", "topic", "partition"}`` dicts (``units`` may add
        ``throughput`` and ``backlog``). The answer has ``work_units``, ``release`` (units
        to stop and hand back in ``released``), ``lease_s``, ``generation`` and ``joined``
        (the heartbeat admitted the member: new, or its lease had expired).
        """
        body = {
            "member_id": member_id,
            "stream": stream,
            "lanes": list(lanes),
            "cpu": min(1.0, max(0.0, cpu)),
            "records_per_s": max(0.0, records_per_s),
            "units": list(units),
            "released": list(released),
            "claims": list(claims),
        }
        path = f"/v1/groups/{_seg(group)}/heartbeat"
        # Harmless twice: the answer is the member's state, its claims and releases are
        # sent again until one is answered.
        return self._json(  # type: ignore[no-any-return]
            "POST", path, json=body, timeout=timeout, retry="any"
        )

    def leave_group(self, group: str, member_id: str, timeout: float = 2.0) -> None:
        self._json("DELETE", f"/v1/groups/{_seg(group)}/members/{_seg(member_id)}", timeout=timeout)

    def describe_group(self, group: str) -> dict[str, Any]:
        """A group as the Assigner holds it: ``members`` (``member_id``, ``units``,
        ``releasing``, ``lease_s`` left, ``cpu``, ``records_per_s``), ``pending_release``
        (``unit``, ``holder``, ``target``, ``deadline_s``), ``unowned`` units, ``units``,
        ``generation``, ``recovering``; units are ``"cluster/topic/partition"``.
        ``NotFound`` for a group no member heartbeated to."""
        return self._json("GET", f"/v1/groups/{_seg(group)}/members")  # type: ignore[no-any-return]

    def assigner_groups(self) -> list[dict[str, Any]]:
        """Every group the Assigner knows: ``group``, ``stream``, ``lanes``, ``members``,
        ``units``, ``unowned`` (counts), ``generation``, ``recovering``."""
        return self._json("GET", "/v1/assigner/groups")  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ failover protocol
    def producer_heartbeat(self, stream: str, producer_id: str, epoch: int) -> dict[str, Any]:
        """Report the routing epoch a producer writes with (the sealer waits for it)."""
        path = f"/v1/streams/{_seg(stream)}/producers/{_seg(producer_id)}/heartbeat"
        return self._json(  # type: ignore[no-any-return]
            "POST", path, json={"epoch": epoch}, retry="any"
        )

    def producer_left(self, stream: str, producer_id: str, timeout: float = 2.0) -> None:
        """A producer closed: the sealer stops waiting for its heartbeats."""
        path = f"/v1/streams/{_seg(stream)}/producers/{_seg(producer_id)}"
        self._json("DELETE", path, timeout=timeout)

    def report_drained(self, stream: str, group: str, cluster: str, topic: str) -> dict[str, Any]:
        """Say that ``group`` has settled every record of a sealed segment."""
        body = {"group": group, "cluster": cluster, "topic": topic}
        path = f"/v1/streams/{_seg(stream)}/segments/drained"
        # A set of reports: the same one twice is one.
        return self._json("POST", path, json=body, retry="any")  # type: ignore[no-any-return]

    def declare_lost(self, stream: str, cluster: str, reason: str = "") -> RoutingTable:
        """Declare the draining and sealed segments of ``stream`` on ``cluster`` lost."""
        body = {"cluster": cluster, "reason": reason}
        path = f"/v1/streams/{_seg(stream)}/segments/lost"

        def lost_before(exc: ControlPlaneError) -> Any:
            # An attempt that may have reached a replica before: no draining or sealed
            # segment left there, and a lost one, is that attempt's doing.
            if exc.status == 400:
                doc = self._json("GET", f"/v1/streams/{_seg(stream)}/routing")
                states = {s.get("state") for s in doc.get("segments", [])
                          if s.get("cluster") == cluster}  # fmt: skip
                if "lost" in states and not states & {"draining", "sealed"}:
                    return doc
            raise exc

        return self._routing(self._json("POST", path, json=body, retry="any", settle=lost_before))

    def segments(self, stream: str) -> dict[str, Any]:
        """Segments with their drained reports, and the live producers' epochs."""
        return self._json("GET", f"/v1/streams/{_seg(stream)}/segments")  # type: ignore[no-any-return]

    def cluster_health(self) -> dict[str, Any]:
        """``{replica, leader, health_enabled, clusters: [{name, health, since, ...}]}``."""
        return self._json("GET", "/v1/health/clusters")  # type: ignore[no-any-return]

    def lag(self, group: str | None = None, stream: str | None = None) -> dict[str, Any]:
        """Time lag from the lag monitor (``GET /v1/lag``): ``{monitor, groups: [...]}``,
        only ``group``'s or those reading ``stream`` when given."""
        params = [(k, v) for k, v in (("group", group), ("stream", stream)) if v]
        return self._json("GET", "/v1/lag", params=params)  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ plumbing
    def _routing(self, doc: Any) -> RoutingTable:
        try:
            return routing_from_json(doc)
        except (ConfigError, AttributeError) as exc:
            raise ControlPlaneError(f"control plane at {self.url} sent {exc}") from exc

    def _json(
        self,
        method: str,
        path: str,
        *,
        params: Any = None,
        json: Any = None,
        timeout: float | None = None,
        retry: Retry | None = None,
        settle: Callable[[ControlPlaneError], Any] | None = None,
    ) -> Any:
        """One request, to the current replica and, when it cannot serve, to the next.

        ``retry``: after a failure that may have reached a replica (a timeout, a dropped
        connection, a proxy's 502/504), is the request sent to another? ``"any"``: yes
        (doing it twice is harmless or recognised by ``settle``); ``"unsent"``: no.
        Default: ``"any"`` for GET, PUT and DELETE, ``"unsent"`` otherwise. A failure
        that surely did not reach the control plane's logic (no connection, its own 503)
        always moves on. ``settle(error)``, when the request may have been done by an
        earlier attempt and a later replica refuses it: the answer to return, or raise.
        """
        if retry is None:
            retry = "any" if method in ("GET", "HEAD", "PUT", "DELETE") else "unsent"
        count = len(self.urls)
        first = self._current
        failures: list[tuple[str, str, ControlPlaneError]] = []  # (url, why, error)
        maybe_done_at: str | None = None  # the first replica that may have acted on it
        for step in range(count):
            if step and self._http.is_closed:  # closed meanwhile (a watch in flight)
                break
            index = (first + step) % count
            base = self.urls[index]
            try:
                resp = self._send(method, base + path, params, json, timeout)
            except httpx.TimeoutException as exc:
                why = f"did not answer in time ({type(exc).__name__})"
                error: ControlPlaneError = ControlPlaneUnavailable(f"control plane at {base} {why}")
                error.__cause__ = exc
                reached = not isinstance(exc, (httpx.ConnectTimeout, httpx.PoolTimeout))
            except httpx.TransportError as exc:
                why = f"is unreachable: {_one_line(str(exc)) or type(exc).__name__}"
                error = ControlPlaneUnavailable(f"control plane at {base} {why}")
                error.__cause__ = exc
                reached = not isinstance(exc, httpx.ConnectError)
            else:
                if not _cannot_serve(resp):
                    self._answered(index, first, failures)
                    if resp.status_code == 204:
                        return None
                    if resp.status_code >= 400:
                        error = _error(resp, base)
                        if maybe_done_at is not None and settle is not None:
                            return settle(error)
                        raise error
                    try:
                        return resp.json()
                    except ValueError as exc:
                        raise ControlPlaneError(
                            f"control plane at {base} sent a response that is not JSON",
                            status=resp.status_code,
                        ) from exc
                error = _error(resp, base)
                why = _http_why(resp)
                # The control plane's own 503 (and a proxy's: no backend) did nothing; a
                # proxy's 502/504 may have passed the request on.
                reached = resp.status_code != 503
            failures.append((base, why, error))
            if reached and maybe_done_at is None:
                maybe_done_at = base
            if count > 1 and step < count - 1 and reached and retry == "unsent":
                raise _kind(error)(
                    f"{error}; {method} {_path_only(path)} may have been done there, so it "
                    "was not sent to another replica (look before trying again)",
                    status=error.status,
                ) from error.__cause__
        if len(failures) == 1:
            raise failures[0][2] from failures[0][2].__cause__
        answered = [e for _, _, e in failures if e.status is not None]
        message = "every control-plane replica failed: " + "; ".join(
            f"{url} {why}" for url, why, _ in failures
        )
        if retry == "unsent" and maybe_done_at is not None:
            message += f" ({method} {_path_only(path)} may have been done at {maybe_done_at})"
        if answered:  # some replica is there, but cannot serve now (503: its Assigner
            # has no leader, its database is away): not "unreachable"
            raise ControlPlaneError(message, status=answered[-1].status)
        raise ControlPlaneUnavailable(message) from failures[-1][2].__cause__

    def _send(
        self, method: str, url: str, params: Any, json: Any, timeout: float | None
    ) -> httpx.Response:
        """One request to one replica, its httpx INFO line dropped (``_DropOwnRequests``)
        and logged at DEBUG here instead."""
        sending = _SENDING_OWN_REQUEST.set(True)
        try:
            resp = self._http.request(
                method,
                url,
                params=params,
                json=json,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        finally:
            _SENDING_OWN_REQUEST.reset(sending)
        log.debug(
            'HTTP Request: %s %s "%s %d %s"',
            method,
            resp.request.url,
            resp.http_version,
            resp.status_code,
            resp.reason_phrase,
        )
        return resp

    def _long_poll(self, poll: Callable[[], T], instead: Callable[[], T]) -> T:
        """``poll()`` (a long poll), run on a thread of its own and waited for, unless a
        request of another thread moves the client off the replica it went to: that
        replica did not answer it (a stopped process keeps a long poll unanswered until
        its read timeout, ``timeout + WATCH_SLACK``, while a failover made through
        another replica goes unseen), so the poll is left to end on its own and
        ``instead()`` is asked of the replica requests go to now."""
        outcome: list[tuple[bool, Any]] = []
        with self._lock:
            polled = self._current

        def run() -> None:
            try:
                outcome.append((True, poll()))
            except BaseException as exc:  # handed to the waiting thread
                outcome.append((False, exc))
            with self._moved:
                self._moved.notify_all()

        thread = threading.Thread(target=run, name="control-plane-long-poll", daemon=True)
        thread.start()
        with self._moved:
            while not outcome and (self._current == polled or self._moved_by == thread.ident):
                self._moved.wait()
            left_at = None if outcome else self.urls[polled]
        if left_at is None:
            ok, value = outcome[0]
            if ok:
                return value  # type: ignore[no-any-return]
            raise value
        log.info("control plane: long poll at %s left (requests moved to %s)", left_at, self.url)
        return instead()

    def _answered(
        self, index: int, first: int, failures: list[tuple[str, str, ControlPlaneError]]
    ) -> None:
        """Requests go to the replica that answered from now on (sticky)."""
        with self._lock:
            moved = self._current != index
            self._current = index
            if moved:
                self._moved_by = threading.get_ident()
                self._moved.notify_all()
        if moved and index != first and failures:
            log.warning(
                "control plane: using %s (%s)",
                self.urls[index],
                "; ".join(f"{url} {why}" for url, why, _ in failures),
            )


def parse_urls(url: str | Sequence[str]) -> tuple[str, ...]:
    """The replicas' URLs from ``"http://a:8470,http://b:8470"`` or a list (whose items
    may hold commas too). Raises ``ConfigError`` naming the bad element."""
    if isinstance(url, str):
        given = url
    elif isinstance(url, Sequence) and all(isinstance(u, str) for u in url):
        given = ",".join(url)
    else:
        raise ConfigError(f"invalid control-plane URL {url!r}: expected http(s)://host:port")
    elements = given.split(",")
    several = len(elements) > 1
    out: list[str] = []
    for position, raw in enumerate(elements, 1):
        element = raw.strip()
        where = f" (element {position} of {given!r})" if several else ""
        if not element:
            if not several:
                raise ConfigError("no control-plane URL given: expected http(s)://host:port")
            raise ConfigError(
                f"invalid control-plane URL list {given!r}: element {position} is empty"
            )
        try:
            parsed = httpx.URL(element)
        except (httpx.InvalidURL, TypeError) as exc:
            raise ConfigError(f"invalid control-plane URL {element!r}{where}: {exc}") from exc
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ConfigError(
                f"invalid control-plane URL {element!r}{where}: expected http(s)://host:port"
            )
        if parsed.query or parsed.fragment:
            raise ConfigError(
                f"invalid control-plane URL {element!r}{where}: no query or fragment allowed"
            )
        element = element.rstrip("/")
        if element in out:
            raise ConfigError(f"control-plane URL {element!r} is given twice in {given!r}")
        out.append(element)
    return tuple(out)


def _cannot_serve(resp: httpx.Response) -> bool:
    """The replica cannot serve now, another may: a 503 (no leader to forward the
    Assigner's requests to, leadership moving, its database away), a 504, or a 502 that
    is not the control plane's own (which says a Kafka cluster failed: the same
    wherever it is asked)."""
    if resp.status_code in (503, 504):
        return True
    return resp.status_code == 502 and not _detail(resp)


def _detail(resp: httpx.Response) -> str:
    try:
        doc = resp.json()
    except ValueError:
        return ""
    return str(doc.get("detail", "")) if isinstance(doc, dict) else ""


def _http_why(resp: httpx.Response) -> str:
    detail = _one_line(_detail(resp)) or resp.reason_phrase
    return f"answered HTTP {resp.status_code}: {detail}".rstrip(": ")


def _kind(error: ControlPlaneError) -> type[ControlPlaneError]:
    return (
        ControlPlaneUnavailable if isinstance(error, ControlPlaneUnavailable) else ControlPlaneError
    )


def _path_only(path: str) -> str:
    return path.split("?", 1)[0]


# How a 409 after a retry is named when what exists is not exactly what was asked for.
_EARLIER_ATTEMPT = (
    "(an earlier attempt of this request, at a replica that then failed, may have made it)"
)


def _made_by_earlier_attempt(
    exc: ControlPlaneError,
    fetch: Callable[[], dict[str, Any]],
    same: Callable[[dict[str, Any]], bool],
) -> dict[str, Any]:
    """A creation refused after an attempt that may have reached a replica (``settle``):
    a 409 is ours when what exists (``fetch()``) is exactly what was asked (``same``)."""
    if not isinstance(exc, Conflict):
        raise exc
    try:
        doc = fetch()
    except ControlPlaneError:
        raise exc from None
    if same(doc):
        log.info("%s was created by an earlier attempt", doc.get("name", "it"))
        return doc
    raise Conflict(f"{exc} {_EARLIER_ATTEMPT}", status=exc.status) from exc


def _gone_is_done(exc: ControlPlaneError) -> Any:
    """A delete sent again after an attempt that may have done it: 404 is done."""
    if isinstance(exc, NotFound):
        return None
    raise exc


def same_bootstrap(registered: Any, asked: str) -> bool:
    """``registered`` (a cluster document's bootstrap) names the brokers of ``asked``, in
    any order."""

    def norm(b: str) -> list[str]:
        return sorted(p.strip() for p in b.split(",") if p.strip())

    return isinstance(registered, str) and norm(registered) == norm(asked)


def _stream_is(doc: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
    """The stream described by ``doc`` is the one ``body`` asked to create (a replication
    factor ``body`` leaves to the server is whatever it resolved)."""
    same = all(
        doc.get(key) == body[key]
        for key in (
            "lanes",
            "partitions",
            "dlq_partitions",
            "replication_factor",
            "config",
            "max_record_bytes",
        )
        if key in body
    )
    return same and doc.get("active_clusters") in ([body["cluster"]], None)


def _lane_is(table: RoutingTable, body: Mapping[str, Any]) -> bool:
    """``table`` has the lane ``body`` asked ``add_lane`` for, as asked (place,
    partitions, cluster)."""
    lane = str(body["name"])
    if lane not in table.lanes:
        return False
    at = table.lanes.index(lane)
    below = table.lanes[at + 1] if at + 1 < len(table.lanes) else None
    segment = table.active(lane)
    return bool(
        body.get("before", below) == below
        and body.get("partitions", segment.partitions) == segment.partitions
        and body.get("cluster", segment.cluster) == segment.cluster
    )


def _seg(name: str) -> str:
    """A path segment: names are validated server-side, but never let one change the path
    (a '/' would reach the server as a path of its own: a bare "Not Found"; '', '.' and
    '..' are dropped or climb a level on the way, so ``describe_stream(".")`` listed
    every stream)."""
    if "/" in name:
        raise ConfigError(f"invalid name {name!r}: names cannot contain '/'")
    if name in ("", ".", ".."):
        raise ConfigError(f"invalid name {name!r}")
    return quote(name, safe="")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _error(resp: httpx.Response, url: str) -> ControlPlaneError:
    detail = ""
    try:
        doc = resp.json()
        if isinstance(doc, dict):
            detail = str(doc.get("detail", ""))
    except ValueError:
        pass
    status = resp.status_code
    request = resp.request
    got = f"{request.method} {request.url.path} got HTTP {status} {resp.reason_phrase}".rstrip()
    if status >= 500 and not detail:
        # The server answered but failed without saying why (an older control plane's
        # plain-text 500, or a proxy): it is there, so do not say nothing answers.
        return ControlPlaneError(f"the server at {url} failed: {got}", status=status)
    if not detail or detail == "Not Found":
        # Not one of the control plane's own errors (they name what is wrong): another
        # server, or the control plane under a wrong base URL (a route it does not have).
        return ControlPlaneError(
            f"no streamplane control plane answers at {url}: {got}", status=status
        )
    detail = _one_line(detail)
    if status == 404:
        return NotFound(detail, status=status)
    if status in (401, 403):
        if status == 401 and "authorization" not in request.headers:
            # (the server's "send 'Authorization: Bearer <token>'" says the protocol)
            detail += (
                "; this client sends no token: give it one with "
                f"ControlPlaneClient(url, token=...), or set {TOKEN_ENV} for "
                "ControlPlaneClient.from_env()"
            )
        return Unauthorized(detail, status=status)
    if status == 409:
        return Conflict(detail, status=status)
    if status < 500:
        return ControlPlaneError(detail, status=status)
    # The control plane's own 5xx, e.g. "database unavailable: ..." (503).
    return ControlPlaneError(f"control plane at {url}: {detail}", status=status)
