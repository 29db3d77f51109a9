"""The store on a real PostgreSQL: concurrent migrations of an empty database, UTC
timestamps whatever the session time zone, byte-order lists whatever the collation, and
an outage answered 503 (then recovery)."""

from __future__ import annotations

import logging
import multiprocessing
import threading
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from streamplane.controlplane.app import ControlPlaneSettings, create_app
from streamplane.controlplane.failover_runtime import FailoverSettings
from streamplane.controlplane.failover_store import FailoverStore
from streamplane.controlplane.migrations import LATEST_VERSION, current_version, migrate
from streamplane.controlplane.service import ControlPlaneService
from streamplane.controlplane.store import AuditEntry, ClusterRecord, Store, StreamRecord, utcnow
from streamplane.core.routing import new_routing_table
from streamplane.local.control_plane_process import ControlPlaneProcess

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


def _admin(url: str) -> tuple[str, str]:
    parsed = sa.engine.make_url(url)
    conninfo = f"host={parsed.host} port={parsed.port} user={parsed.username} dbname=postgres"
    return conninfo, str(parsed.database)


@pytest.fixture
def fresh_dbs(postgres_server: str) -> Iterator[list[str]]:
    """Several fresh, empty databases."""
    conninfo, _ = _admin(postgres_server)
    names = [f"m_{uuid.uuid4().hex[:12]}" for _ in range(6)]
    admin = sa.engine.make_url(postgres_server)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for name in names:
            conn.execute(f'CREATE DATABASE "{name}"')
    yield [admin.set(database=n).render_as_string(hide_password=False) for n in names]
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for name in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _migrate_at_barrier(url: str, barrier: threading.Barrier, errors: list[BaseException]) -> None:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        barrier.wait()
        migrate(engine)
    except BaseException as exc:
        errors.append(exc)
    finally:
        engine.dispose()


