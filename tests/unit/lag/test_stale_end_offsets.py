"""Partitions whose end offsets cannot be read for a while (a broker down, a leader moving).

Found in an exploratory run: one broker of three killed, a topic of replication factor
3. librdkafka answered ListOffsets for the partitions led by the dead broker with offset
-1001 (no error) at the request timeout; the monitor took that for an end offset, the
partitions turned unknown, and a dead group's total offset lag fell by a third (the sum
over the partitions still known), looking like a recovery. Now an invalid answer keeps
the last known end, partitions left unanswered are flagged stale (with the age of their
end), totals include them and say how many, the trend rule does not read a lag measured
against a frozen end as coming down, and the history keeps one sample per bucket however
long a poll takes.

The worker tests drive ``ClusterWorker._poll_once`` with a stub ``LogEnds`` that speaks
both the batched ``fetch`` the poller used before and ``fetch_pass``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from streamplane.cli.lag import render
from streamplane.controlplane.lag_api import GroupLagOut, PartitionLagOut
from streamplane.core.lag import LagModel, LagStatus, LagThresholds
from streamplane.lag import monitor as monitor_module
from streamplane.lag.monitor import ClusterWorker, LabelledLag, MonitorSettings, summarize
from streamplane.lag.reader import CommitEvent, CommitState
from tests.unit.lag.stubs import INVALID, T0_S, Clock, NoLookup, StubEnds

S = 1000
TOPIC = "orders"


def _worker(clock: Clock, settings: MonitorSettings | None = None) -> ClusterWorker:
    return ClusterWorker(
        "local-a", "127.0.0.1:1", settings or MonitorSettings(), clock, lambda c, t: None
    )


def _commit(w: ClusterWorker, group: str, partition: int, offset: int, at_s: float) -> None:
    """A foreign group's commit (no timestamp in its metadata)."""
    state = CommitState(offset, int(at_s * S), None, False)
    w._apply([CommitEvent((group, TOPIC, partition), state)])


def _summary(w: ClusterWorker, group: str, now_s: float) -> Any:
    parts = [LabelledLag(w.name, p) for p in w.partitions(int(now_s * S)) if p.group == group]
    return summarize(group, parts)


# ---------------------------------------------------------------------- the model


def test_an_invalid_end_offset_answer_keeps_the_last_known_end() -> None:
    m = LagModel()
    m.observe_commit("g", TOPIC, 0, 100, 0)
    m.observe_end_offset(TOPIC, 0, 1_150, 1 * S)
    m.observe_end_offset(TOPIC, 0, INVALID, 2 * S)  # the leader did not answer
    m.observe_end_offset(TOPIC, 0, -1, 3 * S)
    lag = m.partition("g", TOPIC, 0, 4 * S)
    assert lag is not None
    assert (lag.end_offset, lag.offset_lag) == (1_150, 1_050)
    (agg,) = m.aggregate(4 * S, by_topic=False)
    assert (agg.offset_lag, agg.unknown_offset_lag) == (1_050, 0)


def test_a_stale_end_is_reported_with_its_age_until_it_is_read_again() -> None:
    m = LagModel()
    for p in range(3):
        m.observe_commit("g", TOPIC, p, 100, 0)
        m.observe_end_offset(TOPIC, p, 1_150, 1 * S)
    m.mark_stale([(TOPIC, 1), (TOPIC, 2), ("never-seen", 0)])
    lag = m.partition("g", TOPIC, 1, 13 * S)
    assert lag is not None and lag.end_offset_stale and lag.end_offset_age_s == 12.0
    fresh = m.partition("g", TOPIC, 0, 13 * S)
    assert fresh is not None and not fresh.end_offset_stale
    (agg,) = m.aggregate(13 * S, by_topic=False)
    assert (agg.offset_lag, agg.stale_end_offsets, agg.unknown_offset_lag) == (3 * 1_050, 2, 0)
    m.observe_end_offset(TOPIC, 1, 1_200, 14 * S)
    again = m.partition("g", TOPIC, 1, 14 * S)
    assert again is not None and not again.end_offset_stale and again.offset_lag == 1_100
    assert m.aggregate(14 * S, by_topic=False)[0].stale_end_offsets == 1


