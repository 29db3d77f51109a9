"""Reading and replaying a stream's dlq lane."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka import KafkaError as _RawKafkaError
from confluent_kafka import KafkaException as _RawKafkaException

from streamplane.client.commit_store import is_topic_missing_error
from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.partition_state import PartitionKey
from streamplane.client.producer import StreamProducer
from streamplane.client.provenance import (
    PREFIX,
    REPLAYED_FROM,
    origin_of,
    read_provenance,
    record_id,
    replay_headers,
)
from streamplane.core.routing import (
    DLQ_LANE,
    LEGACY_DLQ_REPLAY_GROUP,
    Segment,
    SegmentState,
    dlq_replay_group,
)
from streamplane.core.text import counted
from streamplane.exceptions import (
    ConfigError,
    ControlPlaneError,
    KafkaError,
    NotFound,
    ProduceError,
    RecordTooLarge,
)
from streamplane.kafka.admin import KafkaAdmin, to_kafka_error
from streamplane.kafka.clients import consume_available, consumer_config

log = logging.getLogger(__name__)

# A replay acks, and commits, its dead letters a batch at a time, once their copies
# are delivered: a replay killed mid-way sends at most this many again.
_BATCH = 500
# How long a replay waits at its start for each cluster to tell the end offsets of its
# dlq partitions (where the run stops): one that does not tell in time has them
# reported as unread, not replayed.
_ENDS_TIMEOUT_S = 5.0
# How long a replay waits to be assigned the dlq partitions it has to read (the group's
# Assigner grants none for a moment after the control plane starts, nor a partition a
# killed replay's member still holds until its lease runs out): those not assigned by
# then are reported as unread (a run used to end after its idle time having replayed
# nothing, and said so as if there were nothing to replay).
_ASSIGN_WAIT_S = 15.0
# How long a replay waits for its copies' delivery at a time before it looks whether
# the stream was deleted meanwhile (its copies are then never delivered: flushing
# waited ~30 s for librdkafka to give up on the deleted topic), and in all.
_DELIVERY_STEP_S = 0.2
_DELIVERY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class DeadLetter:
    """A record of the dlq lane: ``provenance`` is its ``sp-dlq-*`` headers (without the
    prefix), ``headers`` the others, in order: the record's own ones (``content-type``,
    ...) and, on a replayed copy that was dead-lettered again, ``sp-origin`` and
    ``sp-replayed-from``."""

    cluster: str
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    provenance: dict[str, str]
    headers: tuple[tuple[str, bytes | None], ...] = ()
    # Its segment is retired: `dlq replay` does not read it (the stream's replay group
    # settled it, or an operator retired it by hand to give its dead letters up).
    retired: bool = False

    @property
    def replayed_from(self) -> str | None:
        """The dead letter this one is a replayed copy of (``topic:partition:offset``),
        if a replay sent it back and it was dead-lettered again (a copy carries one; one
        replayed by an older version of the library may carry one per replay it went
        through: the latest one's)."""
        found = None
        for k, v in self.headers:
            if k == REPLAYED_FROM and v is not None:
                found = v.decode(errors="replace")
        return found

    @property
    def origin(self) -> str:
        """The original record this one stands for (``cluster:topic:partition:offset``),
        which its replayed copy carries as ``sp-origin``: the same for every dead letter
        of one record, duplicates and replayed copies dead-lettered again included
        (``provenance.origin_of``)."""
        dlq_record = record_id(self.cluster, self.topic, self.partition, self.offset)
        return origin_of(self.headers, self.provenance, dlq_record)


@dataclass(frozen=True)
class DlqListing:
    """What ``list_dead_letters`` read, and the dlq partitions it could not read to
    their end (their cluster is down: it did not say where to start, or stopped
    answering mid-read), so a listing is never silently short."""

    letters: list[DeadLetter]
    unread: list[PartitionKey]
    more: bool = False  # the limit was reached and at least one more record follows
    # Those of ``unread`` whose cluster answers without them: their topic is missing.
    missing: frozenset[PartitionKey] = frozenset()


def describe_unreadable(
    unread: list[PartitionKey], missing: frozenset[PartitionKey], why: str
) -> str:
    """``unread`` partitions for a message (``describe_unread``), those whose topic is
    missing (``missing``: their cluster answers without it) told apart from the others,
    which ``why`` explains (the cluster does not answer, say)."""
    parts = []
    others = [k for k in unread if k not in missing]
    if others:
        parts.append(f"{describe_unread(others)} ({why})")
    gone = [k for k in unread if k in missing]
    if gone:
        parts.append(
            f"{describe_unread(gone)} (the topic is missing: the cluster answers without it)"
        )
    return "; ".join(parts)


def describe_unread(unread: list[PartitionKey], shown: int = 5) -> str:
    """``unread`` partitions for a message: how many, on which clusters, and which (the
    first ``shown`` by name, then how many more)."""
    keys = sorted(set(unread), key=lambda k: (k.cluster, k.topic, k.partition))
    clusters = _and(sorted({k.cluster for k in keys}))
    names = [f"{k.topic}[{k.partition}]" for k in keys[:shown]]
    if len(keys) > shown:
        names.append(f"{counted(len(keys) - shown, 'other')}")
    return f"{len(keys)} of the dlq partitions on {clusters} could not be read: {_and(names)}"


def _and(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) < 2 else f"{', '.join(items[:-1])} and {items[-1]}"


def _drain(consumer: StreamConsumer, idle_s: float, each: Callable[[StreamMessage], bool]) -> None:
    """Hand records to ``each`` until it returns False or nothing arrives for ``idle_s``."""
    last = time.monotonic()
    while time.monotonic() - last < idle_s:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        last = time.monotonic()
        if not each(msg):
            return


def _dead_letter(
    cluster: str,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] | None,
    retired: bool = False,
) -> DeadLetter:
    return DeadLetter(
        cluster,
        topic,
        partition,
        offset,
        key,
        value,
        read_provenance(headers),
        tuple((k, v) for k, v in headers or [] if not k.startswith(PREFIX)),
        retired,
    )


