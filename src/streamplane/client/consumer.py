"""StreamConsumer: per-record acks over a stream's lanes, with the commit log in Kafka.

- Every readable segment (active, draining, sealed) of the chosen lanes is read, on
  whichever cluster it lives; routing changes are picked up live. A consumer of every
  lane (``lanes=None``) reads a lane added to the stream too, at its priority.
- Lanes are served by priority: a record of a higher lane is always handed out before
  one of a lower lane, and a lower lane's fetching pauses when its buffer is full, so
  ``realtime`` never waits behind ``bulk``. Each lane is fetched by a Kafka client of
  its own on each cluster: a fetch queue is first in, first out, and a shared one put
  realtime records behind the bulk backlog the client had prefetched.
- ``ack`` settles a record; ``nack`` schedules a retry with exponential backoff while
  newer records keep flowing; after ``max_attempts`` the record is rejected;
  ``reject`` sends it to the dlq lane with provenance headers and then settles it.
- Every ``commit_interval_s`` the low watermark of each partition is committed as the
  Kafka offset, and the rest of the state (settled ranges above it, retry counts,
  rejected marks, the low watermark's ingestion time) as the commit metadata, through
  the commit-log codec. When that state does not fit the broker's
  ``offset.metadata.max.bytes``, the full state is spilled to the compacted side topic
  ``sp.<stream>.__commitlog`` and the metadata points at it (plus as much state as
  fits), so nothing is dropped and nothing stalls. Commits run on a thread of their
  own (``Committer``) through a client of their own, so the consuming thread never
  waits for a commit's round trip or a spill's write; ``commit()`` waits.
- Which partitions this member reads comes from the control plane's Assigner
  (``membership.GroupMembership``): leases renewed by heartbeats. A unit asked back
  (``_release``) is not read or handed out any more, and is handed back once the
  records of it in the application's hands are acked, nacked or rejected (their dead
  letters written), or at its release deadline (a little before the Assigner's
  ``RELEASE_TIMEOUT_S``), committed first (kept while that commit fails); once a
  lease may have run out (no heartbeat answered for it: a stopped or starved
  process) nothing is committed or handed out until a heartbeat answers, and
  the records of units lost meanwhile are dropped, never committed; fail-static while
  the control plane is away. ``assigner=False`` reads every partition (a group of one).
- A partition holding ``max_in_flight`` unsettled records is paused until some settle:
  memory stays bounded, and so does the commit state (its holes are unsettled
  records). A record stuck at the low watermark does not pause the partition by
  itself: newer records keep flowing and are settled above it.
- The partitions of a lane take turns (``_take_turns``): a fetching client hands out
  what it prefetched first in, first out, up to ``max.partition.fetch.bytes`` (1 MiB)
  of a partition at a time, so a member slower than its backlog read one partition at
  a time. A partition it has handed out alone for ``_TURN_S`` while it holds records
  of another is sent to the back of its queue.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for_futures
from types import TracebackType
from typing import Any, Self

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition
from confluent_kafka import KafkaException as _RawKafkaException

from streamplane.client.commit_store import CommitStore, Restored
from streamplane.client.committer import Committer
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.dlq_writer import DlqWriter, Letter, Write
from streamplane.client.membership import (
    LEASE_MARGIN_S,
    CpuMeter,
    GroupMembership,
    unit_json,
    units_text,
)
from streamplane.client.metrics import METRICS
from streamplane.client.partition_state import PartitionKey, PartitionState
from streamplane.client.producer import StreamProducer
from streamplane.client.provenance import dlq_headers, source_headers
from streamplane.client.retry_schedule import RetrySchedule
from streamplane.client.routing_watch import RoutingWatcher
from streamplane.core.assignment import RELEASE_TIMEOUT_S
from streamplane.core.routing import DLQ_LANE, RoutingTable, validate_stream_name
from streamplane.core.text import counted
from streamplane.exceptions import ConfigError, NotFound, Unauthorized
from streamplane.kafka.clients import consume_available, consumer_config
from streamplane.kafka.reachability import ClientReachability, ClusterReachability

log = logging.getLogger(__name__)

Handler = Callable[["StreamMessage"], object]

# Housekeeping (routing, retries, dlq callbacks, commits, flow control) runs at least
# every so many records or every so many seconds, whichever comes first, even while
# the buffers are not empty (slow handlers still commit on time).
_HOUSEKEEPING_EVERY = 1000
_HOUSEKEEPING_INTERVAL_S = 0.05
# Iteration and a sequential ``run`` hand out at most _MAX_BATCH records a poll, and
# about _BATCH_BUDGET_S of the application's work (``_handed_out``).
_MAX_BATCH = 500
_BATCH_BUDGET_S = 0.05
# The load reported to the Assigner is smoothed with this time constant (seconds).
_LOAD_SMOOTHING_S = 5.0
# While ``run``'s poll thread waits for a free handler thread, or for its handlers to
# finish once the run stops, it keeps house this often: acks folded and committed on
# time, retries released, units handed over. Before, it did nothing while it waited
# (a downstream stalled every handler: no commit for 30 s, then the pod's SIGKILL).
_WAIT_STEP_S = 0.2
# How often a run that stopped says what its handlers still hold.
_DRAIN_LOG_EVERY_S = 5.0
_STATS_INTERVAL_MS = 2000  # the fetching clients' statistics: watermarks, prefetched records
# A partition a fetching client has handed out alone for this long, while it holds
# records of another partition of its lane, goes to the back of the client's queue
# (``_take_turns``). A client hands out up to 1 MiB (``max.partition.fetch.bytes``) of
# a partition at a time: a member that handles such a run in less than this sends no
# partition back (nothing is fetched twice); a slower one gives each partition turns
# of about this long, or of one fetch (``fetch_batch`` records) if that takes longer
# to handle (the first turn, two: the client's statistics, which tell that others
# wait, come with a fetch). Each turn costs the broker a second read of what the
# client had prefetched of the partition (up to its part of librdkafka's queue, 64 MiB
# by default).
_TURN_S = 2.0

# A partition whose in-flight window has been full this long with nothing of it settled
# is logged once (its fetching is paused until records are settled): an application that
# forgets to ack stalled without a word (exploratory run: 5,500 records handed out, then
# nothing, ``partition_states()`` the only place that told).
_STALL_WARN_S = 60.0

# Records taken from the Kafka client at a time (each becomes a tracked Python object
# here, and a StreamMessage when handed out). Kept under CPython's young-generation
# threshold (700 tracked objects): a consumer handing out small records then runs no
# collection at all, where fetches of 1,000 set off one every ~550 records and a full
# one every ~85,000 (~15 ms each). Measured, trivial handler, 1M records, medians of
# 5 runs: 1.10 -> 0.90 us of consuming-thread CPU per record; JSON handler: 2.87 ->
# 2.72 us (bench/client_throughput.py, docs/client-throughput.md). ``poll_batch`` hands a fetch
# out whole and fetches again only when the buffer is nearly empty, so one fetch's
# messages and StreamMessages (~500 objects) are alive at a time: when retries shifted
# its batches off fetch boundaries, part of a fetch waited in the buffer while the next
# one came in, and with 1% poison pills young collections went from ~60 to ~300 per
# 500,000 records, with a full one every ~250,000 (~15-18 ms each).
_FETCH_BATCH = 250

# Dead letters are not latency-critical (the record settles when its dlq write is
# acked), so they go out in batches at most this often (``DlqWriter``). Measured with
# 1% poison at ~500,000 records/s: broker CPU per dead letter fell from ~90 us (one
# small acks=all produce request per partition every 5 ms) to a few us.
_DLQ_BATCH_INTERVAL_S = 0.1

# Where to start reading a partition (its committed offset and commit-log state) is read
# on a thread per cluster (``_OffsetsLoad``): a cluster that does not answer (typically
# the sick one a stream was just failed over from) must not keep the consumer from
# reading the others. ``_assign`` waits this long for the loads it starts (a cluster
# that answers does so in milliseconds, so its partitions are read at once; a load of
# an earlier call still in flight is not waited for);
# housekeeping assigns the partitions of a slower load once it is in, and tries a
# failed one again after _LOAD_RETRY_S.
_LOAD_WAIT_S = 2.0
_LOAD_RETRY_S = 5.0
# The dlq producer fails the writes to a topic its metadata says is missing after
# 1 s, not librdkafka's 30 s: a deleted dlq topic is told (and logged) within about a
# second, and a letter failed by a topic still propagating is only written again.
_DLQ_PRODUCER_CONFIG = {"topic.metadata.propagation.max.ms": 1000}
# How long ``close`` waits for the outputs of records sent with ``send(source=msg)`` to
# be delivered (their records are acked then): those still on their way are not
# committed, and handled again after a restart.
_FORWARD_WAIT_S = 5.0
# How long ``close`` from another thread waits for a ``run`` with threads to finish the
# records its threads started and complete the close (their acks in the closing
# commit); then it closes all the same: as long as a unit asked back waits for them.
_RUN_CLOSE_WAIT_S = RELEASE_TIMEOUT_S


class StreamMessage:
    """One record handed to the application. Settle it with ack, nack or reject.

    Four fields (one is made per record on the hot path); everything else is read
    through the fetch run it came in or its raw message. A nacked record's message is
    handed out again for its retry (a handle kept from before must not settle it).
    """

    __slots__ = ("_done", "_error", "_raw", "_run", "offset")

    def __init__(self, run: _Run, raw: Message, offset: int) -> None:
        self._run = run
        self._raw = raw  # key, value, headers and timestamp are read from it when asked
        self._done: bool | _Forwarded = False
        self.offset = offset

    @property
    def key(self) -> bytes | None:
        return self._raw.key()

    @property
    def value(self) -> bytes | None:
        return self._raw.value()

    @property
    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._raw.headers()  # type: ignore[return-value]

    @property
    def timestamp_ms(self) -> int:
        """The record's ingestion time (its Kafka timestamp, ms since the epoch)."""
        ts: int = self._raw.timestamp()[1]
        return ts

    @property
    def attempts(self) -> int:
        """Attempts before this delivery (its nacks, including those restored from a
        commit); 0 on a first delivery."""
        return self._run.state.attempts.get(self.offset, 0)

    @property
    def last_error(self) -> str | None:
        """The error passed to this record's last nack (None if there was none)."""
        error: str | None = getattr(self, "_error", None)
        return error

    @property
    def first_seen_ms(self) -> int:
        """When this consumer first fetched the record (ms since the epoch)."""
        return self._run.first_seen_ms

    @property
    def stream(self) -> str:
        return self._run.consumer.stream

    @property
    def lane(self) -> str:
        return self._run.state.lane

    @property
    def cluster(self) -> str:
        return self._run.state.key.cluster

    @property
    def topic(self) -> str:
        return self._run.state.key.topic

    @property
    def partition(self) -> int:
        return self._run.state.key.partition

    def ack(self) -> None:
        """Done: the record is settled (thread-safe, and takes no lock: the hot path).
        A record whose outputs were sent with ``StreamProducer.send(..., source=msg)``
        is settled once they are delivered too."""
        done = self._done
        if done:
            if done is not True:  # outputs on their way (``_Forwarded``)
                done.handler_acked()
            return
        self._done = True
        self._run.acks.append(self.offset)  # applied at the next housekeeping or commit

    def _ack_now(self) -> None:
        """The ack of a forwarded record, once its outputs are delivered."""
        self._run.acks.append(self.offset)

    def nack(self, error: BaseException | str | None = None) -> None:
        """Retry later with backoff, without blocking newer records (thread-safe, no
        lock: queued like an ack, and scheduled at the next housekeeping). ``error`` (an
        exception is told by its type and message) is the record's ``last_error``."""
        done = self._done
        if done and (done is True or not done.cancel()):
            return
        self._done = True
        self._nack_now(error)

    def _nack_now(self, error: BaseException | str | None) -> None:
        if isinstance(error, BaseException):  # told as ``reject`` tells it
            self._error = f"{type(error).__name__}: {error}"
        elif error is not None:
            self._error = str(error)
        self._run.state.nacks.append(self)  # counted and scheduled at housekeeping

    def _forwarding(self) -> _Forwarded:
        """One more output of this record on its way (``StreamProducer.send(...,
        source=msg)``): the record is acked once the handler acked it and every output
        is delivered."""
        consumer = self._run.consumer
        with consumer._forward_lock:
            # Read under the lock: another thread may be sending an output of it too
            # (each made its own ``_Forwarded``, and one output's failure was lost), or
            # the report server settling it.
            done = self._done
            if done is True or (isinstance(done, _Forwarded) and done.finished):
                raise ConfigError(
                    f"send(source=msg): {self!r} is settled already (acked, nacked or "
                    "rejected): send a record's outputs before you settle it"
                )
            if not isinstance(done, _Forwarded):
                done = self._done = _Forwarded(self)
            done.pending += 1
        return done

    def reject(self, reason: BaseException | str = "rejected", *, dlq: bool = True) -> None:
        """Give up: send to the dlq lane with provenance (or only mark rejected). The
        reason (an exception is told by its type and message) is the dead letter's
        ``sp-dlq-error``."""
        if isinstance(reason, BaseException):
            reason = f"{type(reason).__name__}: {reason}"
        elif not isinstance(reason, str):
            raise TypeError(f"reject(reason): a str or an exception, not {reason!r}")
        self._run.consumer._reject(self, reason, dlq)

    def __repr__(self) -> str:
        return (
            f"StreamMessage({self.stream}/{self.lane} {self.cluster}:{self.topic}"
            f"[{self.partition}]@{self.offset})"
        )


