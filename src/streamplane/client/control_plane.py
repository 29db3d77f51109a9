"""``ControlPlaneClient``: the synchronous HTTP client of the control plane.

One ``httpx.Client`` (one connection pool) per instance; safe to share between
threads, so a producer can long-poll the routing in one thread while others read.

Errors, always one line:

- connection refused, DNS failure, timeout, dropped connection -> ``ControlPlaneUnavailable``
  (naming the URL), so callers can keep their cached routing (fail-static);
- 404 -> ``NotFound``; 401/403 -> ``Unauthorized``; 409 -> ``Conflict``;
- any other 4xx/5xx -> ``ControlPlaneError`` with ``status``; a 5xx names the URL and
  the server's detail (``control plane at URL: database unavailable: ...``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import httpx

from streamplane import __version__
from streamplane.core.routing import DEFAULT_LANES, RoutingTable, routing_from_json
from streamplane.exceptions import (
    ConfigError,
    Conflict,
    ControlPlaneError,
    ControlPlaneUnavailable,
    NotFound,
    Unauthorized,
)

DEFAULT_URL = "http://127.0.0.1:8470"
# Calls that create or delete topics wait for Kafka; give them more than a plain read.
KAFKA_CALL_TIMEOUT = 60.0
# A long poll may take its whole timeout; the HTTP read waits that much longer.
WATCH_SLACK = 10.0


class ControlPlaneClient:
    """A client of the control plane at ``url``; ``token`` is needed for mutations."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 10.0) -> None:
        try:
            parsed = httpx.URL(url)
        except (httpx.InvalidURL, TypeError) as exc:
            raise ConfigError(f"invalid control-plane URL {url!r}: {exc}") from exc
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ConfigError(f"invalid control-plane URL {url!r}: expected http(s)://host:port")
        if timeout <= 0:
            raise ConfigError("the control-plane timeout must be positive")
        self.url = url.rstrip("/")
        self.timeout = timeout
        headers = {"User-Agent": f"streamplane/{__version__}"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    # ------------------------------------------------------------------ life cycle
    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ControlPlaneClient({self.url!r})"

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
        return self._json(  # type: ignore[no-any-return]
            "POST", "/v1/clusters", json=body, params=params
        )

    def update_cluster(
        self,
        name: str,
        bootstrap: str | None = None,
        tags: Mapping[str, str] | None = None,
        force: bool = False,
    ) -> dict[str, Any]:
        """Change the bootstrap and/or replace the tags (``None`` leaves them as they are).
        A new bootstrap must answer and be the same Kafka cluster, unless ``force``."""
        body: dict[str, Any] = {}
        if bootstrap is not None:
            body["bootstrap"] = bootstrap
        if tags is not None:
            body["tags"] = dict(tags)
        params = {"force": "true"} if force else None
        return self._json(  # type: ignore[no-any-return]
            "PATCH", f"/v1/clusters/{_seg(name)}", json=body, params=params
        )

    def delete_cluster(self, name: str) -> None:
        self._json("DELETE", f"/v1/clusters/{_seg(name)}")

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
        replication_factor: int = 1,
        config: Mapping[str, str] | None = None,
        max_record_bytes: int = 1048576,
    ) -> RoutingTable:
        """Create the stream and its topics (every lane and the dlq) on ``cluster``."""
        body = {
            "name": name,
            "cluster": cluster,
            "lanes": list(lanes),
            "partitions": partitions,
            "dlq_partitions": dlq_partitions,
            "replication_factor": replication_factor,
            "config": dict(config or {}),
            "max_record_bytes": max_record_bytes,
        }
        doc = self._json("POST", "/v1/streams", json=body, timeout=KAFKA_CALL_TIMEOUT)
        return self._routing(doc["routing"])

    def list_streams(self) -> list[dict[str, Any]]:
        return self._json("GET", "/v1/streams")  # type: ignore[no-any-return]

    def describe_stream(self, name: str) -> dict[str, Any]:
        """The stream's settings (``max_record_bytes``, ``lanes``, ...) and its ``routing``."""
        return self._json("GET", f"/v1/streams/{_seg(name)}")  # type: ignore[no-any-return]

    def delete_stream(self, name: str, delete_topics: bool = True) -> None:
        params = {"delete_topics": "true" if delete_topics else "false"}
        self._json("DELETE", f"/v1/streams/{_seg(name)}", params=params, timeout=KAFKA_CALL_TIMEOUT)

    # ------------------------------------------------------------------ routing
    def routing(self, stream: str) -> RoutingTable:
        return self._routing(self._json("GET", f"/v1/streams/{_seg(stream)}/routing"))

    def watch_routing(self, stream: str, after_epoch: int, timeout: float = 25.0) -> RoutingTable:
        """Long poll: the table once its epoch is above ``after_epoch``, or after ``timeout``
        seconds the current table (whose epoch may still equal ``after_epoch``)."""
        doc = self._json(
            "GET",
            f"/v1/streams/{_seg(stream)}/routing",
            params={"after_epoch": after_epoch, "timeout": timeout},
            timeout=max(self.timeout, timeout + WATCH_SLACK),
        )
        return self._routing(doc)

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
        doc = self._json(
            "POST", f"/v1/streams/{_seg(stream)}/failover", json=body, timeout=KAFKA_CALL_TIMEOUT
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
        return self._routing(self._json("POST", path, json=body))

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
        return self._json("POST", path, json=body, timeout=timeout)  # type: ignore[no-any-return]

    def leave_group(self, group: str, member_id: str, timeout: float = 2.0) -> None:
        self._json("DELETE", f"/v1/groups/{_seg(group)}/members/{_seg(member_id)}", timeout=timeout)

    def describe_group(self, group: str) -> dict[str, Any]:
        """Members with their units and leases, the generation."""
        return self._json("GET", f"/v1/groups/{_seg(group)}/members")  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ failover protocol
    def producer_heartbeat(self, stream: str, producer_id: str, epoch: int) -> dict[str, Any]:
        """Report the routing epoch a producer writes with (the sealer waits for it)."""
        path = f"/v1/streams/{_seg(stream)}/producers/{_seg(producer_id)}/heartbeat"
        return self._json("POST", path, json={"epoch": epoch})  # type: ignore[no-any-return]

    def producer_left(self, stream: str, producer_id: str, timeout: float = 2.0) -> None:
        """A producer closed: the sealer stops waiting for its heartbeats."""
        path = f"/v1/streams/{_seg(stream)}/producers/{_seg(producer_id)}"
        self._json("DELETE", path, timeout=timeout)

    def report_drained(self, stream: str, group: str, cluster: str, topic: str) -> dict[str, Any]:
        """Say that ``group`` has settled every record of a sealed segment."""
        body = {"group": group, "cluster": cluster, "topic": topic}
        path = f"/v1/streams/{_seg(stream)}/segments/drained"
        return self._json("POST", path, json=body)  # type: ignore[no-any-return]

    def declare_lost(self, stream: str, cluster: str, reason: str = "") -> RoutingTable:
        """Declare the draining and sealed segments of ``stream`` on ``cluster`` lost."""
        body = {"cluster": cluster, "reason": reason}
        path = f"/v1/streams/{_seg(stream)}/segments/lost"
        return self._routing(self._json("POST", path, json=body))

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
    ) -> Any:
        try:
            resp = self._http.request(
                method,
                path,
                params=params,
                json=json,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.TimeoutException as exc:
            raise ControlPlaneUnavailable(
                f"control plane at {self.url} did not answer in time ({type(exc).__name__})"
            ) from exc
        except httpx.TransportError as exc:
            reason = _one_line(str(exc)) or type(exc).__name__
            raise ControlPlaneUnavailable(
                f"control plane at {self.url} is unreachable: {reason}"
            ) from exc
        if resp.status_code == 204:
            return None
        if resp.status_code >= 400:
            raise _error(resp, self.url)
        try:
            return resp.json()
        except ValueError as exc:
            raise ControlPlaneError(
                f"control plane at {self.url} sent a response that is not JSON",
                status=resp.status_code,
            ) from exc


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
        return Unauthorized(detail, status=status)
    if status == 409:
        return Conflict(detail, status=status)
    if status < 500:
        return ControlPlaneError(detail, status=status)
    # The control plane's own 5xx, e.g. "database unavailable: ..." (503).
    return ControlPlaneError(f"control plane at {url}: {detail}", status=status)
