"""Reads one cluster's ``__consumer_offsets`` topic: streaming, decoded, resumable.

``OffsetsReader`` assigns itself every partition of ``__consumer_offsets`` (``assign``,
no group membership, never commits), decodes each record with
``streamplane.core.offsets_topic`` and keeps the last commit of every (group, topic,
partition). Streamplane commit metadata is read through the commit-log codec's header
peek (``peek_low_watermark_timestamp``: the ingestion time of the first unsettled
record, 20 characters, no body decode); other groups' metadata is foreign and gives no
timestamp.

Resuming: ``save_snapshot()`` writes the read position of every offsets partition and
the last commit of every key to a small JSON file (atomically: temporary file and
rename), with the last known end offsets the caller passes (the monitor's, so that a
restart while the cluster is down still has them). ``read_snapshot()`` loads one
without the cluster (the monitor replays it at once); ``open()`` checks it against the
cluster (its cluster id, positions still in the log), replays the commits and seeks to
the saved positions, so a restarted monitor only reads what was committed since.
Without a usable snapshot (none, corrupt, another cluster id) it reads the topic from
the beginning; either way ``status`` says how long it took to catch up with the topic's
end as it was at start (``catch_up_s``), and the time is logged.

``LogEnds`` (log-end and log start offsets through ``ListOffsets``: one request per
leader broker, each bounded, leaders re-read and failures retried once after a leader
change) and
``TimestampLookup`` (the timestamp of the record at an offset, by fetching it: for
groups whose metadata carries none) are the two other reads the monitor needs.

Threading: one thread drives a reader (``poll``, ``save_snapshot``); ``status`` may be
read from any thread.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from streamplane.core.commitlog import is_streamplane_metadata, peek_low_watermark_timestamp
from streamplane.core.offsets_topic import OffsetCommit, OffsetTombstone, decode_record
from streamplane.exceptions import CodecError, KafkaError
from streamplane.kafka.admin import QUIET, STALE_LEADER_EPOCH, to_kafka_error
from streamplane.kafka.clients import consume_available

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
SNAPSHOT_VERSION = 1

CommitKey = tuple[str, str, int]
"""(group, topic, partition)"""

LogEnd = tuple[int, int, int]
"""(end offset, observed ms, log start offset or -1) of a topic-partition."""


@dataclass(frozen=True, slots=True)
class CommitState:
    """The last commit of one (group, topic, partition)."""

    offset: int
    commit_ms: int
    # The timestamp of the record at ``offset``: from streamplane metadata; for other
    # groups None, or in a snapshot as the lag monitor looked it up.
    low_watermark_ts_ms: int | None
    streamplane: bool


@dataclass(frozen=True, slots=True)
class CommitEvent:
    """A decoded commit (``state``) or a deleted offset (``state`` None)."""

    key: CommitKey
    state: CommitState | None


@dataclass
class ReaderStatus:
    """What a reader has done so far (read from any thread; replaced, never mutated)."""

    cluster: str
    bootstrap: str
    resumed_from_snapshot: bool = False
    snapshot_commits: int = 0
    records_read: int = 0
    commits_tracked: int = 0
    caught_up: bool = False
    catch_up_s: float | None = None
    undecodable: int = 0
    last_error: str | None = None
    last_record_ms: int | None = None


# ------------------------------------------------------------------ snapshot (pure)
@dataclass
class OffsetsSnapshot:
    """Positions in ``__consumer_offsets``, the last commit of every key and the last
    known end offsets ((topic, partition) -> ``LogEnd``; absent from snapshots written
    before they were saved: read as none)."""

    cluster_id: str | None
    positions: dict[int, int] = field(default_factory=dict)
    commits: dict[CommitKey, CommitState] = field(default_factory=dict)
    saved_ms: int = 0
    ends: dict[tuple[str, int], LogEnd] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": SNAPSHOT_VERSION,
                "cluster_id": self.cluster_id,
                "saved_ms": self.saved_ms,
                "positions": {str(p): o for p, o in sorted(self.positions.items())},
                "commits": [
                    [g, t, p, s.offset, s.commit_ms, s.low_watermark_ts_ms, int(s.streamplane)]
                    for (g, t, p), s in self.commits.items()
                ],
                "ends": [[t, p, e, ms, start] for (t, p), (e, ms, start) in self.ends.items()],
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> OffsetsSnapshot:
        """Parse a snapshot; ``CodecError`` when it is not one this version wrote."""
        try:
            doc = json.loads(text)
            if doc.get("version") != SNAPSHOT_VERSION:
                raise CodecError(f"snapshot version {doc.get('version')!r} is not supported")
            positions = {int(p): int(o) for p, o in doc["positions"].items()}
            commits = {
                (str(g), str(t), int(p)): CommitState(
                    int(o), int(ms), None if ts is None else int(ts), bool(sp)
                )
                for g, t, p, o, ms, ts, sp in doc["commits"]
            }
            ends = {
                (str(t), int(p)): (int(e), int(ms), int(start))
                for t, p, e, ms, start in doc.get("ends", ())
            }
            cluster_id = doc.get("cluster_id")
            return cls(
                None if cluster_id is None else str(cluster_id),
                positions,
                commits,
                int(doc.get("saved_ms", 0)),
                ends,
            )
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise CodecError(f"not a lag snapshot: {exc}") from None


def with_timestamps(
    commits: Mapping[CommitKey, CommitState],
    timestamps: Mapping[CommitKey, tuple[int, int]],
) -> dict[CommitKey, CommitState]:
    """``commits`` with the timestamps of ``timestamps`` ((offset, ms) per key) filled in
    where a commit has none and the timestamp is of the record at its offset."""
    out = dict(commits)
    for key, (offset, ts_ms) in timestamps.items():
        state = out.get(key)
        if state is not None and state.low_watermark_ts_ms is None and state.offset == offset:
            out[key] = CommitState(state.offset, state.commit_ms, ts_ms, state.streamplane)
    return out


def read_snapshot(path: Path | None, cluster: str = "") -> OffsetsSnapshot | None:
    """The snapshot at ``path``; None when there is none or it does not parse (logged).
    Not checked against the cluster: ``OffsetsReader.open`` does that."""
    if path is None or not path.is_file():
        return None
    try:
        return OffsetsSnapshot.from_json(path.read_text())
    except (OSError, CodecError) as exc:
        log.warning("%s: ignoring lag snapshot %s: %s", cluster, path, exc)
        return None


def commit_state(record: OffsetCommit) -> CommitState:
    """The state of a decoded commit: the low-watermark timestamp from the metadata header
    when it is streamplane's (a malformed header counts as foreign)."""
    metadata = record.metadata
    if metadata and is_streamplane_metadata(metadata):
        try:
            ts = peek_low_watermark_timestamp(metadata)
        except CodecError:
            return CommitState(record.offset, record.commit_timestamp_ms, None, False)
        return CommitState(record.offset, record.commit_timestamp_ms, ts, True)
    return CommitState(record.offset, record.commit_timestamp_ms, None, False)