class _Redelivery(StreamMessage):
    """A record handed out again (a retry, or after a failed dead-letter write): the
    consumer turns its ``StreamMessage`` into one (``_redeliver``). It is parked, so its
    ack goes to the partition's ``retry_acks`` (``PartitionState``): the acks of first
    deliveries are never checked against the parked set."""

    __slots__ = ()

    def ack(self) -> None:
        done = self._done
        if done:
            if done is not True:  # outputs on their way (``_Forwarded``)
                done.handler_acked()
            return
        self._done = True
        self._run.state.retry_acks.append(self.offset)

    def _ack_now(self) -> None:
        self._run.state.retry_acks.append(self.offset)


class _Forwarded:
    """The settlement of a record whose outputs were sent with ``StreamProducer.send(...,
    source=msg)`` (its ``_done`` while they are on their way): acked once the handler
    acked it and every output is delivered; nacked, to be handled again, when an output
    fails (after the handler acked); a nack or reject by the handler settles it at once
    (its outputs' reports are then ignored). Without it, a consume-then-produce service
    acked each record as its output was queued: an exploratory run lost 585 outputs
    whose cluster was down when the service stopped (their inputs committed). All state
    is guarded by the consumer's ``_forward_lock``."""

    __slots__ = ("acked", "error", "finished", "msg", "pending")

    def __init__(self, msg: StreamMessage) -> None:
        self.msg = msg
        self.pending = 0  # outputs sent and not reported yet
        self.acked = False  # the handler acked the record
        self.error: str | None = None  # the first output's failure
        self.finished = False

    def handler_acked(self) -> None:
        consumer = self.msg._run.consumer
        with consumer._forward_lock:
            if self.finished or self.acked:
                return
            consumer._forwarding += 1  # until it is settled: ``close`` waits for it
            self.acked = True
            if self.pending == 0 or self.error is not None:
                self._finish()

    def delivered(self, error: str | None) -> None:
        """An output's delivery report (``error`` None: delivered)."""
        with self.msg._run.consumer._forward_lock:
            if self.finished:
                return
            self.pending -= 1
            if error is not None and self.error is None:
                self.error = error
            if self.acked and (self.pending == 0 or self.error is not None):
                self._finish()

    def cancel(self) -> bool:
        """The handler settles the record itself (nack, reject): True unless it was
        settled already."""
        with self.msg._run.consumer._forward_lock:
            if self.finished:
                return False
            self.finished = True
            if self.acked:
                self.msg._run.consumer._forwarding -= 1
            return True

    def _finish(self) -> None:
        if self.finished:  # settled by a signal handler's report meanwhile: once only
            return
        self.finished = True
        msg = self.msg
        msg._run.consumer._forwarding -= 1
        msg._done = True
        if self.error is None:
            msg._ack_now()
        else:
            msg._nack_now(f"an output sent with source= was not delivered: {self.error}")


def _is_async(handler: object) -> bool:
    """An ``async def`` function, or an object whose ``__call__`` is one."""
    call = type(handler).__call__ if callable(handler) else None
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)


def _not_run(awaitable: object) -> TypeError:
    """The error of a handler that returned an awaitable instead of handling the record
    (the coroutine is closed: never awaited, it would only warn when collected)."""
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()
    return TypeError(
        f"the handler returned {type(awaitable).__name__} instead of handling the record: "
        "run does not await; give it a plain function"
    )


def _forget_task(
    tasks: dict[Future[None], StreamMessage | None],
) -> Callable[[Future[None]], None]:
    """A done callback that drops a finished task from ``run``'s map of tasks."""

    def forget(future: Future[None]) -> None:
        tasks.pop(future, None)

    return forget


def _offset_order(msg: StreamMessage) -> tuple[str, str, int, int]:
    """Records of each partition in offset order."""
    key = msg._run.state.key
    return key.cluster, key.topic, key.partition, msg.offset


def _redeliver(msg: StreamMessage) -> None:
    """Make ``msg`` a ``_Redelivery`` (the same slots: only its class changes, with no
    new object per retry)."""
    msg.__class__ = _Redelivery


class _Run:
    """Fetched records of one partition, in offset order, as fetched together. Its
    records are handed out from ``pos`` on; a handed-out record keeps its run (the
    partition, the consumer, when the run was fetched), not the records after it."""

    __slots__ = (
        "acks",
        "consumer",
        "first_offset",
        "first_seen_ms",
        "messages",
        "pos",
        "state",
    )

    def __init__(
        self,
        consumer: StreamConsumer,
        state: PartitionState,
        messages: Sequence[Message],
        first_seen_ms: int,
        first_offset: int | None,
    ) -> None:
        self.consumer = consumer
        self.state = state
        self.acks = state.acks  # the partition's ack queue (never replaced)
        self.messages = messages
        self.pos = 0  # the next record to hand out
        self.first_seen_ms = first_seen_ms
        # The offset of messages[0] when the offsets are consecutive (then the offset
        # of messages[i] is first_offset + i), else None.
        self.first_offset = first_offset


class _LaneBuffer:
    """One lane's records waiting to be handed out, oldest first: runs of fetched
    records (a ``StreamMessage`` is made only when a record is handed out, so a buffered
    record costs no more than the client's own message object) and lists of retries
    that came due together."""

    __slots__ = ("entries", "size")

    def __init__(self) -> None:
        self.entries: deque[_Run | list[StreamMessage]] = deque()
        self.size = 0  # records buffered

    def add_run(self, run: _Run) -> None:
        self.entries.append(run)
        self.size += len(run.messages)

    def add_retries(self, messages: list[StreamMessage]) -> None:
        self.entries.append(messages)
        self.size += len(messages)

    def drop(self, keys: set[PartitionKey]) -> None:
        """Forget the records of partitions this member gave up."""
        kept: deque[_Run | list[StreamMessage]] = deque()
        size = 0
        for e in self.entries:
            if isinstance(e, _Run):
                if e.state.key not in keys:
                    kept.append(e)
                    size += len(e.messages) - e.pos
            else:
                retries = [m for m in e if m._run.state.key not in keys]
                if retries:
                    kept.append(retries)
                    size += len(retries)
        self.entries = kept
        self.size = size


class _OffsetsLoad:
    """The committed progress of some partitions of one cluster, read on a thread of its
    own (through the cluster's ``CommitStore``). ``done`` is set once ``restored`` or
    ``error`` is."""

    def __init__(self, cluster: str, keys: list[PartitionKey], store: CommitStore) -> None:
        self.cluster = cluster
        self.keys = keys
        self.done = threading.Event()
        self.restored: Restored = {}
        self.error: Exception | None = None
        threading.Thread(
            target=self._run, args=(store,), name=f"sp-offsets-{cluster}", daemon=True
        ).start()

    def _run(self, store: CommitStore) -> None:
        try:
            self.restored = store.load([(k.topic, k.partition) for k in self.keys])
        except Exception as exc:  # reported, and tried again, by the consuming thread
            self.error = exc
        finally:
            self.done.set()


def _close_after(client: Consumer, waits: list[Callable[[], object]]) -> None:
    """Close ``client`` once every one of ``waits`` returned (a load reading through it,
    a commit still running on it), on a thread of its own: closing a client under a call
    in progress is not safe, and a call to a cluster that does not answer may take
    ~30 s or the whole outage, which ``close`` must not wait for."""

    def close() -> None:
        for wait in waits:
            wait()
        client.close()

    threading.Thread(target=close, name="sp-client-close", daemon=True).start()