def list_dead_letters(
    client: ControlPlaneClient, stream: str, limit: int = 100, idle_s: float = 2.0
) -> DlqListing:
    """Up to ``limit`` records of the dlq lane, oldest first, whether more follow, and
    the partitions that could not be read. Commits nothing.

    Every dead letter still in Kafka is listed: those of the readable dlq segments, read
    by a read-only ``StreamConsumer``, and before them those of the retired ones, which
    no consumer reads (``_RetiredRead``; a segment the sealer retires during the listing
    is read too). A dlq segment a failover left behind is retired once the stream's
    replay group has settled it, and its dead letters used to leave the listing then,
    while the replayed ones of the active segment stayed in it."""
    out: list[DeadLetter] = []
    consumer = StreamConsumer(
        stream, f"sp-dlq-list-{time.time_ns()}", client, lanes=[DLQ_LANE], read_only=True
    )
    with consumer:
        # After the consumer read the routing: a segment retired in between is read by
        # this, and one retired after by the second look below (both: listed once).
        retired = _RetiredRead(client, _retired_dlq_segments(client, stream), limit + 1, idle_s)

        def each(msg: StreamMessage) -> bool:
            out.append(
                _dead_letter(
                    msg.cluster,
                    msg.topic,
                    msg.partition,
                    msg.offset,
                    msg.key,
                    msg.value,
                    msg.headers,
                )
            )
            msg.ack()  # nothing is committed (read-only); it keeps the in-flight window open
            return len(out) <= limit  # one past the limit: whether more follow

        _drain(consumer, idle_s, each)
        unread = consumer.unfinished_partitions() if len(out) <= limit else []
    try:
        looked_at = {(seg.cluster, seg.topic) for seg in retired.segments}
        retired_since = [
            seg
            for seg in _retired_dlq_segments(client, stream)
            if (seg.cluster, seg.topic) not in looked_at
        ]
    except ControlPlaneError as exc:  # (its segments were read while they were readable)
        log.warning("%s: dlq segments retired during the listing not looked for: %s", stream, exc)
        retired_since = []
    if retired_since:
        retired.read(client, retired_since)
    old = retired.result()
    missing = _missing_topics(client, stream, unread) if unread else frozenset()
    seen = {(d.cluster, d.topic, d.partition, d.offset) for d in old.letters}
    letters = old.letters + [
        d for d in out if (d.cluster, d.topic, d.partition, d.offset) not in seen
    ]
    more = len(letters) > limit
    unread = (
        []
        if more
        else sorted({*unread, *old.unread}, key=lambda k: (k.cluster, k.topic, k.partition))
    )
    return DlqListing(letters[:limit], unread, more=more, missing=missing)


