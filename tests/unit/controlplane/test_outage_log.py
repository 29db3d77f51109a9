"""A database outage is logged once when it starts and once when it ends, by the store,
not by each background loop that meets it on every round: in a 20 s PostgreSQL stop an
exploratory run's replica logged 31 multi-line ``routing watch poll failed: ... [SQL:
...]`` warnings and 10 ``lag monitor: cannot read the registry`` warnings. Their other
failures are logged once per run of failures, in one line, without the SQL text."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from streamplane.controlplane.app import ControlPlaneSettings, create_app
from streamplane.controlplane.failover_runtime import FailoverSettings
from streamplane.controlplane.lag_api import StoreTopology
from streamplane.controlplane.service import ControlPlaneService, StreamSpec
from streamplane.controlplane.watch import WatchHub
from streamplane.core.routing import RoutingTable
from streamplane.lag.monitor import LagMonitor
from tests.unit.controlplane.conftest import TOKEN, StubKafka, make_service
from tests.unit.controlplane.test_database_outage import Outage


@pytest.fixture
def db_dir(tmp_path: Path) -> Path:
    return tmp_path / "db"


@pytest.fixture
def svc(db_dir: Path, kafka: StubKafka) -> Iterator[ControlPlaneService]:
    service = make_service(f"sqlite:///{db_dir / 'cp.db'}", kafka)
    service.register_cluster("local-a", "127.0.0.1:19092", {"env": "local"})
    service.create_stream(StreamSpec(name="orders", cluster="local-a"))
    yield service
    service.close()


@pytest.fixture
def outage(svc: ControlPlaneService, db_dir: Path) -> Outage:
    return Outage(svc, db_dir)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_routing_watch_leaves_an_outage_to_the_stores_warning(
    svc: ControlPlaneService, outage: Outage, db_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = ControlPlaneSettings(
        db_url=f"sqlite:///{db_dir / 'cp.db'}",
        api_token=TOKEN,
        lag_monitor=False,
        watch_poll_interval=0.05,
        failover=FailoverSettings(health_enabled=False, sealing_enabled=False),
    )
    caplog.set_level(logging.INFO)
    with TestClient(create_app(settings, svc)) as http:
        epoch = http.get("/v1/streams/orders").json()["epoch"]
        answers: list[int] = []
        watch = threading.Thread(
            target=lambda: answers.append(
                http.get(
                    "/v1/streams/orders/routing", params={"after_epoch": epoch, "timeout": 2.0}
                ).status_code
            )
        )
        watch.start()
        time.sleep(0.3)  # the long poll waits; the poller reads the epochs every 0.05 s
        outage.start()
        try:
            time.sleep(1.0)  # ~20 polls fail
        finally:
            outage.end()
        watch.join(10)
        assert answers == [200]
    lines = _warnings(caplog)
    assert len(lines) == 2, lines
    assert "unavailable" in lines[0] and "answers again" in lines[1], lines


def test_a_watch_poll_that_fails_otherwise_is_logged_once_in_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(_: object) -> dict[str, int]:
        raise sa.exc.ProgrammingError(
            "SELECT streams.name\nFROM streams", {}, Exception("no such column\nstreams.x")
        )

    hub = WatchHub(broken, poll_interval=0.02)

    async def wait() -> None:
        await hub.wait("orders", 1, 0.5)

    asyncio.run(wait())
    hub.close()
    lines = _warnings(caplog)
    assert lines == ["routing watch poll failed: Exception: no such column streams.x"], lines


def test_the_lag_monitor_leaves_an_outage_to_the_stores_warning(
    svc: ControlPlaneService, outage: Outage, caplog: pytest.LogCaptureFixture
) -> None:
    monitor = LagMonitor(StoreTopology(svc.store))
    caplog.set_level(logging.INFO)
    outage.start()
    try:
        for _ in range(5):
            monitor.refresh()  # every few seconds in the monitor's own thread
    finally:
        outage.end()
    assert svc.store.list_clusters()  # the store answers again
    lines = _warnings(caplog)
    assert len(lines) == 2, lines
    assert "unavailable" in lines[0] and "answers again" in lines[1], lines


def test_a_registry_that_fails_otherwise_is_logged_once_in_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken:
        def clusters(self) -> dict[str, str]:
            raise RuntimeError("a bug\nover two lines")

        def routing_tables(self) -> list[RoutingTable]:
            return []

    monitor = LagMonitor(Broken())
    for _ in range(5):
        monitor.refresh()
    assert _warnings(caplog) == ["lag monitor: cannot read the registry: a bug over two lines"]
