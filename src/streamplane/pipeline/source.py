"""The ``streamplane`` Spark data source: read a stream wherever it lives, write to it.

Registered with ``spark.dataSource.register(StreamplaneDataSource)`` (``register(spark)``
does that), then ``spark.readStream.format("streamplane")`` (options in
``streamplane.pipeline.options``).

Reading (PySpark's Python data source API, 4.2):

- ``latestOffset(start, limit)`` runs on the driver. It re-reads the stream's routing
  from the control plane every micro-batch (keeping the last table if the control
  plane is down: fail-static), plans over every readable (active, draining, sealed)
  segment of the chosen lanes on every cluster, and applies admission control with
  lane priority (``streamplane.pipeline.planning``). A failover is picked up between
  two micro-batches: the new segment joins at its first offset, the draining one is
  read to its end. A partition whose watermarks cannot be read (its broker down, its
  leader moving) is left out alone, its offset held, until it answers; a cluster that
  does not answer at all is left out whole (see ``_watermarks``). With
  ``startingOffsets=latest`` such a partition joins where ``latest`` would have put it
  (``_where_latest_was``). ``maxBytesPerTrigger`` is met at the bytes per record of a
  sample of the records the micro-batch reads (``_sample_record_sizes``).
- ``partitions(start, end)`` cuts each Kafka partition's range into splits;
  ``read(split)`` runs on executors with confluent-kafka (assign + seek, read to the
  split's end offset) and yields ``pyarrow.RecordBatch`` es. Consumers are kept per
  Python worker and reused across tasks.
- ``commit(end)`` (driver, after Spark has committed the micro-batch) writes the
  group's commit log on every cluster through ``CommitStore``: the committed offset is
  the end offset (the low watermark: everything below it is done), and the metadata
  carries the ingestion time of the record at it, so the time-lag monitor sees Spark
  jobs like any other group. Spark's checkpoint stays the source of truth for the
  query; the Kafka commit is for monitoring and for new queries starting from the
  group's progress (``startingOffsets=committed``).

Bad input (a missing option, an unknown stream or lane, an unreachable control plane)
fails in ``schema()``, which Spark calls on the driver at ``load()``: the query never
starts and the error names the problem.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from confluent_kafka import Consumer, Message, TopicPartition
from confluent_kafka import KafkaException as _RawKafkaException
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from streamplane.client.commit_store import CommitStore
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.producer import StreamProducer
from streamplane.core.commitlog import TIMESTAMP_MAX_MS, PartitionProgress
from streamplane.core.routing import DLQ_LANE, RoutingTable, Segment
from streamplane.exceptions import ConfigError, KafkaError, NotFound, StreamplaneError
from streamplane.kafka.clients import consume_available, consumer_config
from streamplane.pipeline.options import (
    ReadOptions,
    WriteOptions,
    parse_read_options,
    parse_write_options,
)
from streamplane.pipeline.planning import (
    Limit,
    PartitionInfo,
    PartitionKey,
    QueryStart,
    RecordSizes,
    SourceOffset,
    plan_end,
    plan_splits,
)

log = logging.getLogger(__name__)

FORMAT = "streamplane"

SCHEMA = (
    "stream string, lane string, cluster string, topic string, partition int, offset long, "
    "key binary, value binary, headers array<struct<key: string, value: binary>>, "
    "timestamp timestamp"
)

# How long read() waits for records it knows exist before giving up on a split.
_READ_STALL_S = 60.0
# How long the driver waits for a partition's watermarks. A cluster that did not
# answer the last time (the sick one a stream was failed over from), and a partition
# that did not, get the short probe instead. A cluster whose first partition asked
# fails (partitions that answered last time are asked first) is skipped for that
# micro-batch: a dead cluster costs each batch one short probe, not 10 s for every
# partition it holds (planning stalled for minutes per batch before). A partition
# that fails once others of its cluster answered (its broker is down, its leader is
# moving) is left out alone, its offset held: the rest of the cluster is read (the
# whole cluster was skipped, batch after batch, while one broker of three was down).
_WATERMARK_TIMEOUT_S = 10.0
_PROBE_TIMEOUT_S = 1.0
# Errors that come with an answer of the cluster (its metadata names no leader for
# the partition): the cluster is up, only that partition is out.
_PARTITION_ERRORS = frozenset(
    {
        "_UNKNOWN_PARTITION",
        "LEADER_NOT_AVAILABLE",
        "NOT_LEADER_FOR_PARTITION",
        "NOT_LEADER_OR_FOLLOWER",
        "UNKNOWN_TOPIC_OR_PART",
    }
)
# The planning consumer's metadata refresh: with librdkafka's default (300 s) it kept
# a moved partition leader stale, and every watermark query of that partition failed
# (one broker of an RF 3 cluster killed: the partition was still out 330 s later; with
# 5 s it was planned again 8.7-10.9 s after the kill, the election included).
_PLANNING_METADATA_REFRESH_MS = 5_000
# How long planning waits for a group's committed offsets (retrying while its
# coordinator moves) before it leaves the partitions for the next micro-batch.
_COMMITTED_TIMEOUT_S = 10.0
# maxBytesPerTrigger: the records sampled at the start of each partition a micro-batch
# reads, to learn its topic's bytes per record.
_SAMPLED_RECORDS = 50
# How long the driver waits for the records it peeks at (a sample, the record at a
# committed offset); a partition that has not answered by then is left unsampled.
_PEEK_TIMEOUT_S = 2.0
_ARROW_BATCH_ROWS = 20_000


def register(spark: Any) -> None:
    """Register the ``streamplane`` format with a SparkSession."""
    spark.dataSource.register(StreamplaneDataSource)


# --------------------------------------------------------------------------- preflight
def check_stream(client: ControlPlaneClient, stream: str, lanes: Sequence[str] | None) -> None:
    """Raise a one-line StreamplaneError unless the stream (and its lanes) exist."""
    try:
        table = client.routing(stream)
    except NotFound:
        raise ConfigError(
            f"unknown stream {stream!r} on the control plane at {client.url}"
        ) from None
    for lane in lanes or ():
        if lane not in table.all_lanes:
            raise ConfigError(
                f"stream {stream!r} has no lane {lane!r} (lanes: {', '.join(table.all_lanes)})"
            )


def preflight_read(options: Mapping[str, str]) -> ReadOptions:
    """Parse the reader's options and check the stream exists (driver side)."""
    opts = parse_read_options(options)
    with ControlPlaneClient(opts.control_plane, opts.token) as client:
        check_stream(client, opts.stream, opts.lanes)
    return opts


