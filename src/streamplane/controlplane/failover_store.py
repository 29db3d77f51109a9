"""The failover protocol's state in SQL: producer heartbeats, drained reports, health.

Kept in the store (not in memory) because every replica serves the API while only the
leader runs the background tasks: a heartbeat or a drained report that reaches one
replica must be seen by the leader, and the health the leader measures must be served
by every replica. Portable SQL only, like ``store.py``: no upserts (update, then insert,
and a concurrent insert of the same key means someone else just wrote it).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from streamplane.controlplane.store import _aware, audit_log, segments, utcnow
from streamplane.core.routing import SegmentState

_md = sa.MetaData()

producer_heartbeats = sa.Table(
    "producer_heartbeats",
    _md,
    sa.Column("stream", sa.String(63), primary_key=True),
    sa.Column("producer_id", sa.String(128), primary_key=True),
    sa.Column("epoch", sa.BigInteger, nullable=False),
    sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
)

segment_drains = sa.Table(
    "segment_drains",
    _md,
    sa.Column("stream", sa.String(63), primary_key=True),
    sa.Column("cluster", sa.String(63), primary_key=True),
    sa.Column("topic", sa.String(249), primary_key=True),
    sa.Column("group_name", sa.String(255), primary_key=True),
    sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False),
)

# The groups whose members heartbeated to the Assigner, with the lanes they read: a
# group that has not committed yet, or is offline, still reads those lanes.
stream_readers = sa.Table(
    "stream_readers",
    _md,
    sa.Column("stream", sa.String(63), primary_key=True),
    sa.Column("group_name", sa.String(255), primary_key=True),
    sa.Column("lanes", sa.String(1000), nullable=False),  # comma-separated
    sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
)

# Segments the sealer retired. A retired segment is watched for records landing past
# the end offsets it was retired at (``retired_at`` set) for the ``retired_watch``, then
# fenced (``fenced_at``: its topic refuses writes); a reopen clears ``retired_at`` and
# sets ``reopened_at`` (drained reports from before then do not settle it again). Kept
# here, not in the leader's memory: a new leader goes on watching and fencing.
segment_retirements = sa.Table(
    "segment_retirements",
    _md,
    sa.Column("stream", sa.String(63), primary_key=True),
    sa.Column("cluster", sa.String(63), primary_key=True),
    sa.Column("topic", sa.String(249), primary_key=True),
    sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("reopened_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("fenced_at", sa.DateTime(timezone=True), nullable=True),
)

cluster_health = sa.Table(
    "cluster_health",
    _md,
    sa.Column("cluster", sa.String(63), primary_key=True),
    sa.Column("health", sa.String(16), nullable=False),
    sa.Column("since", sa.DateTime(timezone=True), nullable=False),
    sa.Column("last_error", sa.String(1000), nullable=True),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("replica", sa.String(128), nullable=False),
)

control_plane_leader = sa.Table(
    "control_plane_leader",
    _md,
    sa.Column("slot", sa.String(16), primary_key=True),
    sa.Column("replica", sa.String(128), nullable=False),
    sa.Column("url", sa.String(1024), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)


@dataclass(frozen=True)
class LeaderRecord:
    replica: str
    url: str
    updated_at: datetime


@dataclass(frozen=True)
class Retirement:
    """A retired segment still watched: ``fenced_at`` is None until it is fenced."""

    stream: str
    cluster: str
    topic: str
    retired_at: datetime
    fenced_at: datetime | None


@dataclass(frozen=True)
class HealthRecord:
    cluster: str
    health: str
    since: datetime
    last_error: str | None
    updated_at: datetime
    replica: str


def _put(
    conn: Connection, table: sa.Table, key: Mapping[str, Any], values: Mapping[str, Any]
) -> None:
    where = sa.and_(*(table.c[k] == v for k, v in key.items()))
    if conn.execute(table.update().where(where).values(**values)).rowcount == 0:
        conn.execute(table.insert().values(**key, **values))


class FailoverStore:
    """Reads and writes of the failover state, over the control plane's engine."""

    # A group's lanes are written again at most this often (members heartbeat ~1/s).
    READER_REFRESH_S = 60.0

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._readers_written: dict[tuple[str, str], tuple[str, float]] = {}

    def _write(self, table: sa.Table, key: Mapping[str, Any], values: Mapping[str, Any]) -> None:
        for attempt in range(2):
            try:
                with self.engine.begin() as conn:
                    _put(conn, table, key, values)
                return
            except sa.exc.IntegrityError:
                if attempt:  # inserted concurrently twice: give up, the row is fresh anyway
                    return

    # ------------------------------------------------------------------ producers
    def record_heartbeat(self, stream: str, producer_id: str, epoch: int) -> None:
        self._write(
            producer_heartbeats,
            {"stream": stream, "producer_id": producer_id},
            {"epoch": epoch, "last_seen": utcnow()},
        )

    def live_producers(self, stream: str, within_s: float) -> dict[str, int]:
        """Producer id -> reported epoch, for heartbeats newer than ``within_s`` seconds."""
        since = utcnow() - timedelta(seconds=within_s)
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(producer_heartbeats.c.producer_id, producer_heartbeats.c.epoch).where(
                    producer_heartbeats.c.stream == stream,
                    producer_heartbeats.c.last_seen >= since,
                )
            )
            return {r.producer_id: int(r.epoch) for r in rows}

    def forget_producer(self, stream: str, producer_id: str) -> None:
        """A producer closed: it is no longer live."""
        t = producer_heartbeats
        with self.engine.begin() as conn:
            conn.execute(t.delete().where(t.c.stream == stream, t.c.producer_id == producer_id))

    def forget_producers(self, older_than_s: float) -> int:
        since = utcnow() - timedelta(seconds=older_than_s)
        with self.engine.begin() as conn:
            done = conn.execute(
                producer_heartbeats.delete().where(producer_heartbeats.c.last_seen < since)
            )
            return int(done.rowcount or 0)

    # ------------------------------------------------------------------ drained reports
    def record_drained(self, stream: str, cluster: str, topic: str, group: str) -> None:
        self._write(
            segment_drains,
            {"stream": stream, "cluster": cluster, "topic": topic, "group_name": group},
            {"reported_at": utcnow()},
        )

    def drained_groups(
        self, stream: str, cluster: str, topic: str, since: datetime | None = None
    ) -> set[str]:
        """Groups that reported the segment drained (``since``: at or after then)."""
        where = [
            segment_drains.c.stream == stream,
            segment_drains.c.cluster == cluster,
            segment_drains.c.topic == topic,
        ]
        if since is not None:
            where.append(segment_drains.c.reported_at >= since)
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(segment_drains.c.group_name).where(*where))
            return {r.group_name for r in rows}

    def drained_topics(self, stream: str, within_s: float) -> dict[str, set[str]]:
        """Group -> the topics of ``stream`` it reported drained in the last ``within_s``
        seconds (or was recorded as having drained when they were retired)."""
        since = utcnow() - timedelta(seconds=within_s)
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(segment_drains.c.group_name, segment_drains.c.topic).where(
                    segment_drains.c.stream == stream, segment_drains.c.reported_at >= since
                )
            )
            out: dict[str, set[str]] = {}
            for r in rows:
                out.setdefault(r.group_name, set()).add(r.topic)
            return out

    def forget_stream(self, stream: str) -> None:
        """Drop a deleted stream's producer heartbeats, drained reports, readers and
        retirements."""
        with self.engine.begin() as conn:
            for table in (producer_heartbeats, segment_drains, stream_readers, segment_retirements):
                conn.execute(table.delete().where(table.c.stream == stream))
        self._readers_written = {k: v for k, v in self._readers_written.items() if k[0] != stream}

    # ------------------------------------------------------------------ readers
    def saw_reader(self, stream: str, group: str, lanes: Sequence[str]) -> None:
        """A member of ``group`` heartbeated, reading ``lanes`` of ``stream``. Written
        when new, when its lanes change, and otherwise at most every
        ``READER_REFRESH_S``."""
        now = time.monotonic()
        key, joined = (stream, group), ",".join(sorted(lanes))
        last = self._readers_written.get(key)
        if last is not None and last[0] == joined and now - last[1] < self.READER_REFRESH_S:
            return
        self._write(
            stream_readers,
            {"stream": stream, "group_name": group},
            {"lanes": joined, "last_seen": utcnow()},
        )
        self._readers_written[key] = (joined, now)

    def reader_lanes(self, stream: str, within_s: float) -> dict[str, set[str]]:
        """Group -> the lanes of ``stream`` it read, for groups seen in the last
        ``within_s`` seconds."""
        since = utcnow() - timedelta(seconds=within_s)
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(stream_readers.c.group_name, stream_readers.c.lanes).where(
                    stream_readers.c.stream == stream, stream_readers.c.last_seen >= since
                )
            )
            return {r.group_name: set(r.lanes.split(",")) for r in rows}

    # ------------------------------------------------------------------ retirements
    def record_retired(self, stream: str, cluster: str, topic: str) -> None:
        """The sealer retired the segment: watched from now on (not fenced yet)."""
        self._write(
            segment_retirements,
            {"stream": stream, "cluster": cluster, "topic": topic},
            {"retired_at": utcnow(), "fenced_at": None},
        )

    def record_reopened(self, stream: str, cluster: str, topic: str) -> None:
        """Records landed in the retired segment and it was reopened: no longer watched."""
        self._write(
            segment_retirements,
            {"stream": stream, "cluster": cluster, "topic": topic},
            {"retired_at": None, "reopened_at": utcnow()},
        )

    def reopened_at(self, stream: str, cluster: str, topic: str) -> datetime | None:
        """When the segment was last reopened (None: never)."""
        t = segment_retirements
        with self.engine.connect() as conn:
            value = conn.execute(
                sa.select(t.c.reopened_at).where(
                    t.c.stream == stream, t.c.cluster == cluster, t.c.topic == topic
                )
            ).scalar_one_or_none()
        return _aware(value) if value is not None else None

    def watched_retirements(self, fenced_within_s: float) -> list[Retirement]:
        """Retired segments still watched: those not fenced yet, and those fenced in
        the last ``fenced_within_s`` seconds (records the broker took while the fence
        was being applied are looked for a little longer)."""
        t = segment_retirements
        since = utcnow() - timedelta(seconds=fenced_within_s)
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(t).where(
                    t.c.retired_at.is_not(None),
                    sa.or_(t.c.fenced_at.is_(None), t.c.fenced_at >= since),
                )
            )
            return [
                Retirement(
                    r.stream,
                    r.cluster,
                    r.topic,
                    _aware(r.retired_at),
                    _aware(r.fenced_at) if r.fenced_at is not None else None,
                )
                for r in rows
            ]

    def record_fenced(self, stream: str, cluster: str, topic: str) -> None:
        t = segment_retirements
        with self.engine.begin() as conn:
            conn.execute(
                t.update()
                .where(t.c.stream == stream, t.c.cluster == cluster, t.c.topic == topic)
                .values(fenced_at=utcnow())
            )

    # ------------------------------------------------------------------ segments
    def streams_with(self, *states: SegmentState) -> list[str]:
        """Streams having a segment in one of ``states``."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(segments.c.stream)
                .where(segments.c.state.in_([s.value for s in states]))
                .distinct()
            )
            return sorted(r.stream for r in rows)  # code points, whatever the collation

    def failover_time(self, stream: str, to_epoch: int) -> datetime | None:
        """When the failover that created epoch ``to_epoch`` of ``stream`` was saved."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(audit_log.c.time, audit_log.c.detail)
                .where(audit_log.c.stream == stream, audit_log.c.action == "stream.failover")
                .order_by(audit_log.c.id.desc())
                .limit(200)
            )
            for r in rows:
                if int(dict(r.detail).get("to_epoch", -1)) == to_epoch:
                    return _aware(r.time)
        return None

    # ------------------------------------------------------------------ health
    def save_health(
        self, cluster: str, health: str, since: datetime, last_error: str | None, replica: str
    ) -> None:
        self._write(
            cluster_health,
            {"cluster": cluster},
            {
                "health": health,
                "since": since,
                "last_error": (last_error or None) and last_error[:1000],
                "updated_at": utcnow(),
                "replica": replica,
            },
        )

    def health(self) -> dict[str, HealthRecord]:
        with self.engine.connect() as conn:
            rows = conn.execute(cluster_health.select()).all()
        return {
            r.cluster: HealthRecord(
                cluster=r.cluster,
                health=r.health,
                since=_aware(r.since),
                last_error=r.last_error,
                updated_at=_aware(r.updated_at),
                replica=r.replica,
            )
            for r in rows
        }

    # ------------------------------------------------------------------ leader
    def publish_leader(self, replica: str, url: str) -> None:
        """The leading replica's advertised URL, for followers to forward to."""
        self._write(
            control_plane_leader,
            {"slot": "leader"},
            {"replica": replica, "url": url[:1024], "updated_at": utcnow()},
        )

    def leader(self) -> LeaderRecord | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                control_plane_leader.select().where(control_plane_leader.c.slot == "leader")
            ).first()
        if row is None:
            return None
        return LeaderRecord(row.replica, row.url, _aware(row.updated_at))
