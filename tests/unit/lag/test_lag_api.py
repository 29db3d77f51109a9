"""The lag API and /metrics with the monitor off, and over a monitor with fixed data."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamplane.controlplane.app import ControlPlaneSettings, create_app
from streamplane.controlplane.lag_api import default_snapshot_dir, lag_plane
from streamplane.lag.monitor import LagMonitor, static_topology
from streamplane.lag.reader import CommitEvent, CommitState

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

NOW_S = 1_700_000_100.0


@pytest.fixture
def http(tmp_path: Path) -> Iterator[TestClient]:
    settings = ControlPlaneSettings(
        db_url=f"sqlite:///{tmp_path / 'cp.db'}", api_token="t" * 16, lag_monitor=False
    )
    with TestClient(create_app(settings)) as client:
        yield client


def test_with_the_monitor_off_lists_are_empty(http: TestClient) -> None:
    assert http.get("/v1/lag").json() == {
        "now_ms": 0,
        "monitor": False,
        "groups": [],
        "partitions": [],
    }
    assert http.get("/v1/groups").json() == []
    assert http.get("/v1/groups/g/lag/history").status_code == 404
    assert http.get("/v1/lag?stream=Bad_Name").status_code == 400
    assert http.get("/metrics").headers["content-type"].startswith("text/plain")


def test_lag_from_a_monitor(http: TestClient) -> None:
    monitor = LagMonitor(static_topology({}), clock=lambda: NOW_S)
    from streamplane.lag.monitor import ClusterWorker, MonitorSettings

    worker = ClusterWorker(
        "local-a", "h:1", MonitorSettings(), lambda: NOW_S, lambda c, t: ("orders", "realtime")
    )
    worker._apply(
        [
            CommitEvent(
                ("g", "sp.orders.realtime.e1", 0),
                CommitState(5, 1_700_000_099_000, 1_700_000_090_000, True),
            )
        ]
    )
    worker.model.observe_end_offset("sp.orders.realtime.e1", 0, 9, 1_700_000_099_500)
    monitor._workers["local-a"] = worker
    lag_plane(http.app).monitor = monitor

    doc = http.get("/v1/lag", params={"stream": "orders"}).json()
    (part,) = doc["partitions"]
    assert part["time_lag_s"] == 10.0 and part["offset_lag"] == 4
    assert (part["stream"], part["lane"], part["cluster"]) == ("orders", "realtime", "local-a")
    assert doc["groups"][0]["max_time_lag_s"] == 10.0
    assert http.get("/v1/lag", params={"stream": "other"}).status_code == 404  # unknown
    assert [g["group"] for g in http.get("/v1/groups").json()] == ["g"]
    history = http.get("/v1/groups/g/lag/history").json()
    assert history["series"] and history["partitions"][0]["stream"] == "orders"
    text = http.get("/metrics").text
    assert (
        'streamplane_group_time_lag_seconds{cluster="local-a",group="g",lane="realtime",'
        'partition="0",stream="orders",topic="sp.orders.realtime.e1"} 10.0'
    ) in text
    assert 'streamplane_group_max_time_lag_seconds{group="g"} 10.0' in text
    lag_plane(http.app).monitor = None


def test_snapshot_dir_defaults_next_to_a_sqlite_store() -> None:
    assert default_snapshot_dir("sqlite:////var/sp/cp.db") == Path("/var/sp/lag")
    assert default_snapshot_dir("postgresql+psycopg://h/db") == Path(".streamplane/lag")


def test_replicas_sharing_a_database_default_to_snapshot_dirs_of_their_own() -> None:
    """Three replicas over one PostgreSQL started from one directory wrote the same
    ``.streamplane/lag/<cluster>.json`` files."""
    db = "postgresql+psycopg://u@h:5432/db"
    dirs = {default_snapshot_dir(db, f"http://127.0.0.1:2110{n}") for n in range(3)}
    assert dirs == {Path(f".streamplane/lag/127.0.0.1-2110{n}") for n in range(3)}
    assert default_snapshot_dir(db, "http://[::1]:8470") == Path(".streamplane/lag/__1-8470")
    # A SQLite store has one replica: lag/ beside it, whatever the URL.
    assert default_snapshot_dir("sqlite:////var/sp/cp.db", "http://h:1") == Path("/var/sp/lag")


def test_dashboard_files_are_served(http: TestClient) -> None:
    page = http.get("/ui")
    assert page.status_code == 200 and "/ui/dashboard.js" in page.text
    assert http.get("/ui/dashboard.js").headers["content-type"].startswith("text/javascript")
    assert http.get("/ui/dashboard.css").status_code == 200
    assert http.get("/ui/secret.py").status_code == 404


class _StubEnds:
    """LogEnds answering for the partitions in ``ends`` only (the others' cluster is
    down)."""

    def __init__(self, ends: dict[tuple[str, int], int]) -> None:
        self.ends = ends
        self.failures: dict[tuple[str, int], str] = {}

    def fetch_pass(
        self, ends: object, starts: object = (), timeout: float = 2.0
    ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
        return {tp: end for tp, end in self.ends.items() if tp in ends}, {}  # type: ignore[operator]


class _NoLookup:
    def lookup(self, wanted: object, timeout: float = 1.0) -> dict[tuple[str, int, int], int]:
        return {}


def test_an_unanswered_end_offset_poll_is_reported_and_keeps_dlq_counts(http: TestClient) -> None:
    """While a cluster does not answer: /v1/lag/readers names it (its reader alone goes
    quiet, not wrong), and /v1/lag/dlq keeps its dlq segments' last known counts."""
    from streamplane.lag.monitor import ClusterWorker, MonitorSettings

    dlq_tp = ("sp.orders.dlq.e1", 0)
    worker = ClusterWorker(
        "local-a",
        "h:1",
        MonitorSettings(),
        lambda: NOW_S,
        lambda c, t: ("orders", "dlq" if ".dlq." in t else "realtime"),
        dlq_partitions=lambda cluster: [dlq_tp],
    )
    monitor = LagMonitor(static_topology({}), clock=lambda: NOW_S)
    monitor._workers["local-a"] = worker
    lag_plane(http.app).monitor = monitor
    try:
        worker._poll_once(_StubEnds({dlq_tp: 45}), _NoLookup())  # type: ignore[arg-type]
        (reader,) = http.get("/v1/lag/readers").json()
        assert reader["last_error"] is None
        assert [d["records"] for d in http.get("/v1/lag/dlq").json()] == [45]

        worker._poll_once(_StubEnds({}), _NoLookup())  # type: ignore[arg-type]
        (reader,) = http.get("/v1/lag/readers").json()
        assert reader["last_error"] == "end offsets of 1 of 1 partitions unanswered"
        assert [d["records"] for d in http.get("/v1/lag/dlq").json()] == [45]  # not dropped
    finally:
        lag_plane(http.app).monitor = None


