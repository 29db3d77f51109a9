"""StreamProducer: write to a stream's lanes without knowing clusters or topics.

The producer resolves each lane to its active segment through the routing table and
follows routing changes live: records sent after a change go to the new segment, a lane
added to the stream can be sent to once the change is saved (a lane the routing has not
got makes it fetch the routing at once, at most every second),
records already handed to the old cluster's producer are still delivered there (the
old segment is draining and consumers read it to its end). Every cluster gets one
idempotent producer with ``acks=all``, so a retry never duplicates a record.

A producer the routing left (a retired one) is kept until its queue is empty: its
reports are served with the others', and ``flush``/``close`` wait for its records like
any others (when the old cluster is down, ``flush`` raises ``ProduceError`` naming how
many records wait for which cluster, rather than returning while they are undelivered;
they are still delivered once it answers, within librdkafka's ``message.timeout.ms``).
Moving them to the new segment instead is not possible without loss: librdkafka hands
a purged record back without its headers.

``flush(timeout)`` leaves what it could not deliver queued (the caller may flush
again). ``close(timeout)`` gives up on it: the records still not acknowledged are
purged from librdkafka and their delivery reports served at once, each with an error
(``_PURGE_QUEUE``: never sent; ``_PURGE_INFLIGHT``: sent, its answer abandoned, so the
broker may have written it), then ``ProduceError`` names how many were not acknowledged
for which cluster. Without the purge their ``on_delivery`` never ran (the process
exited with them queued), so an application could not tell which records to resend.

Delivery errors reach the caller: through ``on_delivery`` when given, otherwise they
are collected and ``flush()`` raises ``ProduceError``.

Once the routing watch says the stream was deleted, its topics are gone with it: the
records still queued can never be delivered. They are purged at once (each reported
failed, ``_PURGE_QUEUE`` or ``_PURGE_INFLIGHT``), so ``flush`` and ``close`` do not wait
their timeout for them but raise ``StreamDeleted`` (a ``ProduceError`` and a
``NotFound``) naming how many were not delivered. Before, ``close`` waited its whole
timeout (30 s: a pod's whole grace period) and then gave up on them.

By default librdkafka reports failed deliveries only (``delivery.report.only.error``):
a report per successful record costs the producing thread about as much as the
``produce`` call itself (confluent-kafka builds a Python message for each).
``delivery_reports="all"`` reports every record, and is needed to pass ``on_delivery``
to ``send``. Either way the acknowledged count is ``sent - failed - still queued`` per
topic (a lower bound, exact whenever the queue is empty) and the produce latency
histogram comes from librdkafka's latency windows (``statistics.interval.ms``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

from confluent_kafka import KafkaError as _RawKafkaError
from confluent_kafka import KafkaException, Message, Producer

from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.metrics import METRICS
from streamplane.client.producer_heartbeat import ProducerHeartbeat
from streamplane.client.routing_watch import RoutingWatcher
from streamplane.core.routing import (
    DLQ_LANE,
    RoutingTable,
    SegmentState,
    topic_max_message_bytes,
    validate_stream_name,
)
from streamplane.core.text import counted
from streamplane.exceptions import (
    ConfigError,
    ControlPlaneError,
    NotFound,
    ProduceError,
    RecordTooLarge,
    StreamDeleted,
)
from streamplane.kafka.clients import producer_config
from streamplane.kafka.reachability import ClientReachability, ClusterReachability

if TYPE_CHECKING:  # the consumer imports this module
    from streamplane.client.consumer import StreamMessage, _Forwarded

log = logging.getLogger(__name__)

Headers = Mapping[str, str | bytes] | Sequence[tuple[str, str | bytes]]
DeliveryCallback = Callable[[_RawKafkaError | None, Message], None]
DeliveryReports = Literal["errors", "all"]
# A record for ``send_batch``: (value, key, headers).
Record = tuple[bytes | str | None, bytes | str | None, list[tuple[str, bytes]] | None]

DEFAULT_MAX_RECORD_BYTES = 1024 * 1024
DEFAULT_MAX_BATCH_BYTES = 1024 * 1024
# What a batch leaves free of its topic's max.message.bytes: 1/64 of it, at least 1 KiB.
# librdkafka counts a batch uncompressed, with its framing (and its request's header),
# and sends it compressed only when that is smaller; the broker checks the batch as sent.
# The margin is for what may still grow it: a codec or librdkafka version that sends a
# slightly expanded batch, a topic whose compression.type makes the broker recompress.
_BATCH_MARGIN_SHARE = 64
_BATCH_MARGIN_MIN_BYTES = 1024
_POLL_EVERY = 1000
# A send to a lane the routing has not got fetches the routing again at most this often
# (the lane may have been added a moment ago): ``_route_after_refresh``.
_LANE_REFRESH_S = 1.0
# How long the report server (``send(source=...)``) waits for a report at a time.
_REPORT_STEP_S = 0.05
_ANY_PARTITION = -1  # librdkafka's RD_KAFKA_PARTITION_UA: the partitioner chooses
# How often librdkafka hands over its statistics (the produce latency windows).
_STATISTICS_INTERVAL_MS = 5000
# Records queued for a cluster the routing left that took this long to be delivered
# (or to fail) are logged at INFO: that cluster was slow or down.
_SLOW_HANDOVER_S = 5.0
# How long ``close`` waits for the delivery reports of the records it purged (they are
# ready at once: this bounds a librdkafka that does not hand them over).
_PURGED_REPORTS_S = 1.0
# The failures of a record whose stream was deleted: purged by the producer, or failed
# by librdkafka for a topic it no longer finds.
_DELETED_STREAM_CODES = frozenset(
    {
        _RawKafkaError._PURGE_QUEUE,
        _RawKafkaError._PURGE_INFLIGHT,
        _RawKafkaError._UNKNOWN_TOPIC,
        _RawKafkaError._UNKNOWN_PARTITION,
        _RawKafkaError.UNKNOWN_TOPIC_OR_PART,
    }
)


class _TopicCounts:
    """What one producer sent to one topic; published to METRICS when it polls."""

    __slots__ = ("acked", "failed", "metric_key", "producer", "published_sent", "sent")

    def __init__(self, producer: Producer, metric_key: tuple[str, str]) -> None:
        # Its queue (``len``); _NOTHING_QUEUED once a retired producer is let go.
        self.producer: Sized = producer
        self.metric_key = metric_key  # (stream, lane)
        self.sent = 0  # records handed to produce()
        self.published_sent = 0
        self.failed = 0  # failed delivery reports served
        self.acked = 0  # acknowledged records published so far


@dataclass(frozen=True)
class _Route:
    producer: Producer
    topic: str
    cluster: str
    epoch: int
    counts: _TopicCounts


@dataclass(frozen=True)
class SentBatch:
    """What ``send_batch`` queued, and where: ``producer`` is the Kafka producer that
    holds the records (``len(producer)``: its writes not done yet, a failure counting
    until its report is served), ``topic`` the segment they go to."""

    too_large: list[int]  # positions of the records too large to queue
    producer: Producer
    topic: str


class _NothingQueued:
    """The queue of a retired producer that was let go: empty for good."""

    def __len__(self) -> int:
        return 0


_NOTHING_QUEUED = _NothingQueued()


@dataclass(frozen=True)
class _Waiting:
    """Records of one cluster's producer not done (neither acknowledged nor reported
    failed) when ``flush``/``close`` stopped waiting."""

    cluster: str
    producer: Producer
    left: bool  # a producer of a cluster the stream left (retired)
    records: int


def _where(waiting: Iterable[tuple[str, bool, int]], verb: str) -> str:
    """``2611 queued for local-b; 40 queued for local-a, which the stream left``: one
    part per (cluster, left) of ``waiting``'s (cluster, left, records)."""
    merged: dict[tuple[str, bool], int] = {}
    for cluster, left, records in waiting:
        merged[(cluster, left)] = merged.get((cluster, left), 0) + records
    return "; ".join(
        f"{records} {verb} {cluster}{', which the stream left' if left else ''}"
        for (cluster, left), records in merged.items()
    )


