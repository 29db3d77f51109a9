"""Table tests of the failover rules: health, standby choice, sealing, retiring."""

from __future__ import annotations

import pytest

from streamplane.core.failover import (
    ClusterHealth,
    HealthState,
    choose_standby,
    observe_probe,
    retire_check,
    seal_reason,
    successor_epoch,
)
from streamplane.core.routing import (
    RoutingTable,
    Segment,
    SegmentState,
    move_lanes,
    new_routing_table,
)
from streamplane.exceptions import ConfigError

OK, DEG, DOWN, UNK = (
    ClusterHealth.OK,
    ClusterHealth.DEGRADED,
    ClusterHealth.DOWN,
    ClusterHealth.UNKNOWN,
)


def run_probes(results: list[tuple[float, float, bool]], threshold: float = 3.0) -> list[str]:
    state = HealthState()
    out = []
    for started, now, ok in results:
        state = observe_probe(
            state, ok=ok, started=started, now=now, threshold_s=threshold, error="boom"
        )
        out.append(state.health.value)
    return out


@pytest.mark.parametrize(
    ("probes", "expected"),
    [
        ([(0, 0.1, True)], ["ok"]),
        ([(0, 1, False)], ["degraded"]),
        # failing from t=0: down once 3 s have passed since the first failed probe began
        ([(0, 1, False), (1, 2, False), (2, 3, False)], ["degraded", "degraded", "down"]),
        ([(0, 1, False), (1, 2, False), (2, 2.5, True)], ["degraded", "degraded", "ok"]),
        # a success resets the streak
        (
            [(0, 1, False), (1, 1.1, True), (2, 3, False), (3, 4, False)],
            ["degraded", "ok", "degraded", "degraded"],
        ),
        ([(0, 5, False)], ["down"]),  # one probe that hung past the threshold
    ],
)
def test_health_from_probes(probes: list[tuple[float, float, bool]], expected: list[str]) -> None:
    assert run_probes(probes) == expected


def test_a_partial_probe_degrades_and_ends_a_failing_streak() -> None:
    failing = observe_probe(HealthState(), ok=False, started=0, now=2, threshold_s=3, error="e")
    part = observe_probe(failing, ok=True, started=2, now=2.5, threshold_s=3, partial="1 of 3")
    assert (part.health, part.since, part.failing_since, part.last_error) == (
        DEG,
        0 + 2,
        None,
        "1 of 3",
    )
    later = observe_probe(part, ok=True, started=60, now=61, threshold_s=3, partial="1 of 3")
    assert (later.health, later.since) == (DEG, 2)  # degraded since the first
    again = observe_probe(later, ok=False, started=62, now=64, threshold_s=3, error="e")
    assert (again.health, again.failing_since) == (DEG, 62)  # a new streak: not down yet
    assert observe_probe(later, ok=True, started=70, now=71, threshold_s=3).health is OK


def test_health_keeps_since_and_counts_failures() -> None:
    s = observe_probe(HealthState(), ok=False, started=0, now=1, threshold_s=3, error="e1")
    s2 = observe_probe(s, ok=False, started=1, now=2, threshold_s=3, error="e2")
    assert (s2.since, s2.failing_since, s2.consecutive_failures, s2.last_error) == (1, 0, 2, "e2")
    s3 = observe_probe(s2, ok=False, started=2, now=3.5, threshold_s=3, error="e3")
    assert (s3.health, s3.since) == (DOWN, 3.5)
    back = observe_probe(s3, ok=True, started=4, now=4.1, threshold_s=3)
    assert (
        back.health,
        back.since,
        back.failing_since,
        back.consecutive_failures,
        back.last_error,
    ) == (OK, 4.1, None, 0, None)


TAGS = {
    "a": {"region": "eu", "standby": "c,b", "standby.orders": "d"},
    "b": {"region": "eu"},
    "c": {"region": "us"},
    "d": {"region": "us"},
    "e": {"region": "eu"},
}