def preflight_write(options: Mapping[str, str]) -> WriteOptions:
    opts = parse_write_options(options)
    with ControlPlaneClient(opts.control_plane, opts.token) as client:
        check_stream(client, opts.stream, [opts.lane] if opts.lane else None)
    return opts


# --------------------------------------------------------------------------- data source
class StreamplaneDataSource(DataSource):
    """Spark's entry point: ``format("streamplane")``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        # Called on the driver at load() (reads only): the place to refuse bad input.
        preflight_read(self.options)
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        """Batch reads are not offered: Spark's own error was a bare "[NOT_IMPLEMENTED]
        reader is not implemented" at the first action."""
        raise ConfigError(
            "the streamplane source reads streams only: use spark.readStream (with "
            ".trigger(availableNow=True) to read what is there and stop), not spark.read"
        )

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return StreamplaneStreamReader(parse_read_options(self.options))

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        return StreamplaneStreamWriter(preflight_write(self.options), _columns(schema))

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        return StreamplaneBatchWriter(preflight_write(self.options), _columns(schema))


@dataclass(frozen=True)
class KafkaSplit(InputPartition):
    """One Spark task: offsets [start, end) of one Kafka partition."""

    stream: str
    lane: str
    cluster: str
    bootstrap: str
    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class _Known:
    segment: Segment
    bootstrap: str


class StreamplaneStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Driver-side planning and committing; ``read`` runs on executors."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._client: ControlPlaneClient | None = None
        self._table: RoutingTable | None = None
        self._bootstraps: dict[str, str] = {}
        self._consumers: dict[str, Consumer] = {}
        self._peekers: dict[str, Consumer] = {}  # cluster -> the consumer of _peek
        self._stores: dict[str, CommitStore] = {}
        self._known: dict[PartitionKey, _Known] = {}
        self._high: dict[PartitionKey, int] = {}
        self._committed: dict[PartitionKey, int] = {}
        self._available_now_cap: dict[PartitionKey, int] | None = None
        # The group's committed offset of each partition, as read once (None: none):
        # Spark asks initialOffset twice, and both answers must be the same.
        self._group_offsets: dict[PartitionKey, int | None] = {}
        self._unanswered: dict[str, str] = {}  # cluster -> why it did not answer
        self._unavailable: dict[PartitionKey, str] = {}  # partition -> why it did not answer
        self._suspects: set[PartitionKey] = set()  # partitions whose last query failed
        # cluster -> why the group's committed offsets could not be read there
        self._progress_unreadable: dict[str, str] = {}
        # cluster -> why where ``latest`` put its partitions could not be read there
        self._start_unreadable: dict[str, str] = {}
        self._sizes = RecordSizes(options.estimated_record_bytes)
        self._query_start: QueryStart | None = None  # latest: when this reader started

    # -------------------------------------------------------------- driver plumbing
    def _cp(self) -> ControlPlaneClient:
        if self._client is None:
            self._client = ControlPlaneClient(self.options.control_plane, self.options.token)
        return self._client

    def _routing(self) -> RoutingTable:
        try:
            self._table = self._cp().routing(self.options.stream)
        except NotFound:
            raise ConfigError(f"unknown stream {self.options.stream!r}") from None
        except StreamplaneError as exc:
            if self._table is None:
                raise
            log.warning("routing of %s unavailable (%s): using epoch %d",
                        self.options.stream, exc, self._table.epoch)  # fmt: skip
        return self._table

    def _bootstrap(self, cluster: str) -> str:
        if cluster not in self._bootstraps:
            self._bootstraps[cluster] = self._cp().cluster_bootstrap(cluster)
        return self._bootstraps[cluster]

    def _consumer(self, cluster: str) -> Consumer:
        if cluster not in self._consumers:
            conf = consumer_config(
                self._bootstrap(cluster),
                self.options.group,
                {"topic.metadata.refresh.interval.ms": _PLANNING_METADATA_REFRESH_MS},
            )
            self._consumers[cluster] = Consumer(conf)
        return self._consumers[cluster]

    def _store(self, cluster: str) -> CommitStore:
        if cluster not in self._stores:
            self._stores[cluster] = CommitStore(
                self._consumer(cluster), self._bootstrap(cluster), self.options.stream,
                self.options.group,
            )  # fmt: skip
        return self._stores[cluster]

    def _segments(self, table: RoutingTable) -> list[Segment]:
        lanes = self.options.lanes or table.lanes
        return table.readable(lanes)

    def _partition_infos(
        self, table: RoutingTable, joining: str, started: Collection[PartitionKey] = ()
    ) -> list[PartitionInfo]:
        """Watermarks of every readable partition that answers; ``joining`` decides where
        partitions not ``started`` (not in the micro-batch's start offset) join.

        A partition left out keeps its offset in the micro-batch (``plan_end`` keeps
        every key of the start): it joins a later one when it answers, nothing skipped."""
        infos: list[PartitionInfo] = []
        by_cluster: dict[str, list[tuple[Segment, PartitionKey]]] = {}
        for seg in self._segments(table):
            bootstrap = self._bootstrap(seg.cluster)
            for p in range(seg.partitions):
                key = PartitionKey(seg.cluster, seg.topic, p)
                self._known[key] = _Known(seg, bootstrap)
                by_cluster.setdefault(seg.cluster, []).append((seg, key))
        for cluster, items in by_cluster.items():
            watermarks = self._watermarks(cluster, [key for _, key in items])
            for seg, key in items:
                if key not in watermarks:
                    continue
                low, high = watermarks[key]
                if self._available_now_cap is not None:
                    high = min(high, self._available_now_cap.get(key, low))
                self._high[key] = high
                join = low if joining != "latest" else high
                infos.append(
                    PartitionInfo(
                        key=key,
                        lane=seg.lane,
                        priority=table.lane_priority(seg.lane),
                        segment_epoch=seg.epoch,
                        join_offset=join,
                        end_offset=high,
                    )
                )
        if joining == "committed":
            infos = self._with_committed(infos, started)
        return infos

    def _watermarks(
        self, cluster: str, keys: Sequence[PartitionKey]
    ) -> dict[PartitionKey, tuple[int, int]]:
        """(low, high) of each partition of one cluster that answers.

        Partitions that answered last time are asked first: a failure before any
        partition answered (and not one that says the cluster is up) means the
        cluster does not answer, and the rest of it is not asked this micro-batch."""
        consumer = self._consumer(cluster)
        found: dict[PartitionKey, tuple[int, int]] = {}
        for key in sorted(keys, key=lambda k: k in self._suspects):
            short = cluster in self._unanswered or key in self._suspects
            try:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(key.topic, key.partition),
                    timeout=_PROBE_TIMEOUT_S if short else _WATERMARK_TIMEOUT_S,
                    cached=False,
                )
            except _RawKafkaException as exc:
                cause, text = _error_of(exc)
                self._suspects.add(key)
                if not found and cause not in _PARTITION_ERRORS:
                    self._cluster_unanswered(cluster, cause, text, key)
                    return {}
                self._partition_unavailable(key, cause, text)
                continue
            found[key] = (low, high)
            self._suspects.discard(key)
            self._partition_answers(key)
        self._cluster_answers(cluster)
        return found

    def _cluster_unanswered(self, cluster: str, cause: str, text: str, key: PartitionKey) -> None:
        if self._unanswered.get(cluster) != cause:
            log.warning(
                "cluster %s does not answer (%s on %s): its partitions are left out of the "
                "micro-batches, their offsets held, until it does",
                cluster, text, _name(key),
            )  # fmt: skip
        self._unanswered[cluster] = cause

    def _cluster_answers(self, cluster: str) -> None:
        if self._unanswered.pop(cluster, None) is not None:
            log.warning("cluster %s answers again", cluster)

    def _partition_unavailable(self, key: PartitionKey, cause: str, text: str) -> None:
        if self._unavailable.get(key) != cause:
            log.warning(
                "watermarks of %s unavailable (%s): that partition is left out of the "
                "micro-batches, its offset held, until it answers (the rest of %s is read)",
                _name(key), text, key.cluster,
            )  # fmt: skip
        self._unavailable[key] = cause

    def _partition_answers(self, key: PartitionKey) -> None:
        if self._unavailable.pop(key, None) is not None:
            log.warning("%s answers again: back in the micro-batches", _name(key))

    def _with_committed(
        self, infos: list[PartitionInfo], started: Collection[PartitionKey]
    ) -> list[PartitionInfo]:
        """Join first-seen partitions at the group's committed offset when it has one.

        A partition whose committed offset cannot be read (its group coordinator does
        not answer) is left out of this micro-batch and asked again at the next one:
        joining it at its beginning instead would read again everything the group had
        already done."""
        by_cluster: dict[str, list[PartitionInfo]] = {}
        for info in infos:
            if info.key not in self._group_offsets and info.key not in started:
                by_cluster.setdefault(info.key.cluster, []).append(info)
        deferred: set[PartitionKey] = set()
        for cluster, items in by_cluster.items():
            try:
                loaded = self._store(cluster).load(
                    [(i.key.topic, i.key.partition) for i in items], timeout_s=_COMMITTED_TIMEOUT_S
                )
            except KafkaError as exc:
                self._progress_unreadable_on(cluster, exc)
                deferred.update(i.key for i in items)
                continue
            self._progress_readable_on(cluster)
            for info in items:
                _, offset = loaded.get((info.key.topic, info.key.partition), (None, None))
                self._group_offsets[info.key] = offset
        out = []
        for info in infos:
            if info.key in deferred:
                continue
            offset = None if info.key in started else self._group_offsets.get(info.key)
            if offset is not None and info.join_offset <= offset <= info.end_offset:
                info = PartitionInfo(
                    info.key, info.lane, info.priority, info.segment_epoch, offset,
                    info.end_offset,
                )  # fmt: skip
            out.append(info)
        return out

    def _progress_unreadable_on(self, cluster: str, exc: KafkaError) -> None:
        cause = exc.code or type(exc).__name__
        if self._progress_unreadable.get(cluster) != cause:
            log.warning(
                "committed offsets of group %s on %s unreadable (%s; its coordinator's "
                "broker may be down): the partitions first seen there wait, asked again "
                "every micro-batch, and join at the group's progress once it is read",
                self.options.group, cluster, exc,
            )  # fmt: skip
        self._progress_unreadable[cluster] = cause

    def _progress_readable_on(self, cluster: str) -> None:
        if self._progress_unreadable.pop(cluster, None) is not None:
            log.warning(
                "committed offsets of group %s on %s readable again: the waiting partitions "
                "join at the group's progress",
                self.options.group, cluster,
            )  # fmt: skip

    def _where_latest_was(
        self, infos: list[PartitionInfo], begin: SourceOffset
    ) -> list[PartitionInfo]:
        """``latest``: a partition joining after the start that was in the routing then
        (it did not answer at the start) joins where ``latest`` would have put it, the
        first offset appended at or after the query's start (stream topics stamp
        records with the broker's append time), or at its end if none was; a failover's
        segment newer than the start joins at its beginning, as ``_partition_infos`` put
        it. A partition whose offset by time cannot be read waits for a later
        micro-batch. Without the start (an offset of an older version), it joins at its
        beginning."""
        since = begin.query_start
        if since is None:
            return infos
        by_cluster: dict[str, list[PartitionInfo]] = {}
        for info in infos:
            if info.key not in begin.partitions and not since.predates(info.segment_epoch):
                by_cluster.setdefault(info.key.cluster, []).append(info)
        placed: dict[PartitionKey, int | None] = {}  # None: unknown, wait
        for cluster, items in by_cluster.items():
            asked = [TopicPartition(i.key.topic, i.key.partition, since.time_ms) for i in items]
            try:
                answers = self._consumer(cluster).offsets_for_times(
                    asked, timeout=_WATERMARK_TIMEOUT_S
                )
            except _RawKafkaException as exc:
                self._start_unreadable_on(cluster, *_error_of(exc))
                placed.update(dict.fromkeys((i.key for i in items), None))
                continue
            self._start_unreadable.pop(cluster, None)
            for info, answer in zip(items, answers, strict=True):
                if answer.error is not None:
                    self._start_unreadable_on(cluster, answer.error.name(), answer.error.str())
                    placed[info.key] = None
                elif answer.offset < 0:  # nothing appended since the start
                    placed[info.key] = info.end_offset
                else:
                    placed[info.key] = min(max(answer.offset, info.join_offset), info.end_offset)
        out = []
        for info in infos:
            if info.key in placed:
                offset = placed[info.key]
                if offset is None:
                    continue
                info = replace(info, join_offset=offset)
            out.append(info)
        return out

    def _start_unreadable_on(self, cluster: str, cause: str, text: str) -> None:
        if self._start_unreadable.get(cluster) != cause:
            log.warning(
                "offsets by time on %s unreadable (%s): its partitions that join after the "
                "query started at latest wait for a later micro-batch",
                cluster, text,
            )  # fmt: skip
        self._start_unreadable[cluster] = cause

    # -------------------------------------------------------------- Spark API (driver)
    def initialOffset(self) -> dict[str, Any]:
        table = self._routing()
        if self.options.starting_offsets == "latest" and self._query_start is None:
            # Taken before the watermarks: what is appended from now on is new. Kept,
            # since Spark asks twice and both answers must carry the same start.
            self._query_start = QueryStart(table.epoch, int(time.time() * 1000))
        infos = self._partition_infos(table, self.options.starting_offsets)
        # Not marked committed: the first latestOffset commits where the query starts, so
        # the lag monitor tracks the group from then, not from the end of micro-batch 0.
        offsets = {i.key: i.join_offset for i in infos}
        return SourceOffset(table.epoch, offsets, self._query_start).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        """The row limit, else the byte limit (Spark hands it back to ``latestOffset``,
        which applies both)."""
        if self.options.max_records_per_trigger is not None:
            return ReadMaxRows(self.options.max_records_per_trigger)
        if self.options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        # Spark plans a micro-batch only once the previous one is done, so ``start`` is
        # processed: commit it now too (commit() alone lags one batch, and the last
        # batch of an availableNow run would never be committed).
        self.commit(start)
        begin = SourceOffset.from_json(start)
        table = self._routing()
        # Partitions first seen after the query started (a failover's new segment)
        # start at their beginning, or at the group's committed offset if any; with
        # latest, one that did not answer at the start where latest would have put it.
        joining = (
            "earliest"
            if self.options.starting_offsets == "latest"
            else (self.options.starting_offsets)
        )
        infos = self._partition_infos(table, joining, begin.partitions)
        if self.options.starting_offsets == "latest":
            infos = self._where_latest_was(infos, begin)
        bounds = _limit(limit, self.options)
        if bounds.max_bytes is not None:
            self._sample_record_sizes(begin, infos)
        end = plan_end(begin, infos, bounds, table.epoch, self._sizes)
        return end.to_json()

    def _sample_record_sizes(self, begin: SourceOffset, infos: Sequence[PartitionInfo]) -> None:
        """Learn the bytes per record of the topics this micro-batch may read from the
        first records of each partition's range (maxBytesPerTrigger)."""
        by_cluster: dict[str, dict[PartitionKey, tuple[int, int]]] = {}
        for info in infos:
            at = begin.partitions.get(info.key)
            if at is not None and info.end_offset > at:
                stop = min(info.end_offset, at + _SAMPLED_RECORDS)
                by_cluster.setdefault(info.key.cluster, {})[info.key] = (at, stop)
        for cluster, ranges in by_cluster.items():
            sampled: dict[str, tuple[int, int]] = {}  # topic -> (bytes, records)
            for key, records in self._peek(cluster, ranges).items():
                total, count = sampled.get(key.topic, (0, 0))
                total += sum(_record_bytes(record) for record in records)
                sampled[key.topic] = (total, count + len(records))
            for topic, (total, count) in sampled.items():
                self._sizes.observe(topic, total, count)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        if not self._high:
            return None
        epoch = self._table.epoch if self._table is not None else 0
        return SourceOffset(epoch, dict(self._high)).to_json()

    def prepareForTriggerAvailableNow(self) -> None:
        table = self._routing()
        self._available_now_cap = None
        self._partition_infos(table, "earliest")
        self._available_now_cap = dict(self._high)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[KafkaSplit]:
        begin = SourceOffset.from_json(start)
        stop = SourceOffset.from_json(end)
        splits = plan_splits(begin, stop, self.options.max_records_per_split)
        missing = [s.key for s in splits if s.key not in self._known]
        if missing:  # a restarted driver re-planning an old batch: learn the segments
            table = self._routing()
            for seg in table.segments:
                for p in range(seg.partitions):
                    key = PartitionKey(seg.cluster, seg.topic, p)
                    if key not in self._known:
                        self._known[key] = _Known(seg, self._bootstrap(seg.cluster))
        out = []
        for s in splits:
            known = self._known.get(s.key)
            if known is None:
                raise ConfigError(f"segment {s.key.topic} on {s.key.cluster} is not in the routing")
            out.append(
                KafkaSplit(
                    self.options.stream,
                    known.segment.lane,
                    s.key.cluster,
                    known.bootstrap,
                    s.key.topic,
                    s.key.partition,
                    s.start,
                    s.end,
                )
            )
        return out

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, KafkaSplit)
        return read_split(partition)

    def commit(self, end: dict[str, Any]) -> None:
        if not self.options.commit_to_kafka:
            return
        stop = SourceOffset.from_json(end)
        changed = {k: v for k, v in stop.partitions.items() if self._committed.get(k) != v}
        if not changed:
            return
        now_ms = int(time.time() * 1000)
        by_cluster: dict[str, list[tuple[PartitionKey, int]]] = {}
        for key, offset in changed.items():
            by_cluster.setdefault(key.cluster, []).append((key, offset))
        for cluster, items in by_cluster.items():
            behind = [(k, o) for k, o in items if o < self._high.get(k, o)]
            stamps = self._peek_timestamps(cluster, behind)
            progress = [
                (
                    k.topic,
                    k.partition,
                    PartitionProgress(
                        low_watermark=o,
                        commit_time_ms=now_ms,
                        low_watermark_timestamp_ms=_clamp_ms(stamps.get(k)),
                    ),
                )
                for k, o in items
            ]
            try:
                self._store(cluster).commit(progress)
            except KafkaError as exc:
                # The checkpoint is the truth; the Kafka commit is for monitoring.
                log.warning("commit of group %s on %s failed (%s); retried next batch",
                            self.options.group, cluster, exc)  # fmt: skip
                continue
            for k, o in items:
                self._committed[k] = o

    def _peek_timestamps(
        self, cluster: str, items: list[tuple[PartitionKey, int]]
    ) -> dict[PartitionKey, int]:
        """Ingestion time of the record at each (partition, offset); bounded wait, so an
        unknown one is simply missing."""
        peeked = self._peek(cluster, {key: (offset, offset + 1) for key, offset in items})
        return {key: records[0].timestamp()[1] for key, records in peeked.items()}

    def _peek(
        self, cluster: str, ranges: Mapping[PartitionKey, tuple[int, int]]
    ) -> dict[PartitionKey, list[Message]]:
        """The records of each partition's range [start, stop) of one cluster; bounded
        wait, so a partition that does not answer in time has fewer, or none, and once
        every partition gave records, a pause ends it (a range with a gap, such as a
        transaction marker, would otherwise wait out the deadline). The consumer is
        kept for the next micro-batch (a new one cost ~100 ms each time)."""
        found: dict[PartitionKey, list[Message]] = {}
        wanted = sum(stop - start for start, stop in ranges.values())
        if wanted <= 0:
            return found
        peeker = self._peekers.get(cluster)
        if peeker is None:
            peeker = Consumer(
                consumer_config(
                    self._bootstrap(cluster),
                    f"{self.options.group}.sp-peek",
                    {"fetch.wait.max.ms": 10},
                )
            )
            self._peekers[cluster] = peeker
        try:
            peeker.assign([TopicPartition(k.topic, k.partition, s) for k, (s, _) in ranges.items()])
            deadline = time.monotonic() + _PEEK_TIMEOUT_S
            seen = 0
            while seen < wanted and time.monotonic() < deadline:
                batch = consume_available(peeker, wanted, 0.2)
                if not batch and all(found.get(key) for key in ranges):
                    break
                for msg in batch:
                    if msg.error():
                        continue
                    key = PartitionKey(cluster, str(msg.topic()), int(msg.partition() or 0))
                    start, stop = ranges.get(key, (0, 0))
                    records = found.setdefault(key, [])
                    if start + len(records) <= int(msg.offset() or 0) < stop:
                        records.append(msg)
                        seen += 1
        finally:
            with contextlib.suppress(_RawKafkaException):
                peeker.unassign()
        return {key: records for key, records in found.items() if records}

    def stop(self) -> None:
        for consumer in [*self._consumers.values(), *self._peekers.values()]:
            with contextlib.suppress(RuntimeError, _RawKafkaException):
                consumer.close()
        self._consumers.clear()
        self._peekers.clear()
        self._stores.clear()
        if self._client is not None:
            self._client.close()
            self._client = None


