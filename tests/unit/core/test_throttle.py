from __future__ import annotations

import pytest

from streamplane.core.mapper import Partition, PartitionMap
from streamplane.core.throttle import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    BrokerTraffic,
    ReassignmentRoles,
    ReplicaChange,
    ThrottleError,
    ThrottleLimits,
    ThrottleRates,
    compute_throttles,
    reassignment_roles,
    replica_changes,
    replication_headroom,
    throttled_replicas,
)
from streamplane.exceptions import ConfigError

MB = 1_000_000
LIMITS = ThrottleLimits(minimum=10 * MB, source_fraction=0.9, destination_fraction=0.8)


@pytest.mark.parametrize(
    ("capacity", "used", "replication", "fraction", "expected"),
    [
        # Idle broker: the whole capacity times the fraction.
        (100, 0, 0, 0.9, 90),
        # 40 of client traffic, no replication yet: (100 - 40) * 0.9.
        (100, 40, 0, 0.9, 54),
        # 70 in use of which 30 is replication: only 40 counts against capacity.
        (100, 70, 30, 0.9, 54),
        # Replication above utilisation (stale throttle figure) never goes negative.
        (100, 20, 50, 1.0, 100),
        # Over capacity: the excess is taken off again -> floor at the minimum.
        (100, 130, 0, 0.9, 10),
        # Nearly saturated by clients: clamped up to the minimum.
        (100, 95, 0, 0.9, 10),
    ],
)
def test_headroom_formula(
    capacity: float, used: float, replication: float, fraction: float, expected: float
) -> None:
    got = replication_headroom(capacity, used, replication, fraction=fraction, minimum=10)
    assert got == pytest.approx(expected)


def test_headroom_maximum_clamp() -> None:
    assert replication_headroom(100, 0, 0, fraction=1.0, minimum=1, maximum=25) == 25


def test_sources_and_destinations_get_their_own_rates() -> None:
    traffic = {
        1: BrokerTraffic(1, bytes_in=20 * MB, bytes_out=40 * MB),
        2: BrokerTraffic(2, bytes_in=50 * MB, bytes_out=10 * MB),
        3: BrokerTraffic(3, bytes_in=10 * MB, bytes_out=10 * MB),
    }
    roles = ReassignmentRoles(frozenset({1, 3}), frozenset({2, 3}))
    plan = compute_throttles(traffic, 100 * MB, roles, LIMITS)
    rows = {b.broker_id: b for b in plan.brokers}
    assert rows[1].leader_rate == 54 * MB and rows[1].follower_rate is None
    assert rows[2].leader_rate is None and rows[2].follower_rate == 40 * MB
    assert rows[3].leader_rate == 81 * MB and rows[3].follower_rate == 72 * MB
    assert plan.broker_configs() == {
        1: {LEADER_RATE: str(54 * MB)},
        2: {FOLLOWER_RATE: str(40 * MB)},
        3: {LEADER_RATE: str(81 * MB), FOLLOWER_RATE: str(72 * MB)},
    }
    assert plan.removals == ()
    assert plan.warnings == ()


def test_previous_throttle_estimates_replication_when_not_measured() -> None:
    # 60 out, of which the 30 in force is assumed to be replication.
    traffic = {1: BrokerTraffic(1, bytes_in=0, bytes_out=60 * MB)}
    roles = ReassignmentRoles(frozenset({1}), frozenset())
    plan = compute_throttles(
        traffic, 100 * MB, roles, LIMITS, previous={1: ThrottleRates(leader=30 * MB)}
    )
    assert plan.brokers[0].leader_rate == 63 * MB
    # A measured figure wins over the estimate.
    measured = {1: BrokerTraffic(1, bytes_in=0, bytes_out=60 * MB, replication_out=50 * MB)}
    plan = compute_throttles(
        measured, 100 * MB, roles, LIMITS, previous={1: ThrottleRates(leader=30 * MB)}
    )
    assert plan.brokers[0].leader_rate == 81 * MB


def test_change_threshold_keeps_the_rate_in_force() -> None:
    traffic = {1: BrokerTraffic(1, bytes_in=0, bytes_out=40 * MB, replication_out=0)}
    roles = ReassignmentRoles(frozenset({1}), frozenset())
    near = compute_throttles(
        traffic, 100 * MB, roles, LIMITS, previous={1: ThrottleRates(leader=52 * MB)}
    )
    assert near.brokers[0].leader_rate == 52 * MB
    assert not near.brokers[0].leader_changed
    assert near.broker_configs() == {}
    far = compute_throttles(
        traffic, 100 * MB, roles, LIMITS, previous={1: ThrottleRates(leader=40 * MB)}
    )
    assert far.brokers[0].leader_rate == 54 * MB
    assert far.brokers[0].leader_changed


