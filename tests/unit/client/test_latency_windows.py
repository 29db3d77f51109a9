"""The produce latency histogram fed from librdkafka's statistics windows."""

from __future__ import annotations

from streamplane.client.metrics import ClientMetrics, latency_window_points

PERCENTILES = ("p50", "p75", "p90", "p95", "p99", "p99_99", "max")


def window(cnt: int, *values_us: int) -> dict[str, int]:
    return {"cnt": cnt, **dict(zip(PERCENTILES, values_us, strict=True))}


def stats(*brokers: dict[str, object]) -> dict[str, object]:
    return {"brokers": {f"b{i}": b for i, b in enumerate(brokers)}}


# The shape librdkafka 2.x hands to stats_cb (fields this module reads; values from a run
# of 154,676 records of 1 KiB against the local fleet).
BROKER = {
    "nodeid": 1,
    "int_latency": window(154_676, 6111, 9000, 30000, 60000, 120319, 900000, 1041540),
    "outbuf_latency": window(337, 210, 300, 400, 500, 900, 1000, 1000),
    "rtt": window(332, 9983, 12000, 20000, 30000, 50943, 60000, 60000),
}


def test_every_record_of_the_window_is_counted_once() -> None:
    points = latency_window_points(stats(BROKER))
    assert sum(n for _, n in points) == 154_676
    # Each point adds queue time, output buffer time and round trip at one percentile.
    assert points[0] == ((6111 + 210 + 9983) / 1e6, 77_338)
    seconds = [s for s, _ in points]
    assert seconds == sorted(seconds)
    assert seconds[-1] == (1041540 + 1000 + 60000) / 1e6


def test_pseudo_brokers_and_empty_windows_give_nothing() -> None:
    bootstrap = {**BROKER, "nodeid": -1}
    idle = {**BROKER, "int_latency": window(0, *[0] * 7)}
    assert latency_window_points(stats(bootstrap, idle)) == []
    assert latency_window_points({}) == []


def test_small_windows_round_without_losing_records() -> None:
    for cnt in (1, 2, 3, 7, 99, 101):
        broker = {**BROKER, "int_latency": window(cnt, 1, 2, 3, 4, 5, 6, 7)}
        assert sum(n for _, n in latency_window_points(stats(broker))) == cnt


def test_windows_feed_the_stream_histogram_and_bad_statistics_are_ignored() -> None:
    m = ClientMetrics()
    m.produce_latency_windows("orders", stats(BROKER, {**BROKER, "nodeid": 2}))
    h = m.produce_latency[("orders",)]
    assert h.count == 2 * 154_676
    assert sum(h.counts) == h.count
    m.produce_latency_windows("orders", {"brokers": "not an object"})
    m.produce_latency_windows("orders", {"brokers": {"b": {"nodeid": 3}}})
    assert m.produce_latency[("orders",)].count == 2 * 154_676