class StreamConsumer:
    """Consume a stream as a member of ``group``, acknowledging each record.

    >>> with StreamConsumer("logs-intake", "indexer", control_plane=client) as consumer:
    ...     for msg in consumer:
    ...         handle(msg.value)
    ...         msg.ack()

    or ``consumer.run(handler, concurrency=8)`` where a handler that raises nacks.
    """

    def __init__(
        self,
        stream: str,
        group: str,
        control_plane: ControlPlaneClient,
        lanes: Sequence[str] | None = None,
        *,
        max_attempts: int = 5,
        retry_backoff: float = 0.2,
        max_retry_backoff: float = 30.0,
        commit_interval_s: float = 1.0,
        max_in_flight: int = 10_000,
        max_buffered_per_lane: int = 5_000,
        fetch_batch: int = _FETCH_BATCH,
        read_only: bool = False,
        assigner: bool = True,
        member_id: str | None = None,
        heartbeat_interval_s: float = 0.3,
        extra_config: Mapping[str, Any] | None = None,
    ) -> None:
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise ConfigError(f"max_attempts must be an int of at least 1, not {max_attempts!r}")
        for name, seconds in (
            ("retry_backoff", retry_backoff),
            ("max_retry_backoff", max_retry_backoff),
            ("commit_interval_s", commit_interval_s),
            ("heartbeat_interval_s", heartbeat_interval_s),
        ):
            if isinstance(seconds, bool) or not isinstance(seconds, int | float):
                raise ConfigError(f"{name} must be a number of seconds, not {seconds!r}")
        if not (
            math.isfinite(retry_backoff)
            and math.isfinite(max_retry_backoff)
            and 0 <= retry_backoff <= max_retry_backoff
        ):
            raise ConfigError(
                "retry_backoff and max_retry_backoff must be seconds with "
                f"0 <= retry_backoff <= max_retry_backoff, not {retry_backoff!r} and "
                f"{max_retry_backoff!r}"
            )
        for name, seconds in (
            ("commit_interval_s", commit_interval_s),
            ("heartbeat_interval_s", heartbeat_interval_s),
        ):
            if not (math.isfinite(seconds) and seconds > 0):
                raise ConfigError(f"{name} must be a positive number of seconds, not {seconds!r}")
        if not group or len(group) > 200:
            raise ConfigError("group must be a non-empty name of at most 200 characters")
        if lanes is not None and (
            isinstance(lanes, str) or not lanes or not all(isinstance(x, str) for x in lanes)
        ):
            raise ConfigError(f"lanes must be a non-empty list of lane names, not {lanes!r}")
        for name, value in (
            ("max_in_flight", max_in_flight),
            ("max_buffered_per_lane", max_buffered_per_lane),
            ("fetch_batch", fetch_batch),
        ):
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive int, not {value!r}")
        self.stream = validate_stream_name(stream)
        self.group = group
        self._client = control_plane
        self._lanes = list(lanes) if lanes is not None else None
        # Reads every lane but the dlq, those added to the stream later too (``_rank_lanes``).
        self._follows_stream_lanes = lanes is None
        self.max_attempts = max_attempts
        self.retry_backoff = retry_backoff
        self.max_retry_backoff = max_retry_backoff
        self.commit_interval_s = commit_interval_s
        self.max_in_flight = max_in_flight
        self.max_buffered_per_lane = max_buffered_per_lane
        self.fetch_batch = fetch_batch
        self.read_only = read_only  # never commit (for browsing, e.g. `dlq list`)
        self._use_assigner = assigner and not read_only
        self._member_id = member_id
        self._heartbeat_interval_s = heartbeat_interval_s
        self._membership: GroupMembership | None = None
        self._fenced_logged = False
        self._lapse_logged = False
        self._last_load = (time.monotonic(), 0)
        self._cpu_smoothed: float | None = None
        self._rate_smoothed: float | None = None
        self._cpu_meter = CpuMeter()
        self._extra = dict(extra_config or {})
        # A cluster whose brokers all dropped out (and its return) in the log.
        self._reachability = ClusterReachability(f"stream {stream!r} (group {group})", log)
        self._watcher = RoutingWatcher(control_plane, stream)
        self._watcher.add_gone_listener(self._on_gone)
        self._lock = threading.RLock()  # re-entered: _assign (under it) commits first
        # Held by a poll, and by close. Reentrant so that ``close`` can tell that its own
        # thread holds it (``_polling_is_mine``): called from a signal handler, or from
        # anything else running on the thread that polls, it cannot wait for the poll.
        self._polling = threading.RLock()
        self._polling_is_mine: Callable[[], bool] = self._polling._is_owned  # type: ignore[attr-defined]
        # The fetching clients, one per (cluster, lane priority); and as _fetch polls
        # them: the highest lane last (the one waited on when nothing else came).
        self._consumers: dict[tuple[str, int], Consumer] = {}
        self._fetch_order: list[tuple[tuple[str, int], Consumer]] = []
        # Turns (``_take_turns``): per fetching client, the partition whose records it
        # has handed out alone, and since when; the partitions the clients held records
        # of that we had not taken, at their last statistics (``_on_stats``), with our
        # next offset of each then.
        self._streaks: dict[tuple[str, int], tuple[PartitionState, float]] = {}
        self._prefetched: dict[PartitionState, int | None] = {}
        # Partitions whose in-flight window is full: since when, with what (acked,
        # in_flight), and whether it was logged (``_note_full_window``).
        self._window_stalls: dict[PartitionState, tuple[float, tuple[int, int], bool]] = {}
        self._bootstraps: dict[str, str] = {}
        self._commit_stores: dict[str, CommitStore] = {}
        self._commit_clients: dict[str, Consumer] = {}  # the stores' clients, by cluster
        self._committer = Committer(
            self._commit_stores, name=f"sp-commit-{stream}", committable=self._committable
        )
        self._states: dict[PartitionKey, PartitionState] = {}
        # Units being handed back (``_release``): no longer read or handed out, their
        # states kept (acks folded, committed) until the records of them in the
        # application's hands are given back: (state, deadline, since), monotonic.
        self._releasing: dict[PartitionKey, tuple[PartitionState, float, float]] = {}
        # The same states by cluster, then (topic, partition): the fetch path's lookup.
        self._states_by_cluster: dict[str, dict[tuple[str, int], PartitionState]] = {}
        # Partitions to read whose committed progress is being loaded: (lane, priority).
        self._loading: dict[PartitionKey, tuple[str, int]] = {}
        self._loads: list[_OffsetsLoad] = []
        self._failed_loads: list[tuple[float, str, list[PartitionKey]]] = []  # (retry at, ...)
        self._until_housekeeping = 0
        self._housekeeping_due = 0.0
        self._buffers: list[_LaneBuffer] = []  # by lane priority
        self._lane_order: dict[str, int] = {}
        self._reads_dlq = False  # a dead letter rejected again is settled, not rewritten
        self._dlq_rejects_logged = False
        self._retries: RetrySchedule[StreamMessage] = RetrySchedule()
        # The backoff before attempt n + 1, by n (the attempts so far), until it reaches
        # max_retry_backoff: later attempts wait the last one.
        self._retry_delays: list[float] = []
        for n in range(max_attempts):
            delay = min(max_retry_backoff, retry_backoff * 2.0 ** min(max(0, n - 1), 64))
            self._retry_delays.append(delay)
            if delay >= max_retry_backoff or n > 64:
                break
        self._exhausted_reason = f"max attempts ({max_attempts}) reached"
        self._pending_routing: RoutingTable | None = None
        self._dlq: DlqWriter[StreamMessage] | None = None
        self._last_commit = time.monotonic()
        self._opened = False
        self._closed = False
        self._torn_down = False  # ``_close`` ran (it runs once, however it is reached)
        # Records acked by their handler whose outputs (``send(source=msg)``) are still
        # on their way (``_Forwarded``): ``close`` waits for them. One whose handler has
        # not returned is not counted (its ack would come after the closing commit).
        # Reentrant: a signal handler that flushes or closes the output producer serves
        # reports on the thread it interrupted, maybe inside this lock (it deadlocked).
        self._forward_lock = threading.RLock()
        self._forwarding = 0
        # ``close`` came while ``open`` ran (a signal handler as ``with`` starts): the
        # iteration and ``run`` end at once instead of raising that it is closed.
        self._closed_while_opening = False
        # ``close`` was called on the thread that polls, while it polled: the poll
        # completes the close as it returns (``_closed_mid_poll``), or, while ``run``
        # hands records to threads (``_run_closes``), ``run`` does once they are done.
        self._close_requested = False
        self._run_closes = False
        self._run_thread: int | None = None  # the thread of a ``run`` with threads
        self._run_handlers: set[int] = set()  # and the threads of its pool
        self._run_ended = threading.Event()  # set as a ``run`` with threads returns
        # Why the stream is no more (deleted), once the routing watch says so: polls
        # raise NotFound from then on, so ``run`` and iteration end.
        self._gone: str | None = None
        # The batch an iteration (or a sequential ``run``) is handing out: ``close`` empties
        # it, so the loop stops at the next record at no cost per record (``_handed_out``).
        self._in_hand: list[StreamMessage] | None = None
        self.stats = {"delivered": 0, "acked": 0, "nacked": 0, "rejected": 0, "dlq": 0}
        METRICS.track_consumer(self)  # metrics

    # ------------------------------------------------------------------ life cycle
    def open(self) -> Self:
        """Fetch the routing, restore committed progress, start reading."""
        if self._closed:
            if self._closed_while_opening:  # its iteration and ``run`` end at once
                return self
            raise ConfigError(
                f"consumer of stream {self.stream!r} (group {self.group!r}) is closed: "
                "make a new one"
            )
        if self._opened:
            return self
        table = self._watcher.start()
        try:
            self._open(table)
        except BaseException:
            # Nothing half-open is left behind: no watch thread, heartbeat or client.
            self._watcher.stop()
            if self._membership is not None:
                self._membership.stop(leave=True)
            self._close_clients()
            if self._dlq is not None:
                self._dlq.close()
            raise
        if self._closed:
            self._closed_while_opening = True
            # ``close`` came while this opened (a signal handler, another thread): it
            # found nothing open and only marked the consumer closed. What opened since
            # (the watch, the group's heartbeat, the dlq producer, the Kafka clients)
            # is closed now, not left running.
            with self._polling:
                self._close()
        return self

    def _open(self, table: RoutingTable) -> None:
        lanes = self._lanes if self._lanes is not None else list(table.lanes)
        for lane in lanes:
            if lane not in table.all_lanes:
                raise ConfigError(
                    f"stream {self.stream!r} has no lane {lane!r} "
                    f"(lanes: {', '.join(table.all_lanes)})"
                )
        # Served by the stream's priority, whatever order they were named in (and each
        # once): the same lanes name the same group reading to the Assigner.
        wanted = set(lanes)
        lanes = [lane for lane in table.all_lanes if lane in wanted]
        self._lanes = lanes
        self._lane_order = {lane: i for i, lane in enumerate(lanes)}
        self._reads_dlq = DLQ_LANE in wanted
        self._buffers = [_LaneBuffer() for _ in lanes]
        if self._use_assigner:  # first: a wrong token is told by its first heartbeat
            self._membership = GroupMembership(
                self._client,
                self.group,
                self.stream,
                lanes,
                member_id=self._member_id,
                interval_s=self._heartbeat_interval_s,
                load=self._load_report,
            )
            self._membership.start()
            self._membership.changed.clear()
        if not self.read_only:  # a browser writes nothing: no commits, no dead letters
            self._dlq = DlqWriter(
                StreamProducer(
                    self.stream,
                    self._client,
                    lane=DLQ_LANE,
                    extra_config=_DLQ_PRODUCER_CONFIG,
                ).open(),
                _DLQ_BATCH_INTERVAL_S,
                self._dead_letter_write,
            )
        self._assign(table)
        self._watcher.add_listener(self._on_routing)
        self._opened = True

    def __enter__(self) -> Self:
        return self.open()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Commit what is settled and leave.

        Safe from a signal handler, and from anything else that runs on the thread that
        polls while it polls: the close is then only requested, and completed as the
        poll returns (it returns at once): the iteration ends, and ``run`` returns once
        the records its threads have started are handled, their acks in the closing
        commit. So does a close from one of ``run``'s handlers; one from another
        thread while ``run`` has threads waits for that (up to ``_RUN_CLOSE_WAIT_S``)."""
        if self._closed or not self._opened:
            self._closed = True
            if self._close_requested and not self._run_closes and not self._polling_is_mine():
                self._finish_requested_close()  # a poll that requested it ended in error
            return
        self._closed = True
        in_hand = self._in_hand
        if in_hand is not None:
            # An iteration or a sequential ``run`` hands out nothing more, not even the
            # rest of its batch: their acks would come after this commit, and be lost
            # (the records handled again by the next reader).
            in_hand.clear()
        me = threading.get_ident()
        if self._polling_is_mine() or (
            self._run_closes and (self._run_thread == me or me in self._run_handlers)
        ):
            # Called on the thread that is polling (a SIGTERM handler runs on the main
            # thread, between two steps of its poll): waiting for the poll would wait on
            # itself (it hung), and closing the clients under their consume call is not
            # safe. The poll sees ``_closed`` and returns, completing the close. On the
            # thread of a ``run`` with threads (waiting for a free place, say), or in one
            # of its handlers, ``run`` completes it once its threads are done: their acks
            # are in the commit.
            self._close_requested = True
            return
        if self._run_closes:
            # ``run`` with threads, on another thread: it stops polling, and completes
            # the close once the records its threads started are handled. (Closed here
            # between two of its polls, the handlers' acks came after the closing
            # commit, and the group moved their units on while they were handled.)
            self._close_requested = True
            if not self._run_ended.wait(_RUN_CLOSE_WAIT_S):
                log.warning(
                    "%s (group %s): closing while run's handlers are still busy after "
                    "%.0f s: their records are handled again after a restart",
                    self.stream,
                    self.group,
                    _RUN_CLOSE_WAIT_S,
                )
            self._finish_requested_close()  # (done already, unless run ended first)
            return
        # A poll running on another thread (``run``, an iteration) returns first: closing
        # a librdkafka client under its consume call hung, and its housekeeping then
        # found the committer stopped.
        with self._polling:
            self._close()

    def _finish_requested_close(self) -> None:
        """Complete a close requested on the polling thread (``close``), once its poll
        returned."""
        with self._polling:
            if self._close_requested:
                self._close_requested = False
                self._close()

    def _closed_mid_poll(self, out: list[StreamMessage]) -> None:
        """A poll during which its own thread called ``close`` (holding ``_polling``):
        the records it took are not handed out (their acks would come after the closing
        commit: unsettled, they are read again after a restart), and the close is
        completed now, unless ``run`` does once its threads are done."""
        self.stats["delivered"] -= len(out)
        if not self._run_closes:
            self._close_requested = False
            self._close()

    def _close(self) -> None:
        if self._torn_down:
            return
        self._torn_down = True
        self._watcher.stop()
        try:
            self._await_forwarded(_FORWARD_WAIT_S)
            with self._lock:
                self._apply_acks()  # nacks past max_attempts are dead-lettered now
            if self._gone is None:  # else its dlq lane is deleted too: nothing to write to
                self._flush_dlq(5.0)
            self.commit()  # nothing once the stream is deleted (``_commit``)
            if self._membership is not None:
                self._membership.stop(leave=True)  # our units move on at once
        finally:
            self._committer.stop()
            self._close_clients()
            for store in self._commit_stores.values():
                store.close()
            if self._dlq is not None:
                self._dlq.close()
            METRICS.untrack_consumer(self)  # metrics: its counts stay in the totals

    def _await_forwarded(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the outputs of forwarded records to be delivered,
        so their acks are in the closing commit; those still on their way are left
        unsettled (handled again after a restart), and said so."""
        deadline = time.monotonic() + timeout
        while self._forwarding and time.monotonic() < deadline:
            time.sleep(0.01)
        if self._forwarding:
            log.warning(
                "%s (group %s): closing with %s whose outputs (sent with source=) were "
                "not delivered in %.0f s: not committed, handled again after a restart",
                self.stream,
                self.group,
                counted(self._forwarding, "record"),
                timeout,
            )

    def _close_clients(self) -> None:
        """Close the Kafka clients; a committing client that a load still reads
        through, or a commit still runs on, is closed once they are done
        (``_close_after``)."""
        self._reachability.close()  # a Kafka client being closed says its brokers are down
        busy: dict[str, list[Callable[[], object]]] = {}
        for load in self._loads:
            if not load.done.is_set():
                busy.setdefault(load.cluster, []).append(load.done.wait)
        for cluster, thread in self._committer.busy().items():
            busy.setdefault(cluster, []).append(thread.join)
        for c in self._consumers.values():
            c.close()
        for cluster, c in self._commit_clients.items():
            if cluster in busy:
                _close_after(c, busy[cluster])
            else:
                c.close()
        self._consumers.clear()
        self._fetch_order = []
        self._commit_clients.clear()

    # ------------------------------------------------------------------ routing
    def _bootstrap(self, cluster: str) -> str:
        if cluster not in self._bootstraps:
            self._bootstraps[cluster] = self._client.cluster_bootstrap(cluster)
        return self._bootstraps[cluster]

    def _client_config(self, cluster: str, reach: ClientReachability) -> dict[str, Any]:
        return consumer_config(
            self._bootstrap(cluster),
            self.group,
            {"enable.auto.offset.store": False, "error_cb": reach.on_error, **self._extra},
        )

    def _fetcher(self, cluster: str, priority: int) -> Consumer:
        """The client fetching one lane's partitions on ``cluster``."""
        c = self._consumers.get((cluster, priority))
        if c is None:
            self._commit_store(cluster)
            reach = self._reachability.client(cluster)
            config = self._client_config(cluster, reach)
            # Its statistics: the backlog the Assigner is told (_backlog), the records
            # it holds prefetched (_take_turns), and whether its brokers are up.
            config["statistics.interval.ms"] = _STATS_INTERVAL_MS
            config["stats_cb"] = functools.partial(self._on_stats, cluster, reach)
            c = self._consumers[cluster, priority] = Consumer(config)
            by_lane = sorted(self._consumers.items(), key=lambda item: -item[0][1])
            self._fetch_order = by_lane
        return c

    def _commit_store(self, cluster: str) -> CommitStore:
        """Commits go through a client of their own (the same group, nothing assigned):
        a synchronous commit on a fetching client, from the committer's thread, waited
        seconds while the consuming thread sat in consume()."""
        store = self._commit_stores.get(cluster)
        if store is None:
            committing = self._commit_clients[cluster] = Consumer(
                self._client_config(cluster, self._reachability.client(cluster))
            )
            store = self._commit_stores[cluster] = CommitStore(
                committing, self._bootstrap(cluster), self.stream, self.group
            )
            if not self.read_only:
                store.prefetch_budget()
        return store

    def _on_routing(self, table: RoutingTable) -> None:
        self._pending_routing = table  # applied by the consuming thread

    def _on_gone(self, reason: str) -> None:
        """The stream was deleted (the routing watch says so): polls raise NotFound from
        their next housekeeping on, so ``run`` and iteration end, as a producer's
        ``send`` does. Nothing is committed from then on: its topics are deleted."""
        self._gone = reason

    def _assign(self, table: RoutingTable) -> None:
        """Read what the routing offers and (with the Assigner) what this member owns."""
        assert self._lanes is not None
        if self._follows_stream_lanes and self._lanes != list(table.lanes):
            self._rank_lanes(table)
        membership = self._membership
        # Taken before the assignment: a heartbeat updates them first.
        regranted = membership.take_regranted() if membership is not None else frozenset()
        owned, to_release = (
            membership.assignment() if membership is not None else (None, frozenset())
        )
        wanted: dict[PartitionKey, tuple[str, int]] = {}
        for seg in table.readable(self._lanes):
            for p in range(seg.partitions):
                key = PartitionKey(seg.cluster, seg.topic, p)
                if owned is None or key in owned:
                    wanted[key] = (seg.lane, self._lane_order[seg.lane])
        # Units given back to us by a heartbeat that admitted us again (our lease had
        # expired on the control plane): another member may have read and committed them
        # meanwhile, so what we hold of them (buffered records, settled state, a load of
        # their commits) is stale. They are dropped like lost units and read afresh.
        stale = {k for k in regranted if k in self._states} if regranted else set()
        reload = {k for k in regranted if k in self._loading} if regranted else set()
        if reload:
            for load in self._loads:
                load.keys = [k for k in load.keys if k not in reload]
            self._failed_loads = [
                (due, cluster, [k for k in keys if k not in reload])
                for due, cluster, keys in self._failed_loads
            ]
        if stale or reload:
            log.warning(
                "%s (group %s): %s given back after our lease had expired are read afresh "
                "from their committed state (their buffered records are dropped)",
                self.stream,
                self.group,
                counted(len(stale | reload), "work unit"),
            )
        releasing = self._releasing
        if releasing and owned is not None:
            # Units we were handing back that are not ours to hand back any more (their
            # release time ran out, or our lease did): their state is stale, and not
            # committed.
            taken = [
                releasing.pop(k)[0]
                for k in list(releasing)
                if (k not in owned and k not in to_release) or k in regranted
            ]
            self._forget_released(taken)
            in_hands = sum(max(0, state.in_hands()) for state in taken)
            if in_hands:
                log.warning(
                    "%s (group %s): %s taken from us while being handed back, with %s "
                    "still in the application's hands: the next holder may handle them too",
                    self.stream,
                    self.group,
                    units_text(state.key for state in taken),
                    counted(in_hands, "record"),
                )
        new = [
            k
            for k in wanted
            if (k not in self._states or k in stale)
            and (k not in self._loading or k in reload)
            and k not in releasing  # ours again: read afresh once handed back
        ]
        gone = [k for k in self._states if k not in wanted or k in stale]
        unloaded = [k for k in self._loading if k not in wanted]  # never read: let go
        for k in unloaded:
            del self._loading[k]
        if membership is not None:
            # Asked back and nothing of them held (never read, or read and let go): at once.
            idle = [
                k
                for k in to_release
                if k not in self._states and k not in releasing and k not in self._loading
            ]
            if unloaded or idle:
                membership.released([*unloaded, *idle])
        if gone:
            # Units that are neither ours nor ours to give back any more (our lease on
            # them ran out, or a restarted Assigner gave them to a member that claimed
            # them too: another member may hold them) are not committed: our state of
            # them is stale, and would overwrite the new holder's progress.
            lost = {k for k in gone if owned is not None and k not in owned and k not in to_release}
            if lost:
                log.warning(
                    "%s (group %s): lost %s to another member (no longer leased to us): "
                    "their buffered records are dropped, not committed; the new holder "
                    "reads them",
                    self.stream,
                    self.group,
                    counted(len(lost), "work unit"),
                )
            lost |= stale
            dropped = [self._states.pop(k) for k in gone if k in lost]
            let_go = [self._states.pop(k) for k in gone if k not in lost]
            self._stop_reading(dropped + let_go)
            self._forget_released(dropped)
            now = time.monotonic()
            for state in let_go:
                # Handed back once the records of it in the application's hands are
                # given back (``_advance_releases``), by the Assigner's release deadline
                # at the latest; without the Assigner, nobody else reads it: at once.
                k = state.key
                deadline = membership.release_deadline(k) if membership is not None else now
                if deadline is None:  # left the routing before the Assigner asked for it
                    deadline = now + RELEASE_TIMEOUT_S - LEASE_MARGIN_S
                releasing[k] = (state, deadline, now)
        by_cluster_new: dict[str, list[PartitionKey]] = {}
        for k in new:
            by_cluster_new.setdefault(k.cluster, []).append(k)
        started = []
        for cluster, keys in by_cluster_new.items():
            for k in keys:
                self._loading[k] = wanted[k]
            started.append(self._start_load(cluster, keys))
        deadline = time.monotonic() + _LOAD_WAIT_S
        for load in started:
            if not load.done.wait(max(0.0, deadline - time.monotonic())):
                log.warning(
                    "cluster %s (%s) has not said in %.0f s where to start %s: "
                    "they are read once it does, the other clusters meanwhile",
                    load.cluster,
                    self._bootstraps.get(load.cluster, "?"),
                    _LOAD_WAIT_S,
                    counted(len(load.keys), "partition"),
                )
        if started:
            self._adopt_loads()

    def _rank_lanes(self, table: RoutingTable) -> None:
        """Take on the lanes added to the stream (a consumer of every lane): each at its
        place in the priority order, so the lanes below it move one priority down. What
        is kept by priority (the lanes' buffers, their fetching clients, the partitions'
        priorities) is renumbered in place: nothing read is dropped or read again. The
        group's heartbeats name the new lanes from now on (the Assigner then gives the
        group their units). Hold the lock."""
        lanes, before = list(table.lanes), self._lanes or []
        order = {lane: i for i, lane in enumerate(lanes)}
        if any(lane not in order for lane in before):
            return  # (lanes are never removed from a stream)
        moved = [order[lane] for lane in before]  # old priority -> new
        buffers = [_LaneBuffer() for _ in lanes]
        for old, buffer in enumerate(self._buffers):
            buffers[moved[old]] = buffer
        for state in self._settling_states():
            state.priority = moved[state.priority]
        self._loading = {k: (lane, order[lane]) for k, (lane, _) in self._loading.items()}
        self._consumers = {(c, moved[p]): client for (c, p), client in self._consumers.items()}
        self._fetch_order = sorted(self._consumers.items(), key=lambda item: -item[0][1])
        self._streaks = {(c, moved[p]): streak for (c, p), streak in self._streaks.items()}
        added = [lane for lane in lanes if lane not in before]
        self._lanes, self._lane_order, self._buffers = lanes, order, buffers
        if self._membership is not None:
            self._membership.lanes = lanes  # (replaced whole: read by its heartbeats)
        log.info(
            "%s (group %s): reading lane %s added to the stream (lanes: %s)",
            self.stream,
            self.group,
            ", ".join(added),
            " > ".join(lanes),
        )

    def _stop_reading(self, states: list[PartitionState]) -> None:
        """Stop fetching and handing out ``states``' records: their buffered records
        and retries are dropped (the next holder reads them from the committed state).
        The records of them in the application's hands may still be settled. Hold the
        lock."""
        if not states:
            return
        by_fetcher: dict[tuple[str, int], list[TopicPartition]] = {}
        for state in states:
            k = state.key
            by_fetcher.setdefault((k.cluster, state.priority), []).append(
                TopicPartition(k.topic, k.partition)
            )
            state.revoked = True
            self._states_by_cluster[k.cluster].pop((k.topic, k.partition), None)
        METRICS.partitions_released(self, states)  # metrics
        for (cluster, priority), tps in by_fetcher.items():
            self._fetcher(cluster, priority).incremental_unassign(tps)
        gone = {state.key for state in states}
        for buf in self._buffers:
            buf.drop(gone)
        self._retries.discard(lambda m: m._run.state.revoked)

    def _forget_released(self, states: list[PartitionState]) -> None:
        """Forget the dead letters not written yet of units let go (hold the lock)."""
        if states and self._dlq is not None:
            let_go = set(states)
            self._dlq.discard(lambda m: m._run.state in let_go)

    def _still_held(self, state: PartitionState) -> int:
        """The records of ``state`` not given back yet: in the application's hands, or
        rejected to the dlq lane with their dead letter not in yet (settled once it is).
        Counted when asked (a unit being handed back), not per dead letter."""
        held = max(0, state.in_hands())
        dlq = self._dlq
        if dlq is not None and dlq.pending:
            held += sum(1 for record in dlq.records() if record._run.state is state)
        return held

    def _advance_releases(self) -> None:
        """Hand back the units being released whose records are out of the
        application's hands (each one acked, nacked or rejected), or whose release
        deadline has come: their acks are committed first, so the next holder neither
        handles again what was acked here nor starts while a record of the unit is still
        being handled here. Before, a unit was handed back at the next poll after it was
        asked for: records of it still in ``run``'s threads were handled again by the
        next holder, some by both members at once (an exploratory run: 29 of ~20,000
        records, all within 0.5 s of a member joining).

        A record rejected to the dlq lane is in hand until its dead letter is in
        (``_still_held``): handed back before, the unit's last commit lacked its settlement
        and the next holder handled it (and dead-lettered it) again. A unit whose commit
        fails is kept and committed again at each housekeeping until its deadline:
        handed back, its acks were lost. The deadline is the Assigner's current one
        (``release_deadline``: a unit kept, then asked back again, has a later one); a
        unit kept is read again once its records in hand are back. Hold the lock."""
        membership = self._membership
        if membership is not None and not membership.may_commit():
            return  # fenced: nothing can be committed (the Assigner moves them if need be)
        now = time.monotonic()
        self._apply_acks()
        owned, to_release = (
            membership.assignment() if membership is not None else (frozenset(), frozenset())
        )
        due: list[tuple[PartitionKey, PartitionState, float, float]] = []
        for k, (state, deadline, since) in self._releasing.items():
            if membership is not None and k in to_release:
                deadline = membership.release_deadline(k) or deadline
            elif k in owned:
                deadline = math.inf  # kept: nobody else reads it
            if self._still_held(state) <= 0 or now >= deadline:
                due.append((k, state, since, deadline))
        if not due:
            return
        self.commit()  # their acks committed before they are let go
        failed = self._commit_again()
        if failed:
            due = [entry for entry in due if entry[0] not in failed or now >= entry[3]]
            if not due:
                return  # committed again at the next housekeeping
        for k, _, _, _ in due:
            del self._releasing[k]
        overdue = [(k, state, since) for k, state, since, _ in due if self._still_held(state) > 0]
        if overdue:
            log.warning(
                "%s (group %s): handed back %s with %s still in the application's hands "
                "after %.1f s (the release time): they may be handled again by the next "
                "holder, perhaps while they are still being handled here",
                self.stream,
                self.group,
                units_text(k for k, _, _ in overdue),
                counted(sum(self._still_held(state) for _, state, _ in overdue), "record"),
                now - min(since for _, _, since in overdue),
            )
        uncommitted = [k for k, _, _, _ in due if k in failed]
        if uncommitted:
            log.warning(
                "%s (group %s): handed back %s at the end of the release time although "
                "their last commit failed: the next holder handles again what was "
                "acked here since their last commit",
                self.stream,
                self.group,
                units_text(uncommitted),
            )
        self._forget_released([state for _, state, _, _ in due])
        if membership is None:
            return
        owned, to_release = membership.assignment()
        membership.released([k for k, _, _, _ in due if k in to_release])
        if any(k in owned for k, _, _, _ in due):
            # Ours again (the Assigner kept it after all, or it left the routing and
            # has not been asked for yet): read afresh from the commit, or handed back
            # once asked for (``_assign``).
            membership.changed.set()

    def _start_load(self, cluster: str, keys: list[PartitionKey]) -> _OffsetsLoad:
        """Read where ``keys`` (partitions of ``cluster``) start, in the background."""
        load = _OffsetsLoad(cluster, keys, self._commit_store(cluster))
        self._loads.append(load)
        return load

    def _adopt_loads(self) -> None:
        """Start reading the partitions whose committed progress is in; a failed load
        is logged and tried again after _LOAD_RETRY_S, while every other partition is
        read (hold the lock)."""
        now = time.monotonic()
        if self._failed_loads:
            due = [f for f in self._failed_loads if f[0] <= now]
            self._failed_loads = [f for f in self._failed_loads if f[0] > now]
            for _, cluster, keys in due:
                keys = [k for k in keys if k in self._loading]
                if keys:
                    self._start_load(cluster, keys)
        in_flight: list[_OffsetsLoad] = []
        for load in self._loads:
            if not load.done.is_set():
                in_flight.append(load)
                continue
            keys = [k for k in load.keys if k in self._loading]  # still ours to read
            if not keys:
                continue
            if load.error is not None:
                log.warning(
                    "cluster %s (%s): where to start %d partitions could not be read (%s); "
                    "the other clusters are read meanwhile, trying again in %.0f s",
                    load.cluster,
                    self._bootstraps.get(load.cluster, "?"),
                    len(keys),
                    load.error,
                    _LOAD_RETRY_S,
                )
                self._failed_loads.append((time.monotonic() + _LOAD_RETRY_S, load.cluster, keys))
                continue
            self._start_reading(load.cluster, keys, load.restored)
        self._loads = in_flight

    def _start_reading(
        self,
        cluster: str,
        keys: list[PartitionKey],
        restored: Restored,
    ) -> None:
        """Read ``keys`` from where their commits left off."""
        by_priority: dict[int, list[TopicPartition]] = {}
        for k in keys:
            lane, prio = self._loading.pop(k)
            state = PartitionState(k, lane, prio)
            progress, committed = restored.get((k.topic, k.partition), (None, None))
            state.restore(progress, committed)
            self._states[k] = state
            self._states_by_cluster.setdefault(k.cluster, {})[(k.topic, k.partition)] = state
            start = state.base if state.base is not None else OFFSET_BEGINNING
            by_priority.setdefault(prio, []).append(TopicPartition(k.topic, k.partition, start))
        for prio, tps in by_priority.items():
            self._fetcher(cluster, prio).incremental_assign(tps)

    # ------------------------------------------------------------------ consuming
    def __iter__(self) -> Iterator[StreamMessage]:
        return self._handed_out(None, 1.0)

    def _handed_out(
        self, stop: threading.Event | None, idle_timeout: float
    ) -> Iterator[StreamMessage]:
        """The records, one at a time, as iteration and a sequential ``run`` hand them
        to the application, until the consumer closes or ``stop`` is set.

        A batch holds at most about ``_BATCH_BUDGET_S`` of the application's work (500
        records for fast handlers, one for a handler slower than that; its size follows
        the last batch's time a record), so what runs between two polls (commits,
        retries, the realtime lane, a rebalance) waits no longer than that or one
        record. With a whole fetch handed out per poll, a 0.12 s handler ran a minute
        between commits: the commit log (and the time lag read from it) stood still,
        and realtime records waited behind the bulk batch.

        Records of the batch the application has not seen go back to the front of their
        lanes when the batch's time is up, when the assignment changes (so a unit asked
        back is committed and released before its lease runs out, instead of moving
        with its handled records uncommitted), when ``stop`` is set, and when the
        application leaves the loop (they stayed handed out and unsettled, holding the
        low watermark until a restart). ``close`` empties the batch (``_in_hand``): the
        loop ends at the next record, as the records after it would be handled after
        the closing commit, their acks lost.
        """
        self.open()
        changed = self._membership.changed if self._membership is not None else None
        size = _MAX_BATCH
        while not self._closed and (stop is None or not stop.is_set()):
            batch = self.poll_batch(size, idle_timeout)
            if not batch:
                continue
            self._in_hand = batch
            started = time.monotonic()
            due = started + _BATCH_BUDGET_S
            seen = 0
            check = 0  # before records 0, 1, 2, 4, 8, ... then every 32: a fast loop
            try:
                for msg in batch:
                    if seen == check:
                        if (
                            self._closed  # closed before the batch was in hand
                            or (changed is not None and changed.is_set())
                            or (stop is not None and stop.is_set())
                            or (seen and time.monotonic() > due)
                        ):
                            break
                        check = seen + min(max(seen, 1), 32)
                    seen += 1
                    yield msg
            finally:
                self._in_hand = None
                if seen < len(batch) and not self._closed:
                    self._hand_back(batch[seen:])
            if seen:
                per_record = (time.monotonic() - started) / seen
                size = (
                    _MAX_BATCH
                    if per_record * _MAX_BATCH <= _BATCH_BUDGET_S
                    else max(1, int(_BATCH_BUDGET_S / per_record))
                )

    def _hand_back(self, messages: list[StreamMessage]) -> None:
        """Put records handed out and never seen by the application back at the front
        of their lanes, in order, and run housekeeping at the next poll."""
        with self._polling:
            by_lane: dict[int, list[StreamMessage]] = {}
            for msg in messages:
                state = msg._run.state
                state.handed -= 1
                if not state.revoked:  # else its unit is being given back: not again
                    by_lane.setdefault(state.priority, []).append(msg)
            for priority, msgs in by_lane.items():
                buf = self._buffers[priority]
                buf.entries.appendleft(msgs)
                buf.size += len(msgs)
            self.stats["delivered"] -= len(messages)
            self._until_housekeeping = 0
        if self._close_requested and not self._run_closes:  # ``close`` from a signal handler
            self._finish_requested_close()

    def waiting_partitions(self) -> list[PartitionKey]:
        """Partitions this consumer should read and does not yet: where they start has
        not been read, because their cluster has not answered (tried again every 5 s)."""
        with self._lock:
            return list(self._loading)

    def unfinished_partitions(self, timeout: float = 2.0) -> list[PartitionKey]:
        """Partitions not read to their end: the ``waiting_partitions``, and those whose
        read position is behind the end offset their cluster last reported (it stopped
        answering mid-read), or whose end it cannot report now (``timeout`` seconds per
        partition never fetched from). For a reader that wants everything there is (the
        dlq's list and replay): ask once ``poll`` hands out nothing."""
        unfinished = self.waiting_partitions()
        with self._lock:
            # (a new group's partition has no position until its first fetch: then any
            # record between the partition's ends is unread)
            positions = [
                (s.key, s.priority, -1 if s.next_fetch is None else s.next_fetch)
                for s in self._states.values()
            ]
        for key, priority, position in positions:
            client = self._consumers.get((key.cluster, priority))
            if client is None:
                continue
            tp = TopicPartition(key.topic, key.partition)
            try:
                ends = client.get_watermark_offsets(tp, cached=True)
                if ends is None or ends[1] < 0:  # no fetch answered yet: ask the broker
                    ends = client.get_watermark_offsets(tp, timeout=timeout)
            except _RawKafkaException:
                ends = None
            if ends is None or ends[1] > max(position, ends[0]):
                unfinished.append(key)
        return unfinished

    def poll(self, timeout: float = 1.0) -> StreamMessage | None:
        """The next record by lane priority, or None after ``timeout`` seconds."""
        got = self.poll_batch(1, timeout)
        return got[0] if got else None

    def poll_batch(self, max_records: int = 500, timeout: float = 1.0) -> list[StreamMessage]:
        """Up to ``max_records`` records by lane priority; waits ``timeout`` for the first.

        The same records ``poll`` would hand out one by one, with less overhead. Nothing
        once the consumer is closed (``close`` from another thread waits for a poll in
        progress, which returns early).
        """
        with self._polling:
            if self._closed:
                return []
            out: list[StreamMessage] = []
            try:
                out = self._poll_batch(max_records, timeout)
            finally:
                if self._close_requested:  # ``close`` on this thread (a signal handler)
                    self._closed_mid_poll(out)
                    out = []
            return out

    def _poll_batch(self, max_records: int, timeout: float) -> list[StreamMessage]:
        if not self._opened:
            self.open()
            if self._closed:  # closed while it opened
                return []
        # Fast path: hand out what is buffered, or else what the client has fetched
        # already; housekeeping once at least _HOUSEKEEPING_EVERY records went out (a
        # fetch is smaller than that: waiting for an empty buffer instead ran it every
        # fetch) or its interval is over. A fetch is handed out whole (up to
        # ``max_records``), so no part of it waits in the buffer while the next one is
        # fetched: see ``_FETCH_BATCH``.
        if self._until_housekeeping > 0 and time.monotonic() < self._housekeeping_due:
            self._fetch_higher_lanes()
            out = self._take(max_records)
            if not out:
                self._fetch(0)
                out = self._take(max_records)
            if out:
                self._until_housekeeping -= len(out)
                return out
        deadline = time.monotonic() + timeout
        membership = self._membership
        while True:
            if self._gone is not None:
                raise NotFound(f"{self._gone}: the consumer stops")
            if membership is not None and membership.lease_lapsed():
                # No heartbeat answered for our lease (the process was stopped, or
                # starved): our units may have moved on, and their buffered records been
                # handled by their new holder. Nothing is handed out until a heartbeat
                # answers; the housekeeping after it drops the units lost (``_assign``).
                # Checked here, before housekeeping, as the heartbeat updates the units
                # before the lease; the fast path above runs only within
                # _HOUSEKEEPING_INTERVAL_S of a check (LEASE_MARGIN_S covers that).
                self._until_housekeeping = 0
                refused = membership.refused
                if refused is not None:
                    # A token the control plane no longer accepts is not cured by
                    # waiting: our units go to members it accepts, and this one would
                    # hand out nothing for good (its lag reading OK meanwhile).
                    raise Unauthorized(
                        f"{self.stream} (group {self.group}): the control plane refuses "
                        f"this consumer's heartbeats ({refused}), and its lease has run "
                        "out: its work units go to other members. Was the API token "
                        "rotated? Restart with the new one (a control plane given the "
                        "old one as --previous-token accepts both while clients move).",
                        status=refused.status,
                    ) from refused
                if not self._lapse_logged:
                    self._lapse_logged = True
                    log.warning(
                        "%s (group %s): no heartbeat answered for the lease: handing out "
                        "nothing until one says which work units are still ours",
                        self.stream,
                        self.group,
                    )
                remaining = deadline - time.monotonic()
                membership.await_heartbeat(max(0.0, min(remaining, 0.1)))
                if remaining <= 0 or self._closed:
                    return []
                continue
            self._lapse_logged = False
            self._housekeeping()
            self._until_housekeeping = _HOUSEKEEPING_EVERY
            self._housekeeping_due = time.monotonic() + _HOUSEKEEPING_INTERVAL_S
            if sum(buf.size for buf in self._buffers) < min(max_records, self.fetch_batch):
                # Top up from what the client has already fetched, without waiting: the
                # retries housekeeping just released then join a full batch rather than
                # making a small one of their own.
                self._fetch(0)
            else:
                self._fetch_higher_lanes()
            out = self._take(max_records)
            if out:
                self._until_housekeeping -= len(out)
                return out
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closed:
                return out
            self._fetch(min(remaining, 0.1))

    def _take(self, room: int) -> list[StreamMessage]:
        """Up to ``room`` buffered records, higher lanes first, as StreamMessages."""
        out: list[StreamMessage] = []
        for buf in self._buffers:
            entries = buf.entries
            while entries and room > 0:
                entry = entries[0]
                if isinstance(entry, list):  # retries due again
                    if len(entry) <= room:
                        entries.popleft()
                        taken = len(entry)
                        again = entry
                    else:
                        taken = room
                        again = entry[:room]
                        del entry[:room]
                    for msg in again:
                        msg._run.state.handed += 1
                    out += again
                    buf.size -= taken
                    room -= taken
                    continue
                messages = entry.messages
                pos = entry.pos
                end = min(len(messages), pos + room)
                first_offset = entry.first_offset
                chunk = messages[pos:end] if pos or end < len(messages) else messages
                if first_offset is not None:  # the common case: consecutive offsets
                    offset = first_offset + pos
                    for m in chunk:
                        out.append(StreamMessage(entry, m, offset))
                        offset += 1
                else:
                    for m in chunk:
                        out.append(StreamMessage(entry, m, m.offset()))  # type: ignore[arg-type]
                if end == len(messages):
                    entries.popleft()
                    entry.messages = ()  # handed out: its records live in their messages
                else:
                    entry.pos = end
                entry.state.handed += end - pos
                buf.size -= end - pos
                room -= end - pos
        self.stats["delivered"] += len(out)
        return out

    def _housekeeping(self) -> None:
        pending = self._pending_routing
        membership = self._membership
        if pending is not None or (membership is not None and membership.changed.is_set()):
            self._pending_routing = None
            if membership is not None:
                membership.changed.clear()
            with self._lock:
                self._assign(pending or self._watcher.table)
        if self._releasing:
            with self._lock:
                self._advance_releases()
        if self._loads or self._failed_loads:
            with self._lock:
                self._adopt_loads()
        if self._retries:
            self._release_due_retries()
        if time.monotonic() - self._last_commit >= self.commit_interval_s:
            self._commit(wait=False)
        self._flow_control()

    def _fetch(self, timeout: float) -> None:
        consumers = self._fetch_order
        if not consumers:
            time.sleep(timeout)
            return
        got_any = False
        for i, (fetcher, consumer) in enumerate(consumers):
            wait = timeout if (i == len(consumers) - 1 and not got_any) else 0
            got_any = self._fetch_from(fetcher, consumer, wait) or got_any

    def _fetch_from(self, fetcher: tuple[str, int], consumer: Consumer, wait: float) -> bool:
        """Buffer what one lane's client on one cluster has fetched; whether it had any."""
        cluster = fetcher[0]
        try:
            batch = consume_available(consumer, self.fetch_batch, wait)
        except _RawKafkaException as exc:
            log.warning("fetch from %s failed: %s", cluster, exc)
            return False
        if batch:
            METRICS.fetch_latency_of(self.stream, cluster, batch[0])  # metrics
            self._accept(cluster, batch)
            return True
        self._streaks.pop(fetcher, None)  # none: no partition handed out alone while others wait
        return False

    def _fetch_higher_lanes(self) -> None:
        """Buffer, without waiting, what the clients of the lanes above the highest one
        buffered have fetched. The buffers are topped up only when they run low, so a
        realtime record waited behind the bulk records buffered (up to ``fetch_batch``
        of them): with a 20 ms handler, realtime p50 2.0 s, max 5.4 s (an exploratory
        run of a group busy on a bulk backlog). Nothing is asked when the top lane has
        records buffered, or when nothing is (a fetch comes then anyway)."""
        top = 0
        for buf in self._buffers:
            if buf.size:
                break
            top += 1
        if top == 0 or top == len(self._buffers):
            return
        for fetcher, consumer in self._fetch_order:
            if fetcher[1] < top:
                self._fetch_from(fetcher, consumer, 0)

    def _accept(self, cluster: str, batch: list[Message]) -> None:
        """Buffer a fetched batch: it comes in runs of one partition, recorded in the
        partition's state a run at a time."""
        states = self._states_by_cluster.get(cluster, {})
        now_ms = int(time.time() * 1000)
        runs: list[tuple[PartitionState, list[Message]]] = []
        run: list[Message] = []
        topic: str | None = None
        partition = -1
        for m in batch:
            err = m.error()
            if err is not None:
                if err.code() != -191:  # _PARTITION_EOF
                    log.warning("fetch error on %s: %s", cluster, err)
                continue
            if m.partition() != partition or m.topic() != topic:
                topic, partition = m.topic(), m.partition()  # type: ignore[assignment]
                state = states.get((topic, partition))  # type: ignore[arg-type]
                if state is None:
                    run = []  # not ours (any more): dropped
                    continue
                run = [m]
                runs.append((state, run))
            else:
                run.append(m)
        if not runs:
            return
        now = time.monotonic()
        streaks = self._streaks
        with self._lock:
            for state, messages in runs:
                fetcher = (cluster, state.priority)
                streak = streaks.get(fetcher)
                if streak is None or streak[0] is not state:
                    streaks[fetcher] = (state, now)  # the client hands out another partition
                first: int = messages[0].offset()  # type: ignore[assignment]
                timestamps = [m.timestamp()[1] for m in messages]
                # Consecutive offsets (they only go up within a partition) are recorded
                # in one step when they follow the previous fetch.
                consecutive = messages[-1].offset() - first + 1 == len(messages)  # type: ignore[operator]
                run_first = first if consecutive and state.on_fetch_run(first, timestamps) else None
                if run_first is None:
                    on_fetch = state.on_fetch
                    messages = [
                        m
                        for m, ts in zip(messages, timestamps, strict=True)
                        if on_fetch(m.offset(), ts)  # type: ignore[arg-type]
                    ]
                if messages:
                    self._buffers[state.priority].add_run(
                        _Run(self, state, messages, now_ms, run_first)
                    )

    def _flow_control(self) -> None:
        """Pause lanes whose buffer is full, partitions whose in-flight window is, and,
        once a lane's buffer is half full, its partitions holding more than their share
        of it; send a partition handed out alone too long to the back of its fetching
        client's queue (``_take_turns``).

        The share: a lane's buffer refills from the head of the fetched records, one
        partition's run of them at a time (a fetch holds up to
        ``max.partition.fetch.bytes`` of each), so without it one partition took every
        slot that freed up. Paused, the partition's fetched records are let go
        (librdkafka purges them) and the others' come in; below half full, every
        partition reads freely. The buffer is refilled only once nearly empty, a fetch of
        ``fetch_batch`` records at a time, so it is seldom half full: the records wait in
        the fetching client's queue, and the turns are what share it."""
        to_pause: dict[tuple[str, int], list[TopicPartition]] = {}
        to_resume: dict[tuple[str, int], list[TopicPartition]] = {}
        limit = self.max_buffered_per_lane
        with self._lock:
            self._apply_acks()
            now = time.monotonic()
            turning = self._take_turns(now)
            sharing: dict[int, int] = {}  # partitions per lane priority
            for state in self._states.values():
                sharing[state.priority] = sharing.get(state.priority, 0) + 1
            for state in self._states.values():
                buffered = self._buffers[state.priority].size
                full = buffered >= limit
                share_over = state.in_flight * sharing[state.priority] > limit
                crowding = 2 * buffered >= limit and share_over
                window = state.in_flight >= self.max_in_flight  # acks applied just above
                if window:
                    self._note_full_window(state, now)
                elif state in self._window_stalls:
                    del self._window_stalls[state]
                want_paused = full or crowding or window or state in turning
                if want_paused != state.paused:
                    state.paused = want_paused
                    k = state.key
                    target = to_pause if want_paused else to_resume
                    target.setdefault((k.cluster, state.priority), []).append(
                        TopicPartition(k.topic, k.partition)
                    )
        for fetcher, tps in to_pause.items():
            self._consumers[fetcher].pause(tps)
        for fetcher, tps in to_resume.items():
            self._consumers[fetcher].resume(tps)

    def _note_full_window(self, state: PartitionState, now: float) -> None:
        """Log once when ``state``'s in-flight window has been full for ``_STALL_WARN_S``
        with nothing of it settled meanwhile (its acks and in-flight count unchanged): a
        slow handler keeps settling records, a forgotten ack does not. Hold the lock."""
        stalls = self._window_stalls
        progress = (state.acked, state.in_flight)
        stall = stalls.get(state)
        if stall is None or stall[1] != progress:
            if len(stalls) > len(self._states):  # partitions gone since
                for gone in [s for s in stalls if s.revoked or s.key not in self._states]:
                    del stalls[gone]
            stalls[state] = (now, progress, False)
            return
        since, _, warned = stall
        if not warned and now - since >= _STALL_WARN_S:
            stalls[state] = (since, progress, True)
            k = state.key
            log.warning(
                "%s: %s[%d] on %s: %d records handed out and none settled for %.0f s; its "
                "fetching is paused until some are acked, nacked or rejected (does the "
                "application settle every record?)",
                self.stream,
                k.topic,
                k.partition,
                k.cluster,
                state.in_flight,
                now - since,
            )

    def _take_turns(self, now: float) -> set[PartitionState]:
        """The partitions to send to the back of their fetching client's queue now:
        paused by this flow control (librdkafka drops what it prefetched of them),
        resumed by the next (fetched again from where we are, behind the records the
        client holds of the others). Hold the lock.

        A client hands out what it prefetched first in, first out, each partition's in
        runs of up to ``max.partition.fetch.bytes`` (1 MiB: thousands of records), and
        prefetches the whole backlog (up to 64 MiB) when the member is slower. A member
        handling ~50 records/s read one partition at a time: one of 4 had no record
        handled for 5.5 minutes. A partition's turn ends once the client has handed
        out its records alone for ``_TURN_S`` while it holds records of another
        partition of the lane that we have not taken since its last statistics
        (``_on_stats``: fetched past our position; a paused partition's are dropped)."""
        turning: set[PartitionState] = set()  # those of the last flow control resume
        prefetched = self._prefetched
        for fetcher, (hog, since) in list(self._streaks.items()):
            if hog.revoked:
                del self._streaks[fetcher]
                continue
            if now - since < _TURN_S or hog.paused:
                continue
            for other, seen in prefetched.items():
                if (
                    other is not hog
                    and other.priority == hog.priority
                    and other.key.cluster == hog.key.cluster
                    and other.next_fetch == seen  # none of it taken since
                    and not other.paused
                    and not other.revoked
                ):
                    turning.add(hog)
                    del self._streaks[fetcher]  # the next records start a new one
                    log.debug(
                        "%s: %s handed out alone for %.1f s while %s waits: to the back",
                        self.stream,
                        hog.key,
                        now - since,
                        other.key,
                    )
                    break
        return turning

    # ------------------------------------------------------------------ settling
    def _settling_states(self) -> Iterable[PartitionState]:
        """The states whose records may still be settled and committed: those read,
        and those of the units being handed back (``_advance_releases``)."""
        if not self._releasing:
            return self._states.values()
        return [*self._states.values(), *(state for state, _, _ in self._releasing.values())]

    def _apply_acks(self) -> None:
        """Count and schedule each partition's queued nacks, fold its queued acks into
        its settled set, then settle acked dead letters (hold the lock). A partition's
        nacks go first: the offsets they park then fold in with its acks, as one run."""
        # Retries by lane priority, then attempts so far: each list is one batch.
        retries: dict[int, dict[int, list[StreamMessage]]] = {}
        exhausted: list[Letter[StreamMessage]] = []  # (record, reason, attempts)
        acked = 0
        for state in self._settling_states():
            if state.nacks:
                self._apply_nacks(state, retries, exhausted)
            state.apply_acks()
            acked += state.acked - state.acked_at_report
            state.acked_at_report = state.acked
        self.stats["acked"] += acked
        if exhausted:
            self._dead_letters(exhausted)
        if retries:
            now = time.monotonic()
            delays = self._retry_delays
            last = len(delays) - 1
            add = self._retries.add
            for by_attempts in retries.values():
                for attempts, batch in by_attempts.items():
                    add(batch, delays[min(attempts, last)], now)
        if self._dlq is not None and self._dlq.pending:
            self._settle_dead_letters()

    def _apply_nacks(
        self,
        state: PartitionState,
        retries: dict[int, dict[int, list[StreamMessage]]],
        exhausted: list[Letter[StreamMessage]],
    ) -> None:
        """Count an attempt for each record nacked in ``state`` (in one step), then add
        it to ``retries`` (by lane priority, then attempts: records due again together
        are scheduled as one batch) or, after ``max_attempts``, to ``exhausted``. The
        nacks are drained by slice and del like the acks (``nack`` takes no lock). A
        record to retry becomes a ``_Redelivery`` here, so releasing it only makes it
        settleable again."""
        queue = state.nacks
        n = len(queue)
        messages: list[StreamMessage] = queue[:n]
        del queue[:n]  # one step each under the GIL: a nack appended meanwhile is kept
        self.stats["nacked"] += n
        state.returned += n
        counts = state.nack([msg.offset for msg in messages])
        max_attempts = self.max_attempts
        by_attempts = retries.get(state.priority)
        if by_attempts is None:
            by_attempts = retries[state.priority] = {}
        revoked = state.revoked  # its records are not retried: the unit moved on
        # (``get`` then a new list only when missing: ``setdefault(k, [])`` would build
        # a list for every record.)
        for msg, attempts in zip(messages, counts, strict=True):
            if attempts >= max_attempts:
                error = msg.last_error
                reason = self._exhausted_reason
                exhausted.append((msg, f"{reason}: {error}" if error else reason, attempts))
                continue
            if revoked:
                continue
            _redeliver(msg)
            group = by_attempts.get(attempts)
            if group is None:
                by_attempts[attempts] = [msg]
            else:
                group.append(msg)

    def _reject(self, msg: StreamMessage, reason: str, dlq: bool) -> None:
        with self._lock:
            done = msg._done
            if done and (done is True or not done.cancel()):
                return
            msg._done = True
            state = msg._run.state
            state.returned += 1
            attempts = msg.attempts + 1
            if dlq:
                state.park((msg.offset,))  # the acks around it fold as one run meanwhile
                self._dead_letters([(msg, reason, attempts)])
            else:
                state.settle([msg.offset], rejected=True)
                self.stats["rejected"] += 1

    def _dead_letters(self, letters: list[Letter[StreamMessage]]) -> None:
        """Queue each (record, reason, attempts) for the dlq lane; a record is settled
        once its dead letter is acked (``_settle_dead_letters``). A read-only consumer
        writes nothing: it settles them at once (in memory; it commits nothing). Nor is
        a record of the dlq lane itself written again (rejecting dead letters would feed
        them back to the lane without end): it is settled as rejected, once logged."""
        if self._dlq is None:
            self._settle_rejected([msg for msg, _reason, _attempts in letters])
            return
        if self._reads_dlq:
            again = [msg for msg, _r, _a in letters if msg._run.state.lane == DLQ_LANE]
            if again:
                if not self._dlq_rejects_logged:
                    self._dlq_rejects_logged = True
                    log.warning(
                        "%s: records of the dlq lane rejected (or out of attempts) are "
                        "settled where they are, not dead-lettered again",
                        self.stream,
                    )
                self._settle_rejected(again)
                letters = [letter for letter in letters if letter[0]._run.state.lane != DLQ_LANE]
                if not letters:
                    return
        self._dlq.add(letters)

    def _settle_rejected(self, messages: list[StreamMessage]) -> None:
        """Settle rejected records, each partition's in one call (hold the lock)."""
        by_partition: dict[PartitionState, list[int]] = {}
        for msg in messages:
            by_partition.setdefault(msg._run.state, []).append(msg.offset)
        for state, offsets in by_partition.items():
            state.settle(offsets, rejected=True)
        self.stats["rejected"] += len(messages)

    def _dead_letter_write(self, msg: StreamMessage, reason: str, attempts: int) -> Write:
        """What is written to the dlq lane for ``msg``: its value and key, its own
        headers and its provenance."""
        raw, run = msg._raw, msg._run
        state = run.state
        key = state.key
        headers = dlq_headers(
            source_headers(self.stream, state.lane, key.cluster, key.topic, key.partition),
            raw.headers(),  # type: ignore[arg-type]
            offset=msg.offset,
            attempts=attempts,
            error=reason,
            first_seen_ms=run.first_seen_ms,
        )
        return raw.value(), raw.key(), headers

    def _settle_dead_letters(self, send_now: bool = False) -> None:
        """Settle the records whose dead letter was acked and send the next batch when
        due. A dead letter whose write failed is written again by the writer, its record
        parked meanwhile (out of attempts: not handed to the application again); only a
        record whose letter cannot be queued at all is handed out again in a second
        (not lost: unsettled until a write succeeds). Hold the lock."""
        assert self._dlq is not None
        now = time.monotonic()
        written, failed = self._dlq.advance(now, send_now=send_now)
        if written:
            self._settle_rejected(written)
            self.stats["dlq"] += len(written)
        for msg in failed:
            if not msg._run.state.revoked:  # parked until its dead letter is acked
                _redeliver(msg)
                self._retries.add([msg], 1.0, now)

    def _release_due_retries(self) -> None:
        """Hand out again the records whose backoff is over: each batch due now
        becomes one buffer entry of its lane."""
        with self._lock:
            buffers = self._buffers
            for batch in self._retries.pop_due(time.monotonic()):
                for again in batch:
                    again._done = False
                buffers[batch[0]._run.state.priority].add_retries(batch)

    def _flush_dlq(self, timeout: float) -> None:
        """Write every queued dead letter and wait for the writes (their records settle
        when acked). A write that does not finish in time leaves its record unsettled:
        redelivered, never lost."""
        dlq = self._dlq
        if dlq is None:
            return
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                self._settle_dead_letters(send_now=True)
            remaining = deadline - time.monotonic()
            if not dlq.pending or remaining <= 0 or not dlq.writing:
                break  # nothing in flight: the letters left could not be queued
            dlq.drain(min(remaining, 0.5))
        if dlq.pending:
            log.warning("%d dead letters unfinished at close: left unsettled", dlq.pending)

    # ------------------------------------------------------------------ commits
    def commit(self) -> None:
        """Commit every partition's low watermark and commit-log metadata now; returns
        once the commit is done (a failed one is logged and retried with the next)."""
        self._commit(wait=True)

    def _committable(self) -> frozenset[PartitionKey] | None:
        """The partitions this member may commit now (None: every one, without the
        Assigner): those it owns or is giving back, none once its lease ran out. Asked
        by the committer as each commit goes out."""
        membership = self._membership
        if membership is None:
            return None
        if not membership.may_commit():
            return frozenset()
        owned, to_release = membership.assignment()
        return owned | to_release

    def _commit_again(self) -> set[PartitionKey]:
        """The partitions whose commit failed since the last call, those read and those
        being handed back (``_releasing``) marked to be committed again: never dropped.
        Hold the lock."""
        failed = set(self._committer.take_failed())
        releasing = self._releasing
        for key in failed:
            state = self._states.get(key)
            if state is None and key in releasing:
                state = releasing[key][0]
            if state is not None:
                state.dirty = True
        return failed

    def _commit(self, wait: bool) -> None:
        """Snapshot every changed partition's progress and hand it to the committer
        (housekeeping does not wait: the consuming thread keeps handing out records
        while the commit's broker round trip, or a spill, runs)."""
        self._last_commit = time.monotonic()
        if self.read_only or self._gone is not None:  # a deleted stream's topics are gone
            return
        if self._membership is not None and not self._membership.may_commit():
            # Our lease ran out while the control plane answers: the units may have a new
            # owner. Fence: commit nothing until a heartbeat renews the lease.
            if not self._fenced_logged:
                log.warning("lease expired: commits fenced until the next heartbeat answers")
                self._fenced_logged = True
            return
        self._fenced_logged = False
        now_ms = int(time.time() * 1000)
        with self._lock:
            self._apply_acks()
            self._commit_again()  # (with this one)
            items = [
                (state.key, state.progress(now_ms))
                for state in self._settling_states()
                if state.dirty and state.base is not None
            ]
        self._committer.submit(items, wait)

    # ------------------------------------------------------------------ run
    def run(
        self,
        handler: Handler,
        concurrency: int = 1,
        key_ordered: bool = False,
        stop: threading.Event | None = None,
        non_retryable: tuple[type[Exception], ...] = (),
    ) -> None:
        """Call ``handler`` for every record until ``stop`` is set or the consumer is
        closed; an exception nacks. Raises NotFound once the stream is deleted.

        With ``concurrency`` > 1, records are handled in a thread pool and acked out of
        order. With ``key_ordered``, records with the same key are handled one at a time
        in offset order; records without a key (None) have no order to keep and are
        handled like unordered ones. A record waiting behind its key holds no thread and
        does not keep other keys' records from the pool. Once ``stop`` is set, records
        not started yet (queued for the threads, or behind their key) are not started:
        they are put back, unsettled (handed out again by a later ``run`` or iteration,
        or read again after a restart); the consumer keeps committing while it waits for
        the threads to finish what they started. An
        exception of a ``non_retryable`` type (a record that can never succeed:
        undecodable, invalid) rejects the record at once, to the dlq lane, instead of
        retrying it ``max_attempts`` times.
        """
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigError(f"concurrency must be an int of at least 1, not {concurrency!r}")
        if not callable(handler):  # it failed on every record, dead-lettering the stream
            raise ConfigError(
                f"run: the handler must be callable (given each StreamMessage), not {handler!r}"
            )
        if _is_async(handler):
            raise ConfigError(
                "run: the handler is a coroutine function (async def); run calls it from "
                "threads and would only create its coroutine. Give run a plain function "
                "(e.g. one that calls asyncio.run_coroutine_threadsafe on your loop and "
                "waits for the result), or iterate and await it yourself"
            )
        if not isinstance(non_retryable, tuple) or not all(
            isinstance(t, type) and issubclass(t, Exception) for t in non_retryable
        ):
            raise ConfigError("non_retryable must be a tuple of exception classes")
        stop = stop or threading.Event()
        self.open()

        def handle(msg: StreamMessage) -> None:
            try:
                result = handler(msg)
            except non_retryable as exc:
                msg.reject(f"non-retryable {type(exc).__name__}: {exc}")
            except Exception as exc:
                msg.nack(exc)
            else:
                if result is not None and inspect.isawaitable(result):
                    # The handler did not run: an async callable ``_is_async`` missed
                    # (a partial, a lambda returning a coroutine). Not acked: nacked with
                    # the reason, so it ends in the dlq lane if it keeps happening.
                    msg.nack(_not_run(result))
                else:
                    msg.ack()

        if concurrency == 1 and not key_ordered:
            for msg in self._handed_out(stop, 0.2):
                handle(msg)
            return
        self._run_pool(handle, concurrency, key_ordered, stop)

    def _run_pool(
        self,
        handle: Callable[[StreamMessage], None],
        concurrency: int,
        key_ordered: bool,
        stop: threading.Event,
    ) -> None:
        """``run`` with a thread pool (or ``key_ordered``).

        ``slots`` bounds the tasks given to the pool and not done (running, or waiting
        for a thread) to 2 * ``concurrency``. With ``key_ordered``, a key's task handles
        its records one after another, and a record polled while its key has a task
        waits in the key's queue, taking no slot: when each waiting record held one, a
        slow key's queued records took them all, and every other key and partition
        waited (7 of 8 threads idle; other keys from ~400 to ~25 records/s). What waits
        behind keys stays bounded all the same: those records are unsettled, and a
        partition holding ``max_in_flight`` unsettled records is paused
        (``_flow_control``), so polls run dry.
        """
        slots = threading.Semaphore(concurrency * 2)
        key_queues: dict[bytes, deque[StreamMessage]] = {}
        key_lock = threading.Lock()

        def ended() -> bool:
            return stop.is_set() or self._closed or self._gone is not None

        def work(msg: StreamMessage) -> None:
            try:
                if msg._run.state.revoked:
                    self._not_started(msg)
                else:
                    handle(msg)
            finally:
                slots.release()

        def work_key(msg: StreamMessage, key: bytes) -> None:
            # The thread goes on with the key's queued records itself (submitting them
            # to the pool failed once ``stop`` had shut it down, and they were never
            # handled). Once the run ends it starts none: its queue stays, without a
            # task (records polled for the key meanwhile join it, not a new task, which
            # would handle them before those), and is put back when ``run`` returns.
            try:
                while True:
                    if msg._run.state.revoked:
                        self._not_started(msg)
                    else:
                        handle(msg)
                    with key_lock:
                        queue = key_queues[key]
                        queue.popleft()
                        if not queue:
                            del key_queues[key]
                            return
                        if ended():
                            return
                        msg = queue[0]
            finally:
                slots.release()

        left: list[StreamMessage] = []  # polled as the run ended: not started
        # Tasks given to the pool and not done: the record of an unordered one (None for
        # a key's: its records stay in its queue until handled).
        tasks: dict[Future[None], StreamMessage | None] = {}
        forget = _forget_task(tasks)

        def submit(fn: Callable[..., None], *args: Any) -> None:
            future = pool.submit(fn, *args)
            tasks[future] = args[0] if fn is work else None
            future.add_done_callback(forget)

        def take_slot() -> bool:
            """A place for one more task; False if the run ended while every place was
            taken (every handler slow: a downstream stalled). Meanwhile the consumer
            keeps house: the acks of the handlers that finish are committed on time."""
            while not slots.acquire(timeout=_WAIT_STEP_S):
                if ended():
                    return False
                self._keep_house()
            return True

        self._run_thread = threading.get_ident()
        handlers = self._run_handlers = set()
        self._run_ended.clear()
        self._run_closes = True  # a close requested on this thread waits for the pool
        pool = ThreadPoolExecutor(
            concurrency,
            thread_name_prefix="sp-handler",
            initializer=lambda: handlers.add(threading.get_ident()),
        )
        try:
            while not stop.is_set() and not self._closed:
                polled = self.poll(0.2)
                if polled is None:
                    continue
                msg = polled
                if stop.is_set():
                    left.append(msg)
                    break
                key = msg.key if key_ordered else None
                if key is not None:
                    with key_lock:
                        queue = key_queues.get(key)
                        if queue is not None:
                            queue.append(msg)  # after the records before it
                            continue
                        key_queues[key] = deque((msg,))
                    if not take_slot():
                        break  # msg is its key's queue: put back with it
                    submit(work_key, msg, key)
                else:  # unordered, or a record without a key: no order to keep
                    if not take_slot():
                        left.append(msg)
                        break
                    submit(work, msg)
        finally:
            try:
                left += self._drain_pool(pool, tasks)
            finally:
                # Even when the wait is interrupted (a second Ctrl-C, ``sys.exit`` in a
                # signal handler): ``close`` on this thread must close, not only ask.
                self._run_closes = False
                self._run_thread = None
                pool.shutdown(wait=False, cancel_futures=True)
            # The tasks are done: what is still queued behind a key was never started.
            for queue in key_queues.values():
                left += queue
            if left and not self._closed and self._gone is None:
                left.sort(key=_offset_order)
                self._hand_back(left)
            elif left:  # never seen by the application: read again by the next reader
                self.stats["delivered"] -= len(left)
            try:
                if self._close_requested:
                    self._finish_requested_close()
            finally:
                self._run_ended.set()  # a ``close`` from another thread waits for it

    def _not_started(self, msg: StreamMessage) -> None:
        """A record given to ``run``'s threads whose unit is being handed back before a
        thread started it: not handled here (its next holder reads it), and out of our
        hands (``_advance_releases`` waits for the others)."""
        with self._lock:
            msg._run.state.returned += 1

    def _drain_pool(
        self, pool: ThreadPoolExecutor, tasks: dict[Future[None], StreamMessage | None]
    ) -> list[StreamMessage]:
        """End ``run``'s pool: the tasks not started are cancelled (their records are
        returned, to be put back unsettled: a stopping pod handled up to ``concurrency``
        more records, each at the downstream's pace, past its grace period), and those
        running are waited for while the consumer keeps house, so each ack is committed
        within ``commit_interval_s`` of its handler's end, not only by the closing
        commit (the SIGKILL at the end of a grace period came first, and every record
        handled since the stop was handled again)."""
        not_started: list[StreamMessage] = []
        for future, msg in tasks.copy().items():  # one step: done tasks leave meanwhile
            if future.cancel() and msg is not None:
                not_started.append(msg)
        running = {f for f in tasks.copy() if not f.done()}
        started = time.monotonic()
        next_log = started + _DRAIN_LOG_EVERY_S
        while running:
            _, running = wait_for_futures(running, _WAIT_STEP_S, FIRST_COMPLETED)
            self._keep_house()
            if running and time.monotonic() >= next_log:
                next_log += _DRAIN_LOG_EVERY_S
                log.info(
                    "%s (group %s): run stopping: %s still being handled after %.0f s "
                    "(acks committed as they finish)",
                    self.stream,
                    self.group,
                    counted(len(running), "record"),
                    time.monotonic() - started,
                )
        pool.shutdown(wait=True)
        return not_started

    def _keep_house(self) -> None:
        """Housekeeping between polls, for a thread that waits instead of polling (``run``
        waiting for its handler threads): acks folded, retries released, commits on
        time, units handed over. Nothing once the consumer is torn down."""
        with self._polling:
            if not self._torn_down and self._opened:
                self._housekeeping()

    def _load_report(self) -> tuple[float, float, list[dict[str, Any]]]:
        """CPU, records/s handled successfully and per-unit throughput, smoothed over
        ~_LOAD_SMOOTHING_S, and each unit's backlog.

        Over a heartbeat's 0.3 s alone the rates were noise (records are fetched and
        handed out a batch at a time: a unit read 0, then a whole fetch's worth), and the
        Assigner's load-driven passes moved units back and forth on it. A unit's
        throughput is what is fetched of it (its offered load, whatever becomes of the
        records), from 0 when it is new here: its first window held the catch-up of what
        waited while it changed hands, and read as the unit's rate it inflated it for
        ~15 s. The member's records/s counts the records acked (``stats["acked"]``), not
        those handed out: those count every failed attempt and retry, and a member whose
        handler failed everything (its database down) read as the fastest of the group
        and kept its units; the Assigner sets it against what the member reads of its
        units ("Failing members" in ``core.assignment``). The backlog (``_backlog``: the
        partition's end, from the fetching client's statistics, minus our next offset)
        tells the Assigner that the member runs flat out."""
        assert self._membership is not None
        now = time.monotonic()
        since, acked_before = self._last_load
        elapsed = max(1e-3, now - since)
        acked = self.stats["acked"]
        self._last_load = (now, acked)
        keep = math.exp(-elapsed / _LOAD_SMOOTHING_S)

        def smooth(before: float | None, now_: float) -> float:
            return now_ if before is None else before * keep + now_ * (1.0 - keep)

        units = []
        for state in list(self._states.values()):
            fetched = state.fetched - state.fetched_at_report
            state.fetched_at_report = state.fetched
            state.throughput = smooth(state.throughput or 0.0, fetched / elapsed)
            units.append(
                {
                    **unit_json(state.key),
                    "throughput": state.throughput,
                    "backlog": self._backlog(state),
                }
            )
        self._cpu_smoothed = smooth(self._cpu_smoothed, self._cpu_meter())
        rate = (acked - acked_before) / elapsed
        self._rate_smoothed = smooth(self._rate_smoothed, rate)
        return self._cpu_smoothed, self._rate_smoothed, units

    def _backlog(self, state: PartitionState) -> int:
        """Records between our next offset (the log's start before our first record)
        and the partition's end, as the fetching client's last statistics gave them
        (``_on_stats``); 0 before those. Read from the heartbeat's thread without
        calling the client: its cached watermarks, asked from that thread, waited up to
        1.8 s while the consuming thread sat in consume(), and the member's lease ran out."""
        low, high = state.watermarks
        if high < 0:
            return 0
        position = state.next_fetch if state.next_fetch is not None else max(low, 0)
        return max(0, high - position)

    def _on_stats(self, cluster: str, reach: ClientReachability, stats_json: str) -> None:
        """librdkafka's statistics of a fetching client (in the consuming thread, from
        consume()): each partition's watermarks, for ``_backlog``, whether the client
        holds records of it that we have not taken, for ``_take_turns``, and its
        brokers' states (``ClusterReachability``)."""
        try:
            stats = json.loads(stats_json)
        except ValueError:
            return
        reach.on_statistics(stats)
        topics = stats.get("topics", {})
        states = self._states_by_cluster.get(cluster, {})
        prefetched = self._prefetched
        for gone in [s for s in prefetched if s.revoked]:
            del prefetched[gone]
        for topic, doc in topics.items():
            for partition, p in doc.get("partitions", {}).items():
                state = states.get((topic, int(partition)))
                if state is None:
                    continue
                if p.get("hi_offset", -1) >= 0:
                    state.watermarks = (p.get("lo_offset", -1), p["hi_offset"])
                # What we took of it (librdkafka's application offset; before our first
                # record of it, where we started), and where its next fetch starts.
                taken = p.get("app_offset", -1)
                if taken < 0:
                    taken = state.next_fetch if state.next_fetch is not None else state.base
                    if taken is None:
                        taken = p.get("lo_offset", -1)
                if 0 <= taken < p.get("next_offset", -1):
                    prefetched[state] = state.next_fetch
                else:
                    prefetched.pop(state, None)

    # ------------------------------------------------------------------ introspection
    @property
    def member_id(self) -> str | None:
        return self._membership.member_id if self._membership is not None else None

    def assignment(self) -> list[PartitionKey]:
        return list(self._states)

    def restored_skips(self) -> int:
        """Records skipped because a previous commit had them settled."""
        return sum(s.restored_skips for s in self._states.values())

    def partition_states(self) -> list[dict[str, Any]]:
        """Per partition read: where fetching and settling stand (for diagnosis)."""
        with self._lock:
            self._apply_acks()
            return [
                {
                    "cluster": k.cluster,
                    "topic": k.topic,
                    "partition": k.partition,
                    "low_watermark": s.base,
                    "next_fetch": s.next_fetch,
                    "fetched": s.fetched,
                    "in_flight": s.in_flight,
                    "gaps_settled": s.gaps_settled,
                    "parked": len(s.parked),
                    "paused": s.paused,
                    "settled_above": repr(s.settled_now()),
                }
                for k, s in self._states.items()
            ]
