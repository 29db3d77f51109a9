"""The lag model: offset lag, time lag in seconds and a Burrow-style status, per partition.

Pure and clock-free: every observation and every query carries its time (``*_ms``,
milliseconds since the epoch), so the model is replayable and testable. One model
covers one Kafka cluster (a key is (group, topic, partition); the ``cluster`` label is
carried for display only).

Inputs
------
- ``observe_commit(group, topic, partition, offset, commit_ms, low_watermark_ts_ms)``:
  a committed offset read from ``__consumer_offsets``, its commit time, and, for
  streamplane groups, the ingestion timestamp of the record at the committed offset
  (the low watermark: the first unsettled record), taken from the commit metadata.
  Foreign groups pass None.
- ``observe_end_offset(topic, partition, end_offset, observed_ms)``: the log-end offset,
  polled. Shared by every group reading that partition. A negative answer (librdkafka
  answers -1001 for a partition whose leader did not reply in time) is no end offset and
  is ignored: the last known one stands.
- ``mark_stale(topic_partitions)``: the end offsets of these partitions could not be
  read this pass. They keep their last known end, flagged *stale* (``end_offset_stale``
  and ``end_offset_age_s`` in the reports, ``stale_end_offsets`` in the aggregates) until
  the next answer. An end restored from a snapshot (``restore_log_end``) is stale too.
- ``observe_offset_timestamp(group, topic, partition, offset, timestamp_ms)``: for
  foreign groups, the timestamp of the record at ``offset`` (ListOffsets / a fetch);
  ``timestamp_lookups()`` lists the partitions that need one.
- ``expect(group, topic, partition)``: a partition the group reads but has never
  committed on (a streamplane consumer starts those at the log start). Until its first
  commit it counts from the log start offset, ``observe_log_start(topic, partition,
  start)`` (polled, shared like the end offset): its *position* is the log
  start, and its timestamp is looked up like a foreign group's (``timestamp_lookups``).
  A partition tracked with ``track()`` only and no commit stays unknown.

Per-partition figures, at time ``now``
---------------------------------------
The *position* is the committed offset, or for an expected partition without a commit
the log start offset (reported with ``committed_offset`` None).

- offset lag ``= max(0, end - position)``; unknown (None) before the first commit (the
  first log-start observation of an expected partition) or the first end-offset
  observation.
- time lag ``= 0`` when caught up (``position >= end``: an empty expected partition);
  otherwise ``max(0, now - ts) / 1000`` where ``ts`` is the ingestion timestamp of the
  record at the position (from a commit's low watermark, or a timestamp lookup *for that
  same offset*: a record's timestamp never changes, so a lookup stays valid until the
  position moves); otherwise unknown (None).
- ``caught_up_ms``: the last time the partition was seen caught up (at a commit or an
  end-offset observation). It plays the part of Burrow's rule 1 ("lag was zero at some
  point of the window -> OK"): nothing below can fire on account of times before it. A
  commit reaching a *stale* end does not count: records may have been written since.
- A stale end offset still counts: the offset lag is taken from the last known end (a
  lower bound of the real lag), so a group's total does not fall because some of its
  partitions could not be read; the aggregate says how many such partitions it holds.

Status rules (thresholds in ``LagThresholds``; first match wins)
----------------------------------------------------------------
Burrow's evaluator (linkedin/Burrow ``core/internal/evaluator/caching.go``) is the
baseline. It looks at the last 10 commits of a partition and, if the current lag is > 0
and was never 0 in those commits, returns REWIND if an offset went backwards, STOP if
``now - last_commit > last_commit - first_commit``, STALL if all offsets are equal, WARN
if the lag never decreased, else OK. Here the same questions are asked in seconds:

0. ``OK`` when the offset lag is 0 or unknown (no commit, no end offset): nothing is
   pending, or nothing can be said -- except an expected partition without a commit
   whose log start is unknown while its end offset is known and above 0 (its cluster
   went down before its log start was polled): ``WARN``, records may be pending and how
   many is unknown.
1. ``ERR`` (Burrow's REWIND) when the committed offset went backwards within the last
   ``window_s`` and the partition has not been caught up since.
2. ``STOP`` when no commit arrived for ``stop_after_s``, or for twice the partition's
   commit interval (rule 4a) if that is longer, while work was pending:
   ``now - max(last_commit, caught_up) > max(stop_after_s, 2 * interval)``. Burrow's
   rule is relative to the commit cadence only; an absolute floor fits groups that
   commit only when they make progress (librdkafka) and is what an alert wants, and the
   cadence keeps a job that commits once per long batch (a Spark micro-batch of 140 s)
   from reading STOP in the middle of every batch. An expected partition never
   committed on has had work pending since its first record was ingested: it stops when
   its time lag (if known) exceeds ``stop_after_s`` since it was last caught up.
3. ``STALL`` when commits still arrive but the offset does not move: a commit was seen
   after the offset last changed, and
   ``now - max(offset_changed, caught_up) > stall_after_s``.
4. ``WARN`` (first match of a, b, c):

   a. the offset has not moved for ``warn_after_s`` (default 45 s, None: off), or for
      1.5 times the partition's commit interval if that is longer, while work was
      pending: ``now - max(offset_changed, caught_up) > max(warn_after_s, 1.5 *
      interval)`` (for an expected partition never committed on, its time lag since it
      was last caught up, as in rule 2). The interval is the shorter of the last two gaps
      between commits (one outage does not stretch it; unknown before the second commit).
      The early sign of a STOP or a STALL: a group whose members all died reads WARN
      from 45 s, STOP from 120 s. A consumer that commits every 60 s (a checkpoint
      cadence) reads OK between its commits and WARN 90 s after its last one.
   b. the time lag exceeds ``warn_time_lag_s`` (if set).
   c. the time lag grew: over the history samples taken in the last ``window_s`` *since
      the partition was last caught up* (``caught_up``; the samples before it do not
      count, Burrow's rule 1), there are at least ``warn_min_samples`` of them (with the
      default history, 5 samples of 30 s: about 2 minutes behind; the monitor's 5 s
      samples: about 25 s), every sample of the newer half is at or above every sample
      of the older half, the lag grew by at least ``growth`` from the oldest sample to
      the newest, and the newest is less than ``growth`` below the highest (a lag that
      came down by more than that is being caught up: a consumer restarted after a STOP
      that reads faster than the production rate turns OK within ``growth`` of
      progress). ``growth`` is ``warn_min_growth_s`` (10 s), or the commit interval of
      rule a if that is longer: between two commits the time lag rises by the interval.
      The samples taken after the offset last moved count as one, the newest (they only
      repeat that the offset stands still, and the lag can only grow): a verdict of
      growth holds until the offset moves again, rule a takes over after ``warn_after_s``
      and STOP after ``stop_after_s``, so a partition whose lag keeps growing without
      progress does not go back to OK (unless, within ``warn_after_s`` of its last move,
      its oldest samples leave a full history). (Burrow's "never decreased" let one dip
      of a third of a second keep a lag that then rose from 15 s to 40 s at OK for the
      whole window; a commit cadence's sawtooth is tolerated as long as the rise
      outgrows it.) When a sample in the window has no time lag
      (foreign group without a timestamp lookup), the halves and growth tests are
      applied to the offset lag, and "coming down" means by a tenth of its highest or
      more (records have no unit of time to set a margin in). Samples taken while the
      end offset was stale are left out of the window: a lag read against a frozen end
      (or a consumer "caught up" with it) is no evidence of coming down, so a growth
      verdict holds through an unreadable spell instead of reading as recovery. The
      rule judges one partition's own samples, never a group's total: a total that
      drops because partitions are missing or stale cannot make a group look better.
5. ``OK`` otherwise: a group that commits every second with a sawtooth of a few seconds
   of lag, or a consumer behind but catching up, stays OK.

A `dlq replay` group (``routing.is_dlq_replay_group``) reads on demand: its lag is the
dead letters not replayed yet, waiting on purpose, so it reads ERR (a rewind) or OK.

``LagStatus`` is ordered by severity (OK < WARN < STALL < STOP < ERR); an aggregate's
status is the worst of its partitions. An aggregate's lags cover the partitions whose
lag is known; ``unknown_offset_lag`` and ``unknown_time_lag`` count the others, so a
group with unknown partitions never reads as plainly caught up.

History and cost
----------------
Each partition keeps a ring of ``history_size`` samples (time, time lag, offset lag) in
three flat arrays shared by the whole model: int64 ms, float32 s, int32 records, 16 bytes
a sample (an offset lag above 2**31 - 1 is recorded as 2**31 - 1; the live figure stays
exact). Samples are taken at end-offset observations and by ``sample(now_ms)``, not at
commits: a commit only updates the partition's state (the cheap, frequent path), and
the next observation samples the lag it left; ``fill_history(now_ms)`` (the monitor
calls it once per bucket) adds a sample to every partition that has none in the current
bucket (its end went unanswered, or no poll finished in it), so the history keeps its
cadence whatever the polls do. Each sample records whether the end offset was stale
(``LagSample.stale``). Samples fall into buckets of
``history_interval_s`` aligned on the epoch; a sample in the same bucket as the newest
one replaces it, so charts get at most one point per bucket, and samples older than the
newest are dropped. Partition state is a ``__slots__`` object; an update allocates
nothing but small ints and the key tuple.
"""