def _retired_dlq_segments(client: ControlPlaneClient, stream: str) -> list[Segment]:
    """The retired segments of ``stream``'s dlq lane, oldest first."""
    table = client.routing(stream)
    return sorted(
        (s for s in table.segments if s.lane == DLQ_LANE and s.state is SegmentState.RETIRED),
        key=lambda s: (s.epoch, s.cluster, s.topic),
    )


@dataclass(frozen=True)
class _RetiredLetters:
    """What ``_RetiredRead`` read: the dead letters, oldest segment first, and the
    partitions it could not read to their end."""

    letters: list[DeadLetter]
    unread: list[PartitionKey]


class _RetiredRead:
    """The dead letters of retired dlq segments, read straight from their topics (no
    group: nothing is committed) in the background, a thread per segment, so a
    cluster that does not answer holds up none of the others: up to ``limit`` of each
    segment, from its first record still kept to its end. A segment whose topic is
    missing (deleted since) has none; one whose cluster is no longer registered is
    passed over; the partitions of one whose cluster does not answer (or stops
    answering: nothing arrives for ``idle_s``) are unread."""

    def __init__(
        self, client: ControlPlaneClient, segments: list[Segment], limit: int, idle_s: float
    ) -> None:
        self.segments: list[Segment] = []
        self._limit = limit
        self._idle_s = idle_s
        self._threads: list[threading.Thread] = []
        self._answers: dict[int, tuple[list[DeadLetter], list[PartitionKey]]] = {}
        self.read(client, segments)

    def read(self, client: ControlPlaneClient, segments: list[Segment]) -> None:
        """Read ``segments`` too."""
        for seg in segments:
            index = len(self.segments)
            self.segments.append(seg)
            try:
                bootstrap = client.cluster_bootstrap(seg.cluster)
            except NotFound:  # only a retired segment outlives its cluster's registration
                log.info("dlq segment %s not listed: cluster %s is not registered any more",
                         seg.topic, seg.cluster)  # fmt: skip
                self._answers[index] = ([], [])
                continue
            thread = threading.Thread(
                target=self._read_one,
                args=(index, bootstrap, seg),
                name=f"sp-dlq-retired-{seg.cluster}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)

    def _read_one(self, index: int, bootstrap: str, seg: Segment) -> None:
        keys = [PartitionKey(seg.cluster, seg.topic, p) for p in range(seg.partitions)]
        try:
            self._answers[index] = _read_retired(bootstrap, seg, self._limit, self._idle_s)
        except Exception as exc:  # raw librdkafka errors too: its partitions are unread
            log.warning("cluster %s (%s): retired dlq segment %s not read: %s",
                        seg.cluster, bootstrap, seg.topic, exc)  # fmt: skip
            self._answers[index] = ([], keys)

    def result(self) -> _RetiredLetters:
        """Once every segment is read (each read ends by itself: the cluster's
        timeouts, ``idle_s`` without a record)."""
        for thread in self._threads:
            thread.join()
        letters: list[DeadLetter] = []
        unread: list[PartitionKey] = []
        for index in range(len(self.segments)):
            got, not_read = self._answers[index]
            letters += got
            unread += not_read
        return _RetiredLetters(letters, unread)


def _read_retired(
    bootstrap: str, seg: Segment, limit: int, idle_s: float
) -> tuple[list[DeadLetter], list[PartitionKey]]:
    """Up to ``limit`` records of retired dlq segment ``seg`` (its topic on
    ``bootstrap``), partition by partition, and the partitions not read to their end
    (none when the limit was reached). Raises KafkaError if the cluster does not tell
    where the partitions end."""
    consumer = Consumer(
        consumer_config(bootstrap, f"sp-dlq-list-{time.time_ns()}", {"enable.partition.eof": True})
    )
    try:
        try:
            meta = consumer.list_topics(seg.topic, timeout=_ENDS_TIMEOUT_S).topics.get(seg.topic)
        except _RawKafkaException as exc:
            raise to_kafka_error(exc, f"metadata of {seg.topic}") from exc
        if meta is None or is_topic_missing_error(meta.error):
            return [], []  # deleted since it was retired: none of its letters is kept
        if meta.error is not None:
            raise KafkaError(f"metadata of {seg.topic}: {meta.error.str()}")
        ends: dict[int, int] = {}  # the partitions with records, to be read up to there
        for p in sorted(meta.partitions):
            try:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(seg.topic, p), timeout=_ENDS_TIMEOUT_S
                )
            except _RawKafkaException as exc:
                raise to_kafka_error(exc, f"end offsets of {seg.topic}") from exc
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(seg.topic, p, OFFSET_BEGINNING) for p in ends])
        letters: list[DeadLetter] = []
        last = time.monotonic()
        while ends and len(letters) < limit and time.monotonic() - last < idle_s:
            for msg in consume_available(consumer, 500, 0.2):
                p, error = msg.partition() or 0, msg.error()
                if error is not None:
                    if error.code() == _RawKafkaError._PARTITION_EOF:
                        ends.pop(p, None)
                    continue
                last = time.monotonic()
                offset = msg.offset() or 0
                if offset >= ends.get(p, 0) - 1:
                    ends.pop(p, None)
                headers: list[tuple[str, bytes | None]] | None = msg.headers()  # type: ignore[assignment]
                letter = _dead_letter(
                    seg.cluster, seg.topic, p, offset, msg.key(), msg.value(), headers, retired=True
                )
                letters.append(letter)
        letters.sort(key=lambda d: (d.partition, d.offset))
        if len(letters) >= limit:
            return letters[:limit], []
        return letters, [PartitionKey(seg.cluster, seg.topic, p) for p in sorted(ends)]
    finally:
        consumer.close()


