from __future__ import annotations

import pytest

from streamplane.core.mapper import (
    Broker,
    BrokerMap,
    BrokerState,
    MapperError,
    PartitionMap,
    RebalanceParams,
    rebalance,
    storage_stats,
)

from .builders import brokers_in_racks, pmap_of, rack_violations, with_free_from_map

# Brokers 1..6; racks r0 = {1, 4}, r1 = {2, 5}, r2 = {3, 6}; 1000 bytes each.
SIX = brokers_in_racks(3, 2)

# Broker 1 holds far more than anyone else.
HEAVY = pmap_of(
    {
        "logs": [[1, 2], [1, 3], [1, 5], [1, 6], [1, 2], [1, 3], [4, 5], [6, 4], [2, 3], [5, 6]],
        "metrics": [[1, 5, 3], [1, 2, 6], [4, 2, 3], [1, 6, 2]],
    },
    sizes={
        "logs": [120, 110, 100, 90, 80, 70, 40, 40, 30, 30],
        "metrics": [60, 50, 20, 10],
    },
)
BROKERS = with_free_from_map(SIX, HEAVY)


def free_range(free: dict[int, int], ids: tuple[int, ...]) -> int:
    values = [free[b] for b in ids]
    return max(values) - min(values)


def test_rebalance_offloads_the_full_broker() -> None:
    plan = rebalance(HEAVY, BROKERS)
    before, after = plan.storage_stats()
    assert after.range < before.range
    assert {m.source for m in plan.moves()} == {1}
    assert rack_violations(plan.after, BROKERS) == []
    assert plan.tolerance is not None
    assert len(plan.sweep) > 1
    best = min(plan.sweep, key=lambda s: (s.storage_range, s.storage_stdev, s.moves, s.tolerance))
    assert best.tolerance == plan.tolerance
    assert best.storage_range == after.range


def test_fixed_tolerance_runs_once() -> None:
    plan = rebalance(HEAVY, BROKERS, RebalanceParams(tolerance=0.1))
    assert plan.tolerance == 0.1
    assert [s.tolerance for s in plan.sweep] == [0.1]
    mean = storage_stats(BROKERS[b].storage_free for b in BROKERS).mean
    free = plan.storage_free_after()
    assert free[1] <= mean * 1.1
    for m in plan.moves():
        assert m.destination is not None
        assert free[m.destination] >= mean * 0.9


def test_the_range_never_widens_even_with_a_loose_tolerance() -> None:
    for tol in (0.05, 0.3, 0.9):
        plan = rebalance(HEAVY, BROKERS, RebalanceParams(tolerance=tol))
        before, after = plan.storage_stats()
        assert after.range <= before.range


def test_balanced_cluster_is_left_alone() -> None:
    even = BrokerMap(brokers_in_racks(3, 2, free=dict.fromkeys(range(1, 7), 500)))
    plan = rebalance(HEAVY, even)
    assert plan.after == HEAVY
    assert "nothing to rebalance" in plan.warnings[0]


def test_threshold_in_bytes_picks_targets() -> None:
    plan = rebalance(HEAVY, BROKERS, RebalanceParams(storage_threshold_bytes=1))
    assert plan.moves() == ()
    assert "below 1 bytes free" in plan.warnings[0]
    full = min(BROKERS, key=lambda b: BROKERS[b].storage_free)
    plan = rebalance(
        HEAVY, BROKERS, RebalanceParams(storage_threshold_bytes=BROKERS[full].storage_free + 1)
    )
    assert {m.source for m in plan.moves()} == {full}


def test_locality_scoped_moves_stay_in_the_rack() -> None:
    plan = rebalance(HEAVY, BROKERS, RebalanceParams(locality_scoped=True))
    assert plan.moves()
    for m in plan.moves():
        assert m.source is not None and m.destination is not None
        assert BROKERS[m.source].rack == BROKERS[m.destination].rack


def test_small_partitions_and_partition_limit() -> None:
    plan = rebalance(HEAVY, BROKERS, RebalanceParams(min_partition_size=100))
    assert all(m.size >= 100 for m in plan.moves())
    limited = rebalance(HEAVY, BROKERS, RebalanceParams(partition_limit=1, tolerance=0.5))
    assert len(limited.moves()) <= len(
        rebalance(HEAVY, BROKERS, RebalanceParams(tolerance=0.5)).moves()
    )


def test_new_brokers_are_destinations_never_sources() -> None:
    brokers = BrokerMap([*BROKERS.values(), Broker(7, "r0", 1000, 1000, BrokerState.NEW)])
    plan = rebalance(HEAVY, brokers)
    assert 7 in {m.destination for m in plan.moves()}
    assert 7 not in {m.source for m in plan.moves()}


def test_optimize_leadership_after_rebalance() -> None:
    plan = rebalance(HEAVY, BROKERS, RebalanceParams(optimize_leadership=True))
    assert {m.source for m in plan.moves()} == {1}
    lead = plan.after.leader_counts()
    assert lead.get(1, 0) < HEAVY.leader_counts()[1]


def test_refuses_retiring_unknown_and_unmeasured_brokers() -> None:
    with pytest.raises(MapperError, match="rebuild first"):
        rebalance(HEAVY, BROKERS.with_states({2: BrokerState.RETIRING}))
    with pytest.raises(MapperError, match="not known"):
        rebalance(HEAVY, BrokerMap(b for b in BROKERS.values() if b.id != 6))
    blind = BrokerMap([*BROKERS.values(), Broker(7, "r0")])
    with pytest.raises(MapperError, match="no storage metrics"):
        rebalance(HEAVY, blind)


@pytest.mark.parametrize(
    "params",
    [
        RebalanceParams(tolerance=0),
        RebalanceParams(tolerance=1.0),
        RebalanceParams(tolerances=()),
        RebalanceParams(tolerances=(0.1, 2.0)),
        RebalanceParams(storage_threshold=-0.1),
        RebalanceParams(storage_threshold=1),
        RebalanceParams(storage_threshold_bytes=0),
        RebalanceParams(partition_limit=0),
        RebalanceParams(min_partition_size=-1),
        RebalanceParams(min_rack_ids=0),
        RebalanceParams(tolerance="0.1"),  # type: ignore[arg-type]
    ],
)
def test_params_validation(params: RebalanceParams) -> None:
    with pytest.raises(MapperError):
        rebalance(HEAVY, BROKERS, params)


def test_empty_map_is_a_no_op() -> None:
    plan = rebalance(PartitionMap(), BROKERS)
    assert plan.moves() == ()