def test_a_group_with_unknown_partitions_on_a_down_cluster_is_not_caught_up(
    http: TestClient,
) -> None:
    """A streamplane group started reading while local-b was down: its expected
    partitions there have known ends (from the snapshot) but no log start. /v1/lag,
    /v1/groups and /metrics used to say offset lag 0, time lag 0.0 s, unknown_time_lag 0,
    OK: they count those partitions as unknown now, and the group is WARN."""
    from streamplane.lag.monitor import ClusterWorker, MonitorSettings

    route = ("orders", "realtime")
    a = ClusterWorker("local-a", "h:1", MonitorSettings(), lambda: NOW_S, lambda c, t: route)
    a._apply(
        [
            CommitEvent(
                ("g", "sp.orders.realtime.e1", 0),
                CommitState(9, 1_700_000_099_000, 1_700_000_090_000, True),
            )
        ]
    )
    a.model.observe_end_offset("sp.orders.realtime.e1", 0, 9, 1_700_000_099_500)  # caught up
    b = ClusterWorker("local-b", "h:2", MonitorSettings(), lambda: NOW_S, lambda c, t: route)
    for p, end in enumerate((510, 510, 2038, 2042)):
        b.model.restore_log_end("sp.orders.realtime.e2", p, end, 1_700_000_000_000)
    b.set_expected({("g", "sp.orders.realtime.e2", p): route for p in range(4)})
    monitor = LagMonitor(static_topology({}), clock=lambda: NOW_S)
    monitor._workers.update({"local-a": a, "local-b": b})
    lag_plane(http.app).monitor = monitor
    try:
        doc = http.get("/v1/lag", params={"group": "g"}).json()
        assert [p["offset_lag"] for p in doc["partitions"]] == [0, None, None, None, None]
        (group,) = doc["groups"]
        assert (group["offset_lag"], group["unknown_offset_lag"], group["unknown_time_lag"]) == (
            0,
            4,
            4,
        )
        assert group["status"] == "WARN"
        (summary,) = http.get("/v1/groups").json()
        assert summary == group
        text = http.get("/metrics").text
        assert 'streamplane_group_unknown_offset_lag_partitions{group="g"} 4.0' in text
        assert 'streamplane_group_unknown_time_lag_partitions{group="g"} 4.0' in text
        assert 'streamplane_group_worst_status{group="g"} 1.0' in text
    finally:
        lag_plane(http.app).monitor = None