def _missing_topics(
    client: ControlPlaneClient, stream: str, unread: list[PartitionKey]
) -> frozenset[PartitionKey]:
    """Those of ``unread`` whose cluster answers without them (their topic is missing),
    asked within ``_ENDS_TIMEOUT_S``; none if the control plane cannot say where the
    dlq lane is (this only tells the reason)."""
    try:
        segments = client.routing(stream).readable([DLQ_LANE])
    except ControlPlaneError as exc:
        log.warning("%s: not asked why dlq partitions could not be read: %s", stream, exc)
        return frozenset()
    where = {(k.cluster, k.topic) for k in unread}
    asked = [seg for seg in segments if (seg.cluster, seg.topic) in where]
    return _EndsRead(client, asked, _ENDS_TIMEOUT_S, ask_sealed=True).result().missing & set(unread)


@dataclass(frozen=True)
class ReplayResult:
    """What one replay run did: the dead letters it replayed, and how many newer ones
    (they reached the dlq lane after it started) it left for the next run."""

    replayed: int
    newer: int


@dataclass(frozen=True)
class _Ends:
    """Each dlq partition's end offset, and the partitions whose end could not be read
    (``missing``, those of them whose cluster answered without them: their topic is
    missing)."""

    ends: dict[PartitionKey, int]
    unknown: frozenset[PartitionKey]
    missing: frozenset[PartitionKey] = frozenset()


