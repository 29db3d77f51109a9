"""The retire decision's inputs and its words: a listing of the consumer groups that may
have missed some is not concluded on (``group_listing_gap``), and a segment that waits
says on whom and how far (``retire_check``).

An exploratory run: after a full restart of a 3-broker cluster, the control plane's
long-lived kafka-python client knew only some of the brokers, ListGroups (asked of those)
left out the groups the others coordinate, and two sealed segments read to their end
stayed sealed for 4.5 minutes with nothing logged. A group that only commits (never
heartbeats to the Assigner) is known to the sealer by its commits alone: missed by the
listing, a segment it had not finished could be retired unread.
"""

from __future__ import annotations

from streamplane.core.failover import group_listing_gap, retire_check


def test_a_listing_that_asked_every_coordinator_is_complete() -> None:
    leaders = {0: 1, 1: 2, 2: 3, 3: 1}
    assert group_listing_gap({1, 2, 3}, leaders) is None
    assert group_listing_gap({1, 2, 3, 4}, leaders) is None  # a broker leading nothing
    assert group_listing_gap({1}, {}) is None  # no group ever committed


def test_a_coordinator_not_asked_makes_the_listing_incomplete() -> None:
    # The client's metadata predates broker 3's return; broker 3 leads partition 2 again.
    gap = group_listing_gap({1, 2}, {0: 1, 1: 2, 2: 3})
    assert gap is not None
    assert "brokers 3 coordinate" in gap
    assert "only 1, 2" in gap


def test_a_group_partition_without_a_leader_makes_the_listing_incomplete() -> None:
    # Every replica of partitions 4 and 7 is down: no broker lists their groups.
    gap = group_listing_gap({1, 2, 3}, {0: 1, 4: -1, 7: -1})
    assert gap is not None
    assert "partitions 4, 7 have no leader" in gap


def test_a_group_that_committed_part_of_a_segment_holds_it_and_is_named() -> None:
    # "quiet" only commits (the Assigner never heard of it): its commits are enough.
    check = retire_check(
        {0: 10, 1: 10, 2: 0},
        {"loud": {0: 10, 1: 10}, "quiet": {0: 10, 1: 3}},
        reported=(),
    )
    assert not check.retire
    assert check.pending == ("quiet",)
    assert check.reason == "not settled by quiet: partition 1 at 3 of 10"


def test_why_a_segment_waits_names_each_group_and_how_far_it_is() -> None:
    check = retire_check({0: 5, 1: 5}, {"a": {}, "b": {0: 1}, "c": {0: 5, 1: 5}}, reported=())
    assert check.pending == ("a", "b")
    assert check.reason == (
        "not settled by a: committed nothing on it; b: partition 0 at 1 of 5 (and 1 more "
        "partitions)"
    )
