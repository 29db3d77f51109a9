"""Offset planning and admission control of the Spark source (no Spark, no broker)."""

from __future__ import annotations

import pytest

from streamplane.exceptions import ConfigError
from streamplane.pipeline.planning import (
    Limit,
    PartitionInfo,
    PartitionKey,
    SourceOffset,
    plan_end,
    plan_splits,
    rows_between,
    water_fill,
)

RT = [PartitionKey("a", "sp.s.realtime.e1", p) for p in range(2)]
BULK = [PartitionKey("a", "sp.s.bulk.e1", p) for p in range(2)]


def info(key: PartitionKey, lane: str, end: int, join: int = 0, epoch: int = 1) -> PartitionInfo:
    priority = {"realtime": 0, "bulk": 1, "dlq": 2}[lane]
    return PartitionInfo(key, lane, priority, epoch, join, end)


def start_all(value: int = 0) -> SourceOffset:
    return SourceOffset(1, {k: value for k in RT + BULK})


def test_offset_json_round_trip() -> None:
    off = SourceOffset(7, {RT[0]: 5, BULK[1]: 9})
    doc = off.to_json()
    assert doc == {"epoch": 7, "partitions": {"a|sp.s.bulk.e1|1": 9, "a|sp.s.realtime.e1|0": 5}}
    assert SourceOffset.from_json(doc) == off


@pytest.mark.parametrize(
    "bad", [{"partitions": {"a|b": 1}}, {"partitions": {"a|b|x": 1}}, {"partitions": 3}]
)
def test_malformed_offsets(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        SourceOffset.from_json(bad)


def test_unlimited_reads_everything() -> None:
    infos = [
        info(RT[0], "realtime", 10),
        info(RT[1], "realtime", 5),
        info(BULK[0], "bulk", 7),
        info(BULK[1], "bulk", 0),
    ]
    end = plan_end(start_all(), infos, Limit(), epoch=3)
    assert end.epoch == 3
    assert end.partitions == {RT[0]: 10, RT[1]: 5, BULK[0]: 7, BULK[1]: 0}


def test_nothing_new_returns_start() -> None:
    start = SourceOffset(1, {RT[0]: 10})
    assert plan_end(start, [info(RT[0], "realtime", 10)], Limit(), epoch=2) is start


def test_realtime_served_before_bulk() -> None:
    infos = [
        info(RT[0], "realtime", 60),
        info(RT[1], "realtime", 30),
        info(BULK[0], "bulk", 1000),
        info(BULK[1], "bulk", 1000),
    ]
    end = plan_end(start_all(), infos, Limit(max_rows=100), epoch=1)
    assert end.partitions[RT[0]] == 60 and end.partitions[RT[1]] == 30
    assert end.partitions[BULK[0]] + end.partitions[BULK[1]] == 10
    assert end.partitions[BULK[0]] == 5  # the rest is spread evenly


def test_realtime_alone_exceeding_limit_starves_bulk_not_realtime() -> None:
    infos = [info(RT[0], "realtime", 1000), info(BULK[0], "bulk", 1000)]
    end = plan_end(SourceOffset(1, {RT[0]: 0, BULK[0]: 0}), infos, Limit(max_rows=50), 1)
    assert end.partitions == {RT[0]: 50, BULK[0]: 0}


def test_draining_segment_first_within_a_lane() -> None:
    old = PartitionKey("a", "sp.s.realtime.e1", 0)
    new = PartitionKey("b", "sp.s.realtime.e2", 0)
    infos = [info(new, "realtime", 100, epoch=2), info(old, "realtime", 101, epoch=1)]
    end = plan_end(SourceOffset(1, {old: 0, new: 0}), infos, Limit(max_rows=101), 2)
    assert end.partitions == {old: 51, new: 50}  # even split, the odd unit to the older one


def test_new_partition_joins_with_no_rows() -> None:
    new = PartitionKey("b", "sp.s.realtime.e2", 0)
    start = SourceOffset(1, {RT[0]: 4})
    end = plan_end(
        start, [info(RT[0], "realtime", 4), info(new, "realtime", 50, join=3)], Limit(), 2
    )
    assert end.partitions == {RT[0]: 4, new: 3}
    assert plan_splits(start, end, 10) == []
    # next batch reads it from its join offset
    end2 = plan_end(
        end, [info(RT[0], "realtime", 4), info(new, "realtime", 50, join=3)], Limit(), 2
    )
    assert [(s.start, s.end) for s in plan_splits(end, end2, 100)] == [(3, 50)]


def test_partition_gone_from_routing_keeps_its_offset() -> None:
    start = SourceOffset(1, {RT[0]: 4, RT[1]: 9})
    end = plan_end(start, [info(RT[0], "realtime", 6)], Limit(), 2)
    assert end.partitions == {RT[0]: 6, RT[1]: 9}


def test_min_rows_waits() -> None:
    start = SourceOffset(1, {RT[0]: 0})
    assert plan_end(start, [info(RT[0], "realtime", 5)], Limit(min_rows=10), 1) is start
    assert plan_end(start, [info(RT[0], "realtime", 15)], Limit(min_rows=10), 1).partitions == {
        RT[0]: 15
    }


def test_offsets_never_go_backwards() -> None:
    # A partition whose high watermark is below the start (e.g. after truncation) stays put.
    start = SourceOffset(1, {RT[0]: 10})
    assert plan_end(start, [info(RT[0], "realtime", 3)], Limit(), 1) is start


@pytest.mark.parametrize(
    ("wants", "budget", "grants"),
    [
        ([10, 10], 7, [4, 3]),
        ([1, 10, 10], 9, [1, 4, 4]),
        ([0, 5], 3, [0, 3]),
        ([3, 3], 100, [3, 3]),
        ([], 5, []),
        ([5, 5, 5], 0, [0, 0, 0]),
    ],
)
def test_water_fill(wants: list[int], budget: int, grants: list[int]) -> None:
    assert water_fill(wants, budget) == grants


def test_splits_cut_long_ranges() -> None:
    start = SourceOffset(1, {RT[0]: 0, RT[1]: 5})
    end = SourceOffset(2, {RT[0]: 25, RT[1]: 5})
    splits = plan_splits(start, end, 10)
    assert [(s.key, s.start, s.end) for s in splits] == [
        (RT[0], 0, 10),
        (RT[0], 10, 20),
        (RT[0], 20, 25),
    ]
    assert rows_between(start, end) == 25
    with pytest.raises(ConfigError):
        plan_splits(start, end, 0)
