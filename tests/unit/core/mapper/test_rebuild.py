from __future__ import annotations

import pytest

from streamplane.core.mapper import (
    Broker,
    BrokerMap,
    BrokerState,
    MapperError,
    Partition,
    PartitionMap,
    PlacementError,
    PlacementStrategy,
    RackConstraintError,
    RebuildParams,
    rebuild,
)

from .builders import brokers_in_racks, pmap_of, rack_violations

# Brokers 1..9; racks r0 = {1, 4, 7}, r1 = {2, 5, 8}, r2 = {3, 6, 9}.
NINE = brokers_in_racks(3, 3)


def nine(**states: BrokerState) -> BrokerMap:
    return BrokerMap(NINE).with_states({int(k[1:]): v for k, v in states.items()})


LAYOUT = pmap_of(
    {
        "orders": [[1, 2, 3], [2, 3, 4], [3, 4, 5], [4, 5, 6], [5, 6, 7], [6, 7, 8]],
        "clicks": [[7, 8, 9], [8, 9, 1], [9, 1, 2], [1, 5, 9]],
    },
    sizes={"orders": [10, 20, 30, 40, 50, 60], "clicks": [5, 5, 5, 5]},
)


def moved_positions(before: PartitionMap, after: PartitionMap) -> dict[tuple[str, int], list[int]]:
    out = {}
    for old, new in zip(before, after, strict=True):
        pos = [i for i, (a, b) in enumerate(zip(old.replicas, new.replicas, strict=True)) if a != b]
        if pos:
            out[old.key] = pos
    return out


@pytest.mark.parametrize("state", [BrokerState.DEAD, BrokerState.RETIRING])
@pytest.mark.parametrize("strategy", list(PlacementStrategy))
def test_replacing_a_broker_moves_only_its_replicas(
    state: BrokerState, strategy: PlacementStrategy
) -> None:
    brokers = nine(b4=state)
    plan = rebuild(LAYOUT, brokers, RebuildParams(strategy=strategy))
    moved = moved_positions(LAYOUT, plan.after)
    holding_4 = {p.key: [p.replicas.index(4)] for p in LAYOUT if 4 in p.replicas}
    assert moved == holding_4
    assert 4 not in plan.after.broker_ids()
    assert rack_violations(plan.after, brokers) == []
    assert all(m.source == 4 for m in plan.moves())
    assert plan.warnings == ()


def test_replacement_stays_in_the_rack_when_the_rule_demands_it() -> None:
    # Every replica set of broker 4 (rack r0) has r1 and r2 taken, so r0 it is.
    plan = rebuild(LAYOUT, nine(b4=BrokerState.DEAD))
    for move in plan.moves():
        assert move.destination in (1, 7)


def test_unknown_broker_in_the_map_is_treated_as_dead() -> None:
    pm = pmap_of({"t": [[1, 2, 42], [42, 3, 1]]})
    plan = rebuild(pm, BrokerMap(NINE))
    assert 42 not in plan.after.broker_ids()
    assert "not in the broker list" in plan.warnings[0]
    assert rack_violations(plan.after, BrokerMap(NINE)) == []


def test_a_partition_with_every_replica_on_dead_brokers_is_warned_about() -> None:
    """Nothing is left to copy it from: its move waits for a dead broker (or, with
    unclean leader election, starts empty). A retiring broker still serves its data."""
    pm = pmap_of({"single": [[4], [5]], "pair": [[4, 5], [4, 6]]})
    plan = rebuild(pm, nine(b4=BrokerState.DEAD, b5=BrokerState.DEAD))
    (stranded,) = [w for w in plan.warnings if "every replica on a dead broker" in w]
    assert stranded.startswith("3 partition(s)") and "(pair-0, single-0, single-1)" in stranded
    retiring = rebuild(pm, nine(b4=BrokerState.RETIRING, b5=BrokerState.RETIRING))
    assert not [w for w in retiring.warnings if "dead broker" in w]


def test_substitution_affinity_sends_everything_to_the_same_rack_newcomer() -> None:
    brokers = BrokerMap(
        [
            *NINE,
            Broker(10, "r0", 1000, 1000, BrokerState.NEW),
            Broker(11, "r1", 1000, 1000, BrokerState.NEW),
        ]
    ).with_states({4: BrokerState.DEAD})
    plan = rebuild(LAYOUT, brokers, RebuildParams(substitution_affinity=True))
    assert {m.destination for m in plan.moves()} == {10}
    assert {m.source for m in plan.moves()} == {4}
    assert plan.warnings == ()


