from __future__ import annotations

import pytest

from streamplane.core.mapper import (
    Broker,
    BrokerMap,
    BrokerState,
    MapperError,
    Partition,
    PartitionMap,
    PlacementStrategy,
    ScaleParams,
    scale,
)

from .builders import brokers_in_racks, rack_violations, with_free_from_map

OLD = brokers_in_racks(3, 2)  # 1..6 in r0, r1, r2
NEW = [Broker(7 + i, f"r{i % 3}", 1000, 1000, BrokerState.NEW) for i in range(3)]
PM = PartitionMap(
    Partition("t", i, (1 + i % 6, 1 + (i + 1) % 6, 1 + (i + 2) % 6), size=10 + i % 5)
    for i in range(48)
)
BROKERS = BrokerMap([*with_free_from_map(OLD, PM).values(), *NEW])


@pytest.mark.parametrize("strategy", list(PlacementStrategy))
def test_scale_moves_replicas_only_onto_new_brokers(strategy: PlacementStrategy) -> None:
    plan = scale(PM, BROKERS, ScaleParams(strategy=strategy))
    moves = plan.moves()
    assert moves
    assert {m.destination for m in moves} <= {7, 8, 9}
    assert {m.source for m in moves} <= set(range(1, 7))
    assert rack_violations(plan.after, BROKERS) == []


def test_count_scale_gives_new_brokers_their_share() -> None:
    plan = scale(PM, BROKERS, ScaleParams(strategy=PlacementStrategy.COUNT, seed=4))
    counts = plan.after.replica_counts()
    share = sum(counts.values()) // len(BROKERS)
    assert all(counts[b] == share for b in (7, 8, 9))
    assert plan.warnings == ()
    again = scale(PM, BROKERS, ScaleParams(strategy=PlacementStrategy.COUNT, seed=4))
    assert again.to_reassignment_json() == plan.to_reassignment_json()


def test_storage_scale_narrows_the_range() -> None:
    plan = scale(PM, BROKERS)
    before, after = plan.storage_stats()
    assert after.range < before.range


def test_count_scale_takes_from_a_broker_whose_rack_allows_it() -> None:
    olds = [Broker(1, "a"), Broker(2, "b")]
    pm = PartitionMap(Partition("t", i, (1, 2)) for i in range(4))
    brokers = BrokerMap([*olds, Broker(3, "a", state=BrokerState.NEW)])
    plan = scale(pm, brokers, ScaleParams(strategy=PlacementStrategy.COUNT))
    # Taking from broker 2 would put two replicas in rack a.
    assert {m.source for m in plan.moves()} == {1}
    assert {m.destination for m in plan.moves()} == {3}


def test_count_scale_warns_when_racks_block_the_share() -> None:
    # Every partition already has a rack-a replica on a lightly loaded broker; the
    # new broker is in rack a too, so the heavy brokers cannot give it anything.
    brokers = BrokerMap(
        [
            *(Broker(b, "a") for b in (1, 5, 6, 7)),
            Broker(2, "b"),
            Broker(3, "c"),
            Broker(4, "a", state=BrokerState.NEW),
        ]
    )
    pm = PartitionMap(Partition("t", i, r) for i, r in enumerate([(1, 2), (5, 2), (6, 3), (7, 3)]))
    plan = scale(pm, brokers, ScaleParams(strategy=PlacementStrategy.COUNT))
    assert plan.moves() == ()
    assert "short of its share" in plan.warnings[0]


def test_scale_without_new_brokers_is_an_error() -> None:
    with pytest.raises(MapperError, match="at least one broker in state 'new'"):
        scale(PM, with_free_from_map(OLD, PM))


def test_scale_params_validation() -> None:
    with pytest.raises(MapperError):
        scale(PM, BROKERS, ScaleParams(seed=1.5))  # type: ignore[arg-type]
    with pytest.raises(MapperError):
        scale(PM, BROKERS, ScaleParams(strategy="x"))  # type: ignore[arg-type]


def test_count_scale_can_balance_leaders_too() -> None:
    params = ScaleParams(strategy=PlacementStrategy.COUNT, optimize_leadership=True)
    plan = scale(PM, BROKERS, params)
    lead = plan.after.leader_counts()
    assert max(lead.values()) - min(lead.values()) <= 1
