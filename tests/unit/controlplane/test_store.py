"""The SQL store: migrations (an old database is upgraded), routing round trip, epoch CAS."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from streamplane.controlplane.failover_store import FailoverStore
from streamplane.controlplane.migrations import (
    LATEST_VERSION,
    MIGRATIONS,
    Migration,
    current_version,
    migrate,
)
from streamplane.controlplane.store import AuditEntry, Store, StreamRecord, display_url
from streamplane.core.routing import SegmentState, move_lanes, new_routing_table, transition
from streamplane.exceptions import ConfigError, Conflict, NotFound


def _tables(engine: sa.Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


def test_empty_database_gets_every_migration(db_url: str) -> None:
    store = Store(db_url)
    assert store.schema_version() == LATEST_VERSION == len(MIGRATIONS)
    assert _tables(store.engine) >= {
        "schema_version",
        "clusters",
        "streams",
        "segments",
        "audit_log",
    }
    store.close()


def test_old_version_database_is_upgraded_keeping_its_data(db_url: str) -> None:
    engine = sa.create_engine(db_url)
    assert migrate(engine, target=1) == [1]
    assert current_version(engine) == 1
    assert "audit_log" not in _tables(engine)
    now = datetime.now(UTC)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO clusters (name, bootstrap, tags, created_at, updated_at) "
                "VALUES ('old', 'h:1', '{\"env\": \"v1\"}', :now, :now)"
            ),
            {"now": now},
        )
    engine.dispose()

    store = Store(db_url)  # opening the store migrates
    assert store.schema_version() == LATEST_VERSION
    assert "audit_log" in _tables(store.engine)
    old = store.get_cluster("old")
    assert (old.bootstrap, dict(old.tags)) == ("h:1", {"env": "v1"})
    with store.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT version FROM schema_version ORDER BY version")).all()
    assert [r[0] for r in rows] == [m.version for m in MIGRATIONS]
    store.close()


def test_segments_retired_before_version_8_are_watched_then_fenced(db_url: str) -> None:
    """Version 8 keeps retirements in the store (the watch was in the leader's memory):
    the segments already retired are watched from the upgrade on."""
    engine = sa.create_engine(db_url)
    migrate(engine, target=7)
    table = move_lanes(new_routing_table("old", ["realtime"], "a", 1), ["realtime"], "b")
    e1 = table.segments[0].topic
    for state in (SegmentState.SEALED, SegmentState.RETIRED):
        table = transition(table, e1, "a", state, {0: 5})
    with engine.begin() as conn:
        now = datetime.now(UTC)
        conn.execute(
            sa.text(
                "INSERT INTO streams (name, lanes, partitions, dlq_partitions, "
                "replication_factor, config, max_record_bytes, epoch, created_at) VALUES "
                "('old', '[\"realtime\"]', 1, 1, 1, '{}', 1048576, :epoch, :now)"
            ),
            {"epoch": table.epoch, "now": now},
        )
        for i, seg in enumerate(table.segments):
            conn.execute(
                sa.text(
                    "INSERT INTO segments (stream, cluster, topic, position, lane, partitions,"
                    " state, epoch, sealed_end_offsets) VALUES ('old', :cluster, :topic, :pos,"
                    " :lane, 1, :state, :epoch, '{}')"
                ),
                {"cluster": seg.cluster, "topic": seg.topic, "pos": i, "lane": seg.lane,
                 "state": seg.state.value, "epoch": seg.epoch},
            )  # fmt: skip
    assert migrate(engine, target=8) == [8]
    watched = FailoverStore(engine).watched_retirements(60.0)
    assert [(r.stream, r.cluster, r.topic, r.fenced_at) for r in watched] == [
        ("old", "a", e1, None)
    ]
    engine.dispose()


def test_migrating_twice_does_nothing(db_url: str) -> None:
    engine = sa.create_engine(db_url)
    assert migrate(engine) == [m.version for m in MIGRATIONS]
    assert migrate(engine) == []
    engine.dispose()


def test_newer_database_is_refused(db_url: str) -> None:
    engine = sa.create_engine(db_url)
    future = (*MIGRATIONS, Migration(LATEST_VERSION + 1, "from the future", lambda conn: None))
    migrate(engine, migrations=future)
    with pytest.raises(ConfigError, match="newer than this streamplane"):
        migrate(engine)
    engine.dispose()


def test_bad_urls_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="invalid database URL"):
        Store("not a url")
    with pytest.raises(ConfigError, match="driver not installed"):
        Store("nosuchdb://x/y")


def test_in_memory_sqlite_is_refused() -> None:
    """Each pooled connection would see an empty database: every request was a 500."""
    for url in ("sqlite://", "sqlite:///:memory:", "sqlite:///file:cp?mode=memory&uri=true"):
        with pytest.raises(ConfigError, match="in-memory SQLite database is not shared"):
            Store(url)


def test_a_file_that_is_not_a_database_is_one_line(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_text("junk " * 100)
    with pytest.raises(ConfigError, match=r"cannot open the database .*not a database") as err:
        Store(f"sqlite:///{junk}")
    assert "\n" not in str(err.value)


def test_a_password_is_never_shown() -> None:
    url = "postgresql+psycopg://user:s3cret@127.0.0.1:1/db?connect_timeout=2"
    assert "s3cret" not in display_url(url) and "user:***@" in display_url(url)
    with pytest.raises(ConfigError) as err:
        Store(url)
    assert "s3cret" not in str(err.value)
    assert "\n" not in str(err.value)


def _stream(name: str = "orders") -> StreamRecord:
    return StreamRecord(
        name=name,
        lanes=("realtime", "bulk"),
        partitions=3,
        dlq_partitions=1,
        replication_factor=1,
        config={"retention.ms": "1000"},
        max_record_bytes=1024,
        epoch=1,
        created_at=datetime.now(UTC),
    )


def test_routing_round_trip_and_compare_and_set(db_url: str) -> None:
    store = Store(db_url)
    table = new_routing_table("orders", ["realtime", "bulk"], "local-a", 3)
    store.add_stream(_stream(), table, AuditEntry("t", "stream.create", "orders"))
    assert store.routing("orders") == table
    with pytest.raises(Conflict):
        store.add_stream(_stream(), table, AuditEntry("t", "stream.create", "orders"))

    moved = move_lanes(table, ["realtime"], "local-b", 6)
    sealed = transition(moved, "sp.orders.realtime.e1", "local-a", SegmentState.SEALED, {0: 5})
    store.save_routing(moved, 1, AuditEntry("t", "stream.failover", "orders"))
    with pytest.raises(Conflict, match="moved on to epoch 2"):
        store.save_routing(move_lanes(table, ["bulk"], "local-b"), 1, AuditEntry("t", "x", None))
    store.save_routing(sealed, 2, AuditEntry("t", "segment.transition", "orders"))
    assert store.routing("orders") == sealed
    assert store.get_stream("orders").epoch == 3
    assert store.stream_epochs(["orders", "gone"]) == {"orders": 3}
    assert store.active_clusters() == {"orders": ["local-a", "local-b"]}
    assert [e.action for e in store.audit("orders")] == [
        "segment.transition",
        "stream.failover",
        "stream.create",
    ]

    store.delete_stream("orders", AuditEntry("t", "stream.delete", "orders"))
    with pytest.raises(NotFound):
        store.routing("orders")
    with pytest.raises(NotFound):
        store.save_routing(move_lanes(sealed, ["bulk"], "local-b"), 3, AuditEntry("t", "x", None))
    store.close()
