"""The control plane's Prometheus metrics: lag (from the monitor, at scrape time) and HTTP.

Names (labels in braces):

- ``streamplane_group_time_lag_seconds{group,stream,lane,cluster,topic,partition}``:
  now minus the ingestion time of the first unsettled record (0 when caught up; absent
  while unknown)
- ``streamplane_group_offset_lag{...same}``, ``streamplane_group_committed_offset{...}``,
  ``streamplane_group_status{...}`` (0 OK, 1 WARN, 2 STALL, 3 STOP, 4 ERR)
- ``streamplane_group_end_offset_stale{...same}``: 1 when the partition's offset lag
  counts from a stale end offset (its last known end: not read at the last poll, a
  broker down or a leader moving; the offset lag is then a lower bound), else 0
- ``streamplane_group_max_time_lag_seconds{group}``, ``streamplane_group_total_offset_lag
  {group}``, ``streamplane_group_worst_status{group}``: the group across clusters (the
  lags over the partitions whose lag is known), with
  ``streamplane_group_unknown_offset_lag_partitions{group}`` and
  ``streamplane_group_unknown_time_lag_partitions{group}`` counting the others, and
  ``streamplane_group_stale_end_offset_partitions{group}`` the partitions of the total
  counted from a stale end offset, ``streamplane_group_stale_end_offset_age_seconds
  {group}`` the oldest such end's age (absent when none is stale); per stream or
  cluster: ``sum by (group, cluster) (streamplane_group_end_offset_stale)``
- ``streamplane_stream_dlq_records{stream,cluster,topic}``: log-end offsets of dlq segments
- ``streamplane_lag_reader_caught_up{cluster}``, ``..._resumed_from_snapshot{cluster}``,
  ``..._catch_up_seconds{cluster}``, ``..._records_read_total{cluster}``,
  ``..._commits_tracked{cluster}``: the ``__consumer_offsets`` readers
- ``streamplane_http_requests_total{method,route,status}`` and
  ``streamplane_http_request_duration_seconds{method,route}``: the API itself

Lag families are built from the monitor when scraped (nothing is kept in
prometheus-client between scrapes, so a forgotten partition disappears). HTTP metrics
are counted by ``RequestMetrics``, an ASGI wrapper that labels requests by their route
template (``/v1/streams/{name}``), never by the raw path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from time import perf_counter
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client import Histogram as PromHistogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from streamplane.lag.monitor import LagMonitor, summarize

PARTITION_LABELS = ["group", "stream", "lane", "cluster", "topic", "partition"]


class LagCollector(Collector):
    """Builds the lag families from ``monitor()`` (None: the monitor is off)."""

    def __init__(self, monitor: Callable[[], LagMonitor | None]) -> None:
        self._monitor = monitor

    def collect(self) -> Iterator[Metric]:
        monitor = self._monitor()
        time_lag = GaugeMetricFamily(
            "streamplane_group_time_lag_seconds",
            "Now minus the ingestion time of the first unsettled record (0 when caught up).",
            labels=PARTITION_LABELS,
        )
        offset_lag = GaugeMetricFamily(
            "streamplane_group_offset_lag",
            "Log-end offset minus committed offset.",
            labels=PARTITION_LABELS,
        )
        committed = GaugeMetricFamily(
            "streamplane_group_committed_offset",
            "The committed offset (the low watermark for streamplane groups).",
            labels=PARTITION_LABELS,
        )
        status = GaugeMetricFamily(
            "streamplane_group_status",
            "Partition status: 0 OK, 1 WARN, 2 STALL, 3 STOP, 4 ERR.",
            labels=PARTITION_LABELS,
        )
        stale = GaugeMetricFamily(
            "streamplane_group_end_offset_stale",
            "1 when the offset lag counts from a stale (last known, not re-read) end offset.",
            labels=PARTITION_LABELS,
        )
        g_time = GaugeMetricFamily(
            "streamplane_group_max_time_lag_seconds",
            "The group's worst time lag over every cluster.",
            labels=["group"],
        )
        g_offset = GaugeMetricFamily(
            "streamplane_group_total_offset_lag",
            "The group's offset lag summed over every cluster.",
            labels=["group"],
        )
        g_status = GaugeMetricFamily(
            "streamplane_group_worst_status",
            "The group's most severe partition status.",
            labels=["group"],
        )
        g_unknown_offset = GaugeMetricFamily(
            "streamplane_group_unknown_offset_lag_partitions",
            "The group's partitions whose offset lag is unknown (not in the total).",
            labels=["group"],
        )
        g_unknown_time = GaugeMetricFamily(
            "streamplane_group_unknown_time_lag_partitions",
            "The group's partitions not known to be caught up whose time lag is unknown.",
            labels=["group"],
        )
        g_stale = GaugeMetricFamily(
            "streamplane_group_stale_end_offset_partitions",
            "The group's partitions whose offset lag counts from a stale end offset (in the"
            " total at their last known end: a lower bound).",
            labels=["group"],
        )
        g_stale_age = GaugeMetricFamily(
            "streamplane_group_stale_end_offset_age_seconds",
            "Age of the group's oldest stale end offset (absent when none is stale).",
            labels=["group"],
        )
        dlq = GaugeMetricFamily(
            "streamplane_stream_dlq_records",
            "Records ever written to a dlq segment (its log-end offsets summed).",
            labels=["stream", "cluster", "topic"],
        )
        r_caught = GaugeMetricFamily(
            "streamplane_lag_reader_caught_up",
            "1 once the reader reached the end of __consumer_offsets as it was at start.",
            labels=["cluster"],
        )
        r_resumed = GaugeMetricFamily(
            "streamplane_lag_reader_resumed_from_snapshot",
            "1 when the reader resumed from its snapshot instead of rereading.",
            labels=["cluster"],
        )
        r_catch = GaugeMetricFamily(
            "streamplane_lag_reader_catch_up_seconds",
            "How long the reader took to catch up at start.",
            labels=["cluster"],
        )
        r_tracked = GaugeMetricFamily(
            "streamplane_lag_reader_commits_tracked",
            "(group, topic, partition) keys with a live commit.",
            labels=["cluster"],
        )
        r_read = CounterMetricFamily(
            "streamplane_lag_reader_records_read",
            "__consumer_offsets records read since start.",
            labels=["cluster"],
        )
        if monitor is not None:
            now = monitor.now_ms()
            by_group: dict[str, list[Any]] = {}
            for p in monitor.partitions(now_ms=now):
                lag = p.lag
                labels = [
                    lag.group,
                    lag.labels.stream or "",
                    lag.labels.lane or "",
                    p.cluster,
                    lag.topic,
                    str(lag.partition),
                ]
                if lag.time_lag_s is not None:
                    time_lag.add_metric(labels, lag.time_lag_s)
                if lag.offset_lag is not None:
                    offset_lag.add_metric(labels, lag.offset_lag)
                if lag.committed_offset is not None:
                    committed.add_metric(labels, lag.committed_offset)
                status.add_metric(labels, int(lag.status))
                # as summarize counts them: a stale end that gives an offset lag
                is_stale = lag.end_offset_stale and lag.offset_lag is not None
                stale.add_metric(labels, 1.0 if is_stale else 0.0)
                by_group.setdefault(lag.group, []).append(p)
            for group, parts in by_group.items():
                s = summarize(group, parts)
                if s.max_time_lag_s is not None:
                    g_time.add_metric([group], s.max_time_lag_s)
                g_offset.add_metric([group], s.offset_lag)
                g_status.add_metric([group], int(s.status))
                g_unknown_offset.add_metric([group], s.unknown_offset_lag)
                g_unknown_time.add_metric([group], s.unknown_time_lag)
                g_stale.add_metric([group], s.stale_end_offsets)
                if s.stale_end_offsets and s.stale_end_offset_age_s is not None:
                    g_stale_age.add_metric([group], s.stale_end_offset_age_s)
            for stream, cluster, topic, records in monitor.dlq_records():
                dlq.add_metric([stream, cluster, topic], records)
            for r in monitor.readers():
                r_caught.add_metric([r.cluster], 1.0 if r.caught_up else 0.0)
                r_resumed.add_metric([r.cluster], 1.0 if r.resumed_from_snapshot else 0.0)
                if r.catch_up_s is not None:
                    r_catch.add_metric([r.cluster], r.catch_up_s)
                r_tracked.add_metric([r.cluster], r.commits_tracked)
                r_read.add_metric([r.cluster], r.records_read)
        yield from (time_lag, offset_lag, committed, status, stale)
        yield from (g_time, g_offset, g_status, g_unknown_offset, g_unknown_time)
        yield from (g_stale, g_stale_age, dlq)
        yield from (r_caught, r_resumed, r_catch, r_tracked, r_read)


class RequestMetrics:
    """ASGI wrapper counting HTTP requests by method, route template and status."""

    def __init__(self, app: ASGIApp, routes: Callable[[], list[Any]], registry: Any) -> None:
        self.app = app
        self._routes = routes
        self.requests = Counter(
            "streamplane_http_requests",
            "HTTP requests answered by the control plane.",
            ["method", "route", "status"],
            registry=registry,
        )
        self.duration = PromHistogram(
            "streamplane_http_request_duration_seconds",
            "Time to answer an HTTP request (long polls included).",
            ["method", "route"],
            registry=registry,
        )

    def _template(self, scope: Scope) -> str:
        route = scope.get("route")  # set by the router on the (shared) scope once matched
        path = getattr(route, "path", None) if route is not None else None
        if isinstance(path, str):
            return path
        for route in self._routes():
            match, _ = route.matches(scope)
            template = getattr(route, "path", None)
            if match is Match.FULL and isinstance(template, str):
                return template
        return "unmatched"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = perf_counter()
        status = [500]

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = self._template(scope)
            method = str(scope.get("method", ""))
            self.requests.labels(method, route, str(status[0])).inc()
            self.duration.labels(method, route).observe(perf_counter() - started)


def new_registry(monitor: Callable[[], LagMonitor | None]) -> CollectorRegistry:
    """A registry of its own per app (several apps may live in one test process)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LagCollector(monitor))
    return registry
