"""Lag model: a group with partitions whose lag is unknown does not look caught up.

An exploratory test: a new streamplane group read a stream while cluster local-b was
down; its expected partitions there (no commit, log start never polled) showed offset
lag "-" while the group's aggregate said offset lag 0, time lag 0.0 s, no unknown
partition, OK.
"""

from __future__ import annotations

from streamplane.core.lag import LagAggregate, LagModel, LagStatus, LagThresholds

S = 1000
NO_TREND = LagThresholds(warn_min_samples=1000, history_interval_s=1.0)


def _down_cluster_model() -> LagModel:
    """Two partitions of a group: one caught up, one expected whose log start is unknown
    (its cluster went down) but whose end offset is known (from a snapshot)."""
    m = LagModel(NO_TREND)
    m.observe_end_offset("t", 0, 100, 1 * S)
    m.observe_commit("g", "t", 0, 100, 1 * S, low_watermark_ts_ms=1 * S)  # caught up
    m.restore_log_end("t", 1, 2038, 1 * S)  # end known, log start not
    m.expect("g", "t", 1, stream="s", lane="realtime", cluster="local-b")
    return m


def test_an_expected_partition_with_records_and_no_log_start_is_unknown_and_warns() -> None:
    m = _down_cluster_model()
    r = m.partition("g", "t", 1, 10 * S)
    assert r is not None
    assert (r.committed_offset, r.end_offset, r.offset_lag, r.time_lag_s) == (
        None,
        2038,
        None,
        None,
    )
    # Records may be pending and how many is unknown: not OK.
    assert r.status is LagStatus.WARN


def test_the_aggregate_counts_partitions_with_an_unknown_lag() -> None:
    m = _down_cluster_model()
    assert m.aggregate(10 * S, by_topic=False) == [
        LagAggregate(
            "g",
            None,
            partitions=2,
            offset_lag=0,  # over the known partitions
            max_time_lag_s=0.0,
            status=LagStatus.WARN,
            unknown_time_lag=1,
            unknown_offset_lag=1,
        )
    ]


def test_an_expected_partition_without_records_or_end_stays_ok() -> None:
    """Nothing known about its records (no end offset) or none there (end 0): counted as
    unknown, but nothing says it is behind."""
    m = LagModel(NO_TREND)
    m.expect("g", "t", 0)
    m.expect("g", "t", 1)
    m.observe_end_offset("t", 1, 0, 1 * S)
    assert [r.status for r in m.partitions(2 * S)] == [LagStatus.OK, LagStatus.OK]
    (agg,) = m.aggregate(2 * S, by_topic=False)
    assert (agg.status, agg.offset_lag, agg.unknown_offset_lag, agg.unknown_time_lag) == (
        LagStatus.OK,
        0,
        2,
        2,
    )


def test_a_log_start_known_from_another_group_is_used() -> None:
    """Log starts are kept per topic-partition: an expected partition without a commit
    counts from one observed for another group, even if none is observed after it."""
    m = LagModel(NO_TREND)
    m.expect("other", "t", 0)
    m.observe_log_start("t", 0, 10)
    m.observe_end_offset("t", 0, 2038, 1 * S)
    m.expect("g", "t", 0)  # the cluster goes down: no poll after this
    r = m.partition("g", "t", 0, 2 * S)
    assert r is not None
    assert (r.committed_offset, r.offset_lag) == (None, 2028)
    (agg,) = [a for a in m.aggregate(2 * S, by_topic=False) if a.group == "g"]
    assert (agg.offset_lag, agg.unknown_offset_lag, agg.unknown_time_lag) == (2028, 0, 1)


def test_a_saved_log_start_is_used_after_a_restart() -> None:
    m = LagModel(NO_TREND)
    m.restore_log_end("t", 0, 2038, 1 * S, start=38)
    m.expect("g", "t", 0)
    r = m.partition("g", "t", 0, 2 * S)
    assert r is not None and r.offset_lag == 2000
