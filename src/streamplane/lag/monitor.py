"""The lag monitor: every registered cluster's ``__consumer_offsets``, one lag model each.

``LagMonitor`` runs one ``ClusterWorker`` per cluster of its ``Topology`` (the control
plane's store: clusters, and routing tables for the labels). A worker has three threads:

- the *reader* first replays the cluster's snapshot (commits and last known end
  offsets), at once and without the cluster, so a monitor restarted while a cluster is
  down still reports (and keeps aging) that cluster's lag; then it follows
  ``__consumer_offsets`` (``OffsetsReader``) and feeds each commit to the cluster's
  ``LagModel`` as it is read, so a commit is visible to queries within the reader's
  poll interval (about 0.1 s). When the cluster answers, the reader checks the snapshot
  (cluster id, positions): if it is not usable, the replayed state is dropped and the
  topic reread. It saves the snapshot (with the model's end offsets, and the timestamps
  it looked up for commits that carry none) every ``snapshot_interval_s`` and on stop;
- the *poller* asks for the log-end offsets of every tracked partition about every
  ``end_offset_interval_s`` (``LogEnds.fetch_pass``: one ListOffsets per leader broker,
  all at once, each bounded by ``end_offset_timeout_s``, leaders re-read and what failed
  asked again once after a leader change; with them the log start offsets of expected
  partitions without a commit, and every ``snapshot_interval_s`` those of every tracked
  partition, so an expected partition of a cluster that went down has one) and fetches
  the timestamps the model asks for (``LagModel.timestamp_lookups``: foreign groups,
  streamplane groups that committed while caught up and have fallen behind since,
  records at the log start). Partitions whose end offsets go unanswered (a broker down,
  a leader moving, a cluster down or not reached yet after a restart) keep their last
  known ends, reported *stale* (``LagModel.mark_stale``) until they are read again;
- the *sampler* fills the history once per history bucket, three quarters into it
  (``LagModel.fill_history``: a sample for every partition no poll sampled in that
  bucket), so the history keeps its cadence however long a poll takes.

Expected partitions: a *streamplane* group (one whose commits carry the commit-log
metadata) reads every partition of every readable segment (active, draining, sealed)
of the lanes it has committed on, on every cluster; it starts a partition it has no
commit for at the log start. ``LagMonitor.refresh`` gives each worker those partitions
(``ClusterWorker.set_expected``; recomputed only when a group's lanes or a routing table
change), and the model counts them from the log start until their first commit
(``committed_offset`` None in the reports). Foreign groups are tracked as committed.
The partitions of retired segments are not reported (``partitions``, ``groups``,
``group_history``, the metrics): their commits stay in ``__consumer_offsets``, and
each failover added a set for good.

Partitions are labelled with stream, lane and cluster from the routing tables (a
physical topic belongs to one lane of one stream), refreshed every
``refresh_interval_s`` together with the cluster list: a cluster added to the registry
gets a worker, a removed one loses it, a changed bootstrap restarts it.

Queries (any thread) return plain data: ``partitions``, ``groups``, ``group_history``,
``readers``. Time comes from ``clock`` (seconds), so tests can pin it.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from streamplane.core.lag import LagModel, LagSample, LagStatus, LagThresholds, PartitionLag
from streamplane.core.routing import DLQ_LANE, RoutingTable, Segment, SegmentState
from streamplane.exceptions import KafkaError, NotFound, StreamplaneError
from streamplane.lag.reader import (
    CommitEvent,
    CommitKey,
    LogEnd,
    LogEnds,
    OffsetsReader,
    OffsetsSnapshot,
    ReaderStatus,
    TimestampLookup,
    read_snapshot,
)

log = logging.getLogger(__name__)

Route = tuple[str, str]
"""(stream, lane) of a physical topic."""

GroupLane = tuple[str, str, str]
"""(group, stream, lane): a lane a streamplane group reads."""


class TopologyUnavailable(Exception):
    """The topology cannot be read now, and its source says so itself (the control
    plane's store: one warning per database outage): the monitor says nothing more."""


class Topology(Protocol):
    """Where the monitor learns the clusters and the routing tables (a source that
    reports its own outages raises ``TopologyUnavailable`` meanwhile)."""

    def clusters(self) -> dict[str, str]:
        """name -> bootstrap servers"""
        ...

    def routing_tables(self) -> list[RoutingTable]: ...


def routes_of(tables: Iterable[RoutingTable]) -> dict[tuple[str, str], Route]:
    """(cluster, topic) -> (stream, lane), over every segment of every table."""
    out: dict[tuple[str, str], Route] = {}
    for table in tables:
        for s in table.segments:
            out[(s.cluster, s.topic)] = (table.stream, s.lane)
    return out


_STREAM_TOPIC = re.compile(r"^sp\.([a-z0-9][a-z0-9-]*)\.([a-z][a-z0-9-]*)\.e\d+$")


def route_of_topic(topic: str) -> Route | None:
    """A stream topic's (stream, lane) from its derived name, for segments not (or no
    longer) in any routing table; None for other topics."""
    m = _STREAM_TOPIC.match(topic)
    return None if m is None else (m.group(1), m.group(2))


# Charts: a point every 5 s over 10 minutes (1.9 KB of history a partition).
DEFAULT_THRESHOLDS = LagThresholds(history_size=120, history_interval_s=5.0)


@dataclass(frozen=True)
class MonitorSettings:
    snapshot_dir: Path | None = None
    end_offset_interval_s: float = 1.0
    snapshot_interval_s: float = 5.0
    refresh_interval_s: float = 2.0
    # Each broker's ListOffsets request (and a metadata refresh) is bounded by this: one
    # dead broker holds a poll up this long at most, and not the others' answers.
    end_offset_timeout_s: float = 2.0
    lookup_timeout_s: float = 0.5
    lookup_spacing_s: float = 0.1  # commits without a timestamp: look up at most this often
    poll_timeout_s: float = 0.1
    thresholds: LagThresholds = DEFAULT_THRESHOLDS
    interpolation_points: int = 0  # > 0: also keep the kafka-lag-exporter estimate


@dataclass(frozen=True)
class LabelledLag:
    """One partition's lag with its cluster."""

    cluster: str
    lag: PartitionLag

    @property
    def stream(self) -> str | None:
        return self.lag.labels.stream

    @property
    def lane(self) -> str | None:
        return self.lag.labels.lane


@dataclass(frozen=True)
class GroupSummary:
    group: str
    clusters: tuple[str, ...]
    streams: tuple[str, ...]
    partitions: int
    offset_lag: int
    max_time_lag_s: float | None
    unknown_time_lag: int
    status: LagStatus
    last_commit_ms: int | None
    unknown_offset_lag: int = 0
    # Partitions whose offset lag counts from a stale end offset (the last known one:
    # included in offset_lag, a lower bound), and the age of the oldest such end.
    stale_end_offsets: int = 0
    stale_end_offset_age_s: float | None = None


def summarize(group: str, parts: Iterable[LabelledLag]) -> GroupSummary:
    """Aggregate one group's partitions (across clusters): the known offset lags add up,
    the time lag is the worst known one, the status the most severe (see
    ``LagAggregate``). Partitions whose lag is unknown are counted, not taken for caught
    up: ``unknown_offset_lag`` (offset lag unknown) and ``unknown_time_lag`` (time lag
    unknown and not known to be 0: behind, or offset lag unknown). Partitions whose end
    offset could not be read lately keep their last known end and count with it:
    ``stale_end_offsets`` says how many (and ``stale_end_offset_age_s`` how old the
    oldest is), so a total holding them is not taken for a current one. The CLI, the
    API, ``/metrics`` and the dashboard all show this summary, the stale count
    included."""
    clusters: set[str] = set()
    streams: set[str] = set()
    n = offset_lag = unknown = unknown_offset = stale = 0
    stale_age: float | None = None
    worst: float | None = None
    status = LagStatus.OK
    last: int | None = None
    for p in parts:
        n += 1
        clusters.add(p.cluster)
        if p.stream is not None:
            streams.add(p.stream)
        lag = p.lag
        if lag.offset_lag is None:
            unknown_offset += 1
        else:
            offset_lag += lag.offset_lag
            if lag.end_offset_stale:
                stale += 1
                age = lag.end_offset_age_s
                if age is not None and (stale_age is None or age > stale_age):
                    stale_age = age
        if lag.time_lag_s is not None:
            worst = lag.time_lag_s if worst is None else max(worst, lag.time_lag_s)
        elif lag.offset_lag != 0:  # behind, or unknown
            unknown += 1
        status = max(status, lag.status)
        if lag.last_commit_ms is not None:
            last = lag.last_commit_ms if last is None else max(last, lag.last_commit_ms)
    return GroupSummary(
        group, tuple(sorted(clusters)), tuple(sorted(streams)), n, offset_lag, worst, unknown,
        status, last, unknown_offset, stale, stale_age,
    )  # fmt: skip


def _unreachable(bootstrap: str, timeout: float = 1.0) -> str | None:
    """None if a TCP connection to one of the bootstrap servers opens, else why not."""
    errors = []
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
                return None
        except (OSError, ValueError) as exc:
            errors.append(f"{server}: {exc}")
    return "no bootstrap server answers (" + "; ".join(errors) + ")"


def _unanswered(
    missing: Iterable[tuple[str, int]], asked: int, failures: Mapping[tuple[str, int], str]
) -> str | None:
    """The poll's error line: how many end offsets went unanswered, and why (the
    distinct reasons, at most three)."""
    missing = list(missing)
    if not missing:
        return None
    line = f"end offsets of {len(missing)} of {asked} partitions unanswered"
    reasons = sorted({failures[tp] for tp in missing if tp in failures})
    if reasons:
        more = f"; and {len(reasons) - 3} more" if len(reasons) > 3 else ""
        line += f" ({'; '.join(reasons[:3])}{more})"
    return line


class ClusterWorker:
    """One cluster: a reader, a poller and a sampler thread, one lag model behind a lock."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        settings: MonitorSettings,
        clock: Callable[[], float],
        labels: Callable[[str, str], Route | None],
        dlq_partitions: Callable[[str], list[tuple[str, int]]] = lambda _: [],
    ) -> None:
        self.name = name
        self.bootstrap = bootstrap
        self.settings = settings
        self._clock = clock
        self._labels = labels
        self.lock = threading.Lock()
        self.model = LagModel(
            settings.thresholds, interpolation_points=settings.interpolation_points
        )
        self._keys: dict[CommitKey, Route | None] = {}  # every key the model tracks
        # Streamplane commits with a route, the lanes they make their groups read (with
        # how many keys say so) and a version bumped when that set of lanes changes.
        self._sp_keys: dict[CommitKey, GroupLane] = {}
        self._reads: dict[GroupLane, int] = {}
        self._reads_version = 0
        self._expected: set[CommitKey] = set()  # set by the monitor (set_expected)
        self._uncommitted: set[CommitKey] = set()  # expected, no commit: log start polled
        self._dlq_partitions = dlq_partitions
        self._dlq_ends: dict[tuple[str, int], int] = {}
        # Why the last end-offset poll left partitions out (None: it answered for all).
        self.end_offsets_error: str | None = None
        self._bucket_ms = max(1, round(settings.thresholds.history_interval_s * 1000))
        self._all_starts_due = 0.0  # monotonic: next log-start poll of every partition
        self._stop = threading.Event()
        self._ready = threading.Event()
        # Set by the reader when a commit carries no timestamp for its committed record:
        # the poller looks it up now instead of at its next interval.
        self._lookup_due = threading.Event()
        self.status = ReaderStatus(name, bootstrap)
        self._reader: OffsetsReader | None = None
        self._threads = [
            threading.Thread(target=self._read_loop, name=f"lag-reader-{name}", daemon=True),
            threading.Thread(target=self._poll_loop, name=f"lag-poller-{name}", daemon=True),
            threading.Thread(target=self._sample_loop, name=f"lag-sampler-{name}", daemon=True),
        ]

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def signal_stop(self) -> None:
        self._stop.set()
        self._ready.set()
        self._lookup_due.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop and wait for the threads (the reader saves its snapshot on the way out).
        A reader still connecting is not waited for: it has nothing to save, and it
        closes its client by itself when its metadata request times out."""
        self.signal_stop()
        wait = timeout if self._reader is not None else 0.05
        for t in self._threads:
            if t.is_alive():
                t.join(wait)

    # --------------------------------------------------------------- reader thread
    def _snapshot_path(self) -> Path | None:
        d = self.settings.snapshot_dir
        return None if d is None else d / f"{re.sub(r'[^A-Za-z0-9._-]', '_', self.name)}.json"

    def _replay_snapshot(self) -> OffsetsSnapshot | None:
        """Replay the saved snapshot before the cluster is asked anything: its commits
        and last known end offsets, as they were (checked when the cluster answers)."""
        snapshot = read_snapshot(self._snapshot_path(), self.name)
        if snapshot is None:
            return None
        self._apply([CommitEvent(k, s) for k, s in snapshot.commits.items()])
        dlq = set(self._dlq_partitions(self.name))
        with self.lock:
            for (topic, partition), (end, observed_ms, start) in snapshot.ends.items():
                self.model.restore_log_end(topic, partition, end, observed_ms, start)
            self._dlq_ends = {tp: e[0] for tp, e in snapshot.ends.items() if tp in dlq}
        n = len(snapshot.commits)
        self.status = ReaderStatus(
            self.name,
            self.bootstrap,
            resumed_from_snapshot=True,
            snapshot_commits=n,
            commits_tracked=n,
        )
        log.info(
            "%s: replayed the lag snapshot (%d commits, %d end offsets, saved at %d)",
            self.name,
            n,
            len(snapshot.ends),
            snapshot.saved_ms,
        )
        return snapshot

    def _drop_state(self) -> None:
        """Forget everything (a replayed snapshot turned out not to be this cluster's)."""
        with self.lock:
            self.model = LagModel(
                self.settings.thresholds, interpolation_points=self.settings.interpolation_points
            )
            self._keys = {}
            self._sp_keys = {}
            self._reads = {}
            self._reads_version += 1
            self._expected = set()
            self._uncommitted = set()
            self._dlq_ends = {}

    def _read_loop(self) -> None:
        reader = None
        try:
            replayed = self._replay_snapshot()
            while not self._stop.is_set() and reader is None:
                unreachable = _unreachable(self.bootstrap)
                if unreachable is not None:  # no Kafka client for a cluster that is not there
                    self.status = replace(self.status, last_error=unreachable)
                    self._stop.wait(2.0)
                    continue
                candidate = OffsetsReader(
                    self.name, self.bootstrap, snapshot_path=self._snapshot_path()
                )
                try:
                    events = candidate.open(replayed)
                    if replayed is None:
                        self._apply(events)
                    elif not candidate.status.resumed_from_snapshot:
                        log.warning("%s: dropping the replayed lag snapshot", self.name)
                        self._drop_state()
                        self._apply(events)
                    # else: the events are the snapshot's commits, replayed already
                    reader = self._reader = candidate
                except StreamplaneError as exc:
                    candidate.close()
                    self.status = replace(self.status, last_error=str(exc))
                    self._stop.wait(2.0)
            if reader is None:
                return
            self._ready.set()
            next_save = time.monotonic() + self.settings.snapshot_interval_s
            while not self._stop.is_set():
                try:
                    events = reader.poll(self.settings.poll_timeout_s)
                except StreamplaneError as exc:
                    self.status = replace(reader.status, last_error=str(exc))
                    self._stop.wait(1.0)
                    continue
                if events:
                    self._apply(events)
                self.status = reader.status
                if time.monotonic() >= next_save:
                    self._save(reader)
                    next_save = time.monotonic() + self.settings.snapshot_interval_s
            self._save(reader)
        except Exception:
            log.exception("lag reader of %s failed", self.name)
        finally:
            if reader is not None:
                reader.close()

    def _save(self, reader: OffsetsReader) -> None:
        with self.lock:
            ends: dict[tuple[str, int], LogEnd] = {
                (t, p): (end, ms, start) for t, p, end, ms, start in self.model.log_ends()
            }
            ms = self._now_ms()
            for tp, end in self._dlq_ends.items():
                ends.setdefault(tp, (end, ms, -1))
            timestamps = self.model.position_timestamps()
        try:
            reader.save_snapshot(self._now_ms(), ends, timestamps)
        except (OSError, StreamplaneError) as exc:
            log.warning("%s: cannot save the lag snapshot: %s", self.name, exc)

    def _apply(self, events: list[CommitEvent]) -> None:
        with self.lock:
            model = self.model
            keys = self._keys
            sp_keys = self._sp_keys
            uncommitted = self._uncommitted
            for ev in events:
                group, topic, partition = key = ev.key
                state = ev.state
                if state is None:
                    self._unread(key)
                    model.forget(group, topic, partition)
                    if key in self._expected:  # still read: from the log start again
                        stream, lane = keys[key] or (None, None)
                        model.expect(*key, stream=stream, lane=lane, cluster=self.name)
                        uncommitted.add(key)
                    else:
                        keys.pop(key, None)
                    continue
                if key not in keys:
                    route = keys[key] = self._labels(self.name, topic)
                    stream, lane = route if route is not None else (None, None)
                    model.track(*key, stream=stream, lane=lane, cluster=self.name)
                if uncommitted:
                    uncommitted.discard(key)
                if state.streamplane:
                    if key not in sp_keys:
                        self._read(key, keys[key])
                elif sp_keys and key in sp_keys:
                    self._unread(key)
                model.observe_commit(*key, state.offset, state.commit_ms, state.low_watermark_ts_ms)
                if state.low_watermark_ts_ms is None:
                    self._lookup_due.set()

    def _read(self, key: CommitKey, route: Route | None) -> None:
        """A streamplane commit on ``route``: its group reads that lane (under the lock)."""
        if route is None:
            return
        lane = self._sp_keys[key] = (key[0], route[0], route[1])
        n = self._reads.get(lane, 0)
        self._reads[lane] = n + 1
        if n == 0:
            self._reads_version += 1

    def _unread(self, key: CommitKey) -> None:
        lane = self._sp_keys.pop(key, None)
        if lane is None:
            return
        n = self._reads[lane] - 1
        if n:
            self._reads[lane] = n
        else:
            del self._reads[lane]
            self._reads_version += 1

    def reads(self) -> tuple[int, set[GroupLane]]:
        """(version, the lanes streamplane groups have committed on here)."""
        with self.lock:
            return self._reads_version, set(self._reads)

    def set_expected(self, wanted: Mapping[CommitKey, Route]) -> None:
        """The partitions this cluster's groups read (``LagMonitor`` computes them): those
        not tracked yet are tracked from the log start; those no longer read and never
        committed on are dropped."""
        with self.lock:
            model = self.model
            keys = self._keys
            for key in self._expected.difference(wanted):
                self._uncommitted.discard(key)
                if not model.has_commit(*key):
                    model.forget(*key)
                    keys.pop(key, None)
            for key, route in wanted.items():
                if key not in keys:
                    keys[key] = route
                    model.expect(*key, stream=route[0], lane=route[1], cluster=self.name)
                    self._uncommitted.add(key)
            self._expected = set(wanted)

    def relabel(self) -> None:
        """Apply changed routes (a stream created after its group committed, a failover)."""
        with self.lock:
            for key, old in self._keys.items():
                route = self._labels(self.name, key[1])
                if route != old:
                    self._keys[key] = route
                    stream, lane = route if route is not None else (None, None)
                    self.model.track(*key, stream=stream, lane=lane, cluster=self.name)
                    if key in self._sp_keys:
                        self._unread(key)
                        self._read(key, route)

    # --------------------------------------------------------------- poller thread
    def _poll_loop(self) -> None:
        ends: LogEnds | None = None
        lookup: TimestampLookup | None = None
        try:
            interval = self.settings.end_offset_interval_s
            # Until the reader is connected (the cluster may be down), no clients: the
            # replayed partitions keep their last known (stale) ends, and the sampler
            # records them as they age.
            self._ready.wait()
            if self._stop.is_set():
                return
            ends = LogEnds(self.bootstrap)
            lookup = TimestampLookup(self.bootstrap)
            spacing = self.settings.lookup_spacing_s
            next_poll = time.monotonic()
            while not self._stop.is_set():
                started = time.monotonic()
                full = started >= next_poll
                self._lookup_due.clear()
                try:
                    if full:
                        self._poll_once(ends, lookup)
                        next_poll = started + interval
                    else:
                        self._lookup_timestamps(lookup)
                except (KafkaError, StreamplaneError) as exc:
                    log.debug("%s: end-offset poll failed: %s", self.name, exc)
                except Exception:
                    log.exception("%s: end-offset poll failed", self.name)
                # Sleep until the next end-offset poll, or until a commit needs a
                # timestamp lookup (no more often than every ``lookup_spacing_s``).
                self._lookup_due.wait(max(0.0, next_poll - time.monotonic()))
                self._stop.wait(max(0.0, min(next_poll, started + spacing) - time.monotonic()))
        finally:
            if lookup is not None:
                lookup.close()

    def _poll_once(self, ends: LogEnds, lookup: TimestampLookup) -> None:
        dlq = self._dlq_partitions(self.name)
        with self.lock:
            wanted = {(t, p) for (_, t, p) in self._keys}
            from_start = {(t, p) for (_, t, p) in self._uncommitted}
        if not wanted and not dlq:
            return
        asked = wanted | set(dlq)
        # Log starts: of the partitions counted from there at every poll, of every tracked
        # one every ``snapshot_interval_s`` (they move with retention only): known, and
        # saved, for a group that starts reading while the cluster is down.
        all_starts = time.monotonic() >= self._all_starts_due
        if all_starts:
            from_start = wanted
        try:
            # Ends and starts together, one request per leader: a dead broker holds up
            # the pass by end_offset_timeout_s at most, and no other broker's answers.
            observed, starts = ends.fetch_pass(
                asked, from_start, self.settings.end_offset_timeout_s
            )
        except (KafkaError, StreamplaneError) as exc:
            self.end_offsets_error = f"end offsets: {exc}"
            with self.lock:
                self.model.mark_stale(wanted)
            raise
        if all_starts:
            self._all_starts_due = time.monotonic() + self.settings.snapshot_interval_s
        missing = asked.difference(observed)
        self.end_offsets_error = _unanswered(missing, len(asked), ends.failures)
        now = self._now_ms()
        with self.lock:
            for (topic, partition), start in starts.items():
                self.model.observe_log_start(topic, partition, start)
            # A dlq partition left out keeps its last known end (its records do not
            # vanish from /v1/lag/dlq while its cluster does not answer).
            last = self._dlq_ends
            self._dlq_ends = {
                tp: observed[tp] if tp in observed else last[tp]
                for tp in dlq
                if tp in observed or tp in last
            }
            for (topic, partition), end in observed.items():
                self.model.observe_end_offset(topic, partition, end, now)
            # Unanswered (or answered -1001): the last known ends stand, flagged stale.
            self.model.mark_stale(missing)
        self._lookup_timestamps(lookup)

    # --------------------------------------------------------------- sampler thread
    def _sample_loop(self) -> None:
        """Three quarters into every history bucket, a sample for each partition that has
        none in it yet (``LagModel.fill_history``): partitions whose ends went
        unanswered, and all of them when no poll finished in the bucket (a cluster down,
        a broker timing out). The polls sample what they observe; this keeps one point
        per bucket for every partition whatever they do."""
        bucket_s = self._bucket_ms / 1000.0
        try:
            while not self._stop.is_set():
                now = self._clock()
                target = (now // bucket_s + 0.75) * bucket_s
                if target <= now:
                    target += bucket_s
                if self._stop.wait(target - now):
                    return
                now_ms = self._now_ms()
                with self.lock:
                    self.model.fill_history(now_ms)
        except Exception:
            log.exception("lag history sampler of %s failed", self.name)

    def _lookup_timestamps(self, lookup: TimestampLookup) -> None:
        with self.lock:
            lookups = self.model.timestamp_lookups()
        if not lookups:
            return
        found = lookup.lookup(((t, p, o) for _, t, p, o in lookups), self.settings.lookup_timeout_s)
        with self.lock:
            for group, topic, partition, offset in lookups:
                ts = found.get((topic, partition, offset))
                if ts is not None:
                    self.model.observe_offset_timestamp(group, topic, partition, offset, ts)

    # --------------------------------------------------------------- queries
    def partitions(self, now_ms: int) -> list[PartitionLag]:
        with self.lock:
            return list(self.model.partitions(now_ms))

    def histories(self, group: str) -> list[tuple[CommitKey, list[LagSample], Route | None]]:
        with self.lock:
            return [
                (key, self.model.history(*key), route)
                for key, route in self._keys.items()
                if key[0] == group
            ]

    def dlq_end_offsets(self) -> dict[tuple[str, int], int]:
        with self.lock:
            return dict(self._dlq_ends)


class LagMonitor:
    """Time lag across every cluster of a ``Topology`` (see the module docstring)."""

    def __init__(
        self,
        topology: Topology,
        settings: MonitorSettings | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.topology = topology
        self.settings = settings or MonitorSettings()
        self._clock = clock
        self._workers: dict[str, ClusterWorker] = {}
        self._routes: dict[tuple[str, str], Route] = {}
        self._dlq: dict[str, list[tuple[str, int]]] = {}
        # (cluster, topic) of retired segments: their partitions are not reported.
        self._retired: frozenset[tuple[str, str]] = frozenset()
        self._expected_basis: object = None
        self._registry_error: str | None = None  # while the topology cannot be read
        self._guard = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --------------------------------------------------------------- life cycle
    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._supervise, name="lag-monitor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(15)
        with self._guard:
            workers = list(self._workers.values())
            self._workers.clear()
        for w in workers:
            w.signal_stop()
        for w in workers:
            w.stop()

    def refresh(self) -> None:
        """Re-read clusters and routes now (the supervisor does it on a timer)."""
        try:
            clusters = self.topology.clusters()
            tables = self.topology.routing_tables()
            routes = routes_of(tables)
        except TopologyUnavailable:
            return  # its source has said so
        except Exception as exc:
            # Once per run of failures, in one line (a refresh comes every few seconds).
            line = " ".join(str(exc).split()) or type(exc).__name__
            if line != self._registry_error:
                log.warning("lag monitor: cannot read the registry: %s", line)
            self._registry_error = line
            return
        self._registry_error = None
        dlq: dict[str, list[tuple[str, int]]] = {}
        retired = frozenset(
            (seg.cluster, seg.topic)
            for table in tables
            for seg in table.segments
            if seg.state is SegmentState.RETIRED
        )
        for table in tables:
            for seg in table.segments:
                if seg.lane == DLQ_LANE:
                    parts = dlq.setdefault(seg.cluster, [])
                    parts.extend((seg.topic, p) for p in range(seg.partitions))
        with self._guard:
            self._routes = routes
            self._dlq = dlq
            self._retired = retired
            stale = [w for name, w in self._workers.items() if clusters.get(name) != w.bootstrap]
            for w in stale:
                del self._workers[w.name]
            added = []
            for name, bootstrap in clusters.items():
                if name not in self._workers:
                    w = ClusterWorker(
                        name, bootstrap, self.settings, self._clock, self._label, self._dlq_of
                    )
                    self._workers[name] = w
                    added.append(w)
            current = list(self._workers.values())
        for w in stale:
            w.stop()
        for w in added:
            w.start()
        for w in current:
            w.relabel()
        self._update_expected(tables, current)

    def _update_expected(self, tables: list[RoutingTable], workers: list[ClusterWorker]) -> None:
        """Give each worker the partitions its streamplane groups read and have not
        committed on (every readable segment of the lanes a group has committed on, on
        any cluster). Recomputed only when a group's lanes, a table or a worker change."""
        reads = [(w, *w.reads()) for w in workers]
        basis = (tuple((w.name, id(w), version) for w, version, _ in reads), tables)
        if basis == self._expected_basis:
            return
        self._expected_basis = basis
        lanes: dict[Route, list[Segment]] = {}
        for table in tables:
            for seg in table.segments:
                if seg.readable:
                    lanes.setdefault((table.stream, seg.lane), []).append(seg)
        wanted: dict[str, dict[CommitKey, Route]] = {}
        for group, stream, lane in set().union(*(r for _, _, r in reads)):
            route = (stream, lane)
            for seg in lanes.get(route, ()):
                into = wanted.setdefault(seg.cluster, {})
                for p in range(seg.partitions):
                    into[(group, seg.topic, p)] = route
        for w in workers:
            w.set_expected(wanted.get(w.name, {}))

    def _label(self, cluster: str, topic: str) -> Route | None:
        route = self._routes.get((cluster, topic))
        return route if route is not None else route_of_topic(topic)

    def _dlq_of(self, cluster: str) -> list[tuple[str, int]]:
        return self._dlq.get(cluster, [])

    def _supervise(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(self.settings.refresh_interval_s)

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _workers_now(self) -> list[ClusterWorker]:
        with self._guard:
            return sorted(self._workers.values(), key=lambda w: w.name)

    # --------------------------------------------------------------- queries
    def partitions(
        self, *, group: str | None = None, stream: str | None = None, now_ms: int | None = None
    ) -> list[LabelledLag]:
        """Every tracked partition (optionally of one group / stream), sorted; not those
        of retired segments (read to their end, or given up: their commits stay in
        ``__consumer_offsets`` and were reported for good, one more set per failover)."""
        now = self.now_ms() if now_ms is None else now_ms
        retired = self._retired
        out = [
            LabelledLag(w.name, p)
            for w in self._workers_now()
            for p in w.partitions(now)
            if (group is None or p.group == group)
            and (stream is None or p.labels.stream == stream)
            and (w.name, p.topic) not in retired
        ]
        out.sort(key=lambda x: (x.lag.group, x.cluster, x.lag.topic, x.lag.partition))
        return out

    def groups(self, *, stream: str | None = None, now_ms: int | None = None) -> list[GroupSummary]:
        by_group: dict[str, list[LabelledLag]] = {}
        for p in self.partitions(stream=stream, now_ms=now_ms):
            by_group.setdefault(p.lag.group, []).append(p)
        return [summarize(g, parts) for g, parts in sorted(by_group.items())]

    def group_history(self, group: str) -> dict[str, object]:
        """Per partition history ([time ms, time lag s, offset lag, stale]) and, per
        history bucket, the group's worst time lag, total offset lag (over the partitions
        whose offset lag is known, stale ones included at their last known end), how many
        of those were stale and how many partitions had an unknown offset lag.
        ``NotFound`` when no cluster tracks the group."""
        bucket_ms = max(1, round(self.settings.thresholds.history_interval_s * 1000))
        series: dict[int, list[float | int | None]] = {}
        partitions = []
        retired = self._retired
        for w in self._workers_now():
            for (_, topic, partition), samples, route in w.histories(group):
                if (w.name, topic) in retired:
                    continue
                partitions.append(
                    {
                        "cluster": w.name,
                        "topic": topic,
                        "partition": partition,
                        "stream": route[0] if route else None,
                        "lane": route[1] if route else None,
                        "samples": [
                            [s.time_ms, s.time_lag_s, s.offset_lag, s.stale] for s in samples
                        ],
                    }
                )
                for s in samples:
                    b = s.time_ms // bucket_ms
                    point = series.setdefault(b, [s.time_ms, None, 0, 0, 0])
                    point[0] = max(int(point[0] or 0), s.time_ms)
                    if s.time_lag_s is not None:
                        point[1] = max(float(point[1] or 0.0), s.time_lag_s)
                    if s.offset_lag is not None:
                        point[2] = int(point[2] or 0) + s.offset_lag
                        if s.stale:
                            point[3] = int(point[3] or 0) + 1
                    else:
                        point[4] = int(point[4] or 0) + 1
        if not partitions:
            raise NotFound(f"no tracked partitions of group {group!r}")
        return {
            "group": group,
            "interval_s": bucket_ms / 1000.0,
            "series": [series[b] for b in sorted(series)],
            "partitions": partitions,
        }

    def readers(self) -> list[ReaderStatus]:
        """Each cluster's reader, with the end-offset poll's error when the reader has
        none of its own (``__consumer_offsets`` reads go quiet, not wrong, while a
        cluster is down: the poll is what notices)."""
        out = []
        for w in self._workers_now():
            status = w.status
            if status.last_error is None and w.end_offsets_error is not None:
                status = replace(status, last_error=w.end_offsets_error)
            out.append(status)
        return out

    def dlq_records(self) -> list[tuple[str, str, str, int]]:
        """(stream, cluster, topic, records) per dlq segment: the log-end offsets summed
        over its partitions (records ever dead-lettered there)."""
        totals: dict[tuple[str, str, str], int] = {}
        for w in self._workers_now():
            for (topic, _), end in w.dlq_end_offsets().items():
                route = self._label(w.name, topic)
                stream = route[0] if route else topic
                key = (stream, w.name, topic)
                totals[key] = totals.get(key, 0) + end
        return [(*k, v) for k, v in sorted(totals.items())]


def static_topology(clusters: Mapping[str, str], tables: Iterable[RoutingTable] = ()) -> Topology:
    """A fixed topology (benchmarks, tools without a control plane)."""
    frozen_tables = list(tables)

    class _Static:
        def clusters(self) -> dict[str, str]:
            return dict(clusters)

        def routing_tables(self) -> list[RoutingTable]:
            return frozen_tables

    return _Static()
