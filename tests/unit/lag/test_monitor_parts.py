"""Pure parts of the lag monitor and the metrics: labels, summaries, histograms."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client import generate_latest

from streamplane.client.metrics import ClientMetrics, ClientMetricsCollector, Histogram
from streamplane.core.lag import LagStatus, PartitionLabels, PartitionLag
from streamplane.core.routing import new_routing_table
from streamplane.lag.monitor import LabelledLag, route_of_topic, routes_of, summarize


def _lag(group: str, tlag: float | None, olag: int | None, status: LagStatus) -> PartitionLag:
    return PartitionLag(
        group, "t", 0, 5, 10, olag, tlag, status, 1_000, PartitionLabels("s", "realtime", "c")
    )


def test_routes_cover_every_segment_and_names_fall_back_to_the_topic() -> None:
    table = new_routing_table("orders", ("realtime", "bulk"), "local-a", 3, 1)
    routes = routes_of([table])
    assert routes[("local-a", "sp.orders.realtime.e1")] == ("orders", "realtime")
    assert routes[("local-a", "sp.orders.dlq.e1")] == ("orders", "dlq")
    assert route_of_topic("sp.logs-intake.bulk.e12") == ("logs-intake", "bulk")
    assert route_of_topic("plain-topic") is None
    assert route_of_topic("sp.orders.__commitlog") is None


def test_summary_adds_offsets_takes_the_worst_time_lag_and_status() -> None:
    parts = [
        LabelledLag("a", _lag("g", 1.5, 10, LagStatus.OK)),
        LabelledLag("b", _lag("g", 4.0, 3, LagStatus.WARN)),
        LabelledLag("b", _lag("g", None, 7, LagStatus.OK)),
        LabelledLag("a", _lag("g", 0.0, 0, LagStatus.OK)),
    ]
    s = summarize("g", parts)
    assert (s.partitions, s.offset_lag, s.max_time_lag_s, s.unknown_time_lag) == (4, 20, 4.0, 1)
    assert s.status is LagStatus.WARN
    assert s.clusters == ("a", "b") and s.streams == ("s",)


def test_histogram_buckets_are_cumulative() -> None:
    h = Histogram((0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 3.0):
        h.observe(v)
    assert h.cumulative() == [("0.1", 2.0), ("1.0", 3.0), ("+Inf", 4.0)]
    assert h.count == 4 and h.sum == 3.65


def test_client_metrics_export_plain_counts() -> None:
    m = ClientMetrics()
    m.produced[("orders", "realtime")] += 3
    m.delivered[("orders", "realtime")] += 1
    m.produce_latency[("orders",)].observe(0.002)
    m.delivery_failed("orders", "sp.orders.realtime.e1")
    m.committed("orders", "local-a", [SimpleNamespace(size=40), SimpleNamespace(size=300)])
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    registry.register(ClientMetricsCollector(m))
    text = generate_latest(registry).decode()
    assert 'streamplane_client_produced_total{lane="realtime",stream="orders"} 3.0' in text
    assert 'streamplane_client_acked_total{lane="realtime",stream="orders"} 1.0' in text
    assert 'streamplane_client_produce_errors_total{lane="realtime",stream="orders"} 1.0' in text
    assert 'streamplane_client_commits_total{bootstrap="local-a",stream="orders"} 2.0' in text
    assert "streamplane_client_produce_latency_seconds_count" in text
