"""Replicas placed over the live brokers only (a cluster with a broker down): leaders
spread evenly, no broker twice in a partition, racks alternated."""

from __future__ import annotations

from collections import Counter

import pytest

from streamplane.core.replication import rack_alternating, replica_assignment
from streamplane.exceptions import ConfigError


def test_the_reported_case_two_live_brokers_of_three_twelve_partitions() -> None:
    live = {1: "a", 2: "b"}  # broker 3 (rack c) is down
    assignment = replica_assignment(12, live, 2)
    assert len(assignment) == 12
    assert all(sorted(r) == [1, 2] for r in assignment)
    assert Counter(r[0] for r in assignment) == {1: 6, 2: 6}


@pytest.mark.parametrize(
    ("partitions", "brokers", "replicas"),
    [(1, 1, 1), (6, 3, 3), (7, 3, 2), (12, 4, 3), (5, 5, 1), (13, 6, 3)],
)
def test_leaders_differ_by_one_at_most_and_no_broker_holds_two_replicas(
    partitions: int, brokers: int, replicas: int
) -> None:
    live: dict[int, str | None] = {b: None for b in range(1, brokers + 1)}
    for first in range(brokers):
        assignment = replica_assignment(partitions, live, replicas, first)
        assert len(assignment) == partitions
        assert all(len(set(r)) == replicas and set(r) <= set(live) for r in assignment)
        leaders = Counter(r[0] for r in assignment)
        led = [leaders.get(b, 0) for b in live]
        assert max(led) - min(led) <= 1


def test_replicas_are_on_distinct_racks_when_the_racks_are_even() -> None:
    live = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    for r in replica_assignment(12, live, 3):
        assert len({live[b] for b in r}) == 3


def test_rack_alternating_order() -> None:
    assert rack_alternating({4: "a", 1: "a", 2: "b", 3: "c", 5: None}) == [1, 2, 3, 5, 4]
    assert rack_alternating({}) == []


def test_first_turns_the_start() -> None:
    live: dict[int, str | None] = {1: None, 2: None, 3: None}
    assert replica_assignment(2, live, 2, first=2) == [[3, 1], [1, 2]]


@pytest.mark.parametrize(("partitions", "replicas"), [(3, 3), (3, 0), (0, 1)])
def test_what_cannot_be_placed_is_refused(partitions: int, replicas: int) -> None:
    with pytest.raises(ConfigError):
        replica_assignment(partitions, {1: "a", 2: "b"}, replicas)
