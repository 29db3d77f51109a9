"""maxBytesPerTrigger: a byte budget turned into rows at the bytes per record sampled of
each topic (512 bytes only before any sample), lane by lane (no Spark, no broker)."""

from __future__ import annotations

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows

from streamplane.exceptions import ConfigError
from streamplane.pipeline.options import parse_read_options
from streamplane.pipeline.planning import (
    Limit,
    PartitionInfo,
    PartitionKey,
    RecordSizes,
    SourceOffset,
    plan_end,
)
from streamplane.pipeline.source import StreamplaneStreamReader, _limit

RT = PartitionKey("a", "sp.s.realtime.e1", 0)
BULK = PartitionKey("a", "sp.s.bulk.e1", 0)


def info(key: PartitionKey, priority: int, end: int) -> PartitionInfo:
    return PartitionInfo(key, "realtime" if priority == 0 else "bulk", priority, 1, 0, end)


def test_sizes_start_from_the_first_guess_and_follow_the_samples() -> None:
    sizes = RecordSizes(first_guess=512)
    assert sizes.per_record(RT.topic) == 512.0
    sizes.observe(RT.topic, 200_000, 100)
    assert sizes.per_record(RT.topic) == 2_000.0
    assert sizes.per_record(BULK.topic) == 2_000.0  # not sampled yet: the stream's mean
    sizes.observe(BULK.topic, 3_000, 100)
    assert sizes.per_record(BULK.topic) == 30.0
    sizes.observe(RT.topic, 0, 0)  # an empty sample changes nothing
    sizes.observe(RT.topic, 50_000, 100)  # the latest sample is what the topic is now
    assert sizes.per_record(RT.topic) == 500.0
    with pytest.raises(ConfigError):
        RecordSizes(first_guess=0)


def test_a_byte_budget_becomes_rows_at_the_sampled_size() -> None:
    sizes = RecordSizes()
    start = SourceOffset(1, {RT: 0})
    limit = Limit(max_bytes=100_000)
    # Before any sample: 512 bytes a record (195 rows).
    assert plan_end(start, [info(RT, 0, 1_000)], limit, 1, sizes).partitions == {RT: 195}
    sizes.observe(RT.topic, 200_000, 100)  # records of 2,000 bytes
    assert plan_end(start, [info(RT, 0, 1_000)], limit, 1, sizes).partitions == {RT: 50}
    both = Limit(max_rows=7, max_bytes=100_000)
    assert plan_end(start, [info(RT, 0, 1_000)], both, 1, sizes).partitions == {RT: 7}


def test_lanes_spend_the_byte_budget_by_priority_at_their_own_sizes() -> None:
    sizes = RecordSizes()
    sizes.observe(RT.topic, 10_000, 100)  # 100 bytes a record
    sizes.observe(BULK.topic, 100_000, 100)  # 1,000 bytes a record
    start = SourceOffset(1, {RT: 0, BULK: 0})
    infos = [info(RT, 0, 60), info(BULK, 1, 1_000)]
    end = plan_end(start, infos, Limit(max_bytes=10_000), 1, sizes)
    assert end.partitions == {RT: 60, BULK: 4}  # 6,000 bytes, then 4 of 1,000


def test_a_record_over_the_budget_still_moves_the_query() -> None:
    sizes = RecordSizes()
    sizes.observe(RT.topic, 10_000_000, 10)  # 1 MB records
    end = plan_end(SourceOffset(1, {RT: 0}), [info(RT, 0, 10)], Limit(max_bytes=1_000), 1, sizes)
    assert end.partitions == {RT: 1}


def test_the_default_read_limit_keeps_the_bytes_in_bytes() -> None:
    def reader(**options: str) -> StreamplaneStreamReader:
        return StreamplaneStreamReader(parse_read_options({"stream": "s", "group": "g", **options}))

    only_bytes = reader(maxBytesPerTrigger="100000")
    assert only_bytes.getDefaultReadLimit() == ReadMaxBytes(100_000)
    assert _limit(ReadMaxBytes(100_000), only_bytes.options) == Limit(max_bytes=100_000)
    both = reader(maxBytesPerTrigger="100000", maxRecordsPerTrigger="7")
    assert both.getDefaultReadLimit() == ReadMaxRows(7)
    assert _limit(ReadMaxRows(7), both.options) == Limit(max_rows=7, max_bytes=100_000)
    assert _limit(ReadAllAvailable(), both.options) == Limit()  # Trigger.Once: everything
    assert reader().getDefaultReadLimit() == ReadAllAvailable()
