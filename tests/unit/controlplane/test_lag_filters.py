"""The lag API's filters and group paths, and `streamplane lag`'s errors, over the app.

- a group id may hold any character, "/" included: its history is at
  ``/v1/groups/<id, percent-encoded>/lag/history`` (it used to be 404 for ``team/a``),
  and that route swallows no other ``/v1/groups/...`` route;
- ``?stream=`` naming no stream is 404 (it used to be 200 with empty lists), an empty
  filter value is 422 (it used to filter on the empty string);
- ``streamplane lag -g <untracked>`` is one ``error:`` line and exit code 1 (it used to
  print "no tracked partitions" and exit 0).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import pytest
from fastapi.testclient import TestClient

from streamplane.cli.main import main
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.controlplane.lag_api import lag_plane
from streamplane.lag.monitor import ClusterWorker, LagMonitor, MonitorSettings, static_topology
from streamplane.lag.reader import CommitEvent, CommitState
from tests.unit.controlplane.conftest import create_stream

NOW_S = 1_700_000_100.0
TOPIC = "sp.orders.realtime.e1"
GROUPS = ("indexer", "team/a", "a/lag/history", "100%", " spaced ")


@pytest.fixture
def tracked(http: TestClient) -> Iterator[TestClient]:
    """The app with stream ``orders`` and a monitor tracking ``GROUPS`` on it."""
    create_stream(http, "orders")
    worker = ClusterWorker(
        "local-a", "h:1", MonitorSettings(), lambda: NOW_S, lambda c, t: ("orders", "realtime")
    )
    worker._apply(
        [
            CommitEvent(
                (group, TOPIC, 0), CommitState(5, 1_700_000_099_000, 1_700_000_090_000, True)
            )
            for group in GROUPS
        ]
    )
    worker.model.observe_end_offset(TOPIC, 0, 9, 1_700_000_099_500)
    monitor = LagMonitor(static_topology({}), clock=lambda: NOW_S)
    monitor._workers["local-a"] = worker
    lag_plane(http.app).monitor = monitor
    try:
        yield http
    finally:
        lag_plane(http.app).monitor = None


def _path(group: str) -> str:
    from urllib.parse import quote

    return f"/v1/groups/{quote(group, safe='')}/lag/history"


# ---------------------------------------------------------------------- group paths
@pytest.mark.parametrize("group", GROUPS)
def test_the_history_of_any_group_id(tracked: TestClient, group: str) -> None:
    resp = tracked.get(_path(group))
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    assert doc["group"] == group
    assert doc["series"] and doc["partitions"][0]["topic"] == TOPIC


def test_an_untracked_group_with_a_slash_is_404_not_a_missing_route(tracked: TestClient) -> None:
    resp = tracked.get(_path("team/b"))
    assert resp.status_code == 404
    assert "team/b" in resp.json()["detail"]  # the monitor's answer, not "Not Found"


def test_the_history_route_swallows_no_other_group_route(tracked: TestClient) -> None:
    assert tracked.get("/v1/groups/team%2Fa/lag/history/more").status_code == 404
    # The assigner's routes under /v1/groups/{group}/ still answer for themselves.
    members = tracked.get("/v1/groups/nope/members")
    assert members.status_code == 404
    assert "lag" not in members.json()["detail"].lower()
    assert [g["group"] for g in tracked.get("/v1/groups").json()] == sorted(GROUPS)
    spec = tracked.get("/openapi.json").json()
    assert "/v1/groups/{group}/lag/history" in spec["paths"]


# ---------------------------------------------------------------------- filters
def test_an_unknown_stream_is_404(tracked: TestClient) -> None:
    for path in ("/v1/lag", "/v1/groups"):
        resp = tracked.get(path, params={"stream": "nosuch"})
        assert resp.status_code == 404, (path, resp.text)
        assert resp.json()["detail"] == "unknown stream 'nosuch'"
    # A known stream, and a known one with nothing of this group on it: 200.
    assert len(tracked.get("/v1/lag", params={"stream": "orders"}).json()["groups"]) == 5
    create_stream(tracked, "quiet")
    assert tracked.get("/v1/groups", params={"stream": "quiet"}).json() == []
    doc = tracked.get("/v1/lag", params={"stream": "quiet", "group": "indexer"}).json()
    assert doc["partitions"] == []


def test_an_unknown_stream_is_404_with_the_monitor_off(http: TestClient) -> None:
    assert http.get("/v1/lag", params={"stream": "nosuch"}).status_code == 404
    assert http.get("/v1/groups", params={"stream": "nosuch"}).status_code == 404
    create_stream(http, "orders")
    assert http.get("/v1/lag", params={"stream": "orders"}).json()["monitor"] is False


def test_an_untracked_group_is_no_error_to_the_api(tracked: TestClient) -> None:
    """The monitor may not have read a group's commits yet: empty lists, not 404."""
    resp = tracked.get("/v1/lag", params={"group": "nosuch"})
    assert resp.status_code == 200
    assert resp.json()["groups"] == [] and resp.json()["partitions"] == []


@pytest.mark.parametrize("query", ["group=", "stream=", "group=&stream=orders"])
def test_an_empty_filter_is_422(tracked: TestClient, query: str) -> None:
    assert tracked.get(f"/v1/lag?{query}").status_code == 422
    if query == "stream=":
        assert tracked.get(f"/v1/groups?{query}").status_code == 422


# ---------------------------------------------------------------------- the CLI
def _run(http: TestClient, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``streamplane lag ARGS`` through ``main`` (its error handling) against the app."""

    @contextmanager
    def connect(url: str, token: str | None) -> Iterator[ControlPlaneClient]:
        cp = ControlPlaneClient("http://testserver")
        own, cp._http = cp._http, http  # a TestClient is an httpx.Client
        try:
            yield cp
        finally:
            own.close()  # not the app's client: the next command uses it too

    code = 0
    with (
        mock.patch("streamplane.cli.lag.connect", connect),
        mock.patch.object(sys, "argv", ["streamplane", "lag", *args]),
    ):
        try:
            main()
        except SystemExit as exc:
            code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_an_untracked_group_is_one_error_line(
    tracked: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(tracked, capsys, "-g", "nosuch")
    assert code == 1
    assert out == ""
    assert err.splitlines() == [
        "error: group 'nosuch': no tracked partitions (no commit of it seen on any cluster)"
    ]
    code, out, err = _run(tracked, capsys, "-g", "indexer", "-s", "quiet")
    assert code == 1 and "error: unknown stream 'quiet'" in err  # 404 from the API
    create_stream(tracked, "quiet")
    code, out, err = _run(tracked, capsys, "-g", "indexer", "-s", "quiet")
    assert code == 1
    assert err.splitlines() == ["error: group 'indexer': no tracked partitions of stream 'quiet'"]


def test_cli_an_unknown_stream_and_a_tracked_group(
    tracked: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(tracked, capsys, "-s", "nosuch")
    assert (code, out) == (1, "")
    assert err.splitlines() == ["error: unknown stream 'nosuch'"]
    code, out, err = _run(tracked, capsys, "-g", "team/a")
    assert code == 0, err
    assert TOPIC in out and out.rstrip().endswith("OK")
