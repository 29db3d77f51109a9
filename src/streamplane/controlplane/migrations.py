"""Schema migrations of the control-plane store: an ordered list, applied at start.

The ``schema_version`` table holds one row per applied migration. ``migrate`` applies
every migration newer than the database, each in its own transaction together with its
version row, so a crash leaves the database at a known version and a second run (or a
second replica starting at the same time) does nothing more. On PostgreSQL the
migrations of concurrent replicas are serialised by a transaction-level advisory lock
(``pg_advisory_xact_lock``), taken before the ``schema_version`` table is created or
read.

Rules for adding a migration: append, never edit or reorder a released one; define the
tables a migration creates inside it (a frozen copy), not from ``store.py``'s current
definitions; use portable DDL (SQLAlchemy constructs, or plain ``ALTER TABLE ... ADD
COLUMN``) so the same list runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from streamplane.exceptions import ConfigError

schema_version_table = sa.Table(
    "schema_version",
    sa.MetaData(),
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("description", sa.String(200), nullable=False),
    sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False),
)


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    upgrade: Callable[[Connection], None]


def _v1_registry_and_routing(conn: Connection) -> None:
    md = sa.MetaData()
    sa.Table(
        "clusters",
        md,
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("bootstrap", sa.String(1024), nullable=False),
        sa.Column("tags", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    sa.Table(
        "streams",
        md,
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
    sa.Table(
        "segments",
        md,
        sa.Column("stream", sa.String(63), primary_key=True),
        sa.Column("cluster", sa.String(63), primary_key=True),
        sa.Column("topic", sa.String(249), primary_key=True),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("lane", sa.String(31), nullable=False),
        sa.Column("partitions", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("sealed_end_offsets", sa.JSON, nullable=False),
        sa.Index("ix_segments_cluster", "cluster"),
    )
    md.create_all(conn)


def _v2_audit_log(conn: Connection) -> None:
    md = sa.MetaData()
    sa.Table(
        "audit_log",
        md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(100), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("stream", sa.String(63), nullable=True),
        sa.Column("detail", sa.JSON, nullable=False),
        sa.Index("ix_audit_log_stream", "stream", "id"),
    )
    md.create_all(conn)


def _v3_failover_state(conn: Connection) -> None:
    md = sa.MetaData()
    sa.Table(
        "producer_heartbeats",
        md,
        sa.Column("stream", sa.String(63), primary_key=True),
        sa.Column("producer_id", sa.String(128), primary_key=True),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
    )
    sa.Table(
        "segment_drains",
        md,
        sa.Column("stream", sa.String(63), primary_key=True),
        sa.Column("cluster", sa.String(63), primary_key=True),
        sa.Column("topic", sa.String(249), primary_key=True),
        sa.Column("group_name", sa.String(255), primary_key=True),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False),
    )
    sa.Table(
        "cluster_health",
        md,
        sa.Column("cluster", sa.String(63), primary_key=True),
        sa.Column("health", sa.String(16), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_error", sa.String(1000), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("replica", sa.String(128), nullable=False),
    )
    md.create_all(conn)


def _v4_broker_and_topic_tags(conn: Connection) -> None:
    md = sa.MetaData()
    sa.Table(
        "broker_tags",
        md,
        sa.Column("cluster", sa.String(63), primary_key=True),
        sa.Column("broker_id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("tags", sa.JSON, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    sa.Table(
        "topic_tags",
        md,
        sa.Column("cluster", sa.String(63), primary_key=True),
        sa.Column("topic", sa.String(249), primary_key=True),
        sa.Column("tags", sa.JSON, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    md.create_all(conn)


def _v5_deleted_stream_epochs(conn: Connection) -> None:
    md = sa.MetaData()
    sa.Table(
        "deleted_stream_epochs",
        md,
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("epoch", sa.BigInteger, nullable=False),
    )
    md.create_all(conn)


def _v6_leader(conn: Connection) -> None:
    md = sa.MetaData()
    sa.Table(
        "control_plane_leader",
        md,
        sa.Column("slot", sa.String(16), primary_key=True),
        sa.Column("replica", sa.String(128), nullable=False),
        sa.Column("url", sa.String(1024), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    md.create_all(conn)


def _v7_stream_readers(conn: Connection) -> None:
    md = sa.MetaData()
    sa.Table(
        "stream_readers",
        md,
        sa.Column("stream", sa.String(63), primary_key=True),
        sa.Column("group_name", sa.String(255), primary_key=True),
        sa.Column("lanes", sa.String(1000), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
    )
    md.create_all(conn)


def _v8_retirements(conn: Connection) -> None:
    md = sa.MetaData()
    sa.Table(
        "segment_retirements",
        md,
        sa.Column("stream", sa.String(63), primary_key=True),
        sa.Column("cluster", sa.String(63), primary_key=True),
        sa.Column("topic", sa.String(249), primary_key=True),
        sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reopened_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("fenced_at", sa.DateTime(timezone=True), nullable=True),
    )
    md.create_all(conn)
    # Segments retired before this version are watched from now on, then fenced.
    retirements = md.tables["segment_retirements"]
    segments = sa.table("segments", sa.column("stream"), sa.column("cluster"),
                        sa.column("topic"), sa.column("state"))  # fmt: skip
    now = sa.literal(datetime.now(UTC), sa.DateTime(timezone=True))
    conn.execute(
        retirements.insert().from_select(
            ["stream", "cluster", "topic", "retired_at"],
            sa.select(segments.c.stream, segments.c.cluster, segments.c.topic, now).where(
                segments.c.state == "retired"
            ),
        )
    )


def _v9_kafka_cluster_ids(conn: Connection) -> None:
    # Which Kafka cluster each registered name is (its cluster id): null until known.
    # Clusters registered before this version get theirs the first time they answer.
    conn.execute(sa.text("ALTER TABLE clusters ADD COLUMN kafka_cluster_id VARCHAR(255)"))


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "clusters, streams and segments", _v1_registry_and_routing),
    Migration(2, "audit log of routing and registry changes", _v2_audit_log),
    Migration(3, "producer heartbeats, drained reports, cluster health", _v3_failover_state),
    Migration(4, "broker and topic tags", _v4_broker_and_topic_tags),
    Migration(5, "last epoch of deleted streams", _v5_deleted_stream_epochs),
    Migration(6, "the leader's advertised URL", _v6_leader),
    Migration(7, "the lanes each group reads", _v7_stream_readers),
    Migration(8, "retired segments: watched, reopened, fenced", _v8_retirements),
    Migration(9, "the Kafka cluster id of each registered cluster", _v9_kafka_cluster_ids),
)

LATEST_VERSION = MIGRATIONS[-1].version


# A fixed key (any int64, not the leader lock's): "streamplane control-plane migrate".
MIGRATION_LOCK_KEY = 0x5354_524D_4D49_0001


def _serialize(conn: Connection) -> None:
    """On PostgreSQL, wait for the migration lock (held until this transaction ends), so
    replicas starting together on an empty database migrate one after the other: two
    concurrent ``CREATE TABLE`` of the same name fail there (``relation already exists``,
    or a duplicate key in ``pg_type``) instead of one waiting for the other. SQLite
    serialises writers itself (and has one replica per file)."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})


