"""The control plane's state, in SQL through SQLAlchemy Core: a thin adapter.

SQLite file by default (``sqlite:///path/to/control-plane.db``); any SQLAlchemy URL
(``postgresql+psycopg://...``) works because only portable SQL is used: JSON columns,
no upserts, no dialect functions. Migrations (``migrations.py``) run when the store
opens.

Invariants kept here:

- a stream's routing table is its ``streams`` row (lanes, epoch) plus its ``segments``
  rows in ``position`` order, so ``routing()`` returns exactly what was saved;
- ``save_routing`` is a compare-and-set on the epoch: two writers (two replicas, or two
  requests) cannot both move a stream from the same epoch; the loser gets ``Conflict``;
- every routing change is written in the same transaction as its audit entry.

Domain rules (names, configs, the routing state machine) are not checked here: the
service does that with ``streamplane.core.routing``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from streamplane.controlplane.migrations import current_version, migrate
from streamplane.core.routing import RoutingTable, Segment, SegmentState
from streamplane.exceptions import ConfigError, Conflict, NotFound

_md = sa.MetaData()

clusters = sa.Table(
    "clusters",
    _md,
    sa.Column("name", sa.String(63), primary_key=True),
    sa.Column("bootstrap", sa.String(1024), nullable=False),
    sa.Column("tags", sa.JSON, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

streams = sa.Table(
    "streams",
    _md,
    sa.Column("name", sa.String(63), primary_key=True),
    sa.Column("lanes", sa.JSON, nullable=False),
    sa.Column("partitions", sa.Integer, nullable=False),
    sa.Column("dlq_partitions", sa.Integer, nullable=False),
    sa.Column("replication_factor", sa.Integer, nullable=False),
    sa.Column("config", sa.JSON, nullable=False),
    sa.Column("max_record_bytes", sa.BigInteger, nullable=False),
    sa.Column("epoch", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

segments = sa.Table(
    "segments",
    _md,
    sa.Column("stream", sa.String(63), primary_key=True),
    sa.Column("cluster", sa.String(63), primary_key=True),
    sa.Column("topic", sa.String(249), primary_key=True),
    sa.Column("position", sa.Integer, nullable=False),
    sa.Column("lane", sa.String(31), nullable=False),
    sa.Column("partitions", sa.Integer, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("epoch", sa.BigInteger, nullable=False),
    sa.Column("sealed_end_offsets", sa.JSON, nullable=False),
)

# The last epoch of each deleted stream: a stream made again under its name goes on
# from there, so clients still watching the old one (after_epoch=N) follow it, and the
# new topics (named by epoch) never meet topics kept from the old one.
deleted_stream_epochs = sa.Table(
    "deleted_stream_epochs",
    _md,
    sa.Column("name", sa.String(63), primary_key=True),
    sa.Column("epoch", sa.BigInteger, nullable=False),
)

audit_log = sa.Table(
    "audit_log",
    _md,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("time", sa.DateTime(timezone=True), nullable=False),
    sa.Column("actor", sa.String(100), nullable=False),
    sa.Column("action", sa.String(64), nullable=False),
    sa.Column("stream", sa.String(63), nullable=True),
    sa.Column("detail", sa.JSON, nullable=False),
)


def utcnow() -> datetime:
    return datetime.now(UTC)


def _aware(value: datetime) -> datetime:
    # SQLite gives naive datetimes back; everything stored is UTC.
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


@dataclass(frozen=True)
class ClusterRecord:
    name: str
    bootstrap: str
    tags: Mapping[str, str]
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class StreamRecord:
    """What a stream was created with, plus its current epoch."""

    name: str
    lanes: tuple[str, ...]
    partitions: int
    dlq_partitions: int
    replication_factor: int
    config: Mapping[str, str]  # the user's topic configs (without the ones streamplane sets)
    max_record_bytes: int
    epoch: int
    created_at: datetime


@dataclass(frozen=True)
class AuditEntry:
    actor: str
    action: str
    stream: str | None
    detail: Mapping[str, Any] = field(default_factory=dict)
    time: datetime = field(default_factory=utcnow)
    id: int | None = None


def display_url(url: str) -> str:
    """``url`` with its password masked, for messages and logs."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return url if "@" not in url else "<the database URL>"


