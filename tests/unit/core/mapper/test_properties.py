"""Property tests over random clusters: the planners' guarantees hold everywhere."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from functools import reduce

from hypothesis import given, settings
from hypothesis import strategies as st

from streamplane.core.mapper import (
    Broker,
    BrokerMap,
    BrokerState,
    PartitionMap,
    PlacementError,
    PlacementStrategy,
    RackConstraintError,
    RackPolicy,
    RebalanceParams,
    RebuildParams,
    ScaleParams,
    balance_leaders,
    parse_reassignment_json,
    rebalance,
    rebuild,
    scale,
    storage_stats,
)

from .builders import brokers_in_racks, rack_violations, random_placement, with_free_from_map

PROPERTY = settings(max_examples=60, deadline=None)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[PartitionMap, BrokerMap]:
    """A rack-valid, storage-skewed placement over 1..5 racks (or no racks at all)."""
    racks = draw(st.integers(1, 5))
    per_rack = draw(st.integers(1, 4))
    rf = draw(st.integers(1, min(3, racks)))
    partitions = draw(st.integers(1, 40))
    seed = draw(st.integers(0, 2**32 - 1))
    headroom = draw(st.floats(1.05, 3.0))
    base = brokers_in_racks(racks, per_rack, total=1)
    pmap = random_placement(random.Random(seed), base, partitions, rf, max_size=1000)
    # Size the disks so the fullest broker is nearly full: storage differences matter.
    total = int(max(pmap.bytes_held().values(), default=0) * headroom) + 1000
    base = [replace(b, storage_total=total, storage_free=total) for b in base]
    if draw(st.booleans()) and racks > 1:
        base = [replace(b, rack=None) for b in base]
    return pmap, with_free_from_map(base, pmap)


def eligible_racks(brokers: BrokerMap) -> int:
    policy = RackPolicy(brokers)
    return len({policy.key(b) for b in brokers.eligible()})


@PROPERTY
@given(
    cluster=clusters(),
    pick=st.integers(0, 10_000),
    strategy=st.sampled_from(list(PlacementStrategy)),
    affinity=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_replacing_a_dead_broker_moves_only_its_replicas(
    cluster: tuple[PartitionMap, BrokerMap],
    pick: int,
    strategy: PlacementStrategy,
    affinity: bool,
    seed: int,
) -> None:
    pmap, brokers = cluster
    holders = pmap.broker_ids()
    victim = holders[pick % len(holders)]
    dead = brokers.with_states({victim: BrokerState.DEAD})
    params = RebuildParams(strategy=strategy, substitution_affinity=affinity, seed=seed)
    rf = max(len(p.replicas) for p in pmap)
    try:
        plan = rebuild(pmap, dead, params)
    except PlacementError as exc:
        # Legitimate only when the survivors cannot host a full replica set, or (by
        # storage) lack the space.
        if strategy is PlacementStrategy.STORAGE and "free storage" in str(exc):
            return
        assert len(dead.eligible()) < rf or eligible_racks(dead) < rf, exc
        assert isinstance(exc, RackConstraintError) or len(dead.eligible()) < rf
        return
    for old, new in zip(pmap, plan.after, strict=True):
        assert len(old.replicas) == len(new.replicas)
        for a, b in zip(old.replicas, new.replicas, strict=True):
            assert a in (b, victim)
    assert victim not in plan.after.broker_ids()
    assert rack_violations(plan.after, dead) == []
    assert plan.to_reassignment_json() == rebuild(pmap, dead, params).to_reassignment_json()


@PROPERTY
@given(
    cluster=clusters(),
    rf=st.integers(1, 4),
    min_rack_ids=st.one_of(st.none(), st.integers(1, 3)),
    seed=st.integers(0, 1000),
    strategy=st.sampled_from(list(PlacementStrategy)),
)
def test_force_rebuild_meets_the_rack_policy_or_says_why(
    cluster: tuple[PartitionMap, BrokerMap],
    rf: int,
    min_rack_ids: int | None,
    seed: int,
    strategy: PlacementStrategy,
) -> None:
    pmap, brokers = cluster
    params = RebuildParams(
        force=True,
        replication_factor=rf,
        min_rack_ids=min_rack_ids,
        seed=seed,
        strategy=strategy,
    )
    policy = RackPolicy(brokers, min_rack_ids)
    try:
        plan = rebuild(pmap, brokers, params)
    except RackConstraintError:
        assert eligible_racks(brokers) < policy.required(rf)
        return
    except PlacementError as exc:
        if strategy is PlacementStrategy.STORAGE and "free storage" in str(exc):
            return
        assert len(brokers) < rf, exc
        return
    assert all(len(p.replicas) == rf for p in plan.after)
    assert rack_violations(plan.after, brokers, min_rack_ids) == []


@PROPERTY
@given(
    cluster=clusters(),
    threshold=st.sampled_from([0.0, 0.02, 0.05, 0.1, 0.2]),
    tolerance=st.one_of(st.none(), st.sampled_from([0.01, 0.1, 0.5, 0.9])),
    scoped=st.booleans(),
)
def test_rebalance_keeps_racks_and_never_widens_the_range(
    cluster: tuple[PartitionMap, BrokerMap],
    threshold: float,
    tolerance: float | None,
    scoped: bool,
) -> None:
    pmap, brokers = cluster
    params = RebalanceParams(
        storage_threshold=threshold, tolerance=tolerance, locality_scoped=scoped
    )
    plan = rebalance(pmap, brokers, params)
    before, after = plan.storage_stats()
    assert after.range <= before.range
    assert rack_violations(plan.after, brokers) == []
    free = {b: brokers[b].storage_free for b in brokers}
    hmean = storage_stats(free.values()).harmonic_mean
    for move in plan.moves():
        assert move.source is not None and move.destination is not None
        src = free[move.source]
        assert threshold == 0 or (hmean - src) / hmean > threshold
    sources = {m.source for m in plan.moves()}
    assert sources.isdisjoint({m.destination for m in plan.moves()})


@PROPERTY
@given(
    cluster=clusters(),
    added=st.integers(1, 3),
    strategy=st.sampled_from(list(PlacementStrategy)),
    seed=st.integers(0, 1000),
)
def test_scale_only_fills_new_brokers(
    cluster: tuple[PartitionMap, BrokerMap],
    added: int,
    strategy: PlacementStrategy,
    seed: int,
) -> None:
    pmap, brokers = cluster
    racks = [brokers[b].rack for b in brokers]
    total = brokers[min(brokers)].storage_total
    first = max(brokers) + 1
    new = [
        Broker(first + i, racks[i % len(racks)], total, total, BrokerState.NEW)
        for i in range(added)
    ]
    grown = BrokerMap([*brokers.values(), *new])
    plan = scale(pmap, grown, ScaleParams(strategy=strategy, seed=seed))
    assert {m.destination for m in plan.moves()} <= {b.id for b in new}
    assert {m.source for m in plan.moves()} <= set(brokers)
    assert rack_violations(plan.after, grown) == []
    if strategy is PlacementStrategy.STORAGE:
        before, after = plan.storage_stats()
        assert after.range <= before.range


@PROPERTY
@given(cluster=clusters())
def test_leadership_is_locally_optimal_and_moves_no_data(
    cluster: tuple[PartitionMap, BrokerMap],
) -> None:
    pmap, _ = cluster
    after = balance_leaders(pmap)
    scale_ = reduce(math.lcm, {len(p.replicas) for p in pmap})
    share: dict[int, int] = {}
    for p in pmap:
        for b in p.replicas:
            share[b] = share.get(b, 0) + scale_ // len(p.replicas)
    leads = after.leader_counts()
    dev = {b: scale_ * leads.get(b, 0) - share[b] for b in share}
    for old, new in zip(pmap, after, strict=True):
        assert sorted(old.replicas) == sorted(new.replicas)
        for other in new.replicas[1:]:
            # No single hand-over would improve the balance.
            assert dev[new.leader] - dev[other] <= scale_


@PROPERTY
@given(cluster=clusters())
def test_reassignment_json_round_trips(cluster: tuple[PartitionMap, BrokerMap]) -> None:
    pmap, brokers = cluster
    plan = rebalance(pmap, brokers, RebalanceParams(storage_threshold=0.05, tolerance=0.1))
    text = plan.to_reassignment_json(only_changed=False, log_dirs=True)
    parsed = parse_reassignment_json(text, known_brokers=list(brokers), current=pmap)
    assert parsed.partition_map == plan.after