def _name(key: PartitionKey) -> str:
    """A partition as people read it: ``cluster/topic[partition]``."""
    return f"{key.cluster}/{key.topic}[{key.partition}]"


def _error_of(exc: _RawKafkaException) -> tuple[str, str]:
    """(code name, "NAME: text") of a confluent-kafka exception."""
    err = exc.args[0] if exc.args else None
    if err is None or not hasattr(err, "name"):
        return type(exc).__name__, str(exc)
    return err.name(), f"{err.name()}: {err.str()}"


def _record_bytes(msg: Message) -> int:
    """A record's bytes as Spark gets them: key, value and headers (uncompressed)."""
    headers = msg.headers() or []
    pairs = headers.items() if isinstance(headers, dict) else headers
    size = len(msg.key() or b"") + len(msg.value() or b"")
    for name, data in pairs:
        size += len(name.encode()) + len(data or b"")
    return size


def _clamp_ms(ts: int | None) -> int | None:
    """Kafka's -1 (no timestamp) is unknown; the codec holds 48 bits."""
    if ts is None or ts < 0:
        return None
    return min(ts, TIMESTAMP_MAX_MS)


def _limit(limit: ReadLimit, options: ReadOptions) -> Limit:
    """Spark hands back the default read limit (or ReadAllAvailable, to read all): the
    row and byte limits both apply when both options are given."""
    if isinstance(limit, ReadMaxRows):
        return Limit(max_rows=int(limit.max_rows), max_bytes=options.max_bytes_per_trigger)
    if isinstance(limit, ReadMaxBytes):
        return Limit(max_rows=options.max_records_per_trigger, max_bytes=int(limit.max_bytes))
    if isinstance(limit, ReadMinRows):
        return Limit(min_rows=int(limit.min_rows))
    return Limit()