def _engine(url: str) -> Engine:
    shown = display_url(url)
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise ConfigError(f"invalid database URL {shown!r}: {exc}") from exc
    is_sqlite = parsed.get_backend_name() == "sqlite"
    if is_sqlite and (parsed.database in (None, "", ":memory:") or "mode=memory" in url):
        # Each connection of the pool would get an empty database of its own: the
        # schema made at start-up would be gone for the requests.
        raise ConfigError(
            f"database URL {shown!r}: an in-memory SQLite database is not shared between "
            "connections; give a file (sqlite:///path/to/control-plane.db)"
        )
    if is_sqlite and parsed.database:
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    try:
        engine = sa.create_engine(parsed)
    except (sa.exc.NoSuchModuleError, ModuleNotFoundError) as exc:
        raise ConfigError(f"database URL {shown!r}: driver not installed ({exc})") from exc
    if is_sqlite:

        @sa.event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")  # readers do not wait for the writer
            cur.execute("PRAGMA busy_timeout=10000")
            cur.close()

    return engine


class Store:
    """All reads and writes of the control plane's state."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = _engine(url)
        try:
            migrate(self.engine)
        except sa.exc.DatabaseError as exc:  # unreachable, refused, not a database
            self.engine.dispose()
            reason = " ".join(str(exc.orig).split())  # drivers' messages span lines
            raise ConfigError(f"cannot open the database {display_url(url)!r}: {reason}") from exc

    def close(self) -> None:
        self.engine.dispose()

    def schema_version(self) -> int:
        return current_version(self.engine)

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(sa.select(1))

    # ------------------------------------------------------------------ clusters
    def add_cluster(self, record: ClusterRecord, audit: AuditEntry) -> None:
        conflict = Conflict(f"cluster {record.name!r} is already registered")
        with _unique(conflict), self.engine.begin() as conn:
            if _exists(conn, clusters.c.name, record.name):
                raise conflict
            conn.execute(
                clusters.insert().values(
                    name=record.name,
                    bootstrap=record.bootstrap,
                    tags=dict(record.tags),
                    created_at=record.created_at,
                    updated_at=record.updated_at,
                )
            )
            _audit(conn, audit)

    def get_cluster(self, name: str) -> ClusterRecord:
        with self.engine.connect() as conn:
            row = conn.execute(clusters.select().where(clusters.c.name == name)).first()
            if row is None:
                raise NotFound(f"unknown cluster {name!r} (known: {_known_clusters(conn)})")
        return _cluster(row)

    def list_clusters(self) -> list[ClusterRecord]:
        with self.engine.connect() as conn:
            rows = conn.execute(clusters.select().order_by(clusters.c.name)).all()
        return [_cluster(r) for r in rows]

    def update_cluster(
        self,
        name: str,
        audit: AuditEntry,
        bootstrap: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> ClusterRecord:
        values: dict[str, Any] = {"updated_at": utcnow()}
        if bootstrap is not None:
            values["bootstrap"] = bootstrap
        if tags is not None:
            values["tags"] = dict(tags)
        with self.engine.begin() as conn:
            done = conn.execute(clusters.update().where(clusters.c.name == name).values(**values))
            if done.rowcount == 0:
                raise NotFound(f"unknown cluster {name!r} (known: {_known_clusters(conn)})")
            _audit(conn, audit)
            row = conn.execute(clusters.select().where(clusters.c.name == name)).one()
        return _cluster(row)

    def delete_cluster(self, name: str, audit: AuditEntry) -> None:
        with self.engine.begin() as conn:
            users = self._streams_on_cluster(conn, name)
            if users:
                raise Conflict(
                    f"cluster {name!r} still holds segments of streams {', '.join(users)}: "
                    "fail them over or delete them first"
                )
            done = conn.execute(clusters.delete().where(clusters.c.name == name))
            if done.rowcount == 0:
                raise NotFound(f"unknown cluster {name!r} (known: {_known_clusters(conn)})")
            _audit(conn, audit)

    @staticmethod
    def _streams_on_cluster(conn: Connection, cluster: str) -> list[str]:
        rows = conn.execute(
            sa.select(segments.c.stream)
            .where(segments.c.cluster == cluster, segments.c.state != SegmentState.RETIRED.value)
            .distinct()
            .order_by(segments.c.stream)
        )
        return [r.stream for r in rows]

    # ------------------------------------------------------------------ streams
    def add_stream(self, record: StreamRecord, table: RoutingTable, audit: AuditEntry) -> None:
        conflict = Conflict(f"stream {record.name!r} already exists")
        with _unique(conflict), self.engine.begin() as conn:
            if _exists(conn, streams.c.name, record.name):
                raise conflict
            conn.execute(
                streams.insert().values(
                    name=record.name,
                    lanes=list(record.lanes),
                    partitions=record.partitions,
                    dlq_partitions=record.dlq_partitions,
                    replication_factor=record.replication_factor,
                    config=dict(record.config),
                    max_record_bytes=record.max_record_bytes,
                    epoch=table.epoch,
                    created_at=record.created_at,
                )
            )
            _insert_segments(conn, table)
            _audit(conn, audit)

    def get_stream(self, name: str) -> StreamRecord:
        with self.engine.connect() as conn:
            return _stream(self._stream_row(conn, name))

    def list_streams(self) -> list[StreamRecord]:
        with self.engine.connect() as conn:
            rows = conn.execute(streams.select().order_by(streams.c.name)).all()
        return [_stream(r) for r in rows]

    def stream_with_routing(self, name: str) -> tuple[StreamRecord, RoutingTable]:
        with self.engine.connect() as conn:
            row = self._stream_row(conn, name)
            return _stream(row), _routing(conn, row)

    def routing(self, name: str) -> RoutingTable:
        with self.engine.connect() as conn:
            return _routing(conn, self._stream_row(conn, name))

    def active_clusters(self) -> dict[str, list[str]]:
        """Per stream, the clusters of its active segments (sorted)."""
        out: dict[str, set[str]] = {}
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(segments.c.stream, segments.c.cluster).where(
                    segments.c.state == SegmentState.ACTIVE.value
                )
            )
            for r in rows:
                out.setdefault(r.stream, set()).add(r.cluster)
        return {k: sorted(v) for k, v in out.items()}

    def stream_epochs(self, names: Collection[str]) -> dict[str, int]:
        """Current epochs of the named streams; a deleted stream is absent."""
        if not names:
            return {}
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(streams.c.name, streams.c.epoch).where(streams.c.name.in_(list(names)))
            )
            return {r.name: int(r.epoch) for r in rows}

    def save_routing(self, table: RoutingTable, expected_epoch: int, audit: AuditEntry) -> None:
        """Replace a stream's segments if its epoch is still ``expected_epoch``."""
        if table.epoch <= expected_epoch:
            raise ValueError("a routing change must increase the epoch")
        with self.engine.begin() as conn:
            done = conn.execute(
                streams.update()
                .where(streams.c.name == table.stream, streams.c.epoch == expected_epoch)
                .values(epoch=table.epoch)
            )
            if done.rowcount == 0:
                row = self._stream_row(conn, table.stream)  # NotFound if deleted meanwhile
                raise Conflict(
                    f"stream {table.stream!r} moved on to epoch {row.epoch} while this change "
                    f"was prepared from epoch {expected_epoch}: retry"
                )
            conn.execute(segments.delete().where(segments.c.stream == table.stream))
            _insert_segments(conn, table)
            _audit(conn, audit)

    def delete_stream(self, name: str, audit: AuditEntry) -> None:
        with self.engine.begin() as conn:
            epoch = self._stream_row(conn, name).epoch
            conn.execute(segments.delete().where(segments.c.stream == name))
            conn.execute(streams.delete().where(streams.c.name == name))
            gone = deleted_stream_epochs.c.name == name
            conn.execute(deleted_stream_epochs.delete().where(gone))
            conn.execute(deleted_stream_epochs.insert().values(name=name, epoch=epoch))
            _audit(conn, audit)

    def first_epoch(self, name: str) -> int:
        """The epoch a new stream called ``name`` starts at: 1, or one past the last
        epoch of a deleted stream of that name."""
        with self.engine.connect() as conn:
            last = conn.execute(
                sa.select(deleted_stream_epochs.c.epoch).where(deleted_stream_epochs.c.name == name)
            ).scalar()
        return 1 if last is None else int(last) + 1

    @staticmethod
    def _stream_row(conn: Connection, name: str) -> sa.Row[Any]:
        row = conn.execute(streams.select().where(streams.c.name == name)).first()
        if row is None:
            raise NotFound(f"unknown stream {name!r}")
        return row

    # ------------------------------------------------------------------ audit
    def append_audit(self, entry: AuditEntry) -> None:
        with self.engine.begin() as conn:
            _audit(conn, entry)

    def audit(self, stream: str | None = None, limit: int = 100) -> list[AuditEntry]:
        """The newest entries first."""
        query = audit_log.select().order_by(audit_log.c.id.desc()).limit(limit)
        if stream is not None:
            query = query.where(audit_log.c.stream == stream)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [
            AuditEntry(
                id=r.id,
                time=_aware(r.time),
                actor=r.actor,
                action=r.action,
                stream=r.stream,
                detail=dict(r.detail),
            )
            for r in rows
        ]