def _version(conn: Connection) -> int:
    if not sa.inspect(conn).has_table(schema_version_table.name):
        return 0
    version = conn.execute(sa.select(sa.func.max(schema_version_table.c.version))).scalar()
    return int(version or 0)


def current_version(engine: Engine) -> int:
    """The highest applied migration, 0 for an empty database."""
    with engine.connect() as conn:
        return _version(conn)


def migrate(
    engine: Engine,
    target: int | None = None,
    migrations: tuple[Migration, ...] = MIGRATIONS,
) -> list[int]:
    """Bring the database up to ``target`` (default: the latest). Returns what was applied.

    Each migration runs in its own transaction with its version row. On PostgreSQL every
    one of these transactions first takes the migration lock and reads the version again,
    so concurrent callers apply each migration exactly once."""
    known = migrations[-1].version if migrations else 0
    target = known if target is None else target
    with engine.begin() as conn:
        _serialize(conn)
        schema_version_table.create(conn, checkfirst=True)
        version = _version(conn)
    if version > known:
        raise ConfigError(
            f"the control-plane database is at schema version {version}, newer than this "
            f"streamplane knows ({known}): upgrade streamplane"
        )
    applied: list[int] = []
    for m in migrations:
        if m.version <= version or m.version > target:
            continue
        try:
            with engine.begin() as conn:
                _serialize(conn)
                if _applied(conn, m.version):
                    continue  # another replica applied it meanwhile
                # The version row first: a replica migrating concurrently without the
                # lock (SQLite) fails here, not halfway through the DDL.
                conn.execute(
                    schema_version_table.insert().values(
                        version=m.version, description=m.description, applied_at=datetime.now(UTC)
                    )
                )
                m.upgrade(conn)
        except sa.exc.IntegrityError:
            continue  # another replica applied it first
        applied.append(m.version)
    return applied


def _applied(conn: Connection, version: int) -> bool:
    row = conn.execute(
        sa.select(schema_version_table.c.version).where(schema_version_table.c.version == version)
    ).first()
    return row is not None