def test_per_broker_capacity_and_missing_figures() -> None:
    roles = ReassignmentRoles(frozenset({1, 2}), frozenset({3}))
    traffic = {1: BrokerTraffic(1, 0, 0), 3: BrokerTraffic(3, 0, 0)}
    plan = compute_throttles(
        traffic,
        {1: 200 * MB, 2: 100 * MB},
        roles,
        LIMITS,
        previous={2: ThrottleRates(leader=33 * MB)},
    )
    rows = {b.broker_id: b for b in plan.brokers}
    assert rows[1].leader_rate == 180 * MB
    # No traffic for 2: the throttle in force stays, unchanged.
    assert (rows[2].leader_rate, rows[2].leader_changed) == (33 * MB, False)
    # No capacity for 3 and nothing in force: the minimum, written.
    assert (rows[3].follower_rate, rows[3].follower_changed) == (10 * MB, True)
    assert len(plan.warnings) == 2
    assert "no traffic figures" in plan.warnings[0]
    assert "no capacity figure" in plan.warnings[1]


def test_brokers_no_longer_reassigning_are_unthrottled() -> None:
    roles = ReassignmentRoles(frozenset({1}), frozenset())
    plan = compute_throttles(
        {1: BrokerTraffic(1, 0, 0)},
        100 * MB,
        roles,
        LIMITS,
        previous={1: ThrottleRates(leader=1), 4: ThrottleRates(follower=5), 5: ThrottleRates()},
    )
    assert plan.removals == (4,)


@pytest.mark.parametrize(
    "limits",
    [
        ThrottleLimits(minimum=0),
        ThrottleLimits(minimum=-1),
        ThrottleLimits(minimum=10, maximum=5),
        ThrottleLimits(minimum=10, source_fraction=0),
        ThrottleLimits(minimum=10, destination_fraction=1.5),
        ThrottleLimits(minimum=10, change_threshold=-0.1),
        ThrottleLimits(minimum=float("inf")),
    ],
)
def test_limits_validation(limits: ThrottleLimits) -> None:
    with pytest.raises(ThrottleError):
        compute_throttles({}, 100, ReassignmentRoles(frozenset(), frozenset()), limits)


def test_bad_traffic_and_capacity() -> None:
    assert issubclass(ThrottleError, ConfigError)
    with pytest.raises(ThrottleError):
        BrokerTraffic(1, -1, 0)
    with pytest.raises(ThrottleError):
        BrokerTraffic(1, 0, 0, replication_in=float("nan"))
    roles = ReassignmentRoles(frozenset({1}), frozenset())
    with pytest.raises(ThrottleError):
        compute_throttles({1: BrokerTraffic(1, 0, 0)}, -5, roles, LIMITS)
    with pytest.raises(ThrottleError):
        compute_throttles({1: BrokerTraffic(1, 0, 0)}, {1: -5}, roles, LIMITS)


CURRENT = PartitionMap(
    [
        Partition("a", 0, (1, 2)),
        Partition("a", 1, (2, 3)),
        Partition("a", 2, (3, 1)),
        Partition("b", 0, (1, 2, 3)),
    ]
)
TARGET = PartitionMap(
    [
        Partition("a", 0, (4, 2)),  # 1 -> 4: copies
        Partition("a", 1, (3, 2)),  # reorder only: no copy
        Partition("a", 2, (3, 1)),  # unchanged
        Partition("b", 0, (1, 2)),  # shrink: no copy
    ]
)


def test_replica_changes_and_roles() -> None:
    changes = replica_changes(CURRENT, TARGET)
    assert changes == [
        ReplicaChange("a", 0, (1, 2), (4, 2)),
        ReplicaChange("a", 1, (2, 3), (3, 2)),
        ReplicaChange("b", 0, (1, 2, 3), (1, 2)),
    ]
    roles = reassignment_roles(changes)
    assert roles.sources == {1, 2}
    assert roles.destinations == {4}
    assert roles.brokers == (1, 2, 4)
    with pytest.raises(ThrottleError):
        replica_changes(CURRENT, PartitionMap([Partition("zzz", 0, (1,))]))


def test_throttled_replicas_config_values() -> None:
    changes = [
        *replica_changes(CURRENT, TARGET),
        ReplicaChange("a", 10, (5, 6), (7, 8)),
        ReplicaChange("c", 3, (9,), (9, 1)),
    ]
    assert throttled_replicas(changes) == {
        "a": {LEADER_REPLICAS: "0:1,0:2,10:5,10:6", FOLLOWER_REPLICAS: "0:4,10:7,10:8"},
        "c": {LEADER_REPLICAS: "3:9", FOLLOWER_REPLICAS: "3:1"},
    }
    assert throttled_replicas([]) == {}