@pytest.mark.parametrize(
    ("failed", "stream", "health", "expected"),
    [
        ("a", "orders", {"b": OK, "c": OK, "d": OK, "e": OK}, "d"),  # stream-level tag
        ("a", "logs", {"b": OK, "c": OK, "d": OK, "e": OK}, "c"),  # cluster-level, in order
        ("a", "logs", {"b": OK, "c": DOWN, "d": OK, "e": OK}, "b"),  # next in the list
        ("a", "orders", {"b": OK, "c": DEG, "d": UNK, "e": OK}, "b"),
        ("a", "logs", {"b": DOWN, "c": DOWN, "d": OK, "e": OK}, "e"),  # same region
        ("b", "logs", {"a": OK, "c": OK, "e": OK}, "a"),  # same region, by name
        ("b", "logs", {"a": DOWN, "c": OK, "d": OK, "e": DOWN}, "c"),  # any healthy
        ("b", "logs", {"a": DOWN, "c": DEG, "d": UNK, "e": DOWN}, None),  # none healthy
        ("x", "logs", {"b": OK}, "b"),  # an unregistered failed cluster: any healthy
    ],
)
def test_choose_standby(
    failed: str, stream: str, health: dict[str, ClusterHealth], expected: str | None
) -> None:
    trusted = {name for name, h in health.items() if h is OK}
    assert choose_standby(failed, stream, TAGS, trusted) == expected


def test_choose_standby_never_picks_the_failed_cluster() -> None:
    assert choose_standby("a", "s", {"a": {"standby": "a"}}, {"a"}) is None


def test_moving_lanes_to_where_they_are() -> None:
    """A lane already active on the target stays as it is; all of them: an error, not an
    empty new epoch. A partition count asks for new segments there all the same."""
    table = new_routing_table("orders", ["realtime", "bulk"], "a", 6)
    with pytest.raises(ConfigError, match="realtime, bulk already active on a; nothing to move"):
        move_lanes(table, ["realtime", "bulk"], "a")
    split = move_lanes(table, ["realtime"], "b")
    both = move_lanes(split, ["realtime", "bulk"], "b")  # realtime is on b already
    assert both.active("realtime") == split.active("realtime")
    assert (both.active("bulk").cluster, both.active("bulk").epoch) == ("b", 3)
    again = move_lanes(table, ["realtime"], "a", 6)
    assert (again.active("realtime").cluster, again.active("realtime").epoch) == ("a", 2)


def _moved() -> tuple[RoutingTable, Segment]:
    table = new_routing_table("orders", ["realtime", "bulk"], "a", 6)
    moved = move_lanes(table, ["realtime"], "b", 12)
    old = next(s for s in moved.segments if s.state is SegmentState.DRAINING)
    return moved, old


@pytest.mark.parametrize(
    ("producers", "draining_for", "sealed"),
    [
        ({}, 0.5, False),  # settling
        ({}, 2.0, True),  # no live producer
        ({"p1": 2, "p2": 2}, 2.0, True),
        ({"p1": 2, "p2": 3}, 2.0, True),
        ({"p1": 2, "p2": 1}, 2.0, False),  # p2 still writes to epoch 1
        ({"p1": 2, "p2": 1}, 10.0, True),  # grace period
        ({"p1": 2}, 1.0, False),  # moved, but in-flight batches may still land
    ],
)
def test_seal_reason(producers: dict[str, int], draining_for: float, sealed: bool) -> None:
    moved, old = _moved()
    reason = seal_reason(moved, old, producers, draining_for, settle_s=2.0, grace_s=10.0)
    assert (reason is not None) == sealed, reason


def test_successor_and_only_draining_segments_seal() -> None:
    moved, old = _moved()
    assert successor_epoch(moved, old) == 2
    active = moved.active("realtime")
    assert successor_epoch(moved, active) is None
    assert seal_reason(moved, active, {}, 99, settle_s=0, grace_s=1) is None


@pytest.mark.parametrize(
    ("committed", "reported", "retire", "pending"),
    [
        ({}, set(), False, ()),  # nobody reads the stream: an operator decides
        ({"g1": {0: 10, 1: 5, 2: 0}}, set(), True, ()),
        ({"g1": {0: 10, 1: 4}}, set(), False, ("g1",)),
        ({"g1": {0: 10, 1: 5}, "g2": {}}, set(), False, ("g2",)),  # g2 read other segments
        ({"g1": {0: 10, 1: 5}, "g2": {}}, {"g2"}, True, ()),  # g2 reported it drained
        ({}, {"g3"}, True, ()),
        ({"g1": {0: 11, 1: 5}}, set(), True, ()),
    ],
)
def test_retire_check(
    committed: dict[str, dict[int, int]], reported: set[str], retire: bool, pending: tuple[str]
) -> None:
    check = retire_check({0: 10, 1: 5, 2: 0}, committed, reported)
    assert (check.retire, check.pending) == (retire, pending), check.reason