class _EndsRead:
    """The end offsets of ``segments``' partitions, read in the background: a sealed
    segment's from the routing, the others' from their cluster, each cluster on a thread
    of its own, so a cluster that does not answer holds up none of the others, and
    ``result`` waits at most ``timeout`` seconds (and so does a run that reads a dead
    cluster's: the consumer meanwhile waits as long for where to start). With
    ``ask_sealed``, a sealed segment's cluster is asked too (whether its topic is there)."""

    def __init__(
        self,
        client: ControlPlaneClient,
        segments: list[Segment],
        timeout: float,
        ask_sealed: bool = False,
    ) -> None:
        self._ends: dict[PartitionKey, int] = {}
        self._asked: dict[str, list[Segment]] = {}
        for seg in segments:
            sealed = seg.sealed_end_offsets
            if (
                not ask_sealed
                and seg.state is SegmentState.SEALED
                and all(p in sealed for p in range(seg.partitions))
            ):
                for p in range(seg.partitions):
                    self._ends[PartitionKey(seg.cluster, seg.topic, p)] = sealed[p]
            else:
                self._asked.setdefault(seg.cluster, []).append(seg)
        self._deadline = time.monotonic() + timeout
        self._answers: dict[str, dict[PartitionKey, int]] = {}  # written by the threads
        self._threads: dict[str, threading.Thread] = {}
        for cluster, segs in self._asked.items():
            bootstrap = client.cluster_bootstrap(cluster)
            thread = threading.Thread(
                target=self._ask,
                args=(cluster, bootstrap, segs, timeout),
                name=f"sp-dlq-ends-{cluster}",
                daemon=True,  # one still waiting for a dead cluster ends at its timeout
            )
            thread.start()
            self._threads[cluster] = thread

    def _ask(self, cluster: str, bootstrap: str, segments: list[Segment], timeout: float) -> None:
        got: dict[PartitionKey, int] = {}
        try:
            admin = KafkaAdmin(bootstrap)
            for seg in segments:
                # (none for a topic that is missing)
                for p, end in admin.end_offsets(seg.topic, timeout).items():
                    got[PartitionKey(cluster, seg.topic, p)] = end
        except Exception as exc:  # raw librdkafka errors too: its partitions are unknown
            log.warning("cluster %s (%s): dlq end offsets not read: %s", cluster, bootstrap, exc)
            return
        self._answers[cluster] = got  # set only by a cluster that answered every question

    def result(self) -> _Ends:
        ends = dict(self._ends)
        unknown: set[PartitionKey] = set()
        missing: set[PartitionKey] = set()
        for cluster, thread in self._threads.items():
            thread.join(max(0.0, self._deadline - time.monotonic()))
            answered = not thread.is_alive() and cluster in self._answers
            got = self._answers[cluster] if answered else {}
            for seg in self._asked[cluster]:
                for p in range(seg.partitions):
                    key = PartitionKey(cluster, seg.topic, p)
                    if key in got:
                        ends[key] = got[key]
                    else:
                        unknown.add(key)
                        if answered:
                            missing.add(key)
            ends.update(got)  # partitions added since the routing was read
        return _Ends(ends, frozenset(unknown), frozenset(missing))


def take_over_legacy_progress(
    client: ControlPlaneClient, stream: str, segments: list[Segment], timeout: float
) -> frozenset[PartitionKey]:
    """Give ``stream``'s replay group (``dlq_replay_group``) the progress that the group
    all streams' replays shared before (``LEGACY_DLQ_REPLAY_GROUP``) committed on the
    partitions of ``segments`` on which it has committed nothing itself: the committed
    offset and its commit-log state, copied as they are, so that the first replay after
    an upgrade does not send again what an earlier one sent. The one place the old
    group is read; a replay calls it before its consumer reads where to start. Each
    cluster is asked on a thread of its own, and waited for at most ``timeout`` seconds.

    Returns the partitions of the clusters that did not answer in time (whether they
    have progress to take over is not known: a run must not replay them)."""
    keys: dict[str, list[PartitionKey]] = {}
    for seg in segments:
        keys.setdefault(seg.cluster, []).extend(
            PartitionKey(seg.cluster, seg.topic, p) for p in range(seg.partitions)
        )
    done: set[str] = set()  # written by the threads

    def take_over(cluster: str, bootstrap: str, on: list[PartitionKey]) -> None:
        try:
            taken = _take_over_on(bootstrap, stream, on, timeout)
        except Exception as exc:  # raw librdkafka errors too: its partitions are unknown
            log.warning(
                "cluster %s (%s): the earlier replays' progress on the dlq lane of %s "
                "not read: %s", cluster, bootstrap, stream, exc,
            )  # fmt: skip
            return
        if taken:
            log.info(
                "cluster %s: %s took over the progress of %s on %s", cluster,
                dlq_replay_group(stream), LEGACY_DLQ_REPLAY_GROUP, counted(taken, "dlq partition"),
            )  # fmt: skip
        done.add(cluster)

    deadline = time.monotonic() + timeout
    threads: dict[str, threading.Thread] = {}
    for cluster, on in keys.items():
        thread = threading.Thread(
            target=take_over,
            args=(cluster, client.cluster_bootstrap(cluster), on),
            name=f"sp-dlq-takeover-{cluster}",
            daemon=True,  # one still waiting for a dead cluster ends at its timeout
        )
        thread.start()
        threads[cluster] = thread
    unknown: set[PartitionKey] = set()
    for cluster, thread in threads.items():
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive() or cluster not in done:
            unknown.update(keys[cluster])
    return frozenset(unknown)