# ---------------------------------------------------------------------- row mapping
@contextmanager
def _unique(conflict: Conflict) -> Iterator[None]:
    """A concurrent insert of the same key (another replica) is the same conflict."""
    try:
        yield
    except sa.exc.IntegrityError as exc:
        raise conflict from exc


def _exists(conn: Connection, column: sa.Column[Any], value: str) -> bool:
    return conn.execute(sa.select(column).where(column == value)).first() is not None


def _known_clusters(conn: Connection) -> str:
    names = list(conn.execute(sa.select(clusters.c.name).order_by(clusters.c.name)).scalars())
    return ", ".join(names) or "none"


def _audit(conn: Connection, entry: AuditEntry) -> None:
    conn.execute(
        audit_log.insert().values(
            time=entry.time,
            actor=entry.actor,
            action=entry.action,
            stream=entry.stream,
            detail=dict(entry.detail),
        )
    )


def _insert_segments(conn: Connection, table: RoutingTable) -> None:
    rows = [
        {
            "stream": table.stream,
            "cluster": s.cluster,
            "topic": s.topic,
            "position": i,
            "lane": s.lane,
            "partitions": s.partitions,
            "state": s.state.value,
            "epoch": s.epoch,
            "sealed_end_offsets": {str(p): o for p, o in s.sealed_end_offsets.items()},
        }
        for i, s in enumerate(table.segments)
    ]
    if rows:
        conn.execute(segments.insert(), rows)