# --------------------------------------------------------------------------- executors
_READERS: dict[str, Consumer] = {}
_READERS_LOCK = threading.Lock()
# The executors' consumer. The fetch sizes bound what librdkafka buffers per Python
# worker: 64 MiB / 16 MiB / 200,000 raised a worker's RSS by ~230 MB reading 1M small
# records, for no more throughput than these (measured, median of 3: 5.6 s at a
# 323 MB peak before, 5.1 s at 206 MB with these).
_READER_SETTINGS: dict[str, Any] = {
    "fetch.max.bytes": 8 << 20,
    "max.partition.fetch.bytes": 1 << 20,
    "queued.min.messages": 20_000,
    "fetch.wait.max.ms": 50,
    "enable.auto.offset.store": False,
}


def _reader(bootstrap: str) -> Consumer:
    """One consumer per bootstrap per Python worker, reused across tasks."""
    with _READERS_LOCK:
        consumer = _READERS.get(bootstrap)
        if consumer is None:
            consumer = Consumer(consumer_config(bootstrap, "sp-spark-reader", _READER_SETTINGS))
            _READERS[bootstrap] = consumer
        return consumer


def _arrow_schema() -> Any:
    import pyarrow as pa

    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    return pa.schema(
        [
            ("stream", pa.string()),
            ("lane", pa.string()),
            ("cluster", pa.string()),
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("headers", pa.list_(header)),
            ("timestamp", pa.timestamp("us", tz="UTC")),
        ]
    )