def test_replicas_migrating_an_empty_database_at_once(fresh_dbs: list[str]) -> None:
    for url in fresh_dbs:
        errors: list[BaseException] = []
        barrier = threading.Barrier(8)
        threads = [
            threading.Thread(target=_migrate_at_barrier, args=(url, barrier, errors))
            for _ in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, [str(e).splitlines()[0] for e in errors]
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        try:
            assert current_version(engine) == LATEST_VERSION
            with engine.connect() as conn:
                rows = conn.execute(sa.text("SELECT version FROM schema_version")).scalars()
                assert sorted(rows) == list(range(1, LATEST_VERSION + 1))
        finally:
            engine.dispose()


def _open_store(url: str, start: object, results: object) -> None:
    start.wait()  # type: ignore[attr-defined]
    try:
        Store(url).close()
        results.put("ok")  # type: ignore[attr-defined]
    except BaseException as exc:
        results.put(f"{type(exc).__name__}: {str(exc).splitlines()[0]}")  # type: ignore[attr-defined]


def test_processes_opening_an_empty_database_at_once(fresh_dbs: list[str]) -> None:
    ctx = multiprocessing.get_context("spawn")
    url = fresh_dbs[0]
    start = ctx.Event()
    results = ctx.Queue()
    procs = [ctx.Process(target=_open_store, args=(url, start, results)) for _ in range(3)]
    for p in procs:
        p.start()
    start.set()
    outcomes = [results.get(timeout=300) for _ in procs]
    for p in procs:
        p.join()
    assert outcomes == ["ok"] * 3


def test_timestamps_are_utc_whatever_the_session_time_zone(pg_url: str) -> None:
    conninfo, name = _admin(pg_url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE \"{name}\" SET timezone = 'America/New_York'")
    store = Store(pg_url)
    try:
        now = utcnow()
        store.add_cluster(
            ClusterRecord("local-a", "127.0.0.1:9092", {}, now, now),
            AuditEntry("t", "cluster.register", None),
        )
        table = new_routing_table("orders", ["realtime"], "local-a", 1)
        store.add_stream(
            StreamRecord("orders", table.lanes, 1, 1, 1, {}, 1024, 1, now),
            table,
            AuditEntry("t", "stream.create", "orders"),
        )
        fstore = FailoverStore(store.engine)
        fstore.save_health("local-a", "down", now, None, "r1")
        cluster = store.get_cluster("local-a")
        stamps = {
            "cluster.created_at": cluster.created_at,
            "cluster.updated_at": cluster.updated_at,
            "list_clusters": store.list_clusters()[0].created_at,
            "stream.created_at": store.get_stream("orders").created_at,
            "list_streams": store.list_streams()[0].created_at,
            "audit.time": store.audit()[0].time,
            "health.since": fstore.health()["local-a"].since,
        }
        for what, stamp in stamps.items():
            offset = stamp.utcoffset()
            assert offset is not None, what
            assert offset.total_seconds() == 0, (what, stamp.isoformat())
            assert stamp.isoformat().endswith("+00:00"), (what, stamp.isoformat())
        assert cluster.created_at == now
        # A connection of the store's own reads in UTC too (raw SQL included).
        with store.engine.connect() as conn:
            assert conn.execute(sa.text("SHOW timezone")).scalar() == "UTC"
    finally:
        store.close()


# Names a PostgreSQL cluster with a linguistic default collation sorts differently from
# SQLite (bytes): the list must come back in code point order either way.
NAMES = ["local-a", "a_b", "a-b", "a.b", "alpha", "zeta", "b1", "a0", "LOCAL-A", "Zed"]


def _collated_db(postgres_server: str) -> Iterator[str]:
    conninfo, _ = _admin(postgres_server)
    name = f"c_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        wanted = ("en_US.utf8", "en-US-x-icu", "und-x-icu")
        query = "SELECT collname FROM pg_collation WHERE collname = ANY(%s)"
        locales = {r[0] for r in conn.execute(query, (list(wanted),))}
        if "en-US-x-icu" in locales or "und-x-icu" in locales:
            icu = "en-US" if "en-US-x-icu" in locales else "und"
            conn.execute(
                f'CREATE DATABASE "{name}" TEMPLATE template0 ENCODING UTF8 '
                f"LOCALE_PROVIDER icu ICU_LOCALE '{icu}' LOCALE 'C'"
            )
        elif "en_US.utf8" in locales:
            conn.execute(
                f'CREATE DATABASE "{name}" TEMPLATE template0 ENCODING UTF8 '
                "LC_COLLATE 'en_US.utf8' LC_CTYPE 'en_US.utf8'"
            )
        else:
            pytest.skip("no linguistic collation (ICU or en_US.utf8) in this PostgreSQL")
    admin = sa.engine.make_url(postgres_server)
    yield admin.set(database=name).render_as_string(hide_password=False)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def collated_url(postgres_server: str) -> Iterator[str]:
    yield from _collated_db(postgres_server)


def test_lists_are_in_code_point_order_whatever_the_collation(collated_url: str) -> None:
    store = Store(collated_url)
    try:
        with store.engine.connect() as conn:
            linguistic = list(
                conn.execute(
                    sa.text("SELECT n FROM unnest(CAST(:names AS text[])) AS n ORDER BY n"),
                    {"names": NAMES},
                ).scalars()
            )
        assert linguistic != sorted(NAMES)  # the database's own order differs
        now = utcnow()
        for name in NAMES:
            store.add_cluster(
                ClusterRecord(name, "127.0.0.1:9092", {}, now, now),
                AuditEntry("t", "cluster.register", None),
            )
        streams = ["local-a", "a-b", "a0", "ab", "alpha", "a1-x", "zeta", "b-2", "b1"]
        for name in streams:
            table = new_routing_table(name, ["realtime"], "local-a", 1)
            store.add_stream(
                StreamRecord(name, table.lanes, 1, 1, 1, {}, 1024, 1, now),
                table,
                AuditEntry("t", "stream.create", name),
            )
        assert [c.name for c in store.list_clusters()] == sorted(NAMES)
        assert [s.name for s in store.list_streams()] == sorted(streams)
        from streamplane.controlplane.failover_store import FailoverStore
        from streamplane.core.routing import SegmentState

        assert FailoverStore(store.engine).streams_with(SegmentState.ACTIVE) == sorted(streams)
    finally:
        store.close()


def test_an_outage_is_a_503_then_recovers(pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    conninfo, name = _admin(pg_url)
    store = Store(pg_url)
    service = ControlPlaneService(store)
    settings = ControlPlaneSettings(
        db_url=pg_url,
        api_token="unit-test-token",
        lag_monitor=False,
        failover=FailoverSettings(health_enabled=False, sealing_enabled=False),
    )
    caplog.set_level(logging.INFO)
    try:
        with TestClient(create_app(settings, service)) as http:
            assert http.get("/v1/clusters").status_code == 200
            with psycopg.connect(conninfo, autocommit=True) as conn:
                conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid()",
                    (name,),
                )
            for path in ["/healthz", "/v1/clusters", "/v1/streams", "/healthz"] * 3:
                resp = http.get(path)
                assert resp.status_code == 503, (path, resp.text)
                assert resp.json()["detail"].startswith("database unavailable: ")
                assert "Retry-After" in resp.headers
            with psycopg.connect(conninfo, autocommit=True) as conn:
                conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
            assert http.get("/healthz").status_code == 200
            assert http.get("/v1/clusters").status_code == 200
    finally:
        service.close()
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 2, lines
    assert "unavailable" in lines[0] and "answers again" in lines[1]
    assert not [r for r in caplog.records if r.exc_info]


def test_a_replica_that_becomes_the_leader_says_so(tmp_path: Path, pg_url: str) -> None:
    cp = ControlPlaneProcess(
        tmp_path / "cp", db_url=pg_url, log_level="info", extra_args=("--no-health",)
    )
    try:
        cp.start()
        log = cp.log_file.read_text()
    finally:
        cp.stop()
    assert "this replica is the leader" in log, log