def test_substitution_affinity_infers_the_rack_of_a_vanished_broker() -> None:
    # Broker 4 is gone from the broker list (no rack known); its co-replicas use r1
    # and r2, so its replacement must come from r0.
    brokers = BrokerMap(
        [b for b in NINE if b.id != 4]
        + [
            Broker(10, "r1", 1000, 1000, BrokerState.NEW),
            Broker(11, "r0", 1000, 1000, BrokerState.NEW),
        ]
    )
    plan = rebuild(LAYOUT, brokers, RebuildParams(substitution_affinity=True))
    assert {m.destination for m in plan.moves()} == {11}


def test_substitution_affinity_without_a_match_warns_and_falls_back() -> None:
    brokers = BrokerMap([*NINE, Broker(10, "r2", 1000, 1000, BrokerState.NEW)]).with_states(
        {4: BrokerState.DEAD}
    )
    plan = rebuild(LAYOUT, brokers, RebuildParams(substitution_affinity=True))
    assert any("no unused new broker" in w for w in plan.warnings)
    assert 4 not in plan.after.broker_ids()


def test_force_rebuild_count_balances_replicas_and_leaders() -> None:
    pm = PartitionMap(Partition("t", i, (1, 2, 3)) for i in range(90))
    brokers = BrokerMap(NINE)
    plan = rebuild(pm, brokers, RebuildParams(force=True, seed=3))
    counts = plan.after.replica_counts()
    leaders = plan.after.leader_counts()
    assert sorted(counts) == list(range(1, 10))
    assert max(counts.values()) - min(counts.values()) <= 1
    assert max(leaders.values()) - min(leaders.values()) <= 1
    assert rack_violations(plan.after, brokers) == []


def test_force_rebuild_storage_balances_free_space() -> None:
    pm = PartitionMap(Partition("t", i, (1, 2, 3), size=10 + i % 7) for i in range(60))
    brokers = BrokerMap(brokers_in_racks(3, 3, total=10_000, free={1: 9000, 2: 9000, 3: 9000}))
    plan = rebuild(pm, brokers, RebuildParams(force=True, strategy=PlacementStrategy.STORAGE))
    before, after = plan.storage_stats()
    assert after.range < before.range
    assert after.range <= 20
    assert rack_violations(plan.after, brokers) == []


def test_storage_strategy_refuses_when_nothing_fits() -> None:
    pm = pmap_of({"t": [[1, 2, 3]]}, sizes={"t": [500]})
    brokers = BrokerMap(brokers_in_racks(3, 3, total=1000, free={4: 10, 7: 10}))
    with pytest.raises(PlacementError, match="no allowed broker has 500 bytes of free storage"):
        rebuild(
            pm,
            brokers.with_states({1: BrokerState.DEAD}),
            RebuildParams(strategy=PlacementStrategy.STORAGE),
        )


def test_replication_factor_up_and_down() -> None:
    brokers = BrokerMap(NINE)
    up = rebuild(LAYOUT, brokers, RebuildParams(replication_factor=3 + 0))
    assert up.after == LAYOUT  # already RF 3
    pm = pmap_of({"t": [[1, 2], [2, 3], [3, 1]]})
    grown = rebuild(pm, brokers, RebuildParams(replication_factor=3))
    for old, new in zip(pm, grown.after, strict=True):
        assert new.replicas[:2] == old.replicas
        assert len(new.replicas) == 3
    assert rack_violations(grown.after, brokers) == []
    assert all(m.source is None for m in grown.moves())

    shrunk = rebuild(LAYOUT, brokers, RebuildParams(replication_factor=2))
    assert all(
        new.replicas == old.replicas[:2] for old, new in zip(LAYOUT, shrunk.after, strict=True)
    )
    assert all(m.destination is None for m in shrunk.moves())


def test_shrinking_drops_replicas_on_replaced_brokers_first() -> None:
    brokers = nine(b2=BrokerState.DEAD)
    plan = rebuild(pmap_of({"t": [[1, 2, 3]]}), brokers, RebuildParams(replication_factor=2))
    assert plan.after[("t", 0)].replicas == (1, 3)


