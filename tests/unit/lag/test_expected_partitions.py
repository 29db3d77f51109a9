"""Partitions a streamplane group reads but never committed on are tracked from the log
start, on every cluster holding a readable segment of the lanes it committed on."""

from __future__ import annotations

from dataclasses import replace

from streamplane.core.lag import LagStatus
from streamplane.core.routing import RoutingTable, SegmentState, move_lanes, new_routing_table
from streamplane.lag.monitor import (
    ClusterWorker,
    LagMonitor,
    MonitorSettings,
    route_of_topic,
    routes_of,
    static_topology,
)
from streamplane.lag.reader import CommitEvent, CommitState

NOW_MS = 1_700_000_100_000


def _setup(
    tables: list[RoutingTable],
) -> tuple[LagMonitor, dict[str, ClusterWorker]]:
    """A monitor with unstarted workers for local-a and local-b (no threads, no Kafka)."""
    monitor = LagMonitor(static_topology({}), clock=lambda: NOW_MS / 1000)
    routes = routes_of(tables)

    def label(cluster: str, topic: str) -> tuple[str, str] | None:
        return routes.get((cluster, topic)) or route_of_topic(topic)

    workers = {
        c: ClusterWorker(c, "h:1", MonitorSettings(), lambda: NOW_MS / 1000, label)
        for c in ("local-a", "local-b")
    }
    monitor._workers.update(workers)
    return monitor, workers


def _commit(w: ClusterWorker, group: str, topic: str, partition: int, sp: bool = True) -> None:
    state = CommitState(5, NOW_MS - 1_000, NOW_MS - 2_000 if sp else None, sp)
    w._apply([CommitEvent((group, topic, partition), state)])


def _keys(monitor: LagMonitor, group: str) -> set[tuple[str, str, int, int | None]]:
    return {
        (p.cluster, p.lag.topic, p.lag.partition, p.lag.committed_offset)
        for p in monitor.partitions(group=group)
    }


def test_a_failed_over_lane_and_uncommitted_partitions_are_tracked() -> None:
    table = new_routing_table("orders", ("realtime", "bulk"), "local-a", 2)
    moved = move_lanes(table, ["realtime"], "local-b")
    monitor, workers = _setup([moved])
    a, b = workers["local-a"], workers["local-b"]
    _commit(a, "sp-group", "sp.orders.realtime.e1", 1)
    _commit(a, "foreign", "sp.orders.realtime.e1", 1, sp=False)
    monitor._update_expected([moved], list(workers.values()))

    # Every partition of every readable realtime segment; not bulk (never committed on),
    # not the dlq; the foreign group only where it committed.
    assert _keys(monitor, "sp-group") == {
        ("local-a", "sp.orders.realtime.e1", 0, None),
        ("local-a", "sp.orders.realtime.e1", 1, 5),
        ("local-b", "sp.orders.realtime.e2", 0, None),
        ("local-b", "sp.orders.realtime.e2", 1, None),
    }
    assert _keys(monitor, "foreign") == {("local-a", "sp.orders.realtime.e1", 1, 5)}

    # Records land on local-b's new segment: counted from its log start.
    with b.lock:
        b.model.observe_log_start("sp.orders.realtime.e2", 0, 0)
        b.model.observe_end_offset("sp.orders.realtime.e2", 0, 8, NOW_MS - 60_000)
        b.model.observe_offset_timestamp("sp-group", "sp.orders.realtime.e2", 0, 0, NOW_MS - 30_000)
    assert b._uncommitted == {
        ("sp-group", "sp.orders.realtime.e2", 0),
        ("sp-group", "sp.orders.realtime.e2", 1),
    }
    (summary,) = [s for s in monitor.groups(now_ms=NOW_MS) if s.group == "sp-group"]
    assert summary.clusters == ("local-a", "local-b")
    assert (summary.partitions, summary.offset_lag, summary.max_time_lag_s) == (4, 8, 30.0)
    history = monitor.group_history("sp-group")
    assert {(p["cluster"], p["lane"]) for p in history["partitions"]} == {  # type: ignore[attr-defined]
        ("local-a", "realtime"),
        ("local-b", "realtime"),
    }

    # A commit on an expected partition takes over; the lag then counts from it.
    _commit(b, "sp-group", "sp.orders.realtime.e2", 0)
    assert ("sp-group", "sp.orders.realtime.e2", 0) not in b._uncommitted
    lag = b.model.partition("sp-group", "sp.orders.realtime.e2", 0, NOW_MS)
    assert lag is not None and (lag.committed_offset, lag.offset_lag) == (5, 3)