def _take_over_on(bootstrap: str, stream: str, keys: list[PartitionKey], timeout: float) -> int:
    """``take_over_legacy_progress`` on one cluster: how many partitions' progress was
    copied. Raises KafkaError if either group's commits cannot be read, or the copies
    cannot be committed."""
    ours = Consumer(consumer_config(bootstrap, dlq_replay_group(stream)))
    try:
        asked = [TopicPartition(k.topic, k.partition) for k in keys]
        none_yet = [
            TopicPartition(tp.topic, tp.partition)
            for tp in _committed(ours, asked, timeout)
            if tp.offset < 0
        ]
        if not none_yet:
            return 0
        legacy = Consumer(consumer_config(bootstrap, LEGACY_DLQ_REPLAY_GROUP))
        try:
            theirs = [tp for tp in _committed(legacy, none_yet, timeout) if tp.offset >= 0]
        finally:
            legacy.close()
        if not theirs:
            return 0
        copies = [_offset(tp.topic, tp.partition, tp.offset, tp.metadata) for tp in theirs]
        try:
            answer = ours.commit(offsets=copies, asynchronous=False)
        except _RawKafkaException as exc:
            raise to_kafka_error(exc, "commit the earlier replays' progress") from exc
        _raise_partition_error(answer or [], "commit the earlier replays' progress")
        return len(copies)
    finally:
        ours.close()


def _committed(
    consumer: Consumer, tps: list[TopicPartition], timeout: float
) -> list[TopicPartition]:
    """The committed offsets (and metadata) of ``consumer``'s group on ``tps``."""
    try:
        got = list(consumer.committed(tps, timeout=timeout))
    except _RawKafkaException as exc:
        raise to_kafka_error(exc, "read committed offsets") from exc
    _raise_partition_error(got, "read committed offsets")
    return got


def _offset(topic: str, partition: int, offset: int, metadata: str | None) -> TopicPartition:
    """An offset to commit, with its metadata (a commit without any reads back None,
    which TopicPartition does not take)."""
    if metadata is None:
        return TopicPartition(topic, partition, offset)
    return TopicPartition(topic, partition, offset, metadata=metadata)


def _raise_partition_error(tps: list[TopicPartition], context: str) -> None:
    for tp in tps:
        if tp.error is not None:
            raise KafkaError(f"{context} of {tp.topic}[{tp.partition}]: {tp.error}")