def read_split(split: KafkaSplit) -> Iterator[Any]:
    """Records [start, end) of one partition as Arrow record batches."""
    import pyarrow as pa

    schema = _arrow_schema()
    consumer = _reader(split.bootstrap)
    consumer.assign([TopicPartition(split.topic, split.partition, split.start)])
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    offsets: list[int] = []
    stamps: list[int] = []
    headers: list[Any] = []
    last_progress = time.monotonic()
    next_offset = split.start

    def batch() -> Any:
        n = len(offsets)
        out = pa.RecordBatch.from_arrays(
            [
                pa.array([split.stream] * n, pa.string()),
                pa.array([split.lane] * n, pa.string()),
                pa.array([split.cluster] * n, pa.string()),
                pa.array([split.topic] * n, pa.string()),
                pa.array([split.partition] * n, pa.int32()),
                pa.array(offsets, pa.int64()),
                pa.array(keys, pa.binary()),
                pa.array(values, pa.binary()),
                pa.array(headers, schema.field("headers").type),
                pa.array([t * 1000 for t in stamps], schema.field("timestamp").type),
            ],
            schema=schema,
        )
        keys.clear()
        values.clear()
        offsets.clear()
        stamps.clear()
        headers.clear()
        return out

    try:
        while next_offset < split.end:
            msgs = consume_available(consumer, 10_000, 0.5)
            if not msgs:
                position = consumer.position([TopicPartition(split.topic, split.partition)])
                if position and position[0].offset >= split.end:
                    break  # a gap at the end (e.g. transaction markers)
                if time.monotonic() - last_progress > _READ_STALL_S:
                    raise KafkaError(
                        f"no records from {split.topic}[{split.partition}] on {split.cluster} "
                        f"for {_READ_STALL_S:.0f}s at offset {next_offset} (want up to {split.end})"
                    )
                continue
            last_progress = time.monotonic()
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.fatal():
                        raise KafkaError(f"reading {split.topic}: {err.str()}", code=err.name())
                    continue
                offset = int(msg.offset() or 0)
                if offset < next_offset:
                    continue
                if offset >= split.end:
                    next_offset = split.end
                    break
                offsets.append(offset)
                keys.append(msg.key())
                values.append(msg.value())
                stamps.append(msg.timestamp()[1])
                raw_headers = msg.headers()
                headers.append(
                    None if not raw_headers else [{"key": h[0], "value": h[1]} for h in raw_headers]
                )
                next_offset = offset + 1
            if len(offsets) >= _ARROW_BATCH_ROWS:
                yield batch()
        if offsets:
            yield batch()
    finally:
        with contextlib.suppress(_RawKafkaException):
            consumer.unassign()