def test_retired_segments_are_not_read_and_forgotten_groups_stop_being_expected() -> None:
    table = new_routing_table("orders", ("realtime",), "local-a", 1)
    moved = move_lanes(table, ["realtime"], "local-b")
    old = next(s for s in moved.segments if s.topic == "sp.orders.realtime.e1")
    retired = replace(
        moved,
        segments=tuple(
            replace(s, state=SegmentState.RETIRED) if s is old else s for s in moved.segments
        ),
    )
    monitor, workers = _setup([retired])
    b = workers["local-b"]
    _commit(b, "g", "sp.orders.realtime.e2", 0)
    monitor._update_expected([retired], list(workers.values()))
    assert _keys(monitor, "g") == {("local-b", "sp.orders.realtime.e2", 0, 5)}

    # Two partitions now (a repartition): the new one is expected.
    wider = move_lanes(retired, ["realtime"], "local-b", partitions=2)
    monitor._update_expected([wider], list(workers.values()))
    assert ("local-b", "sp.orders.realtime.e3", 1, None) in _keys(monitor, "g")
    # A deleted offset of a partition still read: back to the log start, still listed.
    b._apply([CommitEvent(("g", "sp.orders.realtime.e2", 0), None)])
    assert ("local-b", "sp.orders.realtime.e2", 0, None) in _keys(monitor, "g")
    # Every offset of the group deleted: nothing is read any more, nothing is listed.
    b._apply([CommitEvent(("g", "sp.orders.realtime.e2", 0), None)])
    monitor._update_expected([wider], list(workers.values()))
    assert _keys(monitor, "g") == set()
    assert b.reads() == (b.reads()[0], set())


def test_unchanged_inputs_do_not_recompute() -> None:
    table = new_routing_table("orders", ("realtime",), "local-a", 3)
    monitor, workers = _setup([table])
    a = workers["local-a"]
    _commit(a, "g", "sp.orders.realtime.e1", 0)
    monitor._update_expected([table], list(workers.values()))
    assert len(a._expected) == 3
    a._expected = set()  # would be refilled by a recomputation
    _commit(a, "g", "sp.orders.realtime.e1", 0)  # same lane: the version does not move
    monitor._update_expected([table], list(workers.values()))
    assert a._expected == set()
    p = a.model.partition("g", "sp.orders.realtime.e1", 2, NOW_MS)
    assert p is not None and p.status is LagStatus.OK and p.committed_offset is None


def test_the_partitions_of_retired_segments_are_not_reported() -> None:
    """Their commits stay in ``__consumer_offsets``: an operator's `lag` listed 84
    partitions for a group reading 24, one more set per failover, and as many
    metrics series."""
    table = new_routing_table("orders", ("realtime",), "local-a", 1)
    moved = move_lanes(table, ["realtime"], "local-b")
    monitor, workers = _setup([moved])
    _commit(workers["local-a"], "g", "sp.orders.realtime.e1", 0)
    _commit(workers["local-b"], "g", "sp.orders.realtime.e2", 0)
    monitor.topology = static_topology({"local-a": "h:1", "local-b": "h:1"}, [moved])
    monitor.refresh()
    assert _keys(monitor, "g") == {
        ("local-a", "sp.orders.realtime.e1", 0, 5),  # draining: still reported
        ("local-b", "sp.orders.realtime.e2", 0, 5),
    }
    old = next(s for s in moved.segments if s.topic == "sp.orders.realtime.e1")
    retired = replace(
        moved,
        segments=tuple(
            replace(s, state=SegmentState.RETIRED) if s is old else s for s in moved.segments
        ),
    )
    monitor.topology = static_topology({"local-a": "h:1", "local-b": "h:1"}, [retired])
    monitor.refresh()
    assert _keys(monitor, "g") == {("local-b", "sp.orders.realtime.e2", 0, 5)}
    [summary] = monitor.groups(now_ms=NOW_MS)
    assert (summary.partitions, summary.clusters) == (1, ("local-b",))
    history = monitor.group_history("g")
    assert [p["topic"] for p in history["partitions"]] == ["sp.orders.realtime.e2"]  # type: ignore[attr-defined]
