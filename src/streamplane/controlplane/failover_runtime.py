"""The failover protocol's background tasks: cluster health and the segment sealer.

Both run in daemon threads of every replica but act only while the replica is the
leader (``leadership.py``). They gather facts through ``ClusterIO`` and the store, ask
the pure rules of ``streamplane.core.failover`` what to do, and act through the
``ControlPlaneService`` (so every change is a compare-and-set with its audit entry and
wakes the watchers).

- **Health**: one prober thread per registered cluster probes it every
  ``health_interval`` seconds (metadata plus writes to each partition of the health
  topic, one led by each broker; ``cluster_io``). A cluster failing for
  ``health_threshold`` seconds (``STALL_THRESHOLD_S`` while its probes stall: leaders
  answer, no ``acks=all`` write is acknowledged) is ``down``: every stream with an
  active segment there is failed over (all of those lanes, the dlq included) to the standby
  ``choose_standby`` picks among the trusted clusters, with actor ``health``, unless
  ``failover_hold`` holds it (every cluster failed at once: the others get
  ``health_recovery`` to come back). Health is written to the store so every replica
  serves it.
- **Sealer**: every ``sealer_interval`` seconds, each draining segment is sealed when
  ``seal_reason`` says so, with the end offsets read from its cluster (a dead cluster:
  it stays draining); every ``retire_interval`` seconds each sealed segment is retired
  when ``retire_check`` says every group reading the stream has settled it. What holds
  one back (a cluster down, its groups or end offsets not read, a group not done) is
  logged once per cause, and its end with the wait (``_retire_blocked``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field, model_validator

from streamplane.controlplane.cluster_io import FENCED_TOPIC_CONFIG, ClusterIO, KafkaClusterIO
from streamplane.controlplane.failover_store import FailoverStore, HealthRecord
from streamplane.controlplane.leadership import DEFAULT_LEASE_S, Leadership, leadership_for
from streamplane.controlplane.service import ControlPlaneService
from streamplane.controlplane.store import AuditEntry, error_line, is_outage, utcnow
from streamplane.core.failover import (
    ClusterHealth,
    HealthState,
    ProbeStall,
    choose_standby,
    failover_hold,
    observe_probe,
    retire_check,
    seal_reason,
    successor_epoch,
    trusted_clusters,
)
from streamplane.core.routing import (
    DLQ_LANE,
    LEGACY_DLQ_REPLAY_GROUP,
    RoutingTable,
    Segment,
    SegmentState,
    dlq_replay_group,
)
from streamplane.exceptions import Conflict, NotFound, StreamplaneError

log = logging.getLogger(__name__)

ClusterIOFactory = Callable[[str], ClusterIO]
# The leader republishes its URL this often; followers trust a publication this recent.
LEADER_REPUBLISH_S = 5.0
LEADER_STALE_S = 30.0
# The leader rewrites a cluster's health row at least this often (its "checked at").
HEALTH_REWRITE_S = 5.0
# A health record not rewritten for this long is no one's current view (health checks
# were turned off, or no replica leads): reported as unknown.
HEALTH_STALE_S = 6 * HEALTH_REWRITE_S
# A fenced segment is watched this much longer: the brokers apply a config change a
# moment after the controller took it, and a record taken meanwhile reopens it.
_FENCE_SETTLE_S = 60.0


class FailoverSettings(BaseModel):
    """Health checks, automatic failover, sealing and retiring (per replica)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    health_enabled: bool = Field(default=False, description="Probe every cluster.")
    health_failover: bool = Field(
        default=True, description="Fail the streams of a down cluster over (with health on)."
    )
    health_interval: float = Field(default=1.0, gt=0, description="Seconds between probes.")
    health_timeout: float = Field(default=1.0, gt=0, description="Seconds a probe may take.")
    health_threshold: float = Field(
        default=3.0, gt=0, description="Seconds of failed probes before a cluster is down."
    )
    health_recovery: float = Field(
        default=30.0,
        ge=0,
        description="Seconds the clusters get to come back after every cluster failed at "
        "once (the control plane cut off, the fleet restarting), counted from the first "
        "one's answer: a cluster still failing then is failed over, not before.",
    )
    sealing_enabled: bool = Field(
        default=False, description="Seal and retire segments (`serve` turns it on)."
    )
    seal_settle: float = Field(
        default=2.0, ge=0, description="Least seconds a segment drains before it is sealed."
    )
    seal_grace: float = Field(
        default=10.0, gt=0, description="Seal after this long even if producers lag."
    )
    producer_liveness: float = Field(
        default=5.0, gt=0, description="A producer is live if it heartbeated this recently."
    )
    sealer_interval: float = Field(default=1.0, gt=0)
    auto_retire: bool = Field(default=True, description="Retire settled sealed segments.")
    retire_interval: float = Field(default=5.0, gt=0)
    retired_watch: float = Field(
        default=3600.0,
        ge=0,
        description="Seconds a retired segment is watched for records landing after its "
        "retirement (a producer paused across the failover): they reopen it. Then its "
        "topic is fenced (refuses writes).",
    )
    reader_retention: float = Field(
        default=7 * 24 * 3600.0,
        gt=0,
        description="Seconds a group that settled a retired segment still holds the "
        "stream's later segments while it commits nowhere (offline): Kafka's default "
        "offsets retention.",
    )
    kafka_timeout: float = Field(default=5.0, gt=0, description="Seconds per sealer Kafka call.")
    leader_interval: float = Field(
        default=0.5, gt=0, description="How often a follower tries to become the leader."
    )
    leader_lease: float = Field(
        default=DEFAULT_LEASE_S,
        gt=0,
        description="Seconds a silent leader (stopped, hung) keeps the leadership "
        "(PostgreSQL): then its session is ended and another replica takes over.",
    )
    advertise_url: str | None = Field(
        default=None,
        max_length=1024,
        pattern=r"^https?://[^\s/]+(/[^\s]*)?$",
        description="This replica's URL as the other replicas reach it: the leader "
        "publishes it, and followers forward the Assigner's requests there.",
    )

    @model_validator(mode="after")
    def _lease_outlasts_checks(self) -> FailoverSettings:
        if not self.leader_lease > 2 * self.leader_interval:
            raise ValueError(
                f"leader_lease ({self.leader_lease} s) must be more than twice "
                f"leader_interval ({self.leader_interval} s)"
            )
        return self


