from __future__ import annotations

import random

import pytest

from streamplane.core.mapper import (
    Broker,
    BrokerMap,
    PlacementError,
    RackConstraintError,
    RackPolicy,
)
from streamplane.core.mapper.constraints import CountSelector, StorageSelector
from streamplane.core.mapper.exceptions import MapperError

BROKERS = BrokerMap(
    [
        Broker(1, "a"),
        Broker(2, "a"),
        Broker(3, "b"),
        Broker(4, "b"),
        Broker(5, None),
        Broker(6, None),
    ]
)


def test_strict_policy_needs_distinct_racks() -> None:
    policy = RackPolicy(BROKERS)
    assert policy.satisfied([1, 3])
    assert not policy.satisfied([1, 2])
    assert policy.may_add([1], 3, 2)
    assert not policy.may_add([1], 2, 2)


def test_rackless_brokers_are_their_own_rack() -> None:
    policy = RackPolicy(BROKERS)
    assert policy.satisfied([5, 6, 1])
    assert policy.key(5) != policy.key(6)
    # A broker unknown to the map is its own rack too.
    assert policy.satisfied([99, 1])


def test_min_rack_ids_relaxes_the_rule() -> None:
    policy = RackPolicy(BROKERS, min_rack_ids=2)
    assert policy.required(3) == 2
    assert policy.required(1) == 1
    assert policy.satisfied([1, 2, 3])
    assert not policy.satisfied([1, 2])
    # A repeated rack is allowed only once two racks are present.
    assert not policy.may_add([1], 2, 3)
    assert policy.may_add([1, 3], 2, 3)


def test_move_ok() -> None:
    policy = RackPolicy(BROKERS)
    assert policy.move_ok((1, 3), 1, 2)  # a -> a keeps racks distinct
    assert not policy.move_ok((1, 3), 1, 4)  # would put two in b
    # A set already broken may move as long as it does not get worse.
    assert policy.move_ok((1, 2), 2, 3)
    assert policy.move_ok((1, 2), 2, 5)


def test_check_feasible_errors() -> None:
    policy = RackPolicy(BrokerMap([Broker(1, "a"), Broker(2, "a"), Broker(3, "b")]))
    with pytest.raises(RackConstraintError, match="min_rack_ids=2"):
        policy.check_feasible([1, 2, 3], 3)
    with pytest.raises(PlacementError, match="only 3 can receive"):
        policy.check_feasible([1, 2, 3], 4)
    RackPolicy(BrokerMap([Broker(1, "a"), Broker(2, "a"), Broker(3, "b")]), 2).check_feasible(
        [1, 2, 3], 3
    )
    with pytest.raises(MapperError):
        RackPolicy(BROKERS, 0)


def test_count_selector_prefers_fewest_and_is_seeded() -> None:
    picks = []
    for _ in range(2):
        sel = CountSelector({1: 2, 2: 0, 3: 0, 4: 1}, random.Random(5))
        run = []
        for _ in range(6):
            choice = sel.select(lambda b: b != 3)
            assert choice is not None
            sel.take(choice)
            run.append(choice)
        picks.append(run)
    assert picks[0] == picks[1]
    assert picks[0][0] == 2
    assert sel.counts[3] == 0
    assert CountSelector({1: 0}, random.Random(0)).select(lambda b: False) is None


def test_storage_selector_most_free_that_fits() -> None:
    sel = StorageSelector({1: 50, 2: 80, 3: 80})
    assert sel.select(10, lambda b: True) == 2
    sel.take(2, 40)
    assert sel.free == {1: 50, 2: 40, 3: 80}
    assert sel.select(60, lambda b: b != 3) is None
    assert sel.select(45, lambda b: b != 3) == 1