def _moves(before: Mapping[str, _Route], after: Mapping[str, _Route]) -> str:
    """``realtime, bulk moved from local-a to local-b``: the lanes whose active segment
    changed between two routings, by (old, new) cluster, and the lanes added (``lane
    priority added on local-a``); "" when none did."""
    by_clusters: dict[tuple[str, str], list[str]] = {}
    added: list[str] = []
    for lane, route in after.items():
        old = before.get(lane)
        if old is None:
            added.append(f"lane {lane} added on {route.cluster}")
        elif old.topic != route.topic:
            by_clusters.setdefault((old.cluster, route.cluster), []).append(lane)
    return "; ".join(
        [
            *(
                f"{', '.join(lanes)} moved "
                + (f"from {old} to {new}" if old != new else f"to new topics on {new}")
                for (old, new), lanes in by_clusters.items()
            ),
            *added,
        ]
    )


def batch_bytes(max_batch_bytes: int, stream_bound: int) -> int:
    """librdkafka's ``batch.size`` for the topics of a stream whose bound on one record
    is ``stream_bound``: ``max_batch_bytes``, lowered to stay a margin below the topics'
    ``max.message.bytes`` (``topic_max_message_bytes``, as the control plane sets it).
    The broker refuses a larger batch whole, every record of it failing ("Message size
    too large"), and librdkafka does not split it: with a 1,000-byte bound (topics
    taking 66,536 bytes) and 1 MiB batches, 5,000 records of 900 bytes all failed. The
    default bound (1 MiB: topics taking 1,114,112 bytes) keeps 1 MiB batches."""
    limit = topic_max_message_bytes(stream_bound)
    margin = max(_BATCH_MARGIN_MIN_BYTES, limit // _BATCH_MARGIN_SHARE)
    return min(max_batch_bytes, limit - margin)


def _purge(producers: Iterable[Producer]) -> None:
    """Purge every record ``producers`` hold, queued or in flight: each one's delivery
    report (failed: ``_PURGE_QUEUE`` or ``_PURGE_INFLIGHT``) is served by their next
    poll or flush."""
    for producer in producers:
        producer.purge(in_queue=True, in_flight=True, blocking=True)


def _not_bytes(value: object, key: object, call: str) -> TypeError:
    return TypeError(
        f"{call}: value and key are bytes, str or None, not "
        f"{type(value).__name__} and {type(key).__name__}"
    )


def _headers_bytes(headers: Headers | None) -> int:
    """About what ``headers`` take in a record: their names' and values' bytes."""
    if not headers:
        return 0
    try:
        items = headers.items() if isinstance(headers, Mapping) else headers
        return sum(
            len(name.encode() if isinstance(name, str) else name)
            + (len(value.encode()) if isinstance(value, str) else len(value or b""))
            for name, value in items
        )
    except (TypeError, ValueError):  # not headers librdkafka would take
        return 0


def _produce_error(
    exc: KafkaException, size: int, headers: Headers | None, max_bytes: int | None
) -> ProduceError:
    """What a refused ``produce`` call raises: ``RecordTooLarge`` for a record over
    librdkafka's ``message.max.bytes`` (``max_bytes``), counting its headers as
    librdkafka does, a ``ProduceError`` naming the cause otherwise."""
    err = exc.args[0] if exc.args else None
    code = err.code() if isinstance(err, _RawKafkaError) else None
    if code == _RawKafkaError.MSG_SIZE_TOO_LARGE:
        header_bytes = _headers_bytes(headers)
        what = (
            f"record of {size + header_bytes} bytes with its headers ({size} of key and "
            f"value, {header_bytes} of headers)"
            if header_bytes
            else f"record of {size} bytes"
        )
        limit = f" of {max_bytes} bytes" if max_bytes is not None else ""
        return RecordTooLarge(f"{what} exceeds the producer's message.max.bytes{limit}")
    return ProduceError(f"the record could not be queued: {err if err is not None else exc}")


class _OwnReport:
    """The delivery report of a record sent with its own ``on_delivery``: a failure is
    counted by the producer, then the caller's callback decides what it means. One
    small object per record (a ``partial`` of a bound method would be three, each
    tracked by the garbage collector until the report is served)."""

    __slots__ = ("callback", "producer")

    def __init__(self, producer: StreamProducer, callback: DeliveryCallback) -> None:
        self.producer = producer
        self.callback = callback

    def __call__(self, err: _RawKafkaError | None, msg: Message) -> None:
        if err is not None:
            self.producer._count_failure(err, msg)
        self.callback(err, msg)


class _SourceReport:
    """The delivery report of a record sent with ``source=msg``: tells the source
    record's settlement (``_Forwarded``), then the caller's ``on_delivery`` if any."""

    __slots__ = ("callback", "forwarded", "producer")

    def __init__(
        self,
        producer: StreamProducer,
        forwarded: _Forwarded,
        callback: DeliveryCallback | None,
    ) -> None:
        self.producer = producer
        self.forwarded = forwarded
        self.callback = callback

    def __call__(self, err: _RawKafkaError | None, msg: Message) -> None:
        if err is not None:
            self.producer._count_failure(err, msg)
        self.forwarded.delivered(None if err is None else f"{err.name()}: {err.str()}")
        if self.callback is not None:
            self.callback(err, msg)


class StreamProducer:
    """Produce records to a stream.

    >>> with StreamProducer("logs-intake", control_plane=client) as producer:
    ...     producer.send(b'{"msg": "hi"}', key=b"host-1", lane="realtime")

    ``lane`` is the default lane (the stream's first lane when None).
    ``max_record_bytes`` bounds key + value (default: the stream's own bound; a larger
    one is refused at ``open``, as consumers could not dead-letter such a record);
    ``max_batch_bytes`` bounds each batch by *uncompressed* size, lowered for a stream
    with a small bound to stay below what its topics take (``batch_bytes``).
    ``extra_config`` passes librdkafka settings through (dotted keys).
    ``delivery_reports``: ``"errors"`` (default, the fast path) or ``"all"`` (a report
    per record, required for ``send(on_delivery=...)`` and ``send(source=...)``).
    """

    def __init__(
        self,
        stream: str,
        control_plane: ControlPlaneClient,
        lane: str | None = None,
        *,
        max_record_bytes: int | None = None,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        extra_config: Mapping[str, Any] | None = None,
        delivery_reports: DeliveryReports = "errors",
    ) -> None:
        if max_batch_bytes < 1024:
            raise ConfigError("max_batch_bytes must be at least 1024")
        if max_record_bytes is not None and (
            not isinstance(max_record_bytes, int) or max_record_bytes < 1
        ):
            raise ConfigError(f"max_record_bytes must be a positive int, not {max_record_bytes!r}")
        if delivery_reports not in ("errors", "all"):
            raise ConfigError("delivery_reports must be 'errors' or 'all'")
        self.stream = validate_stream_name(stream)
        self._client = control_plane
        self._default_lane = lane
        self._max_record_bytes = max_record_bytes
        # The stream's own bound (``open``): its topics' max.message.bytes bounds batches.
        self._stream_bound: int | None = None
        self._max_batch_bytes = max_batch_bytes
        self._message_max_bytes: int | None = None  # librdkafka's, once a producer is made
        self._extra = dict(extra_config or {})
        # A cluster whose brokers all dropped out (and its return) in the log.
        self._reachability = ClusterReachability(
            f"stream {stream!r}" + (" (dead letters)" if lane == DLQ_LANE else ""), log
        )
        self._all_reports = delivery_reports == "all"
        self._watcher = RoutingWatcher(control_plane, stream)
        self._lock = threading.Lock()
        # Serving the retired producers' queues and publishing the counts: the app's
        # thread (send, poll, flush) and, with failure-only reports, the heartbeat's
        # (``_reported_epoch``) may both do it.
        self._serving = threading.RLock()
        self._failure_lock = threading.Lock()  # failure counts, served on either thread
        self._producers: dict[str, Producer] = {}
        # Producers of clusters the routing left, as (cluster, producer), kept until
        # their queue is empty (replaced, never mutated: read without the lock).
        self._retired: list[tuple[str, Producer]] = []
        # The epoch each retired producer served (by id): while it still holds records,
        # this producer reports that epoch in its heartbeats.
        self._retired_epochs: dict[int, int] = {}
        # Producers still in use (another lane stays on their cluster) that had records
        # queued when a lane moved off that cluster, with the epoch those records were
        # sent with: told in heartbeats until the producer's queue was seen empty.
        self._draining: list[tuple[Producer, int]] = []
        self._bootstraps: dict[str, str] = {}
        self._routes: dict[str, _Route] = {}
        self._failures: list[tuple[_RawKafkaError, Message]] = []
        self._failed_reports = 0  # failed delivery reports served, callbacks' included
        # Failed reports served once the stream was deleted (its topics gone: purged, or
        # failed for a missing topic), callbacks' included, not yet raised about.
        self._undelivered_deleted = 0
        self._counts: dict[str, _TopicCounts] = {}  # by topic, retired ones included
        self._retired_counts: list[_TopicCounts] = []
        METRICS.produce_latency[(stream,)]  # exported from the start, empty until measured
        self._sent_since_poll = 0
        self._epoch = 0
        self._opened = False
        self._closed = False
        self._gone: str | None = None  # the stream was deleted (the routing watch says)
        self._lanes_refreshed_at = -_LANE_REFRESH_S  # (monotonic) ``_route_after_refresh``
        # When the producer started writing to each epoch (monotonic seconds).
        self.epoch_switch_times: dict[int, float] = {}
        # Reports the epoch it writes with, so the control plane can seal old segments.
        self.heartbeat = ProducerHeartbeat(control_plane, stream, self._reported_epoch)
        # Serves delivery reports in the background once a record is sent with
        # ``source=`` (its source's ack waits for them, records sent or not).
        self._report_server: threading.Thread | None = None

    # ------------------------------------------------------------------ life cycle
    def open(self) -> Self:
        """Fetch the routing and start watching it. Raises ControlPlaneUnavailable/NotFound."""
        if self._opened:
            return self
        if self._closed:  # closed before it was ever opened: no watch, no heartbeat
            raise ProduceError("the producer is closed")
        table = self._watcher.start()
        try:
            desc = self._client.describe_stream(self.stream)
            bound = int(desc.get("max_record_bytes") or DEFAULT_MAX_RECORD_BYTES)
            self._stream_bound = bound
            if self._max_record_bytes is None:
                self._max_record_bytes = bound
            elif self._max_record_bytes > bound:
                raise ConfigError(
                    f"max_record_bytes={self._max_record_bytes} is above the bound of "
                    f"stream {self.stream!r} ({bound} bytes)"
                )
            if self._default_lane is None:
                self._default_lane = table.lanes[0]
            else:
                table.active(self._default_lane)  # unknown lane -> ConfigError now, not at send
            self._apply(table)
            self.heartbeat.start()  # a wrong API token raises here
        except BaseException:
            self._watcher.stop()  # no watch thread left behind by a failed open
            self._producers.clear()
            raise
        self._watcher.add_listener(self._apply)
        self._watcher.add_listener(lambda _table: self.heartbeat.beat_now())
        self._watcher.add_gone_listener(self._on_gone)
        self._opened = True
        if self._closed:
            # ``close`` came while this opened (a signal handler, another thread): it
            # found nothing open. What the open started since (the watch, the Kafka
            # producers, the heartbeat, which counted it live for the sealer) goes now.
            self._watcher.stop()
            self._producers.clear()
            self.heartbeat.leave()
        return self

    def __enter__(self) -> Self:
        return self.open()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self, timeout: float = 30.0) -> None:
        """Wait up to ``timeout`` seconds for every queued record (as ``flush``), then let
        the Kafka producers go. Records still not acknowledged then are given up on:
        purged from librdkafka, each one's delivery report served now with an error
        (its ``on_delivery``, or ``take_failures`` for one sent without), and
        ``ProduceError`` names how many were not acknowledged for which cluster. Not
        acknowledged is not lost: a record purged in flight (``_PURGE_INFLIGHT``) may
        have been written by the broker all the same (at-least-once: resending it may
        write it twice); one purged from the queue (``_PURGE_QUEUE``) was never sent.
        Raises ProduceError for failed deliveries as ``flush`` does. Records of a stream
        that was deleted (heard before or while it waits) are not waited for: they are
        purged at once and ``StreamDeleted`` (a ProduceError) names how many."""
        if self._closed:
            return
        with self._lock:  # a routing change being applied is done first
            self._closed = True  # routing changes are ignored from now on (``_apply``)
        try:
            # The watch goes on while the queue drains: hearing that the stream was
            # deleted purges what is queued (its topics are gone), ending the wait.
            waiting = self._drain(timeout)
            if waiting:
                raise self._given_up(waiting, timeout)
            self.raise_failures()
        finally:
            self._reachability.close()  # a Kafka client being let go says its brokers are down
            self._watcher.stop()
            self._producers.clear()
            self._retired = []
            # Heartbeats go on while the queue drains (records may still be on their
            # way to a draining segment, which must not be sealed before they land);
            # then the producer deregisters, so the sealer stops waiting for it.
            self.heartbeat.leave()

    @property
    def epoch(self) -> int:
        """The routing epoch this producer writes with (0 before ``open``)."""
        return self._epoch

    def switched_at(self, epoch: int) -> float | None:
        """When (monotonic seconds) this producer started writing with the routing of
        ``epoch`` or a later one; None if it has not yet. Routing changes in quick
        succession (a failover, then a seal) may reach it as one: it then never wrote
        with ``epoch`` itself, only with the later table."""
        return min((t for e, t in self.epoch_switch_times.items() if e >= epoch), default=None)

    @property
    def routing(self) -> RoutingTable:
        return self._watcher.table

    # ------------------------------------------------------------------ routing
    def _producer_for(self, cluster: str) -> Producer:
        producer = self._producers.get(cluster)
        if producer is None:
            bootstrap = self._bootstraps.get(cluster) or self._client.cluster_bootstrap(cluster)
            self._bootstraps[cluster] = bootstrap
            assert self._max_record_bytes is not None
            bound = self._stream_bound or self._max_record_bytes
            reach = self._reachability.client(cluster)
            conf = producer_config(
                bootstrap,
                {
                    "error_cb": reach.on_error,
                    # Each batch within what the segment's topic takes (a batch the
                    # broker refuses fails whole: librdkafka does not split it).
                    "batch.size": batch_bytes(self._max_batch_bytes, bound),
                    # A record the topic cannot take (its headers past the room above
                    # the bound) is refused at ``send``, not by the broker at delivery.
                    "message.max.bytes": topic_max_message_bytes(bound),
                    "on_delivery": self._on_delivery,
                    "delivery.report.only.error": not self._all_reports,
                    "statistics.interval.ms": _STATISTICS_INTERVAL_MS,
                    "stats_cb": functools.partial(self._on_statistics, reach),
                    **self._extra,
                },
            )
            producer = Producer(conf)
            self._message_max_bytes = int(conf["message.max.bytes"])
            self._producers[cluster] = producer
        return producer

    def _apply(self, table: RoutingTable) -> None:
        with self._lock:
            if self._closed:  # closing: nothing more is sent (the watch goes on meanwhile)
                return
            routes: dict[str, _Route] = {}
            for lane in table.all_lanes:
                seg = table.active(lane)
                producer = self._producer_for(seg.cluster)
                counts = self._counts.get(seg.topic)
                if counts is None or counts.producer is not producer:
                    if counts is not None:  # the topic's cluster producer was replaced
                        self._retired_counts.append(counts)
                    counts = self._counts[seg.topic] = _TopicCounts(producer, (self.stream, lane))
                routes[lane] = _Route(producer, seg.topic, seg.cluster, seg.epoch, counts)
            old_clusters = set(self._producers) - {r.cluster for r in routes.values()}
            # A lane moved off a cluster another lane stays on (the dlq, by default):
            # that producer is kept, with the moved lane's records maybe still queued.
            moved_off = {
                old.cluster
                for lane, old in self._routes.items()
                if lane in routes and routes[lane].cluster != old.cluster
            } - old_clusters
            draining = [
                (self._producers[c], self._epoch)
                for c in sorted(moved_off)
                if c in self._producers and len(self._producers[c])
            ]
            if draining:
                self._draining = self._draining + draining
            moves = _moves(self._routes, routes)
            self._routes = routes
            self.epoch_switch_times.setdefault(table.epoch, time.monotonic())
            served, self._epoch = self._epoch, table.epoch
            # Records already queued for the old cluster are still delivered there.
            retiring = [(c, self._producers.pop(c)) for c in old_clusters]
            for _, producer in retiring:
                self._retired_epochs[id(producer)] = served
            self._retired = self._retired + retiring
        if served:  # not the table ``open`` starts with
            # A failover's epoch, at INFO; a seal's or a retirement's (an epoch each, per
            # segment) moves no lane: DEBUG. A consumer's dlq producer says so: its
            # service may have a producer of the stream too, logging the same change.
            log.log(
                logging.INFO if moves else logging.DEBUG,
                "stream %r: %s with routing epoch %d (was %d): %s",
                self.stream,
                "writing dead letters" if self._default_lane == DLQ_LANE else "producing",
                table.epoch,
                served,
                moves or "no lane moved (a segment sealed, retired or declared lost)",
            )

    # ------------------------------------------------------------------ sending
    def send(
        self,
        value: bytes | str | None,
        key: bytes | str | None = None,
        headers: Headers | None = None,
        lane: str | None = None,
        on_delivery: DeliveryCallback | None = None,
        source: StreamMessage | None = None,
    ) -> None:
        """Queue one record for the lane's active segment (asynchronous).

        ``source``: the consumed record this one is made from (a consume-then-produce
        service). The source is acked only once its handler acked it *and* this record
        (every record sent with it as ``source``) is delivered; a failed delivery nacks
        it, so it is handled again. Needs ``delivery_reports="all"``; a background
        thread serves the reports."""
        route = self._route_for(lane)
        # A str is sent as UTF-8: encoded here so the bound counts its bytes, not its
        # characters. Anything else but bytes and None is refused here (a dict passed
        # the bound by its ``len`` and failed in confluent-kafka). Inline: a call per
        # record cost ~5% of a send of a str.
        if value is not None and value.__class__ is not bytes:
            if isinstance(value, str):
                value = value.encode()
            elif not isinstance(value, bytes):
                raise _not_bytes(value, key, "send")
        if key is not None and key.__class__ is not bytes:
            if isinstance(key, str):
                key = key.encode()
            elif not isinstance(key, bytes):
                raise _not_bytes(value, key, "send")
        size = (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
        if self._max_record_bytes is not None and size > self._max_record_bytes:
            raise RecordTooLarge(
                f"record of {size} bytes exceeds the stream's bound "
                f"of {self._max_record_bytes} bytes"
            )
        callback: _OwnReport | _SourceReport | None = None
        if on_delivery is not None or source is not None:
            if not self._all_reports:
                what = "on_delivery" if source is None else "source"
                raise ConfigError(
                    f"send({what}=...) needs StreamProducer(..., delivery_reports='all'): "
                    "this producer has librdkafka report failed deliveries only"
                )
            if source is None:
                callback = _OwnReport(self, on_delivery)  # type: ignore[arg-type]
            else:
                callback = _SourceReport(self, source._forwarding(), on_delivery)
                if self._report_server is None:
                    self._start_report_server()
        producer = route.producer
        while True:
            try:
                if headers is None and callback is None:
                    producer.produce(route.topic, value, key)
                else:  # None for either keeps the default (no headers, _on_delivery)
                    # Positional (partition, callback, on_delivery, timestamp, headers):
                    # confluent-kafka looks every keyword slot up by a name it builds
                    # and hashes per call, ~3,700 instructions (callgrind) per send.
                    producer.produce(
                        route.topic,
                        value,
                        key,
                        _ANY_PARTITION,
                        callback,
                        None,
                        0,  # timestamp: now
                        headers,  # type: ignore[arg-type]  # a list or dict
                    )
                break
            except BufferError:
                producer.poll(0.05)  # local queue full: back-pressure, not failure
            except KafkaException as exc:
                if isinstance(callback, _SourceReport):  # not sent: no report will come
                    callback.forwarded.delivered(f"not queued: {exc}")
                raise _produce_error(exc, size, headers, self._message_max_bytes) from None
            except BaseException as exc:  # bad headers (TypeError), an interrupt...
                if isinstance(callback, _SourceReport):  # not sent: no report will come
                    callback.forwarded.delivered(f"not queued: {type(exc).__name__}: {exc}")
                raise
        route.counts.sent += 1
        self._sent_since_poll += 1
        if self._sent_since_poll >= _POLL_EVERY:
            self._sent_since_poll = 0
            producer.poll(0)
            if self._retired:
                self._serve_retired()
            self._report_deliveries()

    def _start_report_server(self) -> None:
        with self._lock:
            if self._report_server is not None or self._closed:
                return
            thread = threading.Thread(
                target=self._serve_reports, name=f"sp-reports-{self.stream}", daemon=True
            )
            self._report_server = thread
        thread.start()

    def _serve_reports(self) -> None:
        """Serve delivery reports until the producer closes (``close`` serves the rest):
        the sources of records sent with ``source=`` are acked as their outputs are
        delivered, not at the next ``send`` (an idle service never acked them)."""
        while not self._closed:
            producers = list(self._producers.values())
            if not producers:
                time.sleep(_REPORT_STEP_S)
            try:
                for producer in producers:
                    producer.poll(_REPORT_STEP_S / len(producers))
                if self._retired:
                    self._serve_retired()
            except Exception:  # a caller's on_delivery raised: the rest are still served
                log.exception("%s: an on_delivery callback raised (reports go on)", self.stream)

    def active_topic(self, lane: str | None = None) -> str:
        """The segment records sent to ``lane`` (the default lane when None) go to now."""
        return self._route_for(lane).topic

    def send_batch(self, records: Iterable[Record], lane: str | None = None) -> SentBatch:
        """Queue ``records`` ((value, key, headers) each, bytes) for one lane in order,
        with one routing lookup for them all. Returns where they went, with the
        positions of the records too large to queue: over the stream's bound, or with
        their headers over librdkafka's ``message.max.bytes`` (every other record is
        queued). Unlike
        ``send``, it serves no delivery reports itself: failures are collected at the
        caller's ``poll``, ``drain`` or ``flush`` (or a later ``send``). ``records`` may
        be a generator: each record is queued (copied by librdkafka) before the next is
        asked for.

        A record that is not bytes, str or None raises ``TypeError`` as in ``send``,
        naming its position: the records before it are queued (and counted), those
        after it are not."""
        route = self._route_for(lane)
        producer, topic, bound = route.producer, route.topic, self._max_record_bytes
        produce = producer.produce
        too_large: list[int] = []
        i = 0  # the position of the record at hand: those before it are queued or too large
        try:
            for value, key, headers in records:
                if value is not None and value.__class__ is not bytes:  # as in ``send``
                    if isinstance(value, str):
                        value = value.encode()
                    elif not isinstance(value, bytes):
                        raise self._not_bytes_in_batch(value, key, i, too_large)
                if key is not None and key.__class__ is not bytes:
                    if isinstance(key, str):
                        key = key.encode()
                    elif not isinstance(key, bytes):
                        raise self._not_bytes_in_batch(value, key, i, too_large)
                if bound is not None and len(value or b"") + len(key or b"") > bound:
                    too_large.append(i)
                    i += 1
                    continue
                while True:
                    try:  # positional, as in ``send``
                        produce(topic, value, key, _ANY_PARTITION, None, None, 0, headers)  # type: ignore[arg-type]  # a list
                        break
                    except BufferError:
                        producer.poll(0.05)  # local queue full: back-pressure, not failure
                    except KafkaException as exc:
                        size = len(value or b"") + len(key or b"")
                        error = _produce_error(exc, size, headers, self._message_max_bytes)
                        if not isinstance(error, RecordTooLarge):
                            raise error from None
                        too_large.append(i)
                        break
                i += 1
        finally:  # counted even when a record raised part way: those before it are queued
            queued_count = i - len(too_large)
            route.counts.sent += queued_count
            self._sent_since_poll += queued_count
        return SentBatch(too_large, producer, topic)

    @staticmethod
    def _not_bytes_in_batch(
        value: object, key: object, position: int, too_large: list[int]
    ) -> TypeError:
        queued = counted(position - len(too_large), "record")
        return _not_bytes(value, key, f"send_batch (record {position}; {queued} queued before it)")

    def _on_gone(self, reason: str) -> None:
        """The stream was deleted (called from the watch thread): refuse records from now
        on, and purge those queued already: its topics were deleted with it, so they can
        never be delivered (librdkafka would retry them until ``message.timeout.ms``,
        and ``close`` waited its whole timeout for them). Their failures are served by
        the next ``poll``, ``flush`` or ``close`` (which no longer waits for them), and
        ``flush``/``close`` raise ``StreamDeleted``."""
        with self._lock:
            self._gone = reason
            self._routes = {}
            producers = [*self._producers.values(), *(p for _, p in self._retired)]
        self.heartbeat.stop()
        _purge(producers)

    def _route_for(self, lane: str | None) -> _Route:
        """The route of ``lane`` (the default lane when None), opening if needed."""
        if self._closed:  # before opening: a closed producer is never opened again
            raise ProduceError("the producer is closed")
        if not self._opened:
            self.open()
        route = self._routes.get(lane or self._default_lane or "")
        if route is None:
            return self._route_after_refresh(lane)
        return route

    def _route_after_refresh(self, lane: str | None) -> _Route:
        """The route of a lane the routing has not got: it may have been added to the
        stream a moment ago (the watch brings it within about a second), so the routing
        is fetched once more, at most every ``_LANE_REFRESH_S``; else a ConfigError (a
        NotFound once the stream is deleted)."""
        now = time.monotonic()
        if self._gone is None and lane and now - self._lanes_refreshed_at >= _LANE_REFRESH_S:
            self._lanes_refreshed_at = now
            # (new lanes reach ``_routes`` through ``_apply``; failing, the error below
            # says what is known)
            with contextlib.suppress(ControlPlaneError):
                self._watcher.refresh()
            route = self._routes.get(lane)
            if route is not None:
                return route
        if self._gone is not None:
            raise NotFound(f"{self._gone}: records cannot be sent to it")
        raise ConfigError(
            f"stream {self.stream!r} has no lane {lane!r} (lanes: {', '.join(self._routes)})"
        )

    def flush(self, timeout: float = 30.0) -> None:
        """Wait for every queued record, those queued for a cluster the stream has left
        included; raises ProduceError if any could not be delivered: naming how many
        wait for which cluster when ``timeout`` passes first (they stay queued, and are
        delivered once their cluster answers, within librdkafka's ``message.timeout.ms``:
        flush again to wait for them), otherwise how many failed (``StreamDeleted``
        for those of a stream that was deleted: not waited for, they fail at once)."""
        waiting = self._drain(timeout)
        if waiting:
            total = sum(w.records for w in waiting)
            where = _where(((w.cluster, w.left, w.records) for w in waiting), "queued for")
            raise ProduceError(
                f"{counted(total, 'record')} of stream {self.stream!r} still undelivered "
                f"after {timeout:g}s: {where}. They stay queued, delivered once their "
                "cluster answers (flush again to wait for them; close gives up on them)"
            )
        self.raise_failures()

    def drain(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for every queued record to be acknowledged or
        reported failed; how many are still queued. Failures are kept (``flush`` raises
        them, ``take_failures`` hands them over)."""
        return sum(w.records for w in self._drain(timeout))

    def _drain(self, timeout: float) -> list[_Waiting]:
        """``drain``, telling the records still queued apart by cluster. Once the stream
        is deleted it does not wait: what is queued is purged (a record a ``send`` on
        another thread queued as the deletion was heard included), and only the purged
        records' reports are waited for."""
        deadline = time.monotonic() + timeout
        producers = [
            *((cluster, p, False) for cluster, p in list(self._producers.items())),
            *((cluster, p, True) for cluster, p in self._retired),
        ]
        if self._gone is not None:
            _purge(p for _, p, _ in producers)
            deadline = time.monotonic() + _PURGED_REPORTS_S
        after = [p.flush(max(0.0, deadline - time.monotonic())) for _, p, _ in producers]
        # Those waited for first were counted early: count them again (serving the
        # reports that came in since, as flush(0) does).
        after = [p.flush(0) if n else 0 for (_, p, _), n in zip(producers, after, strict=True)]
        self._serve_retired()
        self._report_deliveries()
        return [
            _Waiting(cluster, p, left, n)
            for (cluster, p, left), n in zip(producers, after, strict=True)
            if n
        ]

    def _given_up(self, waiting: list[_Waiting], timeout: float) -> ProduceError:
        """Purge the records ``close`` gives up on and serve their delivery reports (each
        fails: ``_PURGE_QUEUE`` or ``_PURGE_INFLIGHT``); the ProduceError to raise,
        naming per cluster how many were not acknowledged."""
        given_up: list[tuple[str, bool, int]] = []
        unreported = 0
        for w in waiting:
            failed_before = self._failed_reports
            w.producer.purge(in_queue=True, in_flight=True, blocking=True)
            # The purged records' reports are ready: served now, as the failures they are.
            left = w.producer.flush(_PURGED_REPORTS_S)
            unreported += left
            given_up.append((w.cluster, w.left, self._failed_reports - failed_before + left))
        self._serve_retired()
        self._report_deliveries()
        total = sum(n for _, _, n in given_up)
        where = _where(given_up, "for")
        without = (
            f" ({counted(unreported, 'record')} still without a delivery report)"
            if unreported
            else ""
        )
        return ProduceError(
            f"{counted(total, 'record')} of stream {self.stream!r} not acknowledged after "
            f"{timeout:g}s: {where}. Given up on at close: purged, each reported failed (to "
            "its on_delivery, or in take_failures) with _PURGE_QUEUE (never sent) or "
            "_PURGE_INFLIGHT (sent, its answer not awaited: it may have been written all the "
            "same): undelivered as far as the producer knows, not necessarily lost"
            f"{without}"
        )

    def queued(self) -> int:
        """Records sent and not done: neither acknowledged nor reported failed (a
        failure counts until its report is served by ``poll``). 0 means every record
        sent so far was acknowledged, or is in ``take_failures``."""
        producers = [*self._producers.values(), *(p for _, p in self._retired)]
        return sum(len(p) for p in producers)

    def take_failures(self) -> list[tuple[_RawKafkaError, Message]]:
        """The failed deliveries reported so far without a caller's callback, as
        (error, message) (librdkafka hands a failed record's key and value back, not
        its headers); they are no longer raised by ``flush``."""
        failures, self._failures = self._failures, []
        return failures

    def poll(self, timeout: float = 0.0) -> None:
        """Serve delivery callbacks (``send`` also does, every so often)."""
        for producer in list(self._producers.values()):
            producer.poll(timeout)
        self._serve_retired()
        self._report_deliveries()

    def _reported_epoch(self) -> int:
        """The epoch this producer writes with, as its heartbeats tell the sealer: the
        oldest one it still has records queued for. Records queued for a cluster the
        stream has left are still being delivered there; reporting the new epoch at
        once let the sealer seal the old segment while ~1,800 records were still on
        their way to it (they landed past its sealed end)."""
        if not self._all_reports and (self._retired or self._draining):
            # Their queues hold events besides records (statistics every few seconds,
            # errors from a dead broker), counted by ``len`` until served: a producer
            # whose application sent nothing more after a failover (a consumer's dlq
            # producer, an idle one) told its old epoch for good, and the sealer sealed
            # only after its grace period. With failure-only reports, serving them here
            # runs none of the application's callbacks.
            self._serve_retired()
            with self._serving:
                for producer, _ in list(self._draining):
                    producer.poll(0)
        epoch = self._epoch
        for _, producer in self._retired:  # replaced, never changed: safe from any thread
            if len(producer):
                epoch = min(epoch, self._retired_epochs.get(id(producer), epoch))
        # A producer kept for another lane: its queue is the moved lane's records and the
        # other lane's, so the old epoch is told until it was seen empty (with the dlq
        # left behind by a failover, the new epoch was told at once, and the sealer
        # sealed the old segment with 1,000 records still queued for it).
        for producer, sent_with in self._draining:
            if len(producer):
                epoch = min(epoch, sent_with)
        return epoch

    def _serve_retired(self) -> None:
        """Serve the retired producers' reports; let go of those with nothing queued
        (their counts are final: published, then kept without the producer)."""
        with self._serving:
            self._serve_retired_now()

    def _serve_retired_now(self) -> None:
        if self._draining:
            with self._lock:  # _apply may be adding one
                self._draining = [(p, e) for p, e in self._draining if len(p)]
        retired = self._retired
        if not retired:
            return
        for _, producer in retired:
            producer.poll(0)
        if all(len(p) for _, p in retired):
            return
        self._report_deliveries()
        with self._lock:  # _apply may be adding one
            done = {id(p) for _, p in self._retired if not len(p)}
            # (cluster, the epoch it served, when the routing left it), under the lock:
            # ``_apply`` adds to ``epoch_switch_times``.
            let_go: list[tuple[str, int, float | None]] = []
            for cluster, producer in self._retired:
                if id(producer) in done:
                    epoch = self._retired_epochs.get(id(producer), 0)
                    let_go.append((cluster, epoch, self.switched_at(epoch + 1)))
            self._retired = [(c, p) for c, p in self._retired if id(p) not in done]
            for gone in done:
                self._retired_epochs.pop(gone, None)
            for counts in [*self._counts.values(), *self._retired_counts]:
                if id(counts.producer) in done:
                    counts.producer = _NOTHING_QUEUED
        now = time.monotonic()
        for cluster, epoch, left_at in let_go:
            waited = now - (left_at if left_at is not None else now)
            # Records that waited long for the cluster the stream left (it was down, and
            # the routing moved off it): that they are in is news.
            log.log(
                logging.INFO if waited >= _SLOW_HANDOVER_S else logging.DEBUG,
                "stream %r: the records queued for %s (routing epoch %d) are all delivered "
                "or reported failed, %.1f s after the routing left it",
                self.stream,
                cluster,
                epoch,
                waited,
            )

    def raise_failures(self) -> None:
        """Raise ProduceError for records that failed without a caller's callback;
        ``StreamDeleted`` (a ProduceError) when records failed, callbacks' included,
        because the stream was deleted."""
        with self._failure_lock:
            deleted, self._undelivered_deleted = self._undelivered_deleted, 0
        failures = self.take_failures()
        if deleted:
            others = [(e, m) for e, m in failures if e.code() not in _DELETED_STREAM_CODES]
            raise StreamDeleted(
                f"{counted(deleted, 'record')} of stream {self.stream!r} undelivered: "
                f"{self._gone} while they were queued, its topics with it. Given up on at "
                "once, each reported failed (to its on_delivery when sent with one): "
                "_PURGE_QUEUE (never sent), _PURGE_INFLIGHT (sent, its answer abandoned) "
                "or its topic unknown"
                + (
                    f"; {counted(len(others), 'other record')} failed, the first: "
                    f"{self._describe_failure(*others[0])}"
                    if others
                    else ""
                )
            )
        if not failures:
            return
        err, msg = failures[0]
        raise ProduceError(
            f"{counted(len(failures), 'record')} could not be delivered to stream {self.stream!r}; "
            f"first: {self._describe_failure(err, msg)}"
        )

    def _describe_failure(self, err: _RawKafkaError, msg: Message) -> str:
        """A failed delivery report told for a person: a write refused by a retired
        segment (fenced: the lane moved off it long ago, and this record was queued for
        it since) says so, rather than "message size too large"."""
        topic = msg.topic() or ""
        table = self._watcher.table
        seg = next((s for s in table.segments if s.topic == topic), None)
        fenced = err.code() == _RawKafkaError.MSG_SIZE_TOO_LARGE and (
            seg is None or seg.state is SegmentState.RETIRED
        )
        if fenced:
            return (
                f"{topic} is a retired segment, fenced: it refuses writes (the lane moved "
                f"off it; the stream is at epoch {table.epoch}). The record was not "
                "written: send it again"
            )
        return f"{err.str()} (topic {topic})"

    def _on_delivery(self, err: _RawKafkaError | None, msg: Message) -> None:
        # With every delivery reported this runs once per record (in poll/flush).
        if err is not None:
            self._count_failure(err, msg)
            self._failures.append((err, msg))

    def _count_failure(self, err: _RawKafkaError, msg: Message) -> None:
        # No latency: the histogram comes from librdkafka's windows alone.
        topic = msg.topic()
        METRICS.delivery_failed(self.stream, topic)  # metrics
        counts = self._counts.get(topic or "")
        with self._failure_lock:
            self._failed_reports += 1
            if counts is not None:
                counts.failed += 1
            if self._gone is not None and err.code() in _DELETED_STREAM_CODES:
                self._undelivered_deleted += 1

    def _on_statistics(self, reach: ClientReachability, stats_json: str) -> None:
        """librdkafka's statistics of one cluster's producer (every few seconds): the
        produce latency windows, and whether its brokers are up."""
        try:
            stats = json.loads(stats_json)
        except ValueError:
            return  # statistics of an unexpected shape: never an error
        reach.on_statistics(stats)
        METRICS.produce_latency_windows(self.stream, stats)

    def _report_deliveries(self) -> None:
        """Publish what was sent and acknowledged since the last report to METRICS."""
        with self._serving:
            self._report_deliveries_now()

    def _report_deliveries_now(self) -> None:
        produced = METRICS.produced
        acked = METRICS.delivered
        for counts in [*self._counts.values(), *self._retired_counts]:
            if counts.sent != counts.published_sent:
                produced[counts.metric_key] += counts.sent - counts.published_sent
                counts.published_sent = counts.sent
            # Everything not failed and no longer queued (queued includes reports not
            # served yet) was acknowledged: a lower bound for this topic, since the
            # queue may hold other topics' records too.
            settled = counts.sent - counts.failed - len(counts.producer)
            if settled > counts.acked:
                acked[counts.metric_key] += settled - counts.acked
                counts.acked = settled
