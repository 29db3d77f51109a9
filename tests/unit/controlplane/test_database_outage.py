"""A database that does not answer: 503 ``database unavailable: ...`` with Retry-After,
one warning per outage (and one line when it answers again) instead of a traceback per
request; other unexpected errors: a JSON 500 and one traceback. The client shows the
server's detail."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from streamplane.client.control_plane import ControlPlaneClient
from streamplane.controlplane import store as store_module
from streamplane.controlplane.app import ControlPlaneSettings, create_app
from streamplane.controlplane.failover_runtime import FailoverSettings
from streamplane.controlplane.service import ControlPlaneService
from streamplane.exceptions import ControlPlaneError
from tests.unit.controlplane.conftest import AUTH, TOKEN, StubKafka, make_service


class Outage:
    """Takes the SQLite database away (its directory renamed: new connections fail with
    "unable to open database file") and brings it back."""

    def __init__(self, service: ControlPlaneService, db_dir: Path) -> None:
        self.service = service
        self.db_dir = db_dir
        self.away = db_dir.with_name(db_dir.name + "-away")

    def start(self) -> None:
        self.db_dir.rename(self.away)
        self.service.store.engine.dispose()  # the pooled connections still hold the file

    def end(self) -> None:
        self.away.rename(self.db_dir)


@pytest.fixture
def db_dir(tmp_path: Path) -> Path:
    return tmp_path / "db"


@pytest.fixture
def outage_service(db_dir: Path, kafka: StubKafka) -> Iterator[ControlPlaneService]:
    svc = make_service(f"sqlite:///{db_dir / 'cp.db'}", kafka)
    svc.register_cluster("local-a", "127.0.0.1:19092", {"env": "local"})
    yield svc
    svc.close()


@pytest.fixture
def outage(outage_service: ControlPlaneService, db_dir: Path) -> Outage:
    return Outage(outage_service, db_dir)


@pytest.fixture
def api(outage_service: ControlPlaneService, db_dir: Path) -> Iterator[TestClient]:
    settings = ControlPlaneSettings(
        db_url=f"sqlite:///{db_dir / 'cp.db'}",
        api_token=TOKEN,
        lag_monitor=False,
        failover=FailoverSettings(health_enabled=False, sealing_enabled=False),
    )
    with TestClient(create_app(settings, outage_service)) as client:
        yield client


def _outage_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_database_outage_is_a_503_with_one_warning(
    api: TestClient, outage: Outage, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    assert api.get("/v1/clusters").status_code == 200
    outage.start()
    try:
        requests = [
            ("GET", "/healthz"),
            ("GET", "/v1/clusters"),
            ("GET", "/v1/clusters/local-a"),
            ("GET", "/v1/streams"),
            ("GET", "/v1/streams/orders/routing"),
            ("GET", "/v1/audit"),
            ("POST", "/v1/clusters"),
        ] * 5
        for method, path in requests:
            body = {"name": "local-b", "bootstrap": "127.0.0.1:19093"}
            resp = api.request(method, path, headers=AUTH, json=body if method == "POST" else None)
            assert resp.status_code == 503, (method, path, resp.text)
            assert resp.headers["content-type"] == "application/json"
            detail = resp.json()["detail"]
            assert detail.startswith("database unavailable: "), detail
            assert "unable to open database file" in detail
            assert "\n" not in detail
            assert int(resp.headers["Retry-After"]) > 0
        during = _outage_records(caplog)
        assert len(during) == 1, [r.getMessage() for r in during]
        assert during[0].levelno == logging.WARNING
        assert "unavailable" in during[0].getMessage()
        assert during[0].exc_info is None  # one line, no traceback
    finally:
        outage.end()
    assert api.get("/healthz").status_code == 200
    assert api.get("/v1/clusters").status_code == 200
    records = _outage_records(caplog)
    assert len(records) == 2, [r.getMessage() for r in records]
    assert "answers again" in records[1].getMessage()
    assert all(r.exc_info is None for r in caplog.records)
    # A second outage is logged again.
    outage.start()
    try:
        assert api.get("/v1/streams").status_code == 503
        assert api.get("/v1/streams").status_code == 503
    finally:
        outage.end()
    assert api.get("/v1/streams").status_code == 200
    assert len(_outage_records(caplog)) == 4


def test_the_client_shows_the_servers_detail(api: TestClient, outage: Outage) -> None:
    with ControlPlaneClient("http://testserver") as cp:
        cp._http.close()
        cp._http = api  # the app itself answers
        outage.start()
        try:
            with pytest.raises(ControlPlaneError) as err:
                cp.list_clusters()
        finally:
            outage.end()
    message = str(err.value)
    assert err.value.status == 503
    assert message.startswith("control plane at http://testserver: database unavailable: ")
    assert "no streamplane control plane answers" not in message


def test_an_unexpected_error_is_a_json_500(
    outage_service: ControlPlaneService,
    api: TestClient,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken() -> None:
        raise RuntimeError("a bug\nover two lines")

    def bad_sql() -> None:
        with outage_service.store.engine.connect() as conn:
            conn.execute(sa.text("SELECT * FROM no_such_table"))

    monkeypatch.setattr(outage_service, "list_streams", broken)
    monkeypatch.setattr(outage_service, "audit", lambda *_: bad_sql())
    with TestClient(api.app, raise_server_exceptions=False) as client:
        resp = client.get("/v1/streams")
        assert resp.status_code == 500
        assert resp.headers["content-type"] == "application/json"
        assert resp.json()["detail"].startswith("internal error (RuntimeError)")
        caplog.clear()
        resp = client.get("/v1/audit")  # a DBAPI error that is no outage
        assert resp.status_code == 500, resp.text
        assert resp.json()["detail"].startswith("internal error (OperationalError)")
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1


@pytest.mark.parametrize(
    ("exc", "unavailable"),
    [
        (
            sa.exc.OperationalError("SELECT 1", {}, sqlite3.OperationalError("database is locked")),
            True,
        ),
        (sa.exc.InterfaceError("SELECT 1", {}, sqlite3.InterfaceError("closed")), True),
        (sa.exc.OperationalError("SELECT", {}, sqlite3.OperationalError("no such table")), False),
        (sa.exc.IntegrityError("INSERT", {}, sqlite3.IntegrityError("UNIQUE failed")), False),
        (sa.exc.ProgrammingError("SELECT", {}, sqlite3.ProgrammingError("syntax")), False),
        (
            sa.exc.DBAPIError("SELECT 1", {}, Exception("gone"), connection_invalidated=True),
            True,
        ),
        (sa.exc.TimeoutError("QueuePool limit of size 5 overflow 10 reached"), True),
        (sqlite3.OperationalError("database is locked"), True),
        (RuntimeError("no"), False),
    ],
)
def test_which_errors_mean_the_database_is_unavailable(
    exc: BaseException, unavailable: bool
) -> None:
    reason = store_module.unavailable_reason(exc)
    assert (reason is not None) is unavailable
    if reason is not None:
        assert "\n" not in reason and reason


def test_psycopg_connection_errors_are_unavailable() -> None:
    psycopg = pytest.importorskip("psycopg")
    err = psycopg.OperationalError("connection failed:\n\tConnection refused")
    assert store_module.unavailable_reason(err) == "connection failed: Connection refused"
    wrapped = sa.exc.OperationalError("SELECT 1", {}, err)
    assert store_module.unavailable_reason(wrapped) == "connection failed: Connection refused"