def replay_dead_letters(
    client: ControlPlaneClient,
    stream: str,
    to_lane: str | None = None,
    idle_s: float = 2.0,
    progress: Callable[[int], None] = lambda _: None,
) -> ReplayResult:
    """Send the dlq lane's records back to ``to_lane`` (default: the lane each came
    from, as its ``sp-dlq-lane`` header says; the stream's first lane for a record
    without provenance headers or from a lane the stream no longer has), up to the
    dead letters present when the run starts.

    The run takes each dlq partition's end offset first, and replays only the records
    below it: those that reach the dlq lane meanwhile (a group rejecting what this run
    sends back, say) are left for the next run, unacked (counted in ``newer``), so a run
    always ends. It ends once every partition was read up to its end offset, or when no
    record below it arrives for ``idle_s`` seconds.

    Each dlq record is acked only after its copy is delivered, under the stream's replay
    group ``sp-dlq-replay.<stream>`` (``dlq_replay_group``: one per stream, so replays of
    different streams run at the same time), and the group's progress is committed after
    each batch of 500, so an interrupted replay resumes where it stopped and loses
    nothing; a killed one sends at most its last batch again. Each copy carries
    ``sp-origin``, the original record it stands for (``provenance.origin_of``: the
    same for the copies of a dead letter written twice, and kept by a copy
    dead-lettered and replayed again), for a consumer to drop repeats by, and
    ``sp-replayed-from``, the dead letter it came from. On a partition where the group
    has committed nothing yet, it starts from the progress of the group all streams'
    replays shared before, ``sp-dlq-replay`` (``take_over_legacy_progress``).
    Raises KafkaError, once the rest is replayed and committed, if some dlq partitions
    could not be read (their cluster is down, or did not tell their end offset when the
    run started): running it again replays those. Raises RecordTooLarge, once the rest
    is replayed, if some dead letters cannot be: written without their record
    (``sp-dlq-dropped``: it was over the stream's bound, and stays on its origin topic
    until retention) or over the bound themselves. Those are left unsettled in the
    replay group: every replay names them again. Raises NotFound, at once, if the
    stream is deleted meanwhile (its dlq lane is deleted with it), saying how many
    were replayed; the copies not delivered by then are given up on.
    """
    if to_lane == DLQ_LANE:
        raise ConfigError("cannot replay the dlq lane into itself")
    segments = client.routing(stream).readable([DLQ_LANE])
    ends_read = _EndsRead(client, segments, _ENDS_TIMEOUT_S)
    # Before the consumer reads where to start (meanwhile, the end offsets are read).
    not_taken_over = take_over_legacy_progress(client, stream, segments, _ENDS_TIMEOUT_S)
    replayed = 0
    with (
        StreamConsumer(stream, dlq_replay_group(stream), client, lanes=[DLQ_LANE]) as consumer,
        StreamProducer(stream, client) as producer,
    ):
        lanes = producer.routing.lanes
        if to_lane is not None and to_lane not in lanes:
            raise ConfigError(
                f"stream {stream!r} has no lane {to_lane!r} (lanes: {', '.join(lanes)})"
            )
        bounds = ends_read.result()
        if not_taken_over:  # not replayed: their start is not known (as if their end were not)
            bounds = _Ends(
                {k: end for k, end in bounds.ends.items() if k not in not_taken_over},
                bounds.unknown | not_taken_over,
            )
        # Partitions with records below their end offset not handed out yet.
        to_read = {k for k, end in bounds.ends.items() if end > 0}
        held: dict[PartitionKey, int] = {}  # records handed out and not acked, by partition
        batch: list[StreamMessage] = []
        not_replayable: list[tuple[StreamMessage, str]] = []

        def send_batch() -> None:
            nonlocal replayed
            _deliver(producer)
            for m in batch:
                m.ack()
                held[PartitionKey(m.cluster, m.topic, m.partition)] -= 1
            consumer.commit()  # so a killed replay sends at most this batch again
            if batch:  # (the last call's may be empty: its count was told already)
                replayed += len(batch)
                batch.clear()
                progress(replayed)

        def each(msg: StreamMessage) -> bool:
            """Replay ``msg`` if it is below its partition's end offset (True), else
            leave it for the next run (False: not progress)."""
            key = PartitionKey(msg.cluster, msg.topic, msg.partition)
            held[key] = held.get(key, 0) + 1
            end = bounds.ends.get(key, 0)  # 0: a segment or partition new since the start
            if msg.offset >= end - 1:
                to_read.discard(key)  # (offsets go up within a partition)
            if msg.offset >= end or key in bounds.unknown:
                return False
            origin = read_provenance(msg.headers)
            if "dropped" in origin:
                not_replayable.append((msg, f"its record ({origin['dropped']} bytes) was not kept"))
                return True
            lane = to_lane or origin.get("lane") or lanes[0]
            if lane not in lanes:
                lane = lanes[0]
            headers = replay_headers(
                msg.headers,
                origin_of(
                    msg.headers,
                    origin,
                    record_id(msg.cluster, msg.topic, msg.partition, msg.offset),
                ),
                f"{msg.topic}:{msg.partition}:{msg.offset}",
            )
            try:
                producer.send(msg.value, key=msg.key, headers=headers, lane=lane)
            except RecordTooLarge as exc:
                not_replayable.append((msg, str(exc)))
                return True
            batch.append(msg)
            if len(batch) >= _BATCH:
                send_batch()
            return True

        last = time.monotonic()
        assign_by = last + _ASSIGN_WAIT_S
        check_at = 0.0
        unassigned = set(to_read)
        try:
            while to_read and (
                time.monotonic() - last < idle_s
                or (to_read & unassigned and time.monotonic() < assign_by)
            ):
                if to_read & unassigned:
                    unassigned = to_read - _assigned(consumer)
                messages = consumer.poll_batch(_BATCH, 0.2)
                for msg in messages:
                    if each(msg):
                        last = time.monotonic()
                now = time.monotonic()
                if to_read and (not messages or now >= check_at):
                    check_at = now + 0.5
                    _drop_read_through(consumer, bounds.ends, held, to_read)
            send_batch()
        except NotFound as exc:  # the producer's send, or the consumer's poll, once told
            _give_up(producer)
            raise NotFound(
                f"stream {stream!r} was deleted during the replay, its dlq lane with it: "
                f"{counted(replayed, 'record')} replayed before it was"
            ) from exc
        # Partitions read up to their end offset are not unread for new records past it.
        unfinished = consumer.unfinished_partitions()
    unread = sorted(
        {k for k in unfinished if k in to_read} | (to_read & unassigned) | bounds.unknown,
        key=lambda k: (k.cluster, k.topic, k.partition),
    )
    newer = _newer(client, stream, bounds, {k.cluster for k in unread})
    left = f" ({counted(newer, 'newer dead letter')} left for the next replay)" if newer else ""
    if unread:
        why = "their cluster does not answer, or another replay holds them"
        raise KafkaError(
            f"replayed {counted(replayed, 'record')}{left}, but "
            f"{describe_unreadable(unread, bounds.missing, why)}: replay again"
        )
    if not_replayable:
        msg, why = not_replayable[0]
        origin = read_provenance(msg.headers)
        raise RecordTooLarge(
            f"replayed {counted(replayed, 'record')}{left}, but not "
            f"{counted(len(not_replayable), 'dead letter')}, left in the dlq lane; the "
            f"first, {msg.topic}[{msg.partition}]@{msg.offset} (from "
            f"{origin.get('topic', '?')}[{origin.get('partition', '?')}]"
            f"@{origin.get('offset', '?')} on {origin.get('cluster', '?')}): {why}"
        )
    return ReplayResult(replayed, newer)