def _process_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def replica_id() -> str:
    return f"{_process_id()}:{uuid.uuid4().hex[:6]}"


class FailoverRuntime:
    """Leadership, the health probers and the sealer of one replica."""

    def __init__(
        self,
        service: ControlPlaneService,
        settings: FailoverSettings,
        *,
        leadership: Leadership | None = None,
        io_factory: ClusterIOFactory | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.service = service
        self.settings = settings
        self.store = FailoverStore(service.store.engine)
        self.leadership = leadership or leadership_for(
            service.store.url, settings.leader_interval, settings.leader_lease
        )
        self.replica = replica_id()
        self._io_factory = io_factory or (
            lambda bootstrap: KafkaClusterIO(bootstrap, settings.health_timeout)
        )
        self._clock = clock
        self._leader_cache: tuple[float, str | None] | None = None
        self._ios: dict[str, ClusterIO] = {}
        self._io_lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._probers: dict[str, threading.Thread] = {}
        self._health: dict[str, HealthState] = {}
        self._health_lock = threading.Lock()
        self._written: dict[str, tuple[tuple[str, str | None] | None, float]] = {}
        self._first_seen_draining: dict[tuple[str, str, str], float] = {}
        self._last_retire_check: dict[str, float] = {}
        self._last_watch_check = -1e9
        self._warned: set[tuple[str, str, str]] = set()
        # What holds a retirement back, logged once per cause: (stream, "", "retire") for
        # a stream's whole round, (stream, cluster, topic) for one sealed segment ->
        # (cause, since when, monotonic).
        self._retire_blocks: dict[tuple[str, str, str], tuple[str, float]] = {}
        self.started = False

    # ------------------------------------------------------------------ life cycle
    def start(self) -> None:
        if self.started:
            return
        self.started = True
        self._stop.clear()
        self.leadership.start()
        if self.settings.advertise_url is not None:
            self._spawn(self._publish_loop, "leader-url")
        if self.settings.health_enabled:
            self._spawn(self._health_loop, "health")
        if self.settings.sealing_enabled:
            self._spawn(self._sealer_loop, "sealer")

    def stop(self) -> None:
        self._stop.set()
        for t in [*self._threads, *self._probers.values()]:
            t.join(timeout=3)
        self._threads.clear()
        self._probers.clear()
        self.leadership.stop()
        with self._io_lock:
            for io in self._ios.values():
                try:
                    io.close()
                except Exception as exc:
                    log.debug("closing cluster I/O failed: %s", exc)
            self._ios.clear()
        self.started = False

    @property
    def is_leader(self) -> bool:
        return self.leadership.is_leader

    def _publish_loop(self) -> None:
        """While leading, keep the advertised URL published (at once on becoming the
        leader, then every LEADER_REPUBLISH_S)."""
        url = self.settings.advertise_url
        assert url is not None
        published_at: float | None = None
        while not self._stop.wait(self.settings.leader_interval):
            if not self.is_leader:
                published_at = None
                continue
            now = self._clock()
            if published_at is not None and now - published_at < LEADER_REPUBLISH_S:
                continue
            try:
                self.store.publish_leader(self.replica, url)
                published_at = now
            except Exception as exc:
                _warn("publishing the leader's URL failed: %s", exc)

    def leader_url(self) -> str | None:
        """Where the leader answers, as it published it (cached for a second); None when
        nothing recent is published, or what is published is this replica's own URL
        from when it led."""
        now = self._clock()
        cached = self._leader_cache
        if cached is not None and now - cached[0] < 1.0:
            return cached[1]
        url: str | None = None
        try:
            record = self.store.leader()
        except Exception as exc:
            log.debug("reading the leader's URL failed: %s", exc)
            record = None
        if (
            record is not None
            and record.replica != self.replica
            and utcnow() - record.updated_at < timedelta(seconds=LEADER_STALE_S)
        ):
            url = record.url
        self._leader_cache = (now, url)
        return url

    def _spawn(self, target: Callable[[], None], name: str) -> threading.Thread:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)
        return t

    def _io(self, bootstrap: str) -> ClusterIO:
        with self._io_lock:
            io = self._ios.get(bootstrap)
            if io is None:
                io = self._ios[bootstrap] = self._io_factory(bootstrap)
            return io

    # ------------------------------------------------------------------ health
    def health_records(self) -> dict[str, HealthRecord]:
        """Every cluster's health as last written by the leader (any replica serves it),
        leaving out records nobody keeps current: with health checks off here, those
        another process wrote (an earlier one's), and any not rewritten for
        ``HEALTH_STALE_S`` (a leader rewrites its records every ``HEALTH_REWRITE_S``).
        Before, a control plane started with health checks off showed what an earlier
        process had seen (a dead cluster ``ok``)."""
        fresh_after = utcnow() - timedelta(seconds=HEALTH_STALE_S)
        return {
            name: r
            for name, r in self.store.health().items()
            if r.updated_at >= fresh_after  # aware: the store's records are UTC
            and (self.settings.health_enabled or r.replica.startswith(f"{_process_id()}:"))
        }

    def _health_loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self.is_leader:
                    names = {c.name for c in self.service.store.list_clusters()}
                    for name in names - set(self._probers):
                        t = threading.Thread(
                            target=self._probe_loop, args=(name,), name=f"probe-{name}", daemon=True
                        )
                        self._probers[name] = t
                        t.start()
                    for name, t in list(self._probers.items()):
                        if not t.is_alive():
                            del self._probers[name]
            except Exception as exc:
                _warn("health loop: %s", exc)
            self._stop.wait(self.settings.health_interval)

    def _probe_loop(self, name: str) -> None:
        while not self._stop.is_set():
            started = self._clock()
            if not self.is_leader:
                with self._health_lock:
                    self._health.pop(name, None)  # start afresh when leading again
                return
            try:
                self.probe_once(name)
            except NotFound:
                with self._health_lock:
                    self._health.pop(name, None)
                return
            except Exception as exc:  # the store is down: try again
                _warn("health of %s: %s", exc, name)
            elapsed = self._clock() - started
            self._stop.wait(max(0.0, self.settings.health_interval - elapsed))

    def probe_once(self, name: str) -> HealthState:
        """Probe one cluster, record its health, fail its streams over if it is down."""
        s = self.settings
        cluster = self.service.store.get_cluster(name)
        started = self._clock()
        error: str | None = None
        partial: str | None = None
        stalled = False
        try:
            found = self._io(cluster.bootstrap).probe(s.health_timeout)
        except StreamplaneError as exc:
            error = str(exc)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        else:
            if isinstance(found, ProbeStall):  # failing, but down only after a longer stall
                error, stalled = str(found), True
            else:
                partial = found
        now = self._clock()
        with self._health_lock:
            before = self._health.get(name, HealthState())
            state = observe_probe(
                before,
                ok=error is None,
                started=started,
                now=now,
                threshold_s=s.health_threshold,
                error=error,
                partial=partial,
                stalled=stalled,
            )
            self._health[name] = state
            written, last_written = self._written.get(name, (None, -1e9))
        key = (state.health.value, state.last_error if error or partial else None)
        if key != written or now - last_written >= HEALTH_REWRITE_S:
            self._write_health(name, state, now)
            with self._health_lock:
                self._written[name] = (key, now)
        if state.health is not before.health and before.health is not ClusterHealth.UNKNOWN:
            self._audit_health(name, state)
        if state.health is ClusterHealth.DOWN and s.health_failover:
            self._fail_over_cluster(name, state, now)
        if error is None and cluster.kafka_cluster_id is None:
            # Registered before its id was recorded: the first answer records it.
            try:
                self.service.learn_kafka_cluster_id(cluster, s.health_timeout)
            except Exception as exc:
                _warn("recording the Kafka cluster id of %s failed: %s", exc, name)
        return state

    def _write_health(self, name: str, state: HealthState, now: float) -> None:
        since = utcnow() - timedelta(seconds=max(0.0, now - (state.since or now)))
        try:
            self.store.save_health(name, state.health.value, since, state.last_error, self.replica)
        except Exception as exc:
            _warn("saving the health of %s failed: %s", exc, name)

    def _audit_health(self, name: str, state: HealthState) -> None:
        detail = {"cluster": name, "health": state.health.value, "error": state.last_error}
        try:
            self.service.store.append_audit(
                AuditEntry("health", f"cluster.{state.health.value}", None, detail)
            )
        except Exception as exc:
            _warn("audit of %s's health failed: %s", exc, name)

    def _fail_over_cluster(self, failed: str, state: HealthState, now: float) -> None:
        """Move every lane whose active segment is on ``failed`` (dlq included), unless
        ``failover_hold`` says the fault may not be ``failed``'s (every cluster failed
        at once) or no cluster is trusted yet; the next probe asks again."""
        streams = [s for s, cs in self.service.store.active_clusters().items() if failed in cs]
        if not streams:
            return
        threshold = self.settings.health_threshold
        with self._health_lock:
            states = dict(self._health)
        hold = failover_hold(failed, states, now, threshold, self.settings.health_recovery)
        if hold is not None:
            self._warn_once(
                (failed, str(state.failing_since), hold.reason.value),
                "not failing the streams of %s over yet: %s",
                failed,
                hold.detail,
            )
            return
        tags = {c.name: dict(c.tags) for c in self.service.store.list_clusters()}
        trusted = trusted_clusters(states, now, threshold)
        for stream in streams:
            try:
                table = self.service.routing(stream)
                lanes = [lane for lane in table.all_lanes if _active_cluster(table, lane) == failed]
                target = choose_standby(failed, stream, tags, trusted)
                if not lanes:
                    continue
                if target is None:
                    self._warn_once(
                        (stream, failed, "standby"), "no healthy standby for %s", stream
                    )
                    continue
                reason = f"cluster {failed} is down: {state.last_error}"
                self.service.failover(stream, target, lanes, None, reason[:1000], actor="health")
                log.warning("failed stream %s over from %s to %s", stream, failed, target)
            except (Conflict, NotFound) as exc:
                # Changed meanwhile, or a conflict that stays (a topic in the way): the
                # next probe tries again; said once, not swallowed.
                self._warn_once(
                    (stream, failed, "conflict"),
                    "automatic failover of %s off %s not done yet: %s",
                    stream,
                    failed,
                    exc,
                )
            except Exception as exc:
                _warn("automatic failover of %s off %s failed: %s", exc, stream, failed)

    # ------------------------------------------------------------------ sealer
    def _sealer_loop(self) -> None:
        while not self._stop.wait(self.settings.sealer_interval):
            if not self.is_leader:
                continue
            try:
                self.seal_and_retire_once()
            except Exception as exc:
                _warn("sealer: %s", exc)

    def seal_and_retire_once(self, now: float | None = None) -> None:
        """One round of the sealer (also called directly by tests)."""
        mono = self._clock() if now is None else now
        for stream in self.store.streams_with(SegmentState.DRAINING, SegmentState.SEALED):
            try:
                self._seal_and_retire_stream(stream, mono)
            except Exception as exc:  # one stream's trouble must not hold up the others
                _warn("sealer, stream %s: %s", exc, stream)
        if mono - self._last_watch_check >= self.settings.retire_interval:
            self._last_watch_check = mono
            self._watch_retired()

    def retire_by_hand(
        self,
        stream: str,
        cluster: str,
        topic: str,
        sealed_end_offsets: Mapping[int, int],
        actor: str,
    ) -> RoutingTable:
        """An operator's retirement (``segments/transition`` to retired), watched as the
        sealer's are (``_watch_retired``): records landing after it reopen the segment,
        and its topic is fenced once the watch is over. Before, nothing watched it: 10
        records a producer wrote there after an operator retired it were acknowledged
        and never read. Its end offsets at retirement are the given ones, else those it
        was sealed at, else read now (the records it holds are not "late": an operator
        retires a dlq segment whose letters no one will replay); when they cannot be
        read, every record in it counts as late and reopens it (nothing unread is
        dropped on a guess)."""
        ends = dict(sealed_end_offsets)
        seg = self.service.routing(stream).segment(cluster, topic)
        if not ends and seg is not None and not seg.sealed_end_offsets:
            try:
                bootstrap = self.service.store.get_cluster(cluster).bootstrap
                ends = self._io(bootstrap).end_offsets(
                    topic, seg.partitions, self.settings.kafka_timeout
                )
            except StreamplaneError as exc:
                log.warning(
                    "retiring %s on %s: its end offsets cannot be read (%s); any record "
                    "in it reopens it", topic, cluster, exc,
                )  # fmt: skip
        # First, as the sealer does: a row for a segment that is not retired is passed over.
        self.store.record_retired(stream, cluster, topic)
        return self.service.transition_segment(
            stream, cluster, topic, SegmentState.RETIRED, ends or None, actor
        )

    def _watch_retired(self) -> None:
        """Watch the retired segments (``FailoverStore.watched_retirements``): reopen
        (retired -> sealed) one whose end offsets moved past those it was retired at,
        and fence one watched for ``retired_watch`` (its topic refuses writes).

        A producer that has not seen the failover (paused across it, say) writes to
        the old segment, and a retired segment is not read: an exploratory run lost
        7,497 acknowledged records that way. Reopened, they are read, and the segment
        is retired again once every group reading its lane settled them. Past the
        watch, a late write is refused by the broker and the producer's delivery
        report fails (the application sees it), instead of being acknowledged and never
        read. The watch is in the store: a new leader goes on with it. A fenced segment
        is looked at for ``_FENCE_SETTLE_S`` more, for records the broker took while
        the fence was being applied.

        Neither is done while the cluster answering at the registered bootstrap is not
        the registered Kafka cluster (``_foreign_cluster``): a registry moved to another
        Kafka cluster fenced the topics of a live stream there that had the names of
        its retired segments."""
        tables: dict[str, RoutingTable | None] = {}
        answering: dict[str, str | StreamplaneError | None] = {}  # this round's cluster ids
        watch = timedelta(seconds=self.settings.retired_watch)
        for r in self.store.watched_retirements(_FENCE_SETTLE_S):
            key = (r.stream, r.cluster, r.topic)
            if r.stream not in tables:
                try:
                    tables[r.stream] = self.service.routing(r.stream)
                except NotFound:
                    tables[r.stream] = None
            table = tables[r.stream]
            seg = table.segment(r.cluster, r.topic) if table is not None else None
            if seg is None or seg.state is not SegmentState.RETIRED or self._is_down(r.cluster):
                continue
            try:
                io = self._io(self.service.store.get_cluster(r.cluster).bootstrap)
                ends = io.end_offsets(r.topic, seg.partitions, self.settings.kafka_timeout)
                late = sum(max(0, o - seg.sealed_end_offsets.get(p, 0)) for p, o in ends.items())
                fence_due = r.fenced_at is None and utcnow() - r.retired_at >= watch
                if late or fence_due:
                    foreign = self._foreign_cluster(r.cluster, answering)
                    if foreign is not None:
                        what = "reopening" if late else "fencing"
                        self._warn_once((r.stream, r.cluster, f"{r.topic} on another cluster"),
                                        "not %s %s on %s: %s", what, r.topic, r.cluster,
                                        foreign)  # fmt: skip
                        continue
                    self._warned.discard((r.stream, r.cluster, f"{r.topic} on another cluster"))
                if late:
                    self.store.record_reopened(*key)
                    self.service.transition_segment(
                        r.stream, r.cluster, r.topic, SegmentState.SEALED, None, actor="sealer"
                    )
                    log.warning(
                        "reopened %s on %s: %d records landed after it was retired (a "
                        "producer had not seen the failover); they are read, and it is "
                        "retired again once settled",
                        r.topic, r.cluster, late,
                    )  # fmt: skip
                elif fence_due:
                    io.fence(r.topic, self.settings.kafka_timeout)
                    self.store.record_fenced(*key)
                    detail = {"cluster": r.cluster, "topic": r.topic, **FENCED_TOPIC_CONFIG}
                    self.service.store.append_audit(
                        AuditEntry("sealer", "segment.fenced", r.stream, detail)
                    )
                    log.info("fenced %s on %s (retired %s ago): it refuses writes now",
                             r.topic, r.cluster, utcnow() - r.retired_at)  # fmt: skip
            except (Conflict, NotFound):
                continue  # the table moved on, or the stream is gone: next round
            except StreamplaneError as exc:
                self._warn_once(key, "cannot watch %s on %s: %s", r.topic, r.cluster, exc)

    def _foreign_cluster(
        self, cluster: str, answering: dict[str, str | StreamplaneError | None]
    ) -> str | None:
        """What is wrong when the Kafka cluster answering at ``cluster``'s registered
        bootstrap is not the one registered (its recorded cluster id), None when it is.
        Kafka is asked once per cluster and watch round (``answering``); raises
        ``KafkaError`` when the cluster does not answer. A cluster with no id recorded
        (registered before schema version 9) has the one answering recorded now."""
        record = self.service.store.get_cluster(cluster)
        if cluster not in answering:
            try:
                answering[cluster] = self.service.kafka_cluster_id(
                    record.bootstrap, self.settings.kafka_timeout
                )
            except StreamplaneError as exc:
                answering[cluster] = exc
        found = answering[cluster]
        if isinstance(found, StreamplaneError):
            raise found
        if record.kafka_cluster_id is None:
            if found is not None:
                self.service.store.record_kafka_cluster_id(cluster, record.bootstrap, found)
            return None
        return foreign_cluster_problem(cluster, record.bootstrap, record.kafka_cluster_id, found)

    def _seal_and_retire_stream(self, stream: str, mono: float) -> None:
        try:
            table = self.service.routing(stream)
        except NotFound:
            return
        for seg in table.segments:
            try:
                if seg.state is SegmentState.DRAINING:
                    self._maybe_seal(table, seg, mono)
            except (Conflict, NotFound):
                break  # the table moved on: next round
        due = mono - self._last_retire_check.get(stream, -1e9) >= self.settings.retire_interval
        sealed = [s for s in table.segments if s.state is SegmentState.SEALED]
        if sealed and self.settings.auto_retire and due:
            self._last_retire_check[stream] = mono
            with contextlib.suppress(Conflict, NotFound):
                self._maybe_retire(stream, sealed, mono)

    def _maybe_seal(self, table: RoutingTable, seg: Segment, mono: float) -> None:
        s = self.settings
        succ = successor_epoch(table, seg)
        if succ is None:
            return
        key = (table.stream, seg.cluster, seg.topic)
        first = self._first_seen_draining.setdefault(key, mono)
        started = self.store.failover_time(table.stream, succ)
        if started is not None:
            draining_for = (datetime.now(UTC) - started).total_seconds()
        else:
            draining_for = mono - first
        with self._health_lock:
            health = self._health.get(seg.cluster)
        if health is not None and health.since is not None:
            # Its cluster's health changed while the segment drained (it was down and
            # answers again): the records producers kept queued for it are on their way
            # only now, so the settle and grace periods count from then. (Counted from
            # the failover, a grace that ran out during a long outage sealed the segment
            # the moment its cluster answered: 1,136 records landed past the sealed end.)
            draining_for = min(draining_for, mono - health.since)
        producers = self.store.live_producers(table.stream, s.producer_liveness)
        reason = seal_reason(
            table, seg, producers, draining_for, settle_s=s.seal_settle, grace_s=s.seal_grace
        )
        if reason is None:
            return
        if self._is_down(seg.cluster):  # its end offsets cannot be read: no call made
            self._warn_once(key, "cannot seal %s on %s yet: the cluster is down",
                            seg.topic, seg.cluster)  # fmt: skip
            return
        try:
            cluster = self.service.store.get_cluster(seg.cluster)
            offsets = self._io(cluster.bootstrap).end_offsets(
                seg.topic, seg.partitions, s.kafka_timeout
            )
        except StreamplaneError as exc:
            self._warn_once(key, "cannot seal %s on %s yet: %s", seg.topic, seg.cluster, exc)
            return
        self.service.transition_segment(
            table.stream, seg.cluster, seg.topic, SegmentState.SEALED, offsets, actor="sealer"
        )
        self._first_seen_draining.pop(key, None)
        self._warned.discard(key)
        log.info("sealed %s on %s (%s)", seg.topic, seg.cluster, reason)

    def _maybe_retire(self, stream: str, sealed: list[Segment], mono: float) -> None:
        """Retire the sealed segments every group reading ``stream`` has settled."""
        table = self.service.routing(stream)
        by_cluster: dict[str, dict[str, int]] = {}
        for seg in table.readable():
            by_cluster.setdefault(seg.cluster, {})[seg.topic] = seg.partitions
        committed: dict[str, dict[str, dict[int, int]]] = {}
        round_key = (stream, "", "retire")
        down = ", ".join(sorted(c for c in by_cluster if self._is_down(c)))
        if down:  # a cluster we cannot read may hide a group: retire nothing this round
            self._retire_blocked(round_key, f"{down} down", mono,
                                 "not retiring the sealed segments of %s yet: %s down (its "
                                 "groups cannot all be read); retire checks go on when it "
                                 "answers", stream, down)  # fmt: skip
            return
        cluster_name = ""
        try:
            for cluster_name, topics in sorted(by_cluster.items()):
                cluster = self.service.store.get_cluster(cluster_name)
                for group, offsets in (
                    self._io(cluster.bootstrap).committed(topics, self.settings.kafka_timeout)
                ).items():
                    committed.setdefault(group, {}).update(offsets)
        except StreamplaneError as exc:
            # A cluster we cannot read may hide a group: retire nothing this round.
            cause = f"groups of {cluster_name} not read ({getattr(exc, 'code', None) or exc})"
            self._retire_blocked(round_key, cause, mono,
                                 "not retiring the sealed segments of %s yet: the consumer "
                                 "groups of %s cannot all be read: %s (checked again every "
                                 "%gs)", stream, cluster_name, exc,
                                 self.settings.retire_interval)  # fmt: skip
            return
        waited = self._retire_unblocked(round_key, mono)
        if waited is not None:
            log.info("retire checks of %s go on: the groups of every cluster it is read on "
                     "are read again (%s)", stream, waited)  # fmt: skip
        lanes_read = self._lanes_read(stream, table, committed)
        for seg in sealed:
            readers = {group for group, lanes in lanes_read.items() if seg.lane in lanes}
            # Drained reports from before a reopen (those its retirement recorded) do
            # not settle the late records.
            reopened_at = self.store.reopened_at(stream, seg.cluster, seg.topic)
            reported = self.store.drained_groups(stream, seg.cluster, seg.topic, reopened_at)
            key = (stream, seg.cluster, seg.topic)
            try:
                cluster = self.service.store.get_cluster(seg.cluster)
                end = self._io(cluster.bootstrap).end_offsets(
                    seg.topic, seg.partitions, self.settings.kafka_timeout
                )
            except StreamplaneError as exc:
                self._retire_blocked(key, f"end offsets not read ({getattr(exc, 'code', None)})",
                                     mono, "not retiring %s on %s yet: its end offsets cannot "
                                     "be read: %s", seg.topic, seg.cluster, exc)  # fmt: skip
                continue
            # Records that landed after the seal (late batches) must be settled too.
            for p, o in seg.sealed_end_offsets.items():
                end[p] = max(end.get(p, 0), o)
            offsets_here = {g: committed.get(g, {}).get(seg.topic, {}) for g in readers}
            check = retire_check(end, offsets_here, reported)
            if not check.retire:  # said once per set of groups it waits on
                self._retire_blocked(key, ", ".join(check.pending) or check.reason, mono,
                                     "not retiring %s on %s yet: %s", seg.topic, seg.cluster,
                                     check.reason, level=logging.INFO)  # fmt: skip
            else:
                for group in check.groups:  # first: each one settled it, and is remembered
                    self.store.record_drained(stream, seg.cluster, seg.topic, group)
                # Watched from now on (first: a row for a segment that is not retired
                # is passed over); its end offsets at retirement are kept, and records
                # landing past them reopen it (``_watch_retired``).
                self.store.record_retired(stream, seg.cluster, seg.topic)
                self.service.transition_segment(
                    stream, seg.cluster, seg.topic, SegmentState.RETIRED, end, actor="sealer"
                )
                waited = self._retire_unblocked(key, mono)
                log.info("retired %s on %s: %s%s", seg.topic, seg.cluster, check.reason,
                         f" (it waited on: {waited})" if waited else "")  # fmt: skip

    def _lanes_read(
        self, stream: str, table: RoutingTable, committed: Mapping[str, Mapping[str, object]]
    ) -> dict[str, set[str]]:
        """The groups that read ``stream``, each with the lanes it reads: the lanes of the
        segments it committed on (``committed``: group -> topic -> offsets) or reported
        drained, and those its members told the Assigner. A group holds only its lanes'
        segments: a group reading one lane held every other lane's (and the dlq's, which
        a failover of a down cluster moves too) forever.

        A group offline since its last commits, on segments retired since, commits on
        no readable segment: the groups that settled a retired segment are recorded as
        having drained it (``_maybe_retire``), and a group's lanes are kept, so that it
        still holds the later segments, until it has been silent for the reader
        retention. A group that has not committed yet is known by its members'
        heartbeats."""
        retention = self.settings.reader_retention
        lane_of = {seg.topic: seg.lane for seg in table.segments}
        lanes: dict[str, set[str]] = {}
        for source in (committed, self.store.drained_topics(stream, retention)):
            for group, topics in source.items():
                lanes.setdefault(group, set()).update(lane_of[t] for t in topics if t in lane_of)
        for group, told in self.store.reader_lanes(stream, retention).items():
            lanes.setdefault(group, set()).update(told)
        # `dlq replay` reads the dlq lane (as the stream's replay group) whether it has
        # run yet or not: a group acking the dlq lane (an alerting consumer) retired its
        # segment before any replay, and the dead letters left `dlq list` and `dlq
        # replay` with it. The group all streams' replays shared before is not a reader:
        # a replay takes its progress over, and its commits, never moved again, held
        # every dlq segment it had not read to the end until Kafka expired them.
        lanes.pop(LEGACY_DLQ_REPLAY_GROUP, None)
        lanes.setdefault(dlq_replay_group(stream), set()).add(DLQ_LANE)
        return lanes

    def _is_down(self, cluster: str) -> bool:
        """Whether this replica's probes last found ``cluster`` down (never, with health
        checks off). Kafka calls to a down cluster only time out, and librdkafka's admin
        client has aborted the process over such timeouts (``cluster_io.committed``)."""
        with self._health_lock:
            state = self._health.get(cluster)
        return state is not None and state.health is ClusterHealth.DOWN

    def _retire_blocked(
        self,
        key: tuple[str, str, str],
        cause: str,
        mono: float,
        msg: str,
        *args: object,
        level: int = logging.WARNING,
    ) -> None:
        """Log why a retirement waits (``msg``), once per ``cause`` of ``key`` (a
        stream's retire round, or one sealed segment); ``_retire_unblocked`` ends it."""
        blocked = self._retire_blocks.get(key)
        if blocked is None or blocked[0] != cause:
            self._retire_blocks[key] = (cause, mono if blocked is None else blocked[1])
            log.log(level, msg, *args)

    def _retire_unblocked(self, key: tuple[str, str, str], mono: float) -> str | None:
        """What ``key`` last waited on and for how long, now that it no longer does;
        None when nothing held it."""
        blocked = self._retire_blocks.pop(key, None)
        if blocked is None:
            return None
        return f"{blocked[0]}, for {max(0.0, mono - blocked[1]):.0f}s"

    def _warn_once(self, key: tuple[str, str, str], msg: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(msg, *args)


def foreign_cluster_problem(
    cluster: str, bootstrap: str, registered_id: str, answering_id: str | None
) -> str | None:
    """What is wrong when ``bootstrap``, where ``cluster`` is registered as Kafka cluster
    ``registered_id``, answers as another one (``answering_id``, None if it gives no
    id); None when it is the same."""
    if answering_id == registered_id:
        return None
    return (
        f"the cluster answering at {bootstrap} is another Kafka cluster (id "
        f"{answering_id or 'not given'}, registered {registered_id}); if it is {cluster} "
        f"now: streamplane clusters update {cluster} --bootstrap {bootstrap} --force"
    )


def _active_cluster(table: RoutingTable, lane: str) -> str | None:
    for s in table.segments:
        if s.lane == lane and s.state is SegmentState.ACTIVE:
            return s.cluster
    return None


def _describe(exc: BaseException) -> str:
    """An exception for a log line: one line, its message (a database error's without
    SQLAlchemy's statement text), or its type when it has none (a timeout's message is
    empty)."""
    return error_line(exc)


def _warn(msg: str, exc: BaseException, *args: object) -> None:
    """A background loop's failure, in one line (``msg``'s last %s is the error); none
    for a database outage: the store logs one warning when it starts and one when it
    ends, not one per loop and round."""
    if not is_outage(exc):
        log.warning(msg, *args, _describe(exc))
