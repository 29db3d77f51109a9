"""/metrics over a real lag monitor whose end-offset polls go partly unanswered: the
partitions counted from a stale end offset are counted per group and flagged per
partition (with stream, lane and cluster), like ``/v1/lag`` and the CLI show them."""

from __future__ import annotations

from prometheus_client import generate_latest

from streamplane.controlplane.metrics import new_registry
from streamplane.lag.monitor import ClusterWorker, LagMonitor, MonitorSettings, static_topology
from streamplane.lag.reader import CommitEvent, CommitState
from tests.prometheus import metric_value
from tests.unit.lag.stubs import T0_S, Clock, NoLookup, StubEnds

TOPIC_A = "sp.orders.realtime.e1"
TOPIC_B = "sp.orders.realtime.e2"
ROUTE = ("orders", "realtime")


def _worker(name: str, clock: Clock, topic: str, group: str, partitions: int) -> ClusterWorker:
    w = ClusterWorker(name, "127.0.0.1:1", MonitorSettings(), clock, lambda c, t: ROUTE)
    for p in range(partitions):  # a foreign group's commits (no timestamps)
        state = CommitState(257, int((T0_S - 60) * 1000), None, False)
        w._apply([CommitEvent((group, topic, p), state)])
    return w


def _scrape(monitor: LagMonitor) -> str:
    return generate_latest(new_registry(lambda: monitor)).decode()


def test_stale_end_offsets_are_counted_per_group_and_flagged_per_partition() -> None:
    """A group on two clusters, three partitions on local-a (two of them led by a broker
    that died 12 s ago) and one on local-b. /metrics used to show nothing of it: the
    total offset lag alone, which looks as current as any other."""
    clock = Clock()
    a = _worker("local-a", clock, TOPIC_A, "g", 3)
    b = _worker("local-b", clock, TOPIC_B, "g", 1)
    ends_a = StubEnds({(TOPIC_A, p): 1_150 for p in range(3)})
    ends_b = StubEnds({(TOPIC_B, 0): 1_150})
    a._poll_once(ends_a, NoLookup())  # type: ignore[arg-type]
    b._poll_once(ends_b, NoLookup())  # type: ignore[arg-type]
    monitor = LagMonitor(static_topology({}), clock=clock)
    monitor._workers.update({"local-a": a, "local-b": b})

    text = _scrape(monitor)  # every end read: nothing stale
    assert metric_value(text, "streamplane_group_stale_end_offset_partitions", group="g") == 0
    assert metric_value(text, "streamplane_group_stale_end_offset_age_seconds", group="g") is None
    assert metric_value(text, "streamplane_group_end_offset_stale", cluster="local-a") == 0

    clock.now += 3
    ends_a.dead = {(TOPIC_A, 1), (TOPIC_A, 2)}
    a._poll_once(ends_a, NoLookup())  # type: ignore[arg-type]
    b._poll_once(ends_b, NoLookup())  # type: ignore[arg-type]
    clock.now += 9

    text = _scrape(monitor)
    group = {"group": "g"}
    assert metric_value(text, "streamplane_group_total_offset_lag", **group) == 4 * 893
    assert metric_value(text, "streamplane_group_stale_end_offset_partitions", **group) == 2
    assert metric_value(text, "streamplane_group_stale_end_offset_age_seconds", **group) == 12.0
    labels = {"group": "g", "stream": "orders", "lane": "realtime"}
    flags = {
        (cluster, topic, p): metric_value(
            text,
            "streamplane_group_end_offset_stale",
            cluster=cluster,
            topic=topic,
            partition=str(p),
            **labels,
        )
        for cluster, topic, p in [
            ("local-a", TOPIC_A, 0),
            ("local-a", TOPIC_A, 1),
            ("local-a", TOPIC_A, 2),
            ("local-b", TOPIC_B, 0),
        ]
    }
    assert flags == {
        ("local-a", TOPIC_A, 0): 0,
        ("local-a", TOPIC_A, 1): 1,
        ("local-a", TOPIC_A, 2): 1,
        ("local-b", TOPIC_B, 0): 0,
    }
    assert "# TYPE streamplane_group_stale_end_offset_partitions gauge" in text

    clock.now += 1  # the broker is back: read again, fresh
    ends_a.dead = set()
    a._poll_once(ends_a, NoLookup())  # type: ignore[arg-type]
    text = _scrape(monitor)
    assert metric_value(text, "streamplane_group_stale_end_offset_partitions", **group) == 0
    assert metric_value(text, "streamplane_group_stale_end_offset_age_seconds", **group) is None