def test_fill_history_adds_one_sample_per_bucket_to_partitions_without_one() -> None:
    m = LagModel(LagThresholds(history_size=20, history_interval_s=5.0))
    for p in range(2):
        m.observe_commit("g", TOPIC, p, 100, 0)
        m.observe_end_offset(TOPIC, p, 200, 1 * S)
    assert m.fill_history(2 * S) == 0  # both sampled in this bucket already
    m.observe_end_offset(TOPIC, 0, 300, 6 * S)  # partition 1 unanswered from now on
    m.mark_stale([(TOPIC, 1)])
    assert m.fill_history(9 * S) == 1
    assert m.fill_history(9_500) == 0
    samples = m.history("g", TOPIC, 1)
    assert [(s.time_ms, s.offset_lag, s.stale) for s in samples] == [
        (1 * S, 100, False),
        (9 * S, 100, True),
    ]


# ---------------------------------------------------------------------- the worker


def test_a_dead_groups_total_does_not_fall_when_partitions_go_unanswered() -> None:
    """Six partitions, two led by a broker that dies: the group's total stays, the two
    are stale (and say how old their ends are), the CLI and the API say so."""
    clock = Clock()
    w = _worker(clock)
    ends = StubEnds({(TOPIC, p): 1_150 for p in range(6)})
    for p in range(6):
        _commit(w, "dead", p, 257, T0_S - 60)
    w._poll_once(ends, NoLookup())  # type: ignore[arg-type]
    before = _summary(w, "dead", clock.now)
    assert (before.offset_lag, before.unknown_offset_lag) == (6 * 893, 0)

    ends.dead = {(TOPIC, 2), (TOPIC, 3)}
    clock.now += 6
    w._poll_once(ends, NoLookup())  # type: ignore[arg-type]
    after = _summary(w, "dead", clock.now)
    assert (after.offset_lag, after.unknown_offset_lag) == (6 * 893, 0)  # not 4 * 893
    assert (after.stale_end_offsets, after.stale_end_offset_age_s) == (2, 6.0)
    parts = {p.partition: p for p in w.partitions(int(clock.now * S))}
    assert parts[2].end_offset == 1_150 and parts[2].end_offset_stale
    assert not parts[0].end_offset_stale
    assert w.end_offsets_error == (
        "end offsets of 2 of 6 partitions unanswered (no answer from broker 2 within 2s)"
    )

    labelled = [LabelledLag("local-a", parts[p]) for p in range(6)]
    groups = [GroupLagOut.of(after).model_dump()]
    partitions = [PartitionLagOut.of(p).model_dump() for p in labelled]
    doc = {"monitor": True, "groups": groups, "partitions": partitions}
    assert groups[0]["stale_end_offsets"] == 2
    assert partitions[2]["end_offset_stale"] is True
    assert partitions[2]["end_offset_age_s"] == 6.0
    out = render(doc, "dead")
    assert "1150 (stale 6.0s)" in out
    assert "group dead: offset lag 5358 (2 stale)" in out
    assert "2 partitions stale: end offset not read at the last poll, up to 6.0s old" in out
    assert "5358 (2 stale)" in render(doc, None)


