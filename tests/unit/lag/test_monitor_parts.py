"""Pure parts of the lag monitor and the metrics: labels, summaries, histograms."""

from __future__ import annotations

from dataclasses import replace
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


def _unknown_on_local_b() -> PartitionLag:
    """An expected partition of group g on a down cluster: end known, no position."""
    return PartitionLag(
        "g", "t", 1, None, 2038, None, None, LagStatus.WARN, None,
        PartitionLabels("s", "realtime", "local-b"),
    )  # fmt: skip


def test_summary_counts_partitions_whose_lag_is_unknown() -> None:
    """A group reading a stream while a cluster was down: its expected partitions there
    have no position (offset and time lag unknown). The summary used to say offset lag
    0, time lag 0.0 s, unknown_time_lag 0, OK."""
    unknown = _unknown_on_local_b()
    parts = [
        LabelledLag("local-a", _lag("g", 0.0, 0, LagStatus.OK)),
        LabelledLag("local-b", unknown),
        LabelledLag("local-b", replace(unknown, partition=2)),
    ]
    s = summarize("g", parts)
    assert (s.partitions, s.offset_lag, s.unknown_offset_lag, s.unknown_time_lag) == (3, 0, 2, 2)
    assert s.status is LagStatus.WARN


def test_summary_of_a_known_lag_has_no_unknowns() -> None:
    s = summarize("g", [LabelledLag("a", _lag("g", 0.0, 0, LagStatus.OK))])
    assert (s.offset_lag, s.unknown_offset_lag, s.unknown_time_lag, s.status) == (
        0,
        0,
        0,
        LagStatus.OK,
    )


def test_group_metrics_count_unknown_partitions() -> None:
    from streamplane.controlplane.metrics import LagCollector

    unknown = _unknown_on_local_b()
    parts = [
        LabelledLag("local-a", _lag("g", 0.0, 0, LagStatus.OK)),
        LabelledLag("local-b", unknown),
    ]
    monitor = SimpleNamespace(
        now_ms=lambda: 1,
        partitions=lambda now_ms: parts,
        dlq_records=lambda: [],
        readers=lambda: [],
    )
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    registry.register(LagCollector(lambda: monitor))  # type: ignore[arg-type,return-value]
    text = generate_latest(registry).decode()
    assert 'streamplane_group_unknown_offset_lag_partitions{group="g"} 1.0' in text
    assert 'streamplane_group_unknown_time_lag_partitions{group="g"} 1.0' in text
    assert 'streamplane_group_worst_status{group="g"} 1.0' in text