# ------------------------------------------------------------------ the reader
class OffsetsReader:
    """One cluster's ``__consumer_offsets``, followed from a snapshot or the beginning."""

    def __init__(
        self,
        cluster: str,
        bootstrap: str,
        *,
        snapshot_path: Path | None = None,
        extra_config: Mapping[str, Any] | None = None,
        metadata_timeout: float = 5.0,
    ) -> None:
        self.cluster = cluster
        self.bootstrap = bootstrap
        self.snapshot_path = snapshot_path
        self._metadata_timeout = metadata_timeout
        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            # Required by the client; never joined (assign) and never committed to.
            "group.id": f"streamplane-lag-reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 50,  # a commit shows within a second, end to end
            "isolation.level": "read_committed",  # aborted transactional commits never count
            **QUIET,
            **(extra_config or {}),
        }
        self._consumer = Consumer(conf)
        self._commits: dict[CommitKey, CommitState] = {}
        self._partitions: list[int] = []
        self._cluster_id: str | None = None
        self._targets: dict[int, int] = {}  # high watermarks at open: "caught up" means these
        self._opened_at = 0.0
        self.status = ReaderStatus(cluster, bootstrap)

    # --------------------------------------------------------------- life cycle
    def open(self, snapshot: OffsetsSnapshot | None = None) -> list[CommitEvent]:
        """Assign every offsets partition (from the snapshot's positions when usable).

        ``snapshot``: one already read (``read_snapshot``), instead of reading
        ``snapshot_path``. Returns the snapshot's commits as events (empty on a cold
        start or when the snapshot is not usable: ``status.resumed_from_snapshot`` says
        which). Raises ``KafkaError`` when the cluster does not answer or has no offsets
        topic yet.
        """
        self._opened_at = time.monotonic()
        try:
            md = self._consumer.list_topics(OFFSETS_TOPIC, timeout=self._metadata_timeout)
        except KafkaException as exc:
            raise to_kafka_error(exc, f"metadata of {OFFSETS_TOPIC} on {self.cluster}") from exc
        topic = md.topics.get(OFFSETS_TOPIC)
        if topic is None or topic.error is not None or not topic.partitions:
            raise KafkaError(f"{self.cluster} has no {OFFSETS_TOPIC} topic yet", retriable=True)
        self._cluster_id = md.cluster_id
        self._partitions = sorted(topic.partitions)
        snapshot = self._check_snapshot(
            snapshot if snapshot is not None else read_snapshot(self.snapshot_path, self.cluster)
        )
        positions = snapshot.positions if snapshot is not None else {}
        events: list[CommitEvent] = []
        if snapshot is not None:
            self._commits = dict(snapshot.commits)
            events = [CommitEvent(k, s) for k, s in snapshot.commits.items()]
        self._targets = {}
        for p in self._partitions:
            low, high = self._watermarks(p)
            if high > positions.get(p, low):
                self._targets[p] = high
        self._consumer.assign(
            [
                TopicPartition(OFFSETS_TOPIC, p, positions.get(p, OFFSET_BEGINNING))
                for p in self._partitions
            ]
        )
        self.status = ReaderStatus(
            self.cluster,
            self.bootstrap,
            resumed_from_snapshot=snapshot is not None,
            snapshot_commits=len(events),
            commits_tracked=len(self._commits),
        )
        self._check_caught_up()
        return events

    def close(self) -> None:
        self._consumer.close()

    # --------------------------------------------------------------- reading
    def poll(self, timeout: float = 0.1, max_records: int = 5_000) -> list[CommitEvent]:
        """Read what arrived (waiting up to ``timeout``): commits and deletions, in log order
        per offsets partition. Group metadata and unknown record types are skipped."""
        try:
            messages = consume_available(self._consumer, max_records, timeout)
        except KafkaException as exc:
            raise to_kafka_error(exc, f"reading {OFFSETS_TOPIC} on {self.cluster}") from exc
        events: list[CommitEvent] = []
        undecodable = 0
        latest_ms: int | None = None
        commits = self._commits
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.fatal():
                    raise KafkaError(f"{self.cluster}: {err.str()}", code=err.name(), fatal=True)
                continue  # partition EOF and transient errors: librdkafka carries on
            raw_key = msg.key()
            if raw_key is None:
                undecodable += 1
                continue
            try:
                record = decode_record(raw_key, msg.value())
            except CodecError as exc:
                undecodable += 1
                log.warning("%s: undecodable offsets record: %s", self.cluster, exc)
                continue
            kind = type(record)
            if kind is OffsetCommit:
                assert isinstance(record, OffsetCommit)
                key = (record.group, record.topic, record.partition)
                state = commit_state(record)
                commits[key] = state
                events.append(CommitEvent(key, state))
                latest_ms = record.commit_timestamp_ms
            elif kind is OffsetTombstone:
                assert isinstance(record, OffsetTombstone)
                key = (record.group, record.topic, record.partition)
                if commits.pop(key, None) is not None:
                    events.append(CommitEvent(key, None))
        st = self.status
        if messages or undecodable:
            st.records_read += len(messages)
            st.undecodable += undecodable
            st.commits_tracked = len(commits)
            if latest_ms is not None:
                st.last_record_ms = latest_ms
        if not st.caught_up:
            self._check_caught_up()
        return events

    def commits(self) -> dict[CommitKey, CommitState]:
        """The last commit of every key (a copy)."""
        return dict(self._commits)

    def positions(self) -> dict[int, int]:
        """The next offset to read in each offsets partition (only those read from)."""
        out: dict[int, int] = {}
        for tp in self._consumer.position(
            [TopicPartition(OFFSETS_TOPIC, p) for p in self._partitions]
        ):
            if tp.offset >= 0:
                out[tp.partition] = tp.offset
        return out

    # --------------------------------------------------------------- snapshot
    def save_snapshot(
        self,
        now_ms: int | None = None,
        ends: Mapping[tuple[str, int], LogEnd] | None = None,
        timestamps: Mapping[CommitKey, tuple[int, int]] | None = None,
    ) -> bool:
        """Write the snapshot (atomically), with the last known ``ends`` and the looked-up
        ``timestamps`` of committed records (``with_timestamps``) when given. False when
        there is nowhere or nothing to save."""
        if self.snapshot_path is None or not self._partitions:
            return False
        positions = self.positions()
        if not positions and not self._commits:
            return False
        snapshot = OffsetsSnapshot(
            self._cluster_id,
            positions,
            with_timestamps(self._commits, timestamps) if timestamps else self._commits,
            now_ms if now_ms is not None else int(time.time() * 1000),
            dict(ends or {}),
        )
        path = self.snapshot_path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(snapshot.to_json())
        os.replace(tmp, path)
        return True

    def _check_snapshot(self, snapshot: OffsetsSnapshot | None) -> OffsetsSnapshot | None:
        """The snapshot if it is of this cluster and its positions are still in the log."""
        if snapshot is None:
            return None
        path = self.snapshot_path
        if snapshot.cluster_id != self._cluster_id:
            log.warning(
                "%s: snapshot %s is of cluster id %s, not %s: reading from the beginning",
                self.cluster,
                path,
                snapshot.cluster_id,
                self._cluster_id,
            )
            return None
        for p, position in snapshot.positions.items():
            low, high = self._watermarks(p)
            if not low <= position <= high:  # the topic was truncated or recreated
                log.warning("%s: snapshot position %d of partition %d is gone", self.cluster, p, p)
                return None
        return snapshot

    # --------------------------------------------------------------- helpers
    def _watermarks(self, partition: int) -> tuple[int, int]:
        try:
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(OFFSETS_TOPIC, partition), timeout=self._metadata_timeout
            )
        except KafkaException as exc:
            raise to_kafka_error(exc, f"watermarks of {OFFSETS_TOPIC} on {self.cluster}") from exc
        return int(low), int(high)

    def _check_caught_up(self) -> None:
        targets = self._targets
        if targets:
            for tp in self._consumer.position([TopicPartition(OFFSETS_TOPIC, p) for p in targets]):
                if tp.offset < targets[tp.partition]:  # also: -1001 (nothing read yet)
                    return
        st = self.status
        st.caught_up = True
        st.catch_up_s = time.monotonic() - self._opened_at
        log.info(
            "%s: %s caught up in %.2fs (%s, %d records read, %d commits tracked)",
            self.cluster,
            OFFSETS_TOPIC,
            st.catch_up_s,
            "resumed from snapshot" if st.resumed_from_snapshot else "read from the beginning",
            st.records_read,
            len(self._commits),
        )


