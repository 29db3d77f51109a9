"""A lane added to a live stream (``core.routing.add_lane``), and telling the lanes a
consumer of every lane names from a chosen few (``is_lanes_as_of_an_epoch``)."""

from __future__ import annotations

import pytest

from streamplane.core.routing import (
    MAX_LANES,
    SegmentState,
    add_lane,
    home_cluster,
    is_lanes_as_of_an_epoch,
    lane_added_epoch,
    move_lanes,
    new_routing_table,
    routing_from_json,
    routing_to_json,
)
from streamplane.exceptions import ConfigError, Conflict

TABLE = new_routing_table("s", ["realtime", "bulk"], "local-a", 6)


def test_a_lane_goes_above_the_lane_named_in_a_new_epoch_with_its_own_topic() -> None:
    new = add_lane(TABLE, "priority", "local-a", 3, before="bulk")
    assert new.epoch == TABLE.epoch + 1
    assert new.lanes == ("realtime", "priority", "bulk")
    assert new.all_lanes == ("realtime", "priority", "bulk", "dlq")
    segment = new.active("priority")
    assert (segment.topic, segment.partitions, segment.state, segment.epoch) == (
        "sp.s.priority.e2",
        3,
        SegmentState.ACTIVE,
        2,
    )
    assert new.segments[: len(TABLE.segments)] == TABLE.segments  # the others as they were
    assert [s.lane for s in new.readable()] == ["realtime", "priority", "bulk", "dlq"]
    assert new.lane_priority("bulk") == 2
    assert routing_from_json(routing_to_json(new)) == new


def test_without_a_place_it_goes_last_above_the_dlq() -> None:
    assert add_lane(TABLE, "late", "local-a", 1).all_lanes == ("realtime", "bulk", "late", "dlq")
    assert add_lane(TABLE, "urgent", "local-a", 1, before="realtime").lanes[0] == "urgent"


def test_a_lane_the_stream_has_is_a_conflict_the_dlq_included() -> None:
    with pytest.raises(Conflict, match="already has lane 'bulk'"):
        add_lane(TABLE, "bulk", "local-a", 1)
    with pytest.raises(Conflict, match="reserved"):
        add_lane(TABLE, "dlq", "local-a", 1)


@pytest.mark.parametrize(
    ("lane", "before", "partitions", "message"),
    [
        ("Priority", None, 1, "invalid lane name"),
        ("priority", "nope", 1, "no lane 'nope' to put lane 'priority' before"),
        ("priority", "dlq", 1, "no lane 'dlq'"),
        ("priority", None, 0, "partitions must be at least 1"),
    ],
)
def test_bad_requests_are_config_errors(
    lane: str, before: str | None, partitions: int, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        add_lane(TABLE, lane, "local-a", partitions, before=before)


def test_a_stream_has_at_most_max_lanes() -> None:
    lanes = [f"l{i}" for i in range(MAX_LANES)]
    full = new_routing_table("s", lanes, "local-a", 1)
    with pytest.raises(ConfigError, match=f"at most {MAX_LANES}"):
        add_lane(full, "one-more", "local-a", 1)
    with pytest.raises(ConfigError, match=f"at most {MAX_LANES}"):
        new_routing_table("s", [*lanes, "one-more"], "local-a", 1)


def test_the_home_cluster_is_where_every_lane_but_the_dlq_is_active() -> None:
    assert home_cluster(TABLE) == "local-a"
    moved = move_lanes(TABLE, ["realtime", "bulk"], "local-b")
    assert home_cluster(moved) == "local-b"  # the dlq stayed on local-a
    assert home_cluster(move_lanes(TABLE, ["bulk"], "local-b")) is None  # split


def test_lanes_named_by_a_consumer_of_every_lane_at_some_epoch() -> None:
    new = add_lane(TABLE, "priority", "local-a", 1, before="bulk")
    assert lane_added_epoch(new, "bulk") == 1 and lane_added_epoch(new, "priority") == 2
    assert is_lanes_as_of_an_epoch(new, ["realtime", "bulk"])  # before the addition
    assert is_lanes_as_of_an_epoch(new, ["realtime", "priority", "bulk"])  # after it
    assert not is_lanes_as_of_an_epoch(new, ["realtime"])  # a chosen few
    assert not is_lanes_as_of_an_epoch(new, ["bulk", "realtime"])  # not in priority order
    assert not is_lanes_as_of_an_epoch(new, ["realtime", "priority"])  # bulk is older
    assert not is_lanes_as_of_an_epoch(new, ["realtime", "bulk", "dlq"])
    assert not is_lanes_as_of_an_epoch(new, [])
