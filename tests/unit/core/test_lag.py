"""Lag model: lags, status transitions with explicit times, history, aggregates; and the
interpolation baseline (kafka-lag-exporter) next to the exact method."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamplane.core.lag import (
    LagAggregate,
    LagModel,
    LagSample,
    LagStatus,
    LagThresholds,
    PartitionLabels,
    PartitionLag,
)
from streamplane.core.lag_interpolation import (
    EndOffsetTable,
    InterpolatedLag,
    LagEstimate,
    LagEstimateKind,
)
from streamplane.exceptions import ConfigError

S = 1000  # ms per second
# The trend rule needs more samples than the history holds: it never fires.
NO_TREND = LagThresholds(warn_min_samples=1000)


def lag(m: LagModel, now_s: float, group: str = "g", topic: str = "t", p: int = 0) -> PartitionLag:
    result = m.partition(group, topic, p, int(now_s * S))
    assert result is not None
    return result


def status(m: LagModel, now_s: float) -> LagStatus:
    return lag(m, now_s).status


# --- lags ----------------------------------------------------------------------------


def test_offset_and_time_lag() -> None:
    m = LagModel()
    m.observe_end_offset("t", 0, 100, 0)
    m.observe_commit("g", "t", 0, 40, 1 * S, low_watermark_ts_ms=500)
    assert lag(m, 11) == PartitionLag(
        "g", "t", 0, 40, 100, 60, 10.5, LagStatus.OK, 1 * S, PartitionLabels()
    )


def test_caught_up_means_zero_time_lag() -> None:
    m = LagModel()
    m.observe_end_offset("t", 0, 100, 0)
    m.observe_commit("g", "t", 0, 100, 1 * S)
    r = lag(m, 50)
    assert (r.offset_lag, r.time_lag_s, r.status) == (0, 0.0, LagStatus.OK)
    m.observe_commit("g", "t", 0, 120, 2 * S)  # ahead of a stale end offset
    r = lag(m, 50)
    assert (r.offset_lag, r.time_lag_s) == (0, 0.0)
    # The log has at least what was committed: the report never shows an end below it.
    assert (r.committed_offset, r.end_offset) == (120, 120)


def test_time_lag_is_never_negative() -> None:
    m = LagModel()
    m.observe_end_offset("t", 0, 100, 0)
    m.observe_commit("g", "t", 0, 40, 1 * S, low_watermark_ts_ms=5 * S)  # clock skew
    assert lag(m, 2).time_lag_s == 0.0


def test_unknown_end_offset_and_untracked_partitions() -> None:
    m = LagModel()
    m.observe_commit("g", "t", 0, 40, 1 * S, low_watermark_ts_ms=0)
    r = lag(m, 10)
    assert (r.end_offset, r.offset_lag, r.time_lag_s, r.status) == (None, None, 10.0, LagStatus.OK)
    m.track("g", "t", 1)
    r = lag(m, 10, p=1)
    assert (r.committed_offset, r.offset_lag, r.time_lag_s, r.last_commit_ms) == (
        None,
        None,
        None,
        None,
    )
    assert m.partition("g", "t", 9, 0) is None
    assert m.history("g", "t", 9) == []


def test_foreign_group_uses_timestamp_lookups() -> None:
    m = LagModel()
    m.observe_end_offset("t", 0, 100, 0)
    m.observe_commit("g", "t", 0, 40, 1 * S)
    assert lag(m, 10).time_lag_s is None
    assert m.timestamp_lookups() == [("g", "t", 0, 40)]
    m.observe_offset_timestamp("g", "t", 0, 40, 2 * S)
    assert lag(m, 10).time_lag_s == 8.0
    assert m.timestamp_lookups() == []
    m.observe_commit("g", "t", 0, 50, 11 * S)  # the looked-up record is now consumed
    assert lag(m, 12).time_lag_s is None
    assert m.timestamp_lookups() == [("g", "t", 0, 50)]
    m.observe_commit("g", "t", 0, 100, 13 * S)  # caught up: nothing to look up
    assert m.timestamp_lookups() == []
    m.observe_offset_timestamp("nobody", "t", 0, 1, 1)  # untracked: ignored
    assert ("nobody", "t", 0) not in m


def test_position_timestamps_are_those_of_the_committed_records() -> None:
    m = LagModel()
    m.observe_end_offset("t", 0, 100, 0)
    m.observe_commit("foreign", "t", 0, 40, 1 * S)
    m.observe_commit("sp", "t", 0, 30, 1 * S, low_watermark_ts_ms=500)
    assert m.position_timestamps() == {("sp", "t", 0): (30, 500)}
    m.observe_offset_timestamp("foreign", "t", 0, 40, 2 * S)
    assert m.position_timestamps()[("foreign", "t", 0)] == (40, 2 * S)
    m.observe_commit("foreign", "t", 0, 50, 3 * S)  # moved on: that timestamp is not its
    assert ("foreign", "t", 0) not in m.position_timestamps()


def test_low_watermark_stays_valid_while_the_offset_does_not_move() -> None:
    m = LagModel()
    m.observe_end_offset("t", 0, 100, 0)
    m.observe_commit("g", "t", 0, 40, 1 * S, low_watermark_ts_ms=0)
    m.observe_commit("g", "t", 0, 40, 5 * S)  # metadata without a low watermark
    assert lag(m, 6).time_lag_s == 6.0


def test_end_offsets_are_shared_and_old_observations_ignored() -> None:
    m = LagModel()
    m.observe_commit("a", "t", 0, 10, 0)
    m.observe_commit("b", "t", 0, 20, 0)
    m.observe_end_offset("t", 0, 50, 10 * S)
    m.observe_end_offset("t", 0, 30, 5 * S)  # older: ignored
    assert lag(m, 11, group="a").offset_lag == 40
    assert lag(m, 11, group="b").offset_lag == 30


# --- status transitions ----------------------------------------------------------------


def test_stop_when_commits_cease_with_work_pending() -> None:
    m = LagModel(NO_TREND)
    for t in range(0, 101, 10):  # commits move forward, lag stays > 0
        m.observe_end_offset("t", 0, 1000 + 10 * t, t * S)
        m.observe_commit("g", "t", 0, 10 * t, t * S, low_watermark_ts_ms=(t - 5) * S)
    for t in range(110, 400, 10):  # end offsets keep coming, commits do not
        m.observe_end_offset("t", 0, 1000 + 10 * t, t * S)
    assert status(m, 100) is LagStatus.OK
    assert status(m, 145) is LagStatus.OK  # exactly warn_after_s (45 s): not yet
    assert status(m, 145.001) is LagStatus.WARN  # the offset stands still: rule 4a
    assert status(m, 220) is LagStatus.WARN  # exactly stop_after_s: not yet STOP
    assert status(m, 220.001) is LagStatus.STOP
    m.observe_commit("g", "t", 0, 2000, 300 * S)
    assert status(m, 300) is LagStatus.OK


def test_idle_consumer_is_not_stopped_until_work_arrives() -> None:
    m = LagModel(NO_TREND)
    m.observe_commit("g", "t", 0, 100, 0)
    for t in range(0, 500, 10):  # no traffic: caught up at every poll
        m.observe_end_offset("t", 0, 100, t * S)
    assert status(m, 495) is LagStatus.OK
    for t in range(500, 700, 10):  # traffic resumes, the consumer does not commit
        m.observe_end_offset("t", 0, 100 + t, t * S)
    assert status(m, 535) is LagStatus.OK  # 45 s after the last caught-up poll (490 s)
    assert status(m, 600) is LagStatus.WARN  # rule 4a: no progress with work pending
    assert status(m, 610) is LagStatus.WARN  # 120 s after the last caught-up poll
    assert status(m, 610.001) is LagStatus.STOP


def test_stall_when_the_same_offset_is_committed_again() -> None:
    m = LagModel(NO_TREND)
    m.observe_end_offset("t", 0, 100, 0)
    for t in range(0, 61, 5):
        m.observe_commit("g", "t", 0, 40, t * S, low_watermark_ts_ms=0)
    assert status(m, 45) is LagStatus.OK  # exactly warn_after_s
    assert status(m, 60) is LagStatus.WARN  # exactly stall_after_s: rule 4a, not STALL
    assert status(m, 60.001) is LagStatus.STALL
    r = lag(m, 61)
    assert r.time_lag_s == 61.0
    m.observe_commit("g", "t", 0, 41, 65 * S)
    assert status(m, 65) is LagStatus.OK


def test_a_single_commit_then_silence_is_stop_not_stall() -> None:
    m = LagModel(NO_TREND)
    m.observe_end_offset("t", 0, 100, 0)
    m.observe_commit("g", "t", 0, 40, 0)
    assert status(m, 45) is LagStatus.OK
    assert status(m, 100) is LagStatus.WARN
    assert status(m, 121) is LagStatus.STOP


def test_a_dlq_replay_group_reads_on_demand_and_is_never_stopped() -> None:
    """`dlq replay` groups (sp-dlq-replay.STREAM, and the one streams shared before)
    read when someone replays: dead letters that came in since the last replay wait on
    purpose. They read OK however old their last commit (every stream's replay group
    read STOP minutes after its first new dead letter), per partition and aggregated;
    a rewind is still an error. Another group alike reads STOP."""
    m = LagModel(NO_TREND)
    groups = ("sp-dlq-replay.orders", "sp-dlq-replay", "g")
    m.observe_end_offset("t", 0, 100, 0)
    for g in groups:
        m.observe_commit(g, "t", 0, 40, 0)
    assert [lag(m, 1000, group=g).status for g in groups] == [
        LagStatus.OK,
        LagStatus.OK,
        LagStatus.STOP,
    ]
    statuses = {a.group: a.status for a in m.aggregate(1000 * S)}
    assert statuses == {"sp-dlq-replay.orders": LagStatus.OK, "sp-dlq-replay": LagStatus.OK,
                        "g": LagStatus.STOP}  # fmt: skip
    assert lag(m, 1000, group="sp-dlq-replay.orders").offset_lag == 60  # still shown
    m.observe_commit("sp-dlq-replay.orders", "t", 0, 10, 1001 * S)  # went backwards
    assert lag(m, 1002, group="sp-dlq-replay.orders").status is LagStatus.ERR
    # An expected partition without a commit, records pending: WARN for others only.
    m.expect("g2", "t", 1)
    m.expect("sp-dlq-replay.orders", "t", 1)
    m.observe_end_offset("t", 1, 5, 1002 * S)
    assert lag(m, 1003, group="g2", p=1).status is LagStatus.WARN
    assert lag(m, 1003, group="sp-dlq-replay.orders", p=1).status is LagStatus.OK


def test_rewind_is_an_error_for_one_window() -> None:
    m = LagModel(NO_TREND)
    m.observe_end_offset("t", 0, 10_000, 0)
    m.observe_commit("g", "t", 0, 500, 0)
    m.observe_commit("g", "t", 0, 100, 10 * S)  # offsets went backwards
    assert status(m, 11) is LagStatus.ERR
    for t in range(20, 700, 10):  # then the consumer moves forward
        m.observe_commit("g", "t", 0, 100 + t, t * S)
    assert status(m, 600) is LagStatus.ERR
    assert status(m, 610) is LagStatus.ERR
    assert status(m, 610.001) is LagStatus.OK


def test_rewind_clears_once_caught_up() -> None:
    m = LagModel(NO_TREND)
    m.observe_end_offset("t", 0, 1000, 0)
    m.observe_commit("g", "t", 0, 500, 0)
    m.observe_commit("g", "t", 0, 100, 10 * S)
    m.observe_commit("g", "t", 0, 1000, 20 * S)  # caught up
    m.observe_end_offset("t", 0, 1100, 30 * S)
    assert status(m, 31) is LagStatus.OK


def steady_producer(m: LagModel, until_s: int, rate: int = 100) -> None:
    """Record i is ingested at i / rate seconds; end offsets are polled every 10 s."""
    for t in range(0, until_s + 1, 10):
        m.observe_end_offset("t", 0, rate * t, t * S)


Committer = Callable[[int], tuple[int, int | None] | None]


def run(m: LagModel, until_s: int, commit_at: Committer) -> dict[int, PartitionLag]:
    """Every 10 s: poll the end offset of a 100 records/s stream (record i ingested at
    10 i ms), let the consumer commit, and report the partition."""
    reports = {}
    for t in range(0, until_s + 1, 10):
        m.observe_end_offset("t", 0, 100 * t, t * S)
        commit = commit_at(t)
        if commit is not None:
            offset, low_watermark = commit
            m.observe_commit("g", "t", 0, offset, t * S, low_watermark_ts_ms=low_watermark)
        if ("g", "t", 0) in m:
            reports[t] = lag(m, t)
    return reports


def half_speed(t: int) -> tuple[int, int | None] | None:
    """A consumer at half the production rate: committed = 50 t, record 0.5 t s old."""
    return (50 * t, 500 * t) if t >= 10 else None


def test_warn_when_time_lag_grows() -> None:
    reports = run(LagModel(), 400, half_speed)
    # one sample per 30 s bucket, the last of each: 20, 50, 80, 110, then 120 (open bucket)
    assert next(t for t, r in reports.items() if r.status is LagStatus.WARN) == 120
    assert all(r.status is LagStatus.WARN for t, r in reports.items() if t >= 120)
    assert reports[150].time_lag_s == 75.0


def test_no_warn_when_the_consumer_keeps_pace() -> None:
    def jittering(t: int) -> tuple[int, int | None] | None:
        behind = 3 + (t // 10) % 2  # 3 or 4 s behind
        return (100 * (t - behind), 1000 * (t - behind)) if t >= 10 else None

    reports = run(LagModel(), 400, jittering)
    assert {r.status for r in reports.values()} == {LagStatus.OK}
    assert {r.time_lag_s for r in reports.values()} == {3.0, 4.0}


def test_no_warn_when_caught_up_within_the_window() -> None:
    def caught_up_then_half_speed(t: int) -> tuple[int, int | None] | None:
        return (0, None) if t == 0 else half_speed(t)

    # The samples before the last caught-up time do not count; those after it show the
    # growth once there are warn_min_samples of them (20, 50, 80, 110, 120 s), even
    # though the partition was caught up within the window (the old rule waited for a
    # whole window behind: OK until 600 s).
    reports = run(LagModel(), 400, caught_up_then_half_speed)
    assert reports[110].status is LagStatus.OK
    assert reports[120].status is LagStatus.WARN
    assert reports[400].status is LagStatus.WARN

    # Caught up again at 130 s, then at half speed again: the older samples stop
    # counting, the trend shows again once there are 5 samples since (140 to 240 s).
    def catch_up_at_130(t: int) -> tuple[int, int | None] | None:
        if t < 130:
            return caught_up_then_half_speed(t)
        at = 13_000 + 50 * (t - 130)
        return (at, 10 * at)

    reports = run(LagModel(), 400, catch_up_at_130)
    assert reports[120].status is LagStatus.WARN
    assert [reports[t].status for t in (130, 200, 230)] == [LagStatus.OK] * 3
    assert reports[240].status is LagStatus.WARN


def test_warn_on_offset_lag_growth_without_time_lag() -> None:
    def foreign_half_speed(t: int) -> tuple[int, int | None] | None:
        return (50 * t, None) if t >= 10 else None

    reports = run(LagModel(), 400, foreign_half_speed)
    assert reports[200].time_lag_s is None
    assert reports[200].status is LagStatus.WARN
    assert reports[100].status is LagStatus.OK


def test_warn_above_an_absolute_time_lag() -> None:
    m = LagModel(LagThresholds(warn_time_lag_s=30))
    m.observe_end_offset("t", 0, 100, 0)
    m.observe_commit("g", "t", 0, 40, 25 * S, low_watermark_ts_ms=0)
    m.observe_commit("g", "t", 0, 41, 29 * S, low_watermark_ts_ms=0)
    assert status(m, 30) is LagStatus.OK
    assert status(m, 31) is LagStatus.WARN


def test_statuses_are_ordered_by_severity() -> None:
    assert LagStatus.OK < LagStatus.WARN < LagStatus.STALL < LagStatus.STOP < LagStatus.ERR


# --- aggregates ----------------------------------------------------------------------


def test_aggregates_per_group_and_topic() -> None:
    m = LagModel(NO_TREND)
    for p in range(3):
        m.observe_end_offset("t", p, 100, 0)
    m.observe_end_offset("u", 0, 100, 0)
    m.observe_commit("g", "t", 0, 100, 0)  # caught up
    m.observe_commit("g", "t", 1, 60, 0, low_watermark_ts_ms=0)  # 40 behind, stopped
    m.observe_commit("g", "t", 2, 90, 200 * S)  # 10 behind, time lag unknown
    m.observe_commit("g", "u", 0, 70, 200 * S, low_watermark_ts_ms=150 * S)
    m.observe_commit("h", "t", 0, 100, 200 * S)
    m.track("h", "t", 1)  # no commit yet: its lag is unknown (counted, not taken for 0)
    now = 200 * S
    assert m.aggregate(now) == [
        LagAggregate("g", "t", 3, 50, 200.0, LagStatus.STOP, 1),
        LagAggregate("g", "u", 1, 30, 50.0, LagStatus.OK, 0),
        LagAggregate("h", "t", 2, 0, 0.0, LagStatus.OK, 1, 1),
    ]
    assert m.aggregate(now, by_topic=False) == [
        LagAggregate("g", None, 4, 80, 200.0, LagStatus.STOP, 1),
        LagAggregate("h", None, 2, 0, 0.0, LagStatus.OK, 1, 1),
    ]


def test_aggregate_without_any_time_lag() -> None:
    m = LagModel()
    m.observe_end_offset("t", 0, 100, 0)
    m.observe_commit("g", "t", 0, 60, 0)
    assert m.aggregate(0) == [LagAggregate("g", "t", 1, 40, None, LagStatus.OK, 1)]


# --- history ---------------------------------------------------------------------------


def test_history_keeps_one_sample_per_bucket() -> None:
    m = LagModel(LagThresholds(history_interval_s=10))
    m.observe_commit("g", "t", 0, 40, 0, low_watermark_ts_ms=0)
    m.observe_end_offset("t", 0, 100, 1 * S)
    m.observe_end_offset("t", 0, 100, 5 * S)  # same bucket: replaces the sample at 1 s
    m.observe_commit("g", "t", 0, 50, 6 * S, low_watermark_ts_ms=2 * S)  # commits: no sample
    m.observe_end_offset("t", 0, 110, 12 * S)
    m.observe_end_offset("t", 0, 120, 3 * S)  # an older observation: ignored
    m.sample(8 * S)  # older than the newest sample: dropped
    m.observe_commit("g", "t", 0, 60, 20 * S)  # no low watermark for offset 60
    m.observe_end_offset("t", 0, 200, 25 * S)
    assert m.history("g", "t", 0) == [
        LagSample(5 * S, 5.0, 60),
        LagSample(12 * S, 10.0, 60),
        LagSample(25 * S, None, 140),
    ]


def test_history_is_a_bounded_ring() -> None:
    m = LagModel(LagThresholds(history_size=4, history_interval_s=1))
    for t in range(10):
        m.observe_commit("g", "t", 0, t, t * S, low_watermark_ts_ms=0)
        m.observe_end_offset("t", 0, 10_000, t * S)
    history = m.history("g", "t", 0)
    assert [s.time_ms for s in history] == [6 * S, 7 * S, 8 * S, 9 * S]
    assert [s.offset_lag for s in history] == [9994, 9993, 9992, 9991]


def test_history_saturates_huge_offset_lags() -> None:
    m = LagModel()
    m.observe_commit("g", "t", 0, 5, 0)
    m.observe_end_offset("t", 0, 2**40, 1 * S)
    assert m.history("g", "t", 0) == [LagSample(1 * S, None, 2**31 - 1)]
    assert lag(m, 1).offset_lag == 2**40 - 5  # the live figure is exact


def test_sample_adds_a_point_to_every_partition() -> None:
    m = LagModel()
    m.observe_end_offset("t", 0, 100, 0)
    m.observe_commit("g", "t", 0, 40, 0, low_watermark_ts_ms=0)
    m.track("g", "t", 1)
    m.sample(60 * S)
    m.sample(90 * S)
    assert m.history("g", "t", 0)[-2:] == [LagSample(60 * S, 60.0, 60), LagSample(90 * S, 90.0, 60)]
    assert m.history("g", "t", 1) == []


def test_forget_frees_the_history_slot() -> None:
    m = LagModel()
    m.observe_end_offset("t", 0, 100, 0)
    m.observe_commit("g", "t", 0, 40, 0)
    assert len(m) == 1 and ("g", "t", 0) in m
    assert m.forget("g", "t", 0)
    assert not m.forget("g", "t", 0)
    assert len(m) == 0
    m.track("other", "t", 0)  # reuses the slot, starts with an empty history
    assert m.history("other", "t", 0) == []
    m.observe_end_offset("t", 0, 120, 60 * S)
    assert m.history("other", "t", 0) == []  # no commit yet: nothing to plot


def test_forget_group() -> None:
    m = LagModel()
    for p in range(3):
        m.observe_commit("g", "t", p, 1, 0)
    m.observe_commit("h", "t", 0, 1, 0)
    assert m.forget_group("g") == 3
    assert [r.group for r in m.partitions(0)] == ["h"]


# --- labels and configuration -------------------------------------------------------------


def test_labels_are_carried_and_shared() -> None:
    m = LagModel()
    m.track("g", "t", 0, stream="orders", lane="main", cluster="east")
    m.track("g", "t", 1, stream="orders", lane="main", cluster="east")
    m.observe_commit("g", "t", 0, 1, 0)
    m.observe_commit("g", "t", 1, 1, 0)
    a, b = lag(m, 0, p=0), lag(m, 0, p=1)
    assert a.labels == PartitionLabels("orders", "main", "east")
    assert a.labels is b.labels
    m.track("g", "t", 1, stream="payments")
    assert lag(m, 0, p=1).labels == PartitionLabels("payments", None, None)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"window_s": -1},
        {"stop_after_s": math.nan},
        {"warn_time_lag_s": -1.0},
        {"warn_min_samples": 1},
        {"history_size": 1},
        {"history_interval_s": 0},
    ],
)
def test_bad_thresholds(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        LagThresholds(**kwargs)  # type: ignore[arg-type]


# --- properties ----------------------------------------------------------------------------

events = st.lists(
    st.one_of(
        st.tuples(st.just("commit"), st.integers(0, 3), st.integers(0, 500), st.booleans()),
        st.tuples(st.just("end"), st.integers(0, 3), st.integers(0, 500), st.booleans()),
        st.tuples(st.just("ts"), st.integers(0, 3), st.integers(0, 500), st.booleans()),
    ),
    max_size=60,
)


@given(events, st.integers(1, 20))
@settings(max_examples=150)
def test_invariants_under_random_observations(
    evs: list[tuple[str, int, int, bool]], step_s: int
) -> None:
    m = LagModel(LagThresholds(history_size=5, history_interval_s=5))
    now = 0
    for kind, p, offset, flag in evs:
        now += step_s * S
        if kind == "commit":
            m.observe_commit("g", "t", p, offset, now, now - offset * 10 if flag else None)
        elif kind == "end":
            m.observe_end_offset("t", p, offset, now)
        else:
            m.observe_offset_timestamp("g", "t", p, offset, now - 1)
        for r in m.partitions(now):
            assert r.offset_lag is None or r.offset_lag >= 0
            assert r.time_lag_s is None or r.time_lag_s >= 0
            if r.offset_lag == 0:
                assert r.time_lag_s == 0.0 and r.status is LagStatus.OK
            history = m.history(r.group, r.topic, r.partition)
            assert len(history) <= 5
            times = [s.time_ms for s in history]
            assert times == sorted(times)
    for a in m.aggregate(now):
        assert a.offset_lag >= 0


# --- interpolation baseline ---------------------------------------------------------------


def table(*points: tuple[int, int], limit: int = 60) -> EndOffsetTable:
    t = EndOffsetTable(limit)
    for offset, time_ms in points:
        t.add(offset, time_ms)
    return t


def test_table_drops_out_of_order_and_decreasing_points() -> None:
    t = table((100, 1000), (200, 2000), (300, 2000), (150, 3000), (250, 4000))
    assert t.points() == [(100, 1000), (200, 2000), (250, 4000)]


def test_table_compresses_flat_lines() -> None:
    t = table((100, 1000), (200, 2000), (200, 3000), (200, 4000), (200, 5000), (300, 6000))
    assert t.points() == [(100, 1000), (200, 2000), (200, 5000), (300, 6000)]


def test_table_is_a_sliding_window() -> None:
    t = table(*((10 * i, 1000 * i) for i in range(10)), limit=3)
    assert t.points() == [(70, 7000), (80, 8000), (90, 9000)]
    assert len(t) == 3
    with pytest.raises(ConfigError):
        EndOffsetTable(1)
    with pytest.raises(ConfigError):
        LagModel(interpolation_points=1)


@pytest.mark.parametrize(
    ("points", "committed", "expected"),
    [
        ([], 5, LagEstimate(LagEstimateKind.TOO_FEW_POINTS, None)),
        ([(100, 1000)], 50, LagEstimate(LagEstimateKind.TOO_FEW_POINTS, None)),
        ([(100, 1000)], 100, LagEstimate(LagEstimateKind.CAUGHT_UP, None)),
        ([(100, 1000), (200, 2000)], 250, LagEstimate(LagEstimateKind.CAUGHT_UP, None)),
        ([(100, 1000), (200, 2000)], 150, LagEstimate(LagEstimateKind.INTERPOLATED, 1500.0)),
        ([(100, 1000), (200, 2000)], 100, LagEstimate(LagEstimateKind.INTERPOLATED, 1000.0)),
        # before the table: extrapolate along oldest -> newest
        (
            [(100, 1000), (200, 2000), (400, 3000)],
            0,
            LagEstimate(LagEstimateKind.EXTRAPOLATED, 3000 - 400 * 2000 / 300),
        ),
        # on a plateau: the last time the end offset was still there
        (
            [(100, 1000), (200, 2000), (200, 5000), (300, 6000)],
            200,
            LagEstimate(LagEstimateKind.INTERPOLATED, 5000.0),
        ),
        # all flat and the committed offset below it: only a lower bound
        ([(100, 1000), (100, 9000), (200, 9500)], 50, None),
        ([(100, 1000), (100, 9000)], 50, LagEstimate(LagEstimateKind.LOWER_BOUND, 1000.0)),
    ],
)
def test_table_lookup(
    points: list[tuple[int, int]], committed: int, expected: LagEstimate | None
) -> None:
    result = table(*points).lookup(committed)
    if expected is None:
        assert result.kind is LagEstimateKind.EXTRAPOLATED
    else:
        assert result == expected


def test_estimate_to_time_lag() -> None:
    assert LagEstimate(LagEstimateKind.CAUGHT_UP, None).time_lag_s(5000) == 0.0
    assert LagEstimate(LagEstimateKind.TOO_FEW_POINTS, None).time_lag_s(5000) is None
    assert LagEstimate(LagEstimateKind.INTERPOLATED, 1500.0).time_lag_s(5000) == 3.5
    assert LagEstimate(LagEstimateKind.EXTRAPOLATED, 9000.0).time_lag_s(5000) == 0.0


def test_interpolated_lag_per_partition() -> None:
    baseline = InterpolatedLag(limit=10)
    assert baseline.time_lag_s("t", 0, 5, 1000) is None
    baseline.observe_end_offset("t", 0, 100, 1000)
    baseline.observe_end_offset("t", 0, 200, 2000)
    assert baseline.time_lag_s("t", 0, 150, 4000) == 2.5
    table_ = baseline.table("t", 0)
    assert table_ is not None and len(table_) == 2
    assert baseline.table("t", 1) is None


def test_exact_and_interpolated_agree_on_a_steady_stream() -> None:
    m = LagModel(interpolation_points=60)
    steady_producer(m, 300)  # 100 records/s, record i ingested at 10 i ms
    m.observe_commit("g", "t", 0, 12_345, 300 * S, low_watermark_ts_ms=12_345 * 10)
    r = lag(m, 300)
    assert r.time_lag_s is not None and r.estimated_time_lag_s is not None
    assert r.time_lag_s == pytest.approx(176.55)
    assert abs(r.estimated_time_lag_s - r.time_lag_s) <= 0.01  # one inter-arrival gap


def test_interpolation_misses_bursts_that_the_exact_method_sees() -> None:
    m = LagModel(interpolation_points=60)
    # 1,000 records at 0-1 s, then silence; end offsets polled from 10 s on
    for t in range(10, 101, 10):
        m.observe_end_offset("t", 0, 1000, t * S)
    m.observe_commit("g", "t", 0, 500, 100 * S, low_watermark_ts_ms=500)
    r = lag(m, 100)
    assert r.time_lag_s == 99.5
    assert r.estimated_time_lag_s == 90.0  # a lower bound: the table starts at 10 s


@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(1, 5000)), min_size=2, max_size=40),
    st.integers(0, 3000),
    st.integers(0, 3000),
)
def test_estimated_time_is_monotonic_in_the_offset(
    steps: list[tuple[int, int]], c1: int, c2: int
) -> None:
    t = EndOffsetTable(20)
    offset = time_ms = 0
    for d_offset, d_time in steps:
        offset += d_offset
        time_ms += d_time
        t.add(offset, time_ms)
    lo, hi = sorted((c1, c2))
    a, b = t.lookup(lo), t.lookup(hi)
    if a.time_ms is not None and b.time_ms is not None and a.kind == b.kind:
        assert a.time_ms <= b.time_ms + 1e-6


def test_warn_when_the_lag_rises_after_a_dip() -> None:
    """A lag that dipped by 0.35 s once, then rose from 15 s to 40 s: Burrow's "never
    decreased" kept it OK for the whole window (a user's group; its realtime sibling at
    24 s was WARN). The newer half of the samples is above the older half: WARN."""

    def dip_then_slow(t: int) -> tuple[int, int | None] | None:
        if t < 20:
            return None
        # 15 s behind, 14.65 s once (the history's sample at 80 s, taken before the
        # commit at 80 s, sees the one at 70 s: 0.35 s below the sample at 50 s), then
        # half speed: behind by 15 + (t - 70) / 2
        behind = 15.0 + (t - 70) / 2 if t > 70 else (14.65 if t == 70 else 15.0)
        at = t - behind
        return (int(100 * at), int(1000 * at))

    reports = run(LagModel(), 400, dip_then_slow)
    assert reports[70].time_lag_s == pytest.approx(14.65)
    assert reports[400].time_lag_s == pytest.approx(180.0)
    assert reports[400].status is LagStatus.WARN


def test_no_warn_on_a_sawtooth_that_does_not_rise() -> None:
    def sawtooth(t: int) -> tuple[int, int | None] | None:
        behind = 5 + (t % 60) / 3  # commits lag 5 to 25 s, over and over
        return (int(100 * (t - behind)), int(1000 * (t - behind))) if t >= 30 else None

    reports = run(LagModel(), 700, sawtooth)
    assert {r.status for t, r in reports.items() if t >= 100} == {LagStatus.OK}