def _deliver(producer: StreamProducer) -> None:
    """Wait until the copies sent are delivered, as ``producer.flush`` does (raising
    ProduceError for those that failed, or are still queued after
    ``_DELIVERY_TIMEOUT_S``), looking every ``_DELIVERY_STEP_S`` whether the stream was
    deleted meanwhile: raises NotFound at once if so (its topics are gone: the copies
    would only fail, after librdkafka's ~30 s wait for a topic it no longer sees)."""
    deadline = time.monotonic() + _DELIVERY_TIMEOUT_S
    while queued := producer.drain(_DELIVERY_STEP_S):
        producer.active_topic()  # raises NotFound once the routing watch says it is deleted
        if time.monotonic() >= deadline:
            raise ProduceError(
                f"{counted(queued, 'record')} replayed to stream {producer.stream!r} still "
                f"undelivered after {_DELIVERY_TIMEOUT_S:g}s (their dead letters are not "
                "acked: replay again)"
            )
    producer.raise_failures()


def _give_up(producer: StreamProducer) -> None:
    """Close ``producer`` without waiting for what it has queued (the stream is deleted:
    it never will be delivered)."""
    try:
        producer.close(0.0)
    except ProduceError as exc:
        log.info("replay: copies given up on as the stream is deleted: %s", exc)


def _assigned(consumer: StreamConsumer) -> set[PartitionKey]:
    return {
        PartitionKey(s["cluster"], s["topic"], s["partition"]) for s in consumer.partition_states()
    }


def _drop_read_through(
    consumer: StreamConsumer,
    ends: dict[PartitionKey, int],
    held: dict[PartitionKey, int],
    to_read: set[PartitionKey],
) -> None:
    """Drop from ``to_read`` the partitions with nothing below their end offset left to
    hand out: settled up to it by earlier runs, or fetched up to it with every record
    fetched and not settled in our hands (the rest were settled by earlier runs: skipped)."""
    for s in consumer.partition_states():
        key = PartitionKey(s["cluster"], s["topic"], s["partition"])
        if key not in to_read:
            continue
        end, low, fetched_to = ends[key], s["low_watermark"], s["next_fetch"]
        if (low is not None and low >= end) or (
            fetched_to is not None and fetched_to >= end and s["in_flight"] == held.get(key, 0)
        ):
            to_read.discard(key)


def _newer(client: ControlPlaneClient, stream: str, bounds: _Ends, skip_clusters: set[str]) -> int:
    """How many records reached the dlq lane past ``bounds`` (on the clusters that
    answered then, less ``skip_clusters``); 0 if the control plane cannot say where
    they are now (the replay is done: this only informs)."""
    try:
        segments = [
            s for s in client.routing(stream).readable([DLQ_LANE]) if s.cluster not in skip_clusters
        ]
        now = _EndsRead(client, segments, _ENDS_TIMEOUT_S).result()
    except ControlPlaneError as exc:
        log.warning("%s: newer dead letters not counted: %s", stream, exc)
        return 0
    return sum(
        max(0, end - bounds.ends.get(key, 0))
        for key, end in now.ends.items()
        if key not in bounds.unknown
    )
