from __future__ import annotations

from streamplane.core.mapper import (
    BrokerMap,
    BrokerState,
    Partition,
    PartitionMap,
    balance_leaders,
    optimize_leadership,
)

from .builders import brokers_in_racks, pmap_of


def test_skewed_leaders_are_balanced_by_reordering_only() -> None:
    pm = PartitionMap(Partition("t", i, (1, 2, 3)) for i in range(9))
    after = balance_leaders(pm)
    assert after.leader_counts() == {1: 3, 2: 3, 3: 3}
    for old, new in zip(pm, after, strict=True):
        assert sorted(old.replicas) == sorted(new.replicas)
        # Followers keep their relative order.
        assert [b for b in old.replicas if b != new.leader] == list(new.replicas[1:])


def test_balanced_map_is_unchanged() -> None:
    pm = pmap_of({"t": [[1, 2], [2, 3], [3, 1]]})
    assert balance_leaders(pm) == pm


def test_chain_moves_when_no_direct_move_helps() -> None:
    # A leads both A-B partitions, B leads both B-C partitions, C leads nothing.
    # No single hand-over improves things; A -> B -> C does.
    pm = pmap_of({"t": [[1, 2], [1, 2], [2, 3], [2, 3]]})
    after = balance_leaders(pm)
    assert after.leader_counts() == {1: 1, 2: 2, 3: 1}


def test_share_follows_replica_load() -> None:
    # Broker 1 is in every partition, 2..4 in a third each: 1 should lead a third
    # of the time, not a quarter, and nobody should be more than one off.
    pm = PartitionMap(Partition("t", i, (1, 2 + i % 3)) for i in range(12))
    after = balance_leaders(pm)
    lead = after.leader_counts()
    assert lead[1] == 6
    assert {lead[b] for b in (2, 3, 4)} == {2}


def test_ineligible_brokers_never_lead() -> None:
    brokers = BrokerMap(brokers_in_racks(3, 1)).with_states({1: BrokerState.DEAD})
    pm = PartitionMap(Partition("t", i, (1, 2, 3)) for i in range(4))
    plan = optimize_leadership(pm, brokers)
    assert 1 not in plan.after.leader_counts()
    assert plan.moves() == ()
    assert plan.kind == "leadership"


def test_stranded_partitions_warn() -> None:
    brokers = BrokerMap(brokers_in_racks(2, 1)).with_states({1: BrokerState.DEAD})
    pm = pmap_of({"t": [[1], [2]]})
    plan = optimize_leadership(pm, brokers)
    assert plan.after == pm
    assert "no active replica" in plan.warnings[0]


def test_empty_map() -> None:
    assert balance_leaders(PartitionMap()) == PartitionMap()