def test_rack_rule_that_cannot_hold_is_a_clear_error() -> None:
    two_racks = BrokerMap(brokers_in_racks(2, 3))
    pm = pmap_of({"t": [[1, 2, 3]]})
    with pytest.raises(RackConstraintError, match="needs 3 distinct racks"):
        rebuild(pm, two_racks, RebuildParams(force=True))
    relaxed = rebuild(pm, two_racks, RebuildParams(force=True, min_rack_ids=2))
    assert rack_violations(relaxed.after, two_racks, min_rack_ids=2) == []


def test_too_few_brokers_is_an_error() -> None:
    brokers = BrokerMap(brokers_in_racks(3, 1))
    with pytest.raises(PlacementError, match="needs 4 brokers"):
        rebuild(
            pmap_of({"t": [[1, 2, 3]]}),
            brokers,
            RebuildParams(replication_factor=4, min_rack_ids=1),
        )
    everyone_gone = brokers.with_states({b: BrokerState.DEAD for b in (1, 2, 3)})
    with pytest.raises(PlacementError, match="no active or new broker"):
        rebuild(pmap_of({"t": [[1, 2, 3]]}), everyone_gone)


def test_nothing_to_do_is_a_warning_not_a_change() -> None:
    plan = rebuild(LAYOUT, BrokerMap(NINE))
    assert plan.after == LAYOUT
    assert plan.moves() == ()
    assert "nothing to rebuild" in plan.warnings[-1]


def test_pre_existing_rack_violations_are_reported_not_moved() -> None:
    pm = pmap_of({"t": [[1, 4, 2]]})  # 1 and 4 share r0
    plan = rebuild(pm, nine(b2=BrokerState.DEAD))
    assert plan.after[("t", 0)].replicas[:2] == (1, 4)
    assert any("share a rack" in w for w in plan.warnings)


def test_optimize_leadership_only_reorders() -> None:
    pm = PartitionMap(Partition("t", i, (1, 2, 3)) for i in range(9))
    plan = rebuild(pm, BrokerMap(NINE), RebuildParams(optimize_leadership=True))
    assert plan.moves() == ()
    assert plan.after.leader_counts() == {1: 3, 2: 3, 3: 3}


def test_same_seed_same_bytes_other_seed_differs() -> None:
    pm = PartitionMap(Partition("t", i, (1, 2, 3)) for i in range(60))
    first = rebuild(pm, BrokerMap(NINE), RebuildParams(force=True, seed=11)).to_reassignment_json()
    again = rebuild(pm, BrokerMap(NINE), RebuildParams(force=True, seed=11)).to_reassignment_json()
    other = rebuild(pm, BrokerMap(NINE), RebuildParams(force=True, seed=12)).to_reassignment_json()
    assert first == again
    assert first != other


@pytest.mark.parametrize(
    "params",
    [
        RebuildParams(replication_factor=0),
        RebuildParams(min_rack_ids=0),
        RebuildParams(size_factor=0),
        RebuildParams(size_factor=float("nan")),
        RebuildParams(seed="x"),  # type: ignore[arg-type]
        RebuildParams(strategy="bogus"),  # type: ignore[arg-type]
        RebuildParams(force=True, substitution_affinity=True),
    ],
)
def test_params_validation(params: RebuildParams) -> None:
    with pytest.raises(MapperError):
        rebuild(LAYOUT, BrokerMap(NINE), params)


def test_affinity_that_lacks_storage_falls_back_with_a_warning() -> None:
    brokers = BrokerMap([*NINE, Broker(10, "r0", 5, 1000, BrokerState.NEW)]).with_states(
        {4: BrokerState.DEAD}
    )
    params = RebuildParams(strategy=PlacementStrategy.STORAGE, substitution_affinity=True)
    plan = rebuild(LAYOUT, brokers, params)
    assert {m.destination for m in plan.moves()} <= {1, 7}
    assert any("could not follow their substitution affinity" in w for w in plan.warnings)


def test_storage_without_sizes_and_partial_racks_warn() -> None:
    pm = pmap_of({"t": [[1, 2, 3]]})
    brokers = BrokerMap([*NINE[:8], Broker(9, None, 1000, 1000)]).with_states({1: BrokerState.DEAD})
    plan = rebuild(pm, brokers, RebuildParams(strategy=PlacementStrategy.STORAGE))
    assert any("no partition sizes" in w for w in plan.warnings)
    assert any("have no rack" in w for w in plan.warnings)
