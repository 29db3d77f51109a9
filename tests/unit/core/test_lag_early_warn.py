"""Lag status: WARN before STOP when a group dies (rule 4a), the trend rule reachable with
the default history (rule 4c), no WARN -> OK while the lag grows without progress, and no
false positives on healthy groups (a commit every second, a sawtooth lag of a few
seconds; a consumer behind but catching up)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from streamplane.core.lag import LagModel, LagStatus, LagThresholds

S = 1000
MONITOR = LagThresholds(history_size=120, history_interval_s=5.0)  # as lag.monitor uses
THRESHOLDS = [pytest.param(LagThresholds(), id="defaults"), pytest.param(MONITOR, id="monitor")]

# position(t) -> committed offset at t s (None: no commit); records are produced at
# 100/s from 0 s, record i ingested at 10 i ms, end offsets polled every second.
Position = Callable[[int], int | None]


def simulate(th: LagThresholds, until_s: int, position: Position) -> dict[int, LagStatus]:
    m = LagModel(th)
    statuses = {}
    for t in range(until_s + 1):
        offset = position(t)
        if offset is not None:
            m.observe_commit("g", "t", 0, offset, t * S, low_watermark_ts_ms=offset * 10)
        m.observe_end_offset("t", 0, 100 * t, t * S)
        r = m.partition("g", "t", 0, t * S)
        if r is not None:
            statuses[t] = r.status
    return statuses


@pytest.mark.parametrize("th", THRESHOLDS)
def test_a_dead_group_warns_before_it_stops(th: LagThresholds) -> None:
    """All members die at 300 s (caught up to the last second until then): WARN once the
    offset has not moved for warn_after_s (45 s), STOP at stop_after_s (120 s), never OK
    in between. It used to read OK up to 118 s of time lag, then STOP."""
    statuses = simulate(th, 500, lambda t: 100 * (t - 1) if 1 <= t <= 300 else None)
    assert {statuses[t] for t in range(1, 346)} == {LagStatus.OK}
    assert {statuses[t] for t in range(346, 421)} == {LagStatus.WARN}
    assert {statuses[t] for t in range(421, 501)} == {LagStatus.STOP}


@pytest.mark.parametrize("th", THRESHOLDS)
def test_a_group_falling_behind_steadily_warns(th: LagThresholds) -> None:
    """Caught up at 0 s, then committing every second at 90% of the production rate: the
    time lag grows by 0.1 s a second (24 s at 240 s). It read OK for the whole 10 minutes
    the old trend rule needed the partition to have been behind."""
    statuses = simulate(th, 240, lambda t: 90 * t)
    assert statuses[0] is LagStatus.OK
    first_warn = min(t for t, s in statuses.items() if s is LagStatus.WARN)
    assert first_warn <= 180  # 5 samples since caught up and 10 s of growth
    assert {statuses[t] for t in range(first_warn, 241)} == {LagStatus.WARN}


@pytest.mark.parametrize("th", THRESHOLDS)
def test_a_healthy_group_with_a_sawtooth_lag_stays_ok(th: LagThresholds) -> None:
    """A commit every second, the consumer 0.5 to 4 s behind (a sawtooth over 7 s, never
    caught up for minutes), for 30 minutes: OK throughout."""

    def sawtooth(t: int) -> int:
        behind = 0.5 + (t % 7) / 2  # 0.5 .. 3.5 s
        return max(0, int(100 * (t - behind)))

    statuses = simulate(th, 1800, sawtooth)
    assert set(statuses.values()) == {LagStatus.OK}


@pytest.mark.parametrize("th", THRESHOLDS)
def test_a_consumer_behind_but_catching_up_stays_ok(th: LagThresholds) -> None:
    """Restarted 300 s behind, reading at twice the production rate and committing every
    second: the lag shrinks until it is caught up (at 600 s). OK throughout."""

    def catching_up(t: int) -> int | None:
        if t <= 300:
            return 0 if t == 0 else None  # committed 0 at 0 s, then down until 300 s
        return min(100 * t, 200 * (t - 300))

    statuses = simulate(th, 700, catching_up)
    assert statuses[300] is LagStatus.STOP  # down for 300 s with work pending
    # The time lag rose for 300 s: WARN until it is warn_min_growth_s (10 s) below its
    # peak, then OK while it comes down.
    assert {statuses[t] for t in range(301, 311)} <= {LagStatus.WARN, LagStatus.OK}
    assert {statuses[t] for t in range(311, 701)} == {LagStatus.OK}


@pytest.mark.parametrize("th", THRESHOLDS)
def test_a_consumer_behind_and_slowly_catching_up_stays_ok(th: LagThresholds) -> None:
    """Found 200 s behind, reading 5% faster than the production rate and committing every
    second: the lag shrinks by 0.05 s a second, for 30 minutes. OK throughout."""
    statuses = simulate(th, 1800, lambda t: int(100 * (t - 200 + 0.05 * t)) if t >= 200 else None)
    assert {statuses[t] for t in range(200, 1801)} == {LagStatus.OK}


def test_no_flip_to_ok_while_the_lag_grows_without_progress() -> None:
    """A consumer falling behind with a bump (time lag 10 .. 19 s, 23 s, 20 s, then 21 ..
    27 s, a commit every 5 s) dies: the trend rule said WARN, and as new samples came in
    the halves' boundary moved past the bump (23 s in the older half, 20 s in the newer):
    OK 15 s after the last commit while the lag kept growing (as a dead partition went
    WARN -> OK at 583 s in an exploratory run). Samples taken after the offset last moved
    now count as one, and rule 4a takes over after 45 s: WARN until STOP."""
    lags: list[int] = [*range(10, 20), 23, 20, *range(21, 28)]  # at 20, 25, .., 110 s

    def bumpy_then_dead(t: int) -> int | None:
        k, r = (t - 20) // 5, (t - 20) % 5
        if t < 20 or r or k >= len(lags):
            return None
        return 100 * (t - lags[k])

    statuses = simulate(MONITOR, 300, bumpy_then_dead)
    last_commit = 20 + 5 * (len(lags) - 1)
    assert statuses[last_commit] is LagStatus.WARN  # the trend rule
    assert {statuses[t] for t in range(last_commit, last_commit + 121)} == {LagStatus.WARN}
    assert statuses[last_commit + 121] is LagStatus.STOP


def test_warn_after_can_be_turned_off() -> None:
    th = LagThresholds(warn_after_s=None, warn_min_samples=1000)
    statuses = simulate(th, 500, lambda t: 100 * (t - 1) if 1 <= t <= 300 else None)
    assert {statuses[t] for t in range(1, 421)} == {LagStatus.OK}
    assert statuses[421] is LagStatus.STOP


@pytest.mark.parametrize("th", THRESHOLDS)
@pytest.mark.parametrize("behind_s", [1, 5])
def test_a_consumer_committing_every_minute_warns_only_when_it_dies(
    th: LagThresholds, behind_s: int
) -> None:
    """A checkpoint-driven consumer commits every 60 s what it read up to behind_s before:
    between two commits its offset stands still for 60 s with work pending. It read WARN
    for the last 15 s of every minute (warn_after_s, 45 s); rule 4a now waits 1.5 times
    the commit interval (90 s), known from the second commit on. When it dies (last
    commit at 1,200 s): WARN from 90 s, STOP from 120 s."""

    def every_minute(t: int) -> int | None:
        return 100 * (t - behind_s) if t % 60 == 0 and 60 <= t <= 1200 else None

    statuses = simulate(th, 1500, every_minute)
    assert {statuses[t] for t in range(120, 1291)} == {LagStatus.OK}
    assert {statuses[t] for t in range(1291, 1321)} == {LagStatus.WARN}
    assert {statuses[t] for t in range(1321, 1501)} == {LagStatus.STOP}


def test_one_long_gap_does_not_stretch_the_commit_interval() -> None:
    """A group committing every second was down for 100 s once: its interval stays 1 s
    (the shorter of the last two gaps), so when it dies later it warns at 45 s again."""

    def with_an_outage(t: int) -> int | None:
        if 200 <= t < 300 or t > 400:
            return None
        return 100 * (t - 1)

    statuses = simulate(MONITOR, 600, with_an_outage)
    assert statuses[446] is LagStatus.WARN
    assert statuses[445] is LagStatus.OK


def test_an_offset_lag_coming_down_from_its_peak_is_ok() -> None:
    """A foreign group (no time lag): stopped for 200 s while 100 records/s arrived
    (offset lag up to 20,000), then reading 300/s (down 200/s), a commit every second.
    Rule 4c used to hold WARN while the newer half of the samples stayed above the older
    one (~20 s into the decline) although the lag was already coming down."""
    m = LagModel(MONITOR)
    statuses = {}
    for t in range(0, 321):
        if t <= 100:
            offset: int | None = 100 * t
        elif t < 300:
            offset = 10_000 if t % 5 == 0 else None  # commits the same offset, no progress
        else:
            offset = min(100 * t, 10_000 + 300 * (t - 300))
        if offset is not None:
            m.observe_commit("g", "t", 0, offset, t * S)
        m.observe_end_offset("t", 0, 100 * t, t * S)
        r = m.partition("g", "t", 0, t * S)
        assert r is not None and (r.offset_lag == 0 or r.time_lag_s is None)
        statuses[t] = r.status
    assert statuses[299] is not LagStatus.OK  # stuck with 19,900 pending
    # 10% below its peak (~20,000) after 10 s of 200/s: OK from then on
    assert {statuses[t] for t in range(312, 321)} == {LagStatus.OK}


@pytest.mark.parametrize("th", THRESHOLDS)
def test_a_job_committing_once_per_long_batch_stops_only_when_it_dies(
    th: LagThresholds,
) -> None:
    """A Spark job commits once per micro-batch, and its batches take 140 s: it read STOP
    from 120 s into every batch (an exploratory run), like a dead job. STOP now waits
    twice the commit interval (280 s) and WARN 1.5 times it (210 s), known from the
    second commit on. Dead after its commit at 1,400 s: WARN from 1,610 s, STOP from
    1,680 s."""

    def every_140_s(t: int) -> int | None:
        return 100 * (t - 140) if t % 140 == 0 and 140 <= t <= 1400 else None

    statuses = simulate(th, 1800, every_140_s)
    assert statuses[261] is LagStatus.STOP  # the first batch: no interval known yet
    assert {statuses[t] for t in range(280, 1611)} == {LagStatus.OK}
    assert {statuses[t] for t in range(1611, 1681)} == {LagStatus.WARN}
    assert {statuses[t] for t in range(1681, 1801)} == {LagStatus.STOP}