from __future__ import annotations

import enum
import math
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from streamplane.core.lag_interpolation import EndOffsetTable
from streamplane.core.routing import is_dlq_replay_group
from streamplane.exceptions import ConfigError

__all__ = [
    "LagAggregate",
    "LagModel",
    "LagSample",
    "LagStatus",
    "LagThresholds",
    "PartitionLabels",
    "PartitionLag",
]

_NEVER = -(1 << 62)  # a time before any other: "not yet"
_FROM_START = -2  # committed offset of an expected partition without a commit (-1: tracked)
_NAN = math.nan
# History stores offset lags as int32 (an offset lag above the cap is recorded as the
# cap): -1 is unknown, and a sample taken with a stale end offset stores -2 - lag (-2
# and below; its lag capped two lower to fit).
_MAX_SAMPLED_OFFSET_LAG = (1 << 31) - 1
_MAX_STALE_OFFSET_LAG = _MAX_SAMPLED_OFFSET_LAG - 2


class LagStatus(enum.IntEnum):
    """Partition / group status, ordered by severity."""

    OK = 0
    WARN = 1
    STALL = 2
    STOP = 3
    ERR = 4


@dataclass(frozen=True, slots=True)
class LagThresholds:
    """Thresholds of the status rules (see the module docstring), in seconds."""

    window_s: float = 600.0
    stop_after_s: float = 120.0
    stall_after_s: float = 60.0
    # Rule 4a: WARN when the offset has not moved for this long with work pending (the
    # early sign of a STOP or a STALL); None: off.
    warn_after_s: float | None = 45.0
    # Rule 4c: samples needed in the window since the partition was last caught up (with
    # the defaults, 5 of the 20 samples: 2 to 2.5 minutes behind); more than
    # history_size turns the trend rule off.
    warn_min_samples: int = 5
    warn_min_growth_s: float = 10.0
    warn_time_lag_s: float | None = None
    history_size: int = 20
    history_interval_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("window_s", "stop_after_s", "stall_after_s", "warn_min_growth_s"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"LagThresholds.{name} must be >= 0, not {getattr(self, name)}")
        for name in ("warn_after_s", "warn_time_lag_s"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ConfigError(f"LagThresholds.{name} must be >= 0 or None")
        if self.warn_min_samples < 2:
            raise ConfigError("LagThresholds.warn_min_samples must be >= 2")
        if self.history_size < 2:
            raise ConfigError("LagThresholds.history_size must be >= 2")
        if not self.history_interval_s >= 0.001:
            raise ConfigError("LagThresholds.history_interval_s must be >= 0.001")


@dataclass(frozen=True, slots=True)
class PartitionLabels:
    """Labels a caller attaches to a partition; equal label sets share one object."""

    stream: str | None = None
    lane: str | None = None
    cluster: str | None = None


_NO_LABELS = PartitionLabels()


@dataclass(frozen=True, slots=True)
class LagSample:
    """One history point; lags are None when unknown at that time."""

    time_ms: int
    time_lag_s: float | None
    offset_lag: int | None
    stale: bool = False  # the end offset was the last known one, not read this pass


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """The lag of one (group, topic, partition) at a given time."""

    group: str
    topic: str
    partition: int
    committed_offset: int | None
    end_offset: int | None  # as last polled, and never below the committed offset
    offset_lag: int | None
    time_lag_s: float | None
    status: LagStatus
    last_commit_ms: int | None
    labels: PartitionLabels = _NO_LABELS
    estimated_time_lag_s: float | None = None  # interpolation baseline, when enabled
    # The end offset is the last known one: the last poll could not read it (or it was
    # restored from a snapshot and not read since). How old it is, when known.
    end_offset_stale: bool = False
    # Derived from the time of the query like time_lag_s, but not part of equality
    # (reports of one state at two times compare equal on everything else).
    end_offset_age_s: float | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class LagAggregate:
    """Lag of a group (``topic`` None) or of a group's topic.

    ``offset_lag`` sums the known offset lags, ``max_time_lag_s`` is None when no
    partition has a known time lag (both are lower bounds when partitions are unknown),
    ``unknown_time_lag`` counts partitions with an unknown time lag that are not known
    to be caught up (behind, or with an unknown offset lag), ``unknown_offset_lag`` the
    partitions with an unknown offset lag (no position or no end offset yet),
    ``stale_end_offsets`` the partitions whose offset lag counts from a stale end offset
    (the last known one: the total includes them, as a lower bound).
    """

    group: str
    topic: str | None
    partitions: int
    offset_lag: int
    max_time_lag_s: float | None
    status: LagStatus
    unknown_time_lag: int
    unknown_offset_lag: int = 0
    stale_end_offsets: int = 0


class _LogEnd:
    """The log-end offset of one topic-partition, shared by the groups reading it."""

    __slots__ = ("end", "members", "observed_ms", "stale", "start", "table")

    def __init__(self, table: EndOffsetTable | None) -> None:
        self.end = -1
        self.observed_ms = _NEVER
        self.stale = False  # the end is the last known one: not read at the last poll
        self.start = -1  # the log start offset (what expected partitions count from)
        self.members: tuple[_Partition, ...] = ()  # usually one or two: a tuple is smaller
        self.table = table


class _Partition:
    # History: samples live at [base, base + history_size) of the model's arrays, the
    # newest at base + newest; count is how many there are.
    __slots__ = (
        "base",
        "caught_up_ms",
        "changed_ms",
        "commit_gap_ms",
        "commit_ms",
        "committed",
        "count",
        "labels",
        "last_gap_ms",
        "log_end",
        "newest",
        "rewind_ms",
        "ts_ms",
        "ts_offset",
    )

    def __init__(self, labels: PartitionLabels, log_end: _LogEnd, base: int) -> None:
        self.labels = labels
        self.log_end = log_end
        self.base = base
        self.newest = 0
        self.count = 0
        self.committed = -1  # or _FROM_START: expected, counts from the log start
        self.commit_ms = _NEVER
        self.changed_ms = _NEVER
        # The commit interval: the shorter of the last two gaps between commits (the
        # first gap after two commits, 0 before); last_gap_ms is the newer of the two.
        self.commit_gap_ms = 0
        self.last_gap_ms = -1
        self.rewind_ms = _NEVER
        self.caught_up_ms = _NEVER
        self.ts_offset = -1
        self.ts_ms = 0


def _position(p: _Partition) -> int:
    """The offset a partition's lag counts from: its committed offset, or the log start
    of an expected partition without a commit; -1 when unknown."""
    committed = p.committed
    if committed >= 0:
        return committed
    return p.log_end.start if committed == _FROM_START else -1


def _unknown_position_status(p: _Partition) -> LagStatus:
    """Status of a partition without a position: WARN for an expected partition (no
    commit, log start unknown) whose end offset is known and above 0 -- records may be
    pending, how many is unknown -- else OK (nothing can be said)."""
    if p.committed == _FROM_START and p.log_end.end > 0:
        return LagStatus.WARN
    return LagStatus.OK


def _as_read_by(group: str, status: LagStatus) -> LagStatus:
    """``status`` for ``group``: a `dlq replay` group reads on demand, its lag is the
    dead letters not replayed yet, waiting on purpose, so the rules on time (WARN,
    STALL, STOP) do not apply to it (every stream's replay group read STOP some minutes
    after a dead letter came in); a rewind (ERR) still does."""
    if status is not LagStatus.ERR and is_dlq_replay_group(group):
        return LagStatus.OK
    return status


class _Totals:
    __slots__ = (
        "max_time_lag_s",
        "offset_lag",
        "partitions",
        "stale_end_offsets",
        "status",
        "unknown_offset_lag",
        "unknown_time_lag",
    )

    def __init__(self) -> None:
        self.partitions = 0
        self.offset_lag = 0
        self.max_time_lag_s = -1.0
        self.status = LagStatus.OK
        self.unknown_time_lag = 0
        self.unknown_offset_lag = 0
        self.stale_end_offsets = 0


class LagModel:
    """Per-partition lag, status and history for up to ~10^5 partitions (see module doc)."""

    def __init__(
        self, thresholds: LagThresholds | None = None, *, interpolation_points: int = 0
    ) -> None:
        self.thresholds = th = thresholds or LagThresholds()
        self._window_ms = th.window_s * 1000.0
        self._stop_ms = th.stop_after_s * 1000.0
        self._stall_ms = th.stall_after_s * 1000.0
        self._warn_after_ms = math.inf if th.warn_after_s is None else th.warn_after_s * 1000.0
        self._bucket_ms = max(1, round(th.history_interval_s * 1000.0))
        self._trend_span_ms = (th.warn_min_samples - 2) * self._bucket_ms
        self._hsize = th.history_size
        self._interpolation_points = interpolation_points
        if interpolation_points:
            EndOffsetTable(interpolation_points)  # validates the size
        self._parts: dict[tuple[str, str, int], _Partition] = {}
        self._ends: dict[tuple[str, int], _LogEnd] = {}
        self._labels: dict[PartitionLabels, PartitionLabels] = {_NO_LABELS: _NO_LABELS}
        self._free_slots: list[int] = []
        self._slots = 0
        self._h_time = array("q")
        self._h_tlag = array("f")
        self._h_olag = array("i")
        self._blank_time = array("q", [0]) * self._hsize
        self._blank_olag = array("i", [0]) * self._hsize
        self._blank_tlag = array("f", [0.0]) * self._hsize

    # --- bookkeeping ---------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._parts)

    def __contains__(self, key: object) -> bool:
        return key in self._parts

    def _log_end(self, topic: str, partition: int) -> _LogEnd:
        tp = (topic, partition)
        log_end = self._ends.get(tp)
        if log_end is None:
            table = (
                EndOffsetTable(self._interpolation_points) if self._interpolation_points else None
            )
            log_end = self._ends[tp] = _LogEnd(table)
        return log_end

    def _add(self, key: tuple[str, str, int], labels: PartitionLabels) -> _Partition:
        if self._free_slots:
            slot = self._free_slots.pop()
        else:
            slot = self._slots
            self._slots += 1
            self._h_time.extend(self._blank_time)
            self._h_tlag.extend(self._blank_tlag)
            self._h_olag.extend(self._blank_olag)
        log_end = self._log_end(key[1], key[2])
        p = self._parts[key] = _Partition(labels, log_end, slot * self._hsize)
        log_end.members = (*log_end.members, p)
        return p

    def track(
        self,
        group: str,
        topic: str,
        partition: int,
        *,
        stream: str | None = None,
        lane: str | None = None,
        cluster: str | None = None,
    ) -> None:
        """Start tracking a partition (commits do it too) and set its labels."""
        wanted = PartitionLabels(stream, lane, cluster)
        labels = self._labels.setdefault(wanted, wanted)
        key = (group, topic, partition)
        p = self._parts.get(key)
        if p is None:
            self._add(key, labels)
        else:
            p.labels = labels

    def expect(
        self,
        group: str,
        topic: str,
        partition: int,
        *,
        stream: str | None = None,
        lane: str | None = None,
        cluster: str | None = None,
    ) -> None:
        """Track a partition the group reads even if it never commits on it: until its
        first commit it counts from the log start (``observe_log_start``)."""
        self.track(group, topic, partition, stream=stream, lane=lane, cluster=cluster)
        p = self._parts[(group, topic, partition)]
        if p.committed < 0:
            p.committed = _FROM_START

    def has_commit(self, group: str, topic: str, partition: int) -> bool:
        p = self._parts.get((group, topic, partition))
        return p is not None and p.committed >= 0

    def forget(self, group: str, topic: str, partition: int) -> bool:
        """Stop tracking a partition (its offset was deleted). True if it was tracked."""
        p = self._parts.pop((group, topic, partition), None)
        if p is None:
            return False
        log_end = p.log_end
        log_end.members = tuple(m for m in log_end.members if m is not p)
        self._free_slots.append(p.base // self._hsize)
        return True

    def forget_group(self, group: str) -> int:
        """Stop tracking every partition of a group; returns how many were dropped."""
        keys = [key for key in self._parts if key[0] == group]
        for key in keys:
            self.forget(*key)
        return len(keys)

    # --- observations --------------------------------------------------------------

    def observe_commit(
        self,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        commit_ms: int,
        low_watermark_ts_ms: int | None = None,
    ) -> None:
        """A committed offset (``__consumer_offsets``), in log order."""
        key = (group, topic, partition)
        p = self._parts.get(key)
        if p is None:
            p = self._add(key, _NO_LABELS)
        previous = p.committed  # -1 or _FROM_START before the first commit
        if offset != previous:
            if offset < previous:
                p.rewind_ms = commit_ms
            p.committed = offset
            p.changed_ms = commit_ms
        if p.commit_ms != _NEVER and commit_ms > p.commit_ms:
            gap = commit_ms - p.commit_ms
            p.commit_gap_ms = gap if p.last_gap_ms < 0 else min(gap, p.last_gap_ms)
            p.last_gap_ms = gap
        p.commit_ms = commit_ms
        if low_watermark_ts_ms is not None:
            p.ts_offset = offset
            p.ts_ms = low_watermark_ts_ms
        log_end = p.log_end
        if 0 <= log_end.end <= offset and not log_end.stale:
            p.caught_up_ms = commit_ms

    def observe_end_offset(
        self, topic: str, partition: int, end_offset: int, observed_ms: int
    ) -> None:
        """The log-end offset of a topic-partition; older observations are ignored, and so
        is a negative one (no answer: the last known end stands)."""
        if end_offset < 0:
            return
        log_end = self._log_end(topic, partition)
        if observed_ms < log_end.observed_ms:
            return
        log_end.end = end_offset
        log_end.observed_ms = observed_ms
        log_end.stale = False
        if log_end.table is not None:
            log_end.table.add(end_offset, observed_ms)
        for p in log_end.members:
            position = p.committed
            if position < 0 and (position != _FROM_START or (position := log_end.start) < 0):
                continue
            if position >= end_offset:
                p.caught_up_ms = observed_ms
                self._push(p, observed_ms, 0.0, 0, False)
            else:
                tlag = self._time_lag(p, position, observed_ms)
                self._push(p, observed_ms, tlag, end_offset - position, False)

    def mark_stale(self, topic_partitions: Iterable[tuple[str, int]]) -> None:
        """The end offsets of these topic-partitions could not be read (this poll): they
        keep their last known ends, reported stale until the next answer."""
        ends = self._ends
        for tp in topic_partitions:
            log_end = ends.get(tp)
            if log_end is not None and log_end.end >= 0:
                log_end.stale = True

    def observe_log_start(self, topic: str, partition: int, start: int) -> None:
        """The log start offset of a topic-partition (what expected partitions without a
        commit count from), observed in order. Observe it before the end offset of the
        same poll: the end-offset observation takes the history sample."""
        self._log_end(topic, partition).start = start

    def observe_offset_timestamp(
        self, group: str, topic: str, partition: int, offset: int, timestamp_ms: int
    ) -> None:
        """The timestamp of the record at ``offset`` (for groups without a low watermark)."""
        p = self._parts.get((group, topic, partition))
        if p is not None:
            p.ts_offset = offset
            p.ts_ms = timestamp_ms

    def sample(
        self, now_ms: int, topic_partitions: Iterable[tuple[str, int]] | None = None
    ) -> None:
        """Add a history sample at ``now_ms`` to every partition with a position (call it
        on a timer: end-offset observations sample only the groups of that partition),
        or only to those of ``topic_partitions`` (whose end offsets went unanswered:
        their last known ends stand)."""
        if topic_partitions is None:
            members: Iterable[_Partition] = self._parts.values()
        else:
            ends = self._ends
            members = [
                p for tp in topic_partitions if (e := ends.get(tp)) is not None for p in e.members
            ]
        for p in members:
            if _position(p) >= 0:
                olag, tlag = self._lags(p, now_ms)
                self._push(p, now_ms, tlag, olag, p.log_end.stale)

    def fill_history(self, now_ms: int) -> int:
        """A sample at ``now_ms`` for every partition with a position and no sample in the
        bucket of ``now_ms`` yet (its end went unanswered, or no poll finished in this
        bucket): called once per bucket, it keeps the history's cadence however long the
        polls take. Returns how many samples it added."""
        bucket = self._bucket_ms
        current = now_ms // bucket
        times = self._h_time
        added = 0
        for p in self._parts.values():
            if p.count and times[p.base + p.newest] // bucket >= current:
                continue
            if _position(p) >= 0:
                olag, tlag = self._lags(p, now_ms)
                self._push(p, now_ms, tlag, olag, p.log_end.stale)
                added += 1
        return added

    def log_ends(self) -> list[tuple[str, int, int, int, int]]:
        """(topic, partition, end, observed ms, log start) of every tracked topic-partition
        with a known end offset (to save and ``restore_log_end`` after a restart)."""
        return [
            (topic, partition, e.end, e.observed_ms, e.start)
            for (topic, partition), e in self._ends.items()
            if e.end >= 0 and e.members
        ]

    def position_timestamps(self) -> dict[tuple[str, str, int], tuple[int, int]]:
        """{(group, topic, partition): (committed offset, timestamp ms of its record)} of
        every committed partition whose record's timestamp is known (from the commit's
        metadata, or looked up): saved with the commits, so a restart without the
        cluster knows the time lag of groups whose commits carry no timestamp."""
        return {
            key: (p.committed, p.ts_ms)
            for key, p in self._parts.items()
            if p.committed >= 0 and p.ts_offset == p.committed
        }

    def restore_log_end(
        self, topic: str, partition: int, end: int, observed_ms: int, start: int = -1
    ) -> None:
        """Set a saved end offset (and log start) as observed at ``observed_ms``, stale
        until the next observation."""
        if start >= 0:
            self.observe_log_start(topic, partition, start)
        self.observe_end_offset(topic, partition, end, observed_ms)
        self.mark_stale(((topic, partition),))  # not read since: stale until it is

    # --- internals -----------------------------------------------------------------

    @staticmethod
    def _time_lag(p: _Partition, position: int, now_ms: int) -> float:
        """Time lag of a partition known to be behind (NaN when unknown)."""
        if p.ts_offset == position:
            lag = (now_ms - p.ts_ms) / 1000.0
            return lag if lag > 0.0 else 0.0
        return _NAN

    def _lags(self, p: _Partition, now_ms: int) -> tuple[int, float]:
        """(offset lag or -1, time lag or NaN) of a partition with a position."""
        end = p.log_end.end
        position = _position(p)
        if end >= 0:
            if position >= end:
                return 0, 0.0
            return end - position, self._time_lag(p, position, now_ms)
        return -1, self._time_lag(p, position, now_ms)

    def _push(self, p: _Partition, t: int, tlag: float, olag: int, stale: bool) -> None:
        if olag > _MAX_SAMPLED_OFFSET_LAG:
            olag = _MAX_SAMPLED_OFFSET_LAG
        if stale and olag >= 0:  # see _MAX_STALE_OFFSET_LAG
            olag = -2 - (olag if olag <= _MAX_STALE_OFFSET_LAG else _MAX_STALE_OFFSET_LAG)
        times = self._h_time
        if p.count:
            last = p.base + p.newest
            newest = times[last]
            if t < newest:
                return  # older than the newest sample: history only moves forward
            bucket = self._bucket_ms
            if t // bucket == newest // bucket:  # same bucket: the newer sample replaces it
                times[last] = t
                self._h_tlag[last] = tlag
                self._h_olag[last] = olag
                return
            position = p.newest + 1
            if position == self._hsize:
                position = 0
        else:
            position = 0
        i = p.base + position
        times[i] = t
        self._h_tlag[i] = tlag
        self._h_olag[i] = olag
        p.newest = position
        if p.count < self._hsize:
            p.count += 1

    def _samples(self, p: _Partition) -> Iterator[tuple[int, float, int]]:
        """History of a partition, oldest first, as raw (time, time lag, offset lag); an
        offset lag of -1 is unknown, -2 - lag one taken with a stale end offset."""
        n = self._hsize
        base = p.base
        for j in range(p.newest - p.count + 1, p.newest + 1):
            i = base + (j % n)
            yield self._h_time[i], self._h_tlag[i], self._h_olag[i]

    def _lag_grew(self, p: _Partition, now_ms: int) -> bool:
        """Rule 4c: the lag grew over the samples taken in the window since the partition
        was last caught up: the newer half of them stays at or above every sample of the
        older half, it grew by warn_min_growth_s in all, and the newest sample is less
        than that below the highest (a lag that came down by more is being caught up).
        Samples taken after the offset last moved repeat that it stands still (the lag
        can only grow): only the newest of them counts, so a verdict of growth holds
        until the offset moves again. Samples taken with a stale end offset are left out
        (a lag read against a frozen end is no evidence either way)."""
        since = max(now_ms - self._window_ms, p.caught_up_ms + 1)
        still_since = p.changed_ms if p.changed_ms > _NEVER else now_ms
        window: list[tuple[int, float, int]] = []
        for s in self._samples(p):
            if since <= s[0] <= now_ms and s[2] >= -1:
                if window and window[-1][0] > still_since:
                    window[-1] = s  # the offset did not move between the two
                else:
                    window.append(s)
        th = self.thresholds
        if len(window) < th.warn_min_samples:
            return False
        half = len(window) // 2
        tlags = [s[1] for s in window]
        if not any(math.isnan(x) for x in tlags):
            # Between two commits the time lag rises by the commit interval: a rise
            # within that is the cadence's sawtooth, not growth.
            growth = max(th.warn_min_growth_s, p.commit_gap_ms / 1000.0)
            return (
                min(tlags[half:]) >= max(tlags[:half])
                and tlags[-1] - tlags[0] >= growth
                and max(tlags) - tlags[-1] < growth  # not coming down
            )
        olags = [s[2] for s in window]
        if any(x < 0 for x in olags):
            return False
        peak = max(olags)
        return (
            min(olags[half:]) >= max(olags[:half])
            and olags[-1] > olags[0]
            and 10 * (peak - olags[-1]) < peak  # not coming down by a tenth of its peak
        )

    def _status(self, p: _Partition, now_ms: int, olag: int, tlag: float) -> LagStatus:
        if olag <= 0:
            return LagStatus.OK
        caught_up = p.caught_up_ms
        if p.rewind_ms > caught_up and now_ms - p.rewind_ms <= self._window_ms:
            return LagStatus.ERR
        last_commit = last_move = p.commit_ms
        if last_commit == _NEVER:  # expected, never committed: pending since its first record
            last_commit = last_move = now_ms - int(tlag * 1000.0) if tlag == tlag else now_ms
        else:
            last_move = p.changed_ms
        if now_ms - max(last_commit, caught_up) > max(self._stop_ms, 2 * p.commit_gap_ms):
            return LagStatus.STOP
        if p.commit_ms > p.changed_ms and now_ms - max(p.changed_ms, caught_up) > self._stall_ms:
            return LagStatus.STALL
        if now_ms - max(last_move, caught_up) > max(self._warn_after_ms, 1.5 * p.commit_gap_ms):
            return LagStatus.WARN
        warn_at = self.thresholds.warn_time_lag_s
        if warn_at is not None and tlag > warn_at:  # NaN compares False
            return LagStatus.WARN
        # warn_min_samples samples, one per bucket, all after caught_up: cheap to rule out
        if now_ms - caught_up > self._trend_span_ms and self._lag_grew(p, now_ms):
            return LagStatus.WARN
        return LagStatus.OK

    def _report(self, key: tuple[str, str, int], p: _Partition, now_ms: int) -> PartitionLag:
        group, topic, partition = key
        log_end = p.log_end
        end = log_end.end if log_end.end >= 0 else None
        position = _position(p)
        committed = p.committed if p.committed >= 0 else None
        stale = end is not None and log_end.stale
        age = None if end is None else max(0.0, (now_ms - log_end.observed_ms) / 1000.0)
        if position < 0:
            status = _as_read_by(group, _unknown_position_status(p))
            return PartitionLag(
                group, topic, partition, None, end, None, None, status, None, p.labels,
                None, stale, age,
            )  # fmt: skip
        olag, tlag = self._lags(p, now_ms)
        if end is not None and end < position:
            end = position  # a commit newer than the last end-offset poll
        estimate = None
        if log_end.table is not None:
            estimate = log_end.table.time_lag_s(position, now_ms)
        return PartitionLag(
            group,
            topic,
            partition,
            committed,
            end,
            olag if olag >= 0 else None,
            None if tlag != tlag else tlag,
            _as_read_by(group, self._status(p, now_ms, olag, tlag)),
            p.commit_ms if committed is not None else None,
            p.labels,
            estimate,
            stale,
            age,
        )

    # --- queries -------------------------------------------------------------------

    def partition(self, group: str, topic: str, partition: int, now_ms: int) -> PartitionLag | None:
        """The lag of one partition at ``now_ms``, or None if it is not tracked."""
        key = (group, topic, partition)
        p = self._parts.get(key)
        return None if p is None else self._report(key, p, now_ms)

    def partitions(self, now_ms: int) -> Iterator[PartitionLag]:
        """The lag of every tracked partition at ``now_ms`` (in no particular order)."""
        for key, p in list(self._parts.items()):
            yield self._report(key, p, now_ms)

    def history(self, group: str, topic: str, partition: int) -> list[LagSample]:
        """The history of one partition, oldest first (empty if not tracked)."""
        p = self._parts.get((group, topic, partition))
        if p is None:
            return []
        return [
            LagSample(
                t,
                None if tl != tl else float(tl),
                ol if ol >= 0 else (None if ol == -1 else -2 - ol),
                ol < -1,
            )
            for t, tl, ol in self._samples(p)
        ]

    def aggregate(self, now_ms: int, *, by_topic: bool = True) -> list[LagAggregate]:
        """Per (group, topic) -- or per group with ``by_topic=False`` -- sorted by name."""
        acc: dict[tuple[str, str], _Totals] = {}
        for (group, topic, _), p in self._parts.items():
            key = (group, topic if by_topic else "")
            totals = acc.get(key)
            if totals is None:
                totals = acc[key] = _Totals()
            totals.partitions += 1
            if _position(p) < 0:  # unknown: counted, and maybe WARN (see _report)
                totals.unknown_offset_lag += 1
                totals.unknown_time_lag += 1
                status = _as_read_by(group, _unknown_position_status(p))
                if status > totals.status:
                    totals.status = status
                continue
            olag, tlag = self._lags(p, now_ms)
            if olag > 0:
                totals.offset_lag += olag
            elif olag < 0:
                totals.unknown_offset_lag += 1
            if olag >= 0 and p.log_end.stale:
                totals.stale_end_offsets += 1
            if tlag == tlag:
                if tlag > totals.max_time_lag_s:
                    totals.max_time_lag_s = tlag
            elif olag != 0:
                totals.unknown_time_lag += 1
            status = _as_read_by(group, self._status(p, now_ms, olag, tlag))
            if status > totals.status:
                totals.status = status
        return [
            LagAggregate(
                group,
                topic if by_topic else None,
                t.partitions,
                t.offset_lag,
                t.max_time_lag_s if t.max_time_lag_s >= 0.0 else None,
                t.status,
                t.unknown_time_lag,
                t.unknown_offset_lag,
                t.stale_end_offsets,
            )
            for (group, topic), t in sorted(acc.items())
        ]

    def timestamp_lookups(self) -> list[tuple[str, str, int, int]]:
        """(group, topic, partition, position) of the partitions that may be behind (end
        offset above the position, or unknown) and have no timestamp for the record at
        their position: what an adapter should look up for foreign groups and for
        expected partitions without a commit (the record at the log start)."""
        out = []
        for key, p in self._parts.items():
            position = _position(p)
            if position < 0 or p.ts_offset == position:
                continue
            end = p.log_end.end
            if end < 0 or position < end:
                out.append((*key, position))
        return out