def _cluster(row: sa.Row[Any]) -> ClusterRecord:
    return ClusterRecord(
        name=row.name,
        bootstrap=row.bootstrap,
        tags=dict(row.tags),
        created_at=_aware(row.created_at),
        updated_at=_aware(row.updated_at),
    )


def _stream(row: sa.Row[Any]) -> StreamRecord:
    return StreamRecord(
        name=row.name,
        lanes=tuple(row.lanes),
        partitions=row.partitions,
        dlq_partitions=row.dlq_partitions,
        replication_factor=row.replication_factor,
        config=dict(row.config),
        max_record_bytes=int(row.max_record_bytes),
        epoch=int(row.epoch),
        created_at=_aware(row.created_at),
    )


def _routing(conn: Connection, stream_row: sa.Row[Any]) -> RoutingTable:
    rows: Iterable[sa.Row[Any]] = conn.execute(
        segments.select().where(segments.c.stream == stream_row.name).order_by(segments.c.position)
    )
    return RoutingTable(
        stream=stream_row.name,
        epoch=int(stream_row.epoch),
        lanes=tuple(stream_row.lanes),
        segments=tuple(
            Segment(
                lane=r.lane,
                cluster=r.cluster,
                topic=r.topic,
                partitions=r.partitions,
                state=SegmentState(r.state),
                epoch=int(r.epoch),
                sealed_end_offsets={int(p): int(o) for p, o in dict(r.sealed_end_offsets).items()},
            )
            for r in rows
        ),
    )