def test_a_growing_lag_measured_against_a_frozen_end_does_not_read_as_recovery() -> None:
    """A foreign group (no timestamps: the trend rule runs on the offset lag) falls
    behind: WARN. Then its partition's end cannot be read while the group keeps
    committing: against the frozen end its offset lag comes down, which the trend rule
    used to take for a recovery (OK). The records written meanwhile are not seen: that
    is no evidence of coming down, and the partition stays WARN."""
    clock = Clock()
    w = _worker(clock)  # the monitor's defaults: a history sample every 5 s
    tp = (TOPIC, 0)
    ends = StubEnds({tp: 1_000})

    def step(k: int) -> LagStatus:
        clock.now = T0_S + 5 * k
        ends.ends[tp] = 1_000 + 100 * k  # written; read unless the leader is dead
        _commit(w, "slow", 0, 100 + 20 * k, clock.now - 0.5)  # it reads 20 per step
        w._poll_once(ends, NoLookup())  # type: ignore[arg-type]
        now_ms = int(clock.now * S)
        with w.lock:
            w.model.sample(now_ms)  # the history's cadence, whatever the polls do
        (lag,) = w.partitions(now_ms)
        return lag.status

    statuses = [step(k) for k in range(12)]
    assert statuses[-1] is LagStatus.WARN  # behind and falling further behind
    ends.dead = {tp}
    unreadable = [step(k) for k in range(12, 30)]
    assert unreadable == [LagStatus.WARN] * len(unreadable)
    (lag,) = w.partitions(int(clock.now * S))
    assert lag.end_offset == 1_000 + 100 * 11 and lag.offset_lag == 2_100 - (100 + 20 * 29)


def test_the_history_keeps_its_cadence_while_polls_are_slow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each poll takes 2.5 history buckets (a broker timing out): every partition still
    gets a sample in every bucket. Samples used to come only with the polls' answers,
    one every few buckets."""
    bucket_s = 0.6
    slow = StubEnds({(TOPIC, p): 1_150 for p in range(3)}, delay_s=2.5 * bucket_s)
    slow.dead = {(TOPIC, 2)}
    monkeypatch.setattr(monitor_module, "LogEnds", lambda *a, **k: slow)
    monkeypatch.setattr(monitor_module, "TimestampLookup", lambda *a, **k: NoLookup())
    settings = MonitorSettings(
        end_offset_interval_s=0.05,
        thresholds=LagThresholds(history_size=60, history_interval_s=bucket_s),
    )
    w = _worker(time.time, settings)  # type: ignore[arg-type]
    for p in range(3):
        _commit(w, "g", p, 257, time.time() - 60)
    with w.lock:  # known before the broker died
        for p in range(3):
            w.model.observe_end_offset(TOPIC, p, 1_150, int(time.time() * S))
    # The poller and (if there is one) the sampler, without a reader: no cluster here.
    threads = [t for t in w._threads if not t.name.startswith("lag-reader")]
    w._ready.set()
    for t in threads:
        t.start()
    try:
        start = time.time()
        time.sleep(10 * bucket_s)
        end = time.time()
    finally:
        w._stop.set()
        w._lookup_due.set()
        for t in threads:
            t.join(5)
    bucket_ms = int(bucket_s * S)
    first, last = int(start * S) // bucket_ms + 1, int(end * S) // bucket_ms - 1
    wanted = set(range(first, last))
    assert len(wanted) >= 6
    for p in range(3):
        buckets = {s.time_ms // bucket_ms for s in w.model.history("g", TOPIC, p)}
        assert wanted <= buckets, (p, sorted(wanted - buckets))


def test_unanswered_samples_do_not_wait_for_the_poller() -> None:
    """The sampler runs on its own: a poll that never returns (a hung request) does not
    stop the history."""
    clock = Clock()
    settings = MonitorSettings(thresholds=LagThresholds(history_size=20, history_interval_s=0.2))
    w = _worker(clock, settings)
    _commit(w, "g", 0, 5, T0_S - 1)
    with w.lock:
        w.model.observe_end_offset(TOPIC, 0, 10, int(T0_S * S))
    sampler = [t for t in w._threads if t.name.startswith("lag-sampler")]
    assert sampler, "no history sampler thread"
    sampler[0].start()
    try:
        clock.now = T0_S + 1.0
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if w.model.history("g", TOPIC, 0)[-1].time_ms == int((T0_S + 1.0) * S):
                break
            time.sleep(0.02)
        assert w.model.history("g", TOPIC, 0)[-1].time_ms == int((T0_S + 1.0) * S)
    finally:
        w._stop.set()
        sampler[0].join(5)
