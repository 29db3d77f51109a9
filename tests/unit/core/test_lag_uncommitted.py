"""Lag model: expected partitions without a commit count from the log start; sampling
partitions whose end offsets went unanswered; saving and restoring end offsets."""

from __future__ import annotations

from streamplane.core.lag import LagModel, LagStatus, LagThresholds, PartitionLag

S = 1000
NO_TREND = LagThresholds(warn_min_samples=1000, history_interval_s=1.0)


def lag(m: LagModel, now_s: float, group: str = "g", topic: str = "t", p: int = 0) -> PartitionLag:
    result = m.partition(group, topic, p, int(now_s * S))
    assert result is not None
    return result


def test_an_expected_partition_counts_from_the_log_start() -> None:
    m = LagModel(NO_TREND)
    m.expect("g", "t", 0, stream="s", lane="realtime", cluster="b")
    r = lag(m, 1)
    assert (r.committed_offset, r.offset_lag, r.time_lag_s, r.status) == (
        None,
        None,
        None,
        LagStatus.OK,
    )
    m.observe_log_start("t", 0, 10)
    m.observe_end_offset("t", 0, 25, 2 * S)
    r = lag(m, 3)
    assert (r.committed_offset, r.end_offset, r.offset_lag, r.time_lag_s) == (None, 25, 15, None)
    assert r.last_commit_ms is None
    # The record at the log start is looked up like a foreign group's committed record.
    assert m.timestamp_lookups() == [("g", "t", 0, 10)]
    m.observe_offset_timestamp("g", "t", 0, 10, 1 * S)
    assert m.timestamp_lookups() == []
    r = lag(m, 31)
    assert (r.offset_lag, r.time_lag_s, r.status) == (15, 30.0, LagStatus.OK)
    (agg,) = m.aggregate(31 * S, by_topic=False)
    assert (agg.partitions, agg.offset_lag, agg.max_time_lag_s, agg.unknown_time_lag) == (
        1,
        15,
        30.0,
        0,
    )
    # Never committed, never caught up, pending since its first record (1 s): STOP after
    # stop_after_s (120 s) of time lag.
    # Pending since its first record: WARN after warn_after_s (45 s), STOP after
    # stop_after_s (120 s).
    assert lag(m, 46).status is LagStatus.OK
    assert lag(m, 47).status is LagStatus.WARN
    assert lag(m, 120).status is LagStatus.WARN
    assert lag(m, 122).status is LagStatus.STOP


def test_an_empty_expected_partition_is_caught_up_until_records_land() -> None:
    m = LagModel(NO_TREND)
    m.expect("g", "t", 0)
    m.observe_log_start("t", 0, 0)
    m.observe_end_offset("t", 0, 0, 1 * S)
    r = lag(m, 2)
    assert (r.offset_lag, r.time_lag_s, r.status) == (0, 0.0, LagStatus.OK)
    assert r.committed_offset is None
    assert m.timestamp_lookups() == []
    # Records land at 5 s; the group never reads them.
    m.observe_log_start("t", 0, 0)
    m.observe_end_offset("t", 0, 3, 6 * S)
    m.observe_offset_timestamp("g", "t", 0, 0, 5 * S)
    r = lag(m, 65)
    assert (r.offset_lag, r.time_lag_s, r.status) == (3, 60.0, LagStatus.WARN)
    assert lag(m, 46).status is LagStatus.OK  # 45 s after the last caught-up poll (1 s)
    # Caught up (empty) last at 1 s: stopped 120 s after that.
    assert lag(m, 130).status is LagStatus.STOP
    # History: the empty observation, then the lag.
    assert [(s.time_ms, s.offset_lag) for s in m.history("g", "t", 0)] == [(1 * S, 0), (6 * S, 3)]


def test_the_first_commit_takes_over_and_retention_moves_the_start() -> None:
    m = LagModel(NO_TREND)
    m.expect("g", "t", 0)
    m.observe_log_start("t", 0, 4)
    m.observe_end_offset("t", 0, 10, 1 * S)
    m.observe_offset_timestamp("g", "t", 0, 4, 0)
    assert lag(m, 2).offset_lag == 6
    m.observe_log_start("t", 0, 6)  # retention deleted two records
    r = lag(m, 3)
    assert (r.offset_lag, r.time_lag_s) == (4, None)  # the record at 6 is not looked up yet
    assert m.timestamp_lookups() == [("g", "t", 0, 6)]
    m.observe_commit("g", "t", 0, 8, 4 * S, low_watermark_ts_ms=3 * S)
    r = lag(m, 5)
    assert (r.committed_offset, r.offset_lag, r.time_lag_s, r.last_commit_ms) == (8, 2, 2.0, 4 * S)
    assert r.status is LagStatus.OK  # not a rewind: there was no committed offset before


def test_tracked_without_a_commit_is_still_unknown() -> None:
    m = LagModel(NO_TREND)
    m.track("g", "t", 0)
    m.observe_log_start("t", 0, 0)
    m.observe_end_offset("t", 0, 9, 1 * S)
    r = lag(m, 2)
    assert (r.offset_lag, r.time_lag_s, r.status) == (None, None, LagStatus.OK)
    assert m.timestamp_lookups() == []
    assert m.history("g", "t", 0) == []


def test_sampling_unanswered_partitions_ages_their_lag_on_the_last_known_end() -> None:
    m = LagModel(NO_TREND)
    m.observe_end_offset("t", 0, 100, 1 * S)
    m.observe_end_offset("u", 0, 100, 1 * S)
    m.observe_commit("g", "t", 0, 40, 1 * S, low_watermark_ts_ms=0)
    m.observe_commit("g", "u", 0, 40, 1 * S, low_watermark_ts_ms=0)
    m.sample(5 * S, [("t", 0), ("nope", 3)])
    assert [(s.time_ms, s.time_lag_s, s.offset_lag) for s in m.history("g", "t", 0)] == [
        (5 * S, 5.0, 60)
    ]
    assert m.history("g", "u", 0) == []
    m.sample(9 * S)
    assert [s.time_lag_s for s in m.history("g", "u", 0)] == [9.0]


def test_log_ends_restore_into_a_new_model() -> None:
    m = LagModel(NO_TREND)
    m.expect("g", "t", 0)
    m.observe_log_start("t", 0, 3)
    m.observe_end_offset("t", 0, 9, 1 * S)
    m.observe_end_offset("gone", 0, 5, 1 * S)  # no partition reads it: not saved
    saved = m.log_ends()
    assert saved == [("t", 0, 9, 1 * S, 3)]
    again = LagModel(NO_TREND)
    again.expect("g", "t", 0)
    for entry in saved:
        again.restore_log_end(*entry)
    r = lag(again, 2)
    assert (r.end_offset, r.offset_lag) == (9, 6)