# --------------------------------------------------------------------------- writers
@dataclass(frozen=True)
class WrittenRecords(WriterCommitMessage):
    records: int
    by_lane: dict[str, int]


def _columns(schema: Any) -> tuple[str, ...]:
    """The written frame's column names, once ``value`` (and ``key``) are checked to be
    string or binary: anything else failed in every task, deep in executor traces."""
    from pyspark.sql.types import BinaryType, StringType

    types = {f.name: f.dataType for f in schema.fields}
    if "value" not in types:
        raise ConfigError("writing to a stream needs a 'value' column (string or binary)")
    for name in ("value", "key"):
        if name in types and not isinstance(types[name], (StringType, BinaryType)):
            raise ConfigError(
                f"column {name!r} is {types[name].simpleString()}: a stream takes string or "
                f"binary (cast it, e.g. col('{name}').cast('string'))"
            )
    return tuple(types)


def write_rows(
    options: WriteOptions, columns: Sequence[str], rows: Iterator[Any]
) -> WrittenRecords:
    """Send rows (value, and optional key, headers, lane columns) through StreamProducer."""
    by_lane: dict[str, int] = {}
    has_key = "key" in columns
    has_headers = "headers" in columns
    has_lane = "lane" in columns
    with (
        ControlPlaneClient(options.control_plane, options.token) as client,
        StreamProducer(options.stream, client, lane=options.lane) as producer,
    ):
        default_lane = options.lane or producer.routing.lanes[0]
        for row in rows:
            lane = (row["lane"] if has_lane else None) or default_lane
            hdrs = None
            if has_headers and row["headers"]:
                hdrs = [(h["key"], h["value"]) for h in row["headers"]]
            producer.send(
                row["value"], key=row["key"] if has_key else None, headers=hdrs, lane=lane
            )
            by_lane[lane] = by_lane.get(lane, 0) + 1
        producer.flush()
    return WrittenRecords(sum(by_lane.values()), by_lane)


class StreamplaneStreamWriter(DataSourceStreamWriter):
    """At-least-once writes to a stream's lanes (``lane`` option or column; dlq allowed)."""

    def __init__(self, options: WriteOptions, columns: tuple[str, ...]) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[Any]) -> WrittenRecords:
        return write_rows(self.options, self.columns, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = sum(m.records for m in messages if isinstance(m, WrittenRecords))
        log.info("batch %d: %d records written to %s", batchId, total, self.options.stream)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("batch %d aborted: records already sent stay in %s (at-least-once)",
                    batchId, self.options.stream)  # fmt: skip


class StreamplaneBatchWriter(DataSourceWriter):
    """``df.write.format("streamplane")``: the same, for a batch DataFrame."""

    def __init__(self, options: WriteOptions, columns: tuple[str, ...]) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[Any]) -> WrittenRecords:
        return write_rows(self.options, self.columns, iterator)


__all__ = [
    "DLQ_LANE",
    "FORMAT",
    "SCHEMA",
    "KafkaSplit",
    "StreamplaneDataSource",
    "StreamplaneStreamReader",
    "check_stream",
    "preflight_read",
    "preflight_write",
    "read_split",
    "register",
]