# ------------------------------------------------------------------ log ends, timestamps
# Errors that say the partition's leadership moved (or the client's view of it is old):
# after a metadata refresh the partition is asked again at once, in the same pass.
LEADERSHIP_MOVED = frozenset(
    {
        "NOT_LEADER_FOR_PARTITION",
        "NOT_LEADER_OR_FOLLOWER",
        "LEADER_NOT_AVAILABLE",
        "UNKNOWN_TOPIC_OR_PART",
        "_UNKNOWN_PARTITION",
        *STALE_LEADER_EPOCH,
    }
)
# How long past its request timeout a ListOffsets call is waited for: librdkafka answers
# a partition whose leader did not reply at the timeout (offset -1001, no error); a
# Python deadline equal to the timeout lost that race and left every partition out.
_ANSWER_SLACK_S = 0.5
# A partition the metadata does not list (a topic created since, or deleted while a
# group's commits on it are still tracked) has its leader looked up at most this often:
# not a metadata request of the whole cluster at every poll for a deleted topic.
_UNLISTED_REFRESH_S = 10.0

OffsetAsk = tuple[bool, tuple[str, int]]
"""(earliest, (topic, partition)): one offset to ask for."""


class LogEnds:
    """Log-end offsets (high watermarks) and log start offsets of many partitions.

    One ListOffsets call per leader broker (and kind of offset), all in flight at once
    and each bounded by the request timeout: librdkafka answers a call as a whole, so a
    single call waited for the slowest leader, and a dead broker held every partition's
    answer for the full timeout. Leaders come from the cluster's metadata, read when a
    partition is not in it yet and again after any failure. A partition that fails (an
    error, no answer, an offset of -1001) is asked again once in the same pass after
    that refresh, when its leader changed or the error says leadership moved: after a
    leader election the new leader answers within the pass instead of the client's
    cached leader timing out pass after pass (measured, librdkafka 2.16: an admin client
    that never reads metadata kept asking the dead broker for 40 s and more).
    ``failures`` says why each partition of the last pass was left out."""

    def __init__(self, bootstrap: str, extra_config: Mapping[str, Any] | None = None) -> None:
        self._admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET, **(extra_config or {})})
        self._leaders: dict[tuple[str, int], int] = {}
        self._unlisted_refresh_due = 0.0  # monotonic
        self.failures: dict[tuple[str, int], str] = {}

    def fetch(
        self, partitions: Iterable[tuple[str, int]], timeout: float = 5.0, *, earliest: bool = False
    ) -> dict[tuple[str, int], int]:
        """End offset (with ``earliest``: log start offset) per (topic, partition);
        partitions that fail are left out. ``timeout`` bounds each broker's request."""
        wanted = list(partitions)
        ends, starts = self.fetch_pass(
            () if earliest else wanted, wanted if earliest else (), timeout
        )
        return starts if earliest else ends

    def fetch_pass(
        self,
        ends: Iterable[tuple[str, int]],
        starts: Iterable[tuple[str, int]] = (),
        timeout: float = 2.0,
    ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
        """(end offsets of ``ends``, log start offsets of ``starts``), asked together:
        one request per leader broker and kind, each bounded by ``timeout`` (plus a
        metadata refresh and one retry of what failed when leadership moved). Partitions
        that fail are left out (``failures`` says why)."""
        asks: set[OffsetAsk] = {(False, tp) for tp in ends}
        asks.update((True, tp) for tp in starts)
        self.failures = {}
        if not asks:
            return {}, {}
        unanswered = False  # a metadata request of this pass went unanswered
        if self._unlisted_due(tp for _, tp in asks):
            # A new topic: where its partitions lead.
            unanswered = not self._refresh_leaders(timeout)
        answered, failed = self._ask(asks, timeout)
        if failed:
            leaders = self._leaders
            asked_of = {tp: leaders.get(tp, -1) for _, tp in failed}
            # Learn the current leaders (and epochs): librdkafka's admin client does not
            # after a leader change or a broker restart (FENCED_LEADER_EPOCH). Only the
            # partitions of unlisted topics failing: no more often than they are looked
            # up; nor again when the cluster has just not answered one.
            if not unanswered and (
                any(tp in leaders for tp in asked_of) or self._unlisted_due(asked_of)
            ):
                self._refresh_leaders(timeout)
            leaders = self._leaders
            retry = {
                ask
                for ask, why in failed.items()
                if leaders.get(ask[1], -1) >= 0
                and (leaders[ask[1]] != asked_of[ask[1]] or why in LEADERSHIP_MOVED)
            }
            if retry:
                again, still = self._ask(retry, timeout)
                answered.update(again)
                for ask in again:
                    del failed[ask]
                failed.update(still)
        self.failures = {tp: why for (_, tp), why in failed.items()}
        out_ends: dict[tuple[str, int], int] = {}
        out_starts: dict[tuple[str, int], int] = {}
        for (earliest, tp), offset in answered.items():
            (out_starts if earliest else out_ends)[tp] = offset
        return out_ends, out_starts

    def _ask(
        self, asks: Iterable[OffsetAsk], timeout: float
    ) -> tuple[dict[OffsetAsk, int], dict[OffsetAsk, str]]:
        """One ListOffsets call per (kind, leader), all in flight at once; (answers,
        failures with why)."""
        calls: dict[tuple[bool, int], dict[TopicPartition, OffsetSpec]] = {}
        leaders = self._leaders
        for earliest, tp in asks:
            spec = (
                OffsetSpec.earliest()  # type: ignore[no-untyped-call]
                if earliest
                else OffsetSpec.latest()  # type: ignore[no-untyped-call]
            )
            calls.setdefault((earliest, leaders.get(tp, -1)), {})[TopicPartition(*tp)] = spec
        answered: dict[OffsetAsk, int] = {}
        failed: dict[OffsetAsk, str] = {}
        pending: list[tuple[OffsetAsk, int, Future[Any]]] = []
        for (earliest, leader), request in calls.items():
            try:
                futures = self._admin.list_offsets(request, request_timeout=timeout)
            except (KafkaException, ValueError, TypeError) as exc:
                for asked in request:
                    failed[(earliest, (asked.topic, asked.partition))] = f"{exc}"
                continue
            pending.extend(
                ((earliest, (asked.topic, asked.partition)), leader, fut)
                for asked, fut in futures.items()
            )
        wait([fut for _, _, fut in pending], timeout=timeout + _ANSWER_SLACK_S)
        for ask, leader, fut in pending:
            if not fut.done():
                failed[ask] = _no_answer(leader, timeout)
                continue
            try:
                offset = int(fut.result(timeout=0).offset)
            except KafkaException as exc:
                failed[ask] = to_kafka_error(exc, "").code or str(exc)
            except Exception as exc:  # the whole call failed: librdkafka says why
                failed[ask] = str(exc) or type(exc).__name__
            else:
                if offset >= 0:
                    answered[ask] = offset
                else:  # -1001: the leader did not answer within the request timeout
                    failed[ask] = _no_answer(leader, timeout)
        return answered, failed

    def _unlisted_due(self, partitions: Iterable[tuple[str, int]]) -> bool:
        """Whether a partition the metadata does not list is among ``partitions`` and
        may be looked up now (``_UNLISTED_REFRESH_S`` after the last metadata read)."""
        if time.monotonic() < self._unlisted_refresh_due:
            return False
        leaders = self._leaders
        return any(tp not in leaders for tp in partitions)

    def _refresh_leaders(self, timeout: float) -> bool:
        """Read the cluster's metadata: the leader of every partition, and librdkafka's
        cache learns them too. False (the leaders kept as they were) when the cluster
        does not answer."""
        try:
            md = self._admin.list_topics(timeout=timeout)
        except KafkaException:
            return False
        self._unlisted_refresh_due = time.monotonic() + _UNLISTED_REFRESH_S
        self._leaders = {
            (topic, p): pm.leader
            for topic, tm in md.topics.items()
            if tm.error is None
            for p, pm in tm.partitions.items()
        }
        return True


def _no_answer(leader: int, timeout: float) -> str:
    who = f"broker {leader}" if leader >= 0 else "the leader"
    return f"no answer from {who} within {timeout:g}s"


class TimestampLookup:
    """The timestamp of the record at a given offset, fetched (for groups whose commits
    carry no low-watermark timestamp). Stream topics use LogAppendTime, so this is the
    ingestion time. A missing offset (compaction, a transaction marker) gives the next
    record's timestamp: the first record the group has not processed."""

    def __init__(self, bootstrap: str, extra_config: Mapping[str, Any] | None = None) -> None:
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"streamplane-lag-lookup-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": False,
                "fetch.wait.max.ms": 50,
                "fetch.max.bytes": 1 << 20,
                "max.partition.fetch.bytes": 64 << 10,
                **QUIET,
                **(extra_config or {}),
            }
        )

    def lookup(
        self, wanted: Iterable[tuple[str, int, int]], timeout: float = 1.0
    ) -> dict[tuple[str, int, int], int]:
        """{(topic, partition, offset): timestamp ms} for those found within ``timeout``."""
        want = {(t, p): o for t, p, o in wanted}
        if not want:
            return {}
        self._consumer.assign([TopicPartition(t, p, o) for (t, p), o in want.items()])
        out: dict[tuple[str, int, int], int] = {}
        deadline = time.monotonic() + timeout
        try:
            while want and (left := deadline - time.monotonic()) > 0:
                for msg in consume_available(
                    self._consumer, min(len(want) * 4, 1000), min(left, 0.2)
                ):
                    if msg.error() is not None:
                        continue
                    tp = (msg.topic() or "", msg.partition() or 0)
                    offset = want.get(tp)
                    if offset is None or (msg.offset() or 0) < offset:
                        continue
                    ts = msg.timestamp()[1]
                    if ts >= 0:
                        out[(tp[0], tp[1], offset)] = ts
                    del want[tp]
        finally:
            self._consumer.unassign()
        return out

    def close(self) -> None:
        self._consumer.close()
