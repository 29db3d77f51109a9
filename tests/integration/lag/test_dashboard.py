"""The dashboard in headless Chromium.

Against the real control plane and fleet: from a stream to its group, the lag chart has
data (also for a group id with a "/"). Against ``StubApi`` (the dashboard's own files
and canned API answers, so a state such as a dead cluster needs no dead broker): the
health badge, a malformed URL fragment, seal labels, the chart's gaps and y ticks; and
stale end offsets, with the stub serving what the real app answers over a lag monitor
fed directly (a broker down needs no broker).

Needs Debian's chromium (``infra/chromium/ensure-chromium.sh``); without it the tests
fail and say so, they do not skip. The screenshot is saved in the test's tmp dir.
"""

from __future__ import annotations

import json
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from streamplane.client.producer import StreamProducer
from streamplane.controlplane.app import ControlPlaneSettings, create_app
from streamplane.controlplane.dashboard import STATIC
from streamplane.controlplane.lag_api import lag_plane
from streamplane.core.commitlog import PartitionProgress, encode
from streamplane.lag.monitor import ClusterWorker, LagMonitor, MonitorSettings, static_topology
from streamplane.lag.reader import CommitEvent, CommitState
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.local.fleet import FleetDescriptor
from tests.integration.lag.cdp import Browser, chromium_path
from tests.integration.lag.conftest import commit, unique
from tests.waiting import wait_for

with warnings.catch_warnings():  # "install httpx2": the pinned httpx works
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

CHART_POINTS = (
    "(() => { const p = document.querySelector('#lag-chart path.series');"
    " return p ? Number(p.dataset.points) : 0; })()"
)


def _group_with_lag(
    control_plane: ControlPlaneProcess,
    fleet: FleetDescriptor,
    stream_factory: Callable[..., str],
    group: str,
) -> str:
    """A stream with 20 records and ``group`` committed at 5 (20 s behind); its name."""
    stream = stream_factory("local-a", lanes=("realtime",), partitions=1)
    topic = f"sp.{stream}.realtime.e1"
    with control_plane.client() as client, StreamProducer(stream, client) as producer:
        for i in range(20):
            producer.send(b"hello", key=str(i).encode())
    now = int(time.time() * 1000)
    progress = PartitionProgress(
        low_watermark=5, commit_time_ms=now, low_watermark_timestamp_ms=now - 20_000
    )
    commit(fleet.bootstrap("local-a"), group, topic, 0, 5, encode(progress).metadata)

    def lag_has_data() -> bool:  # /v1/lag: the same answer before and after the fix
        resp = httpx.get(f"{control_plane.url}/v1/lag", params={"group": group}, timeout=5)
        return resp.status_code == 200 and bool(resp.json()["partitions"])

    wait_for("lag of the group", lag_has_data, 20)
    return stream


def test_click_from_a_stream_to_its_group_shows_the_lag_chart(
    control_plane: ControlPlaneProcess,
    fleet: FleetDescriptor,
    stream_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    chromium_path()  # fail first, and clearly, when the browser is missing
    group = unique("dash")
    stream = _group_with_lag(control_plane, fleet, stream_factory, group)

    def history_has_data() -> bool:
        resp = httpx.get(f"{control_plane.url}/v1/groups/{group}/lag/history", timeout=5)
        return resp.status_code == 200 and bool(resp.json()["series"])

    wait_for("lag history of the group", history_has_data, 20)

    browser = Browser(tmp_path / "profile")
    try:
        browser.open(f"{control_plane.url}/ui#/streams/{stream}")
        link = f'a.group-link[data-group="{group}"]'
        browser.wait_for(f"!!document.querySelector('{link}')", "the group link on the stream")
        assert browser.evaluate("document.querySelector('#view').dataset.view") == "streams"
        browser.click(link)
        points = browser.wait_for(CHART_POINTS, "the lag chart with data")
        assert points >= 2
        assert browser.evaluate("location.hash") == f"#/groups/{group}"
        assert browser.evaluate("document.querySelector('#view').dataset.view") == "groups"
        assert browser.evaluate("document.querySelector('#view').innerText.includes('sp.' )"), (
            "the partitions table lists the stream topic"
        )
        shot = tmp_path / "dashboard-group.png"
        browser.screenshot(shot)
        assert shot.stat().st_size > 5_000
        print(f"\nscreenshot: {shot} ({points} chart points)")
    finally:
        browser.close()


def test_a_group_id_with_a_slash_has_its_page(
    control_plane: ControlPlaneProcess,
    fleet: FleetDescriptor,
    stream_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    """Kafka group ids may hold any character: ``team/a`` used to be 404 (its history
    route did not match), so its page showed an error and no chart."""
    chromium_path()
    group = unique("team/dash")
    stream = _group_with_lag(control_plane, fleet, stream_factory, group)
    browser = Browser(tmp_path / "profile")
    try:
        browser.open(f"{control_plane.url}/ui#/streams/{stream}")
        link = f'a.group-link[data-group="{group}"]'
        browser.wait_for(f"!!document.querySelector('{link}')", "the group link on the stream")
        browser.click(link)
        assert browser.wait_for(CHART_POINTS, "the lag chart of the group") >= 1
        assert browser.evaluate("location.hash") == f"#/groups/{quote(group, safe='')}"
        title = browser.evaluate("document.querySelector('#view h2').innerText")
        assert title.startswith(f"Group {group}")
        assert not browser.evaluate("!!document.querySelector('#view .error')")
    finally:
        browser.close()


# ---------------------------------------------------------------------- over a stub API
class StubApi:
    """The dashboard's files and canned JSON answers, keyed by the raw request path
    (query included, as the page sends it); anything else is 404."""

    def __init__(self) -> None:
        self.answers: dict[str, Any] = {
            "/v1/clusters": [],
            "/v1/lag/readers": [],
            "/v1/streams": [],
            "/v1/groups": [],
            "/v1/lag/dlq": [],
        }
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/ui" or self.path.startswith("/ui/"):
                    name = self.path[len("/ui/") :] or "index.html"
                    kind = {"html": "text/html", "js": "text/javascript", "css": "text/css"}
                    self._send(200, (STATIC / name).read_bytes(), kind[name.rsplit(".", 1)[1]])
                elif self.path in stub.answers:
                    self._send(200, json.dumps(stub.answers[self.path]).encode())
                else:
                    self._send(404, json.dumps({"detail": "Not Found"}).encode())

            def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", f"{kind}; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()


@pytest.fixture
def stub_api() -> Iterator[StubApi]:
    api = StubApi()
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    chromium_path()
    b = Browser(tmp_path / "profile")
    try:
        yield b
    finally:
        b.close()


def _row(browser: Browser, first_cell: str) -> dict[str, str] | None:
    """The table row whose first cell is ``first_cell``: its status badge and its text."""
    return browser.evaluate(  # type: ignore[no-any-return]
        "(() => { const row = [...document.querySelectorAll('#view tbody tr')]"
        f".find((r) => r.cells[0].innerText.trim() === {json.dumps(first_cell)});"
        " if (!row) return null; const b = row.querySelector('.status');"
        " return {badge: b ? b.innerText : '', cls: b ? b.className : '',"
        " text: row.innerText}; })()"
    )


def _cluster(name: str, health: dict[str, Any] | None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": name,
        "bootstrap": "127.0.0.1:19092",
        "tags": {"env": "local"},
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    }
    if health is not None:
        doc["health"] = health
    return doc


def _reader(cluster: str, last_error: str | None) -> dict[str, Any]:
    return {
        "cluster": cluster,
        "bootstrap": "127.0.0.1:19092",
        "resumed_from_snapshot": True,
        "snapshot_commits": 3,
        "records_read": 10,
        "commits_tracked": 7,
        "caught_up": True,
        "catch_up_s": 0.2,
        "undecodable": 0,
        "last_error": last_error,
        "last_record_ms": 1,
    }


def test_a_dead_cluster_is_down_whatever_its_lag_reader_says(
    stub_api: StubApi, browser: Browser
) -> None:
    """The badge is the control plane's health. With local-a's broker killed its
    ``__consumer_offsets`` reader stays caught up (it only goes quiet) and its end-offset
    polls go unanswered: the badge used to say ``up``."""
    unanswered = "end offsets of 15 of 15 partitions unanswered"
    stub_api.answers["/v1/clusters"] = [
        _cluster(
            "local-a",
            {
                "state": "down",
                "since": "2026-01-01T10:00:00Z",
                "last_error": "no broker answered the metadata request",
                "checked_at": "2026-01-01T10:00:05Z",
            },
        ),
        _cluster("local-b", {"state": "ok", "since": "2026-01-01T09:00:00Z"}),
        _cluster("local-c", {"state": "unknown"}),  # health checks off
    ]
    stub_api.answers["/v1/lag/readers"] = [
        _reader("local-a", unanswered),
        _reader("local-b", None),
        _reader("local-c", None),
    ]
    browser.open(f"{stub_api.url}/ui#/")
    browser.wait_for(
        "document.querySelector('#view')?.dataset.view === 'fleet'", "the fleet view", 10
    )
    a = _row(browser, "local-a")
    assert a is not None
    assert (a["badge"], a["cls"]) == ("down", "status s-down")
    assert "no broker answered the metadata request" in a["text"]  # why
    assert "down since" in a["text"]  # since when
    assert unanswered in a["text"]  # the reader's view, as detail
    b = _row(browser, "local-b")
    assert b is not None and b["badge"] == "ok"
    c = _row(browser, "local-c")
    assert c is not None and c["badge"] == "unknown"  # not "up": nothing probed it
    assert "not probed" in c["text"]


def test_a_malformed_fragment_shows_an_error_and_navigation_recovers(
    stub_api: StubApi, browser: Browser
) -> None:
    """``decodeURIComponent`` threw before the render's try: the page stayed on
    "loading…" and every later render returned early, even after going to ``#/``."""
    error = "(() => { const e = document.querySelector('#view .error'); return e?.innerText; })()"
    fleet = "document.querySelector('#view')?.dataset.view === 'fleet'"
    browser.open(f"{stub_api.url}/ui#/groups/100%")
    message = browser.wait_for(error, "the error for #/groups/100%", 10)
    assert "bad address #/groups/100%" in message
    browser.evaluate("location.hash = '#/'")
    browser.wait_for(fleet, "the fleet view after a bad fragment", 10)
    browser.evaluate("location.hash = '#/groups/%E0%A4%A'")
    message = browser.wait_for(error, "the error for #/groups/%E0%A4%A", 10)
    assert "%E0%A4%A" in message
    browser.evaluate("location.hash = '#/'")
    browser.wait_for(fleet, "the fleet view again", 10)
    assert browser.evaluate("document.querySelector('#view .error')") is None


def _audit(i: int, action: str, detail: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": i,
        "time": f"2026-01-01T10:00:0{i}Z",
        "actor": "api",
        "action": action,
        "stream": "orders",
        "detail": detail,
    }


def test_a_seal_in_place_is_not_labelled_to_its_cluster(
    stub_api: StubApi, browser: Browser
) -> None:
    """A segment sealed where it is used to read "epoch 2 → 3 · to local-a"."""
    stub_api.answers["/v1/streams/orders"] = {
        "name": "orders",
        "epoch": 3,
        "routing": {
            "stream": "orders",
            "epoch": 3,
            "lanes": ["realtime"],
            "segments": [
                {
                    "lane": "realtime",
                    "cluster": "local-b",
                    "topic": "sp.orders.realtime.e2",
                    "partitions": 1,
                    "state": "active",
                    "epoch": 2,
                    "sealed_end_offsets": {},
                }
            ],
        },
    }
    stub_api.answers["/v1/audit?stream=orders&limit=50"] = [
        _audit(
            2,
            "segment.transition",
            {
                "from_epoch": 2,
                "to_epoch": 3,
                "cluster": "local-a",
                "topic": "sp.orders.realtime.e1",
                "state": "sealed",
            },
        ),
        _audit(
            1,
            "stream.failover",
            {
                "from_epoch": 1,
                "to_epoch": 2,
                "cluster": "local-b",
                "lanes": ["realtime"],
                "reason": "drill",
                "draining": [{"cluster": "local-a", "topic": "sp.orders.realtime.e1"}],
            },
        ),
    ]
    stub_api.answers["/v1/groups?stream=orders"] = []
    browser.open(f"{stub_api.url}/ui#/streams/orders")
    browser.wait_for(
        "document.querySelector('#view')?.dataset.view === 'streams'", "the stream view", 10
    )
    rows = browser.evaluate(
        "[...document.querySelectorAll('#view tbody tr')]"
        ".filter((r) => r.cells.length === 4).map((r) => r.cells[3].innerText)"
    )
    sealed, failover = rows
    assert "epoch 2 → 3" in sealed and "sealed" in sealed and "on local-a" in sealed
    assert "to local-a" not in sealed
    assert "epoch 1 → 2" in failover and "to local-b" in failover and "drill" in failover


def _open_chart(stub_api: StubApi, browser: Browser) -> None:
    """Group g's page: samples 60 s, 120 s, unknown, 708 s (11.8 min), now 700 s."""
    t0 = 1_767_261_600_000
    stub_api.answers["/v1/groups/g/lag/history"] = {
        "group": "g",
        "interval_s": 5.0,
        "series": [
            [t0, 60.0, 10],
            [t0 + 5_000, 120.0, 20],
            [t0 + 10_000, None, None],  # unknown: a gap
            [t0 + 15_000, 708.0, 30],
        ],
        "partitions": [],
    }
    stub_api.answers["/v1/lag?group=g"] = {
        "now_ms": t0 + 20_000,
        "monitor": True,
        "groups": [
            {
                "group": "g",
                "clusters": ["local-a"],
                "streams": ["orders"],
                "partitions": 1,
                "offset_lag": 30,
                "max_time_lag_s": 700.0,
                "unknown_time_lag": 0,
                "status": "WARN",
                "last_commit_ms": t0,
            }
        ],
        "partitions": [],
    }
    browser.open(f"{stub_api.url}/ui#/groups/g")
    assert browser.wait_for(CHART_POINTS, "the lag chart", 10) == 4


def test_the_lag_chart_breaks_its_line_at_gaps(stub_api: StubApi, browser: Browser) -> None:
    """The line used to run straight across samples whose lag is unknown."""
    _open_chart(stub_api, browser)
    d = browser.evaluate("document.querySelector('#lag-chart path.series').getAttribute('d')")
    assert d.count("M") == 2, d  # two runs: before and after the unknown sample


def test_the_lag_chart_y_ticks_are_round(stub_api: StubApi, browser: Browser) -> None:
    """The y ticks used to be ymax/4 apart: 3.9, 7.8, 11.7 min for a worst lag of 11.8 min."""
    _open_chart(stub_api, browser)
    labels = browser.evaluate(
        "[...document.querySelectorAll('#lag-chart svg text')].map((t) => t.textContent.trim())"
        ".filter((t) => /^[0-9.]+ (s|min|h|d)$/.test(t))"
    )
    assert labels == ["0 min", "5 min", "10 min", "15 min"]


# ------------------------------------------------- stale end offsets (real API answers)
class _LiveEnds:
    """LogEnds answering ``ends`` but for the partitions in ``dead`` (their leader's
    broker is down: ``LogEnds.fetch_pass`` leaves them out, with a reason)."""

    def __init__(self, ends: dict[tuple[str, int], int]) -> None:
        self.ends = ends
        self.dead: set[tuple[str, int]] = set()
        self.failures: dict[tuple[str, int], str] = {}

    def fetch_pass(
        self, ends: Any, starts: Any = (), timeout: float = 2.0
    ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
        self.failures = {tp: "no answer from broker 2 within 2s" for tp in self.dead}
        return {tp: e for tp, e in self.ends.items() if tp in ends and tp not in self.dead}, {}


class _NoLookup:
    def lookup(self, wanted: object, timeout: float = 1.0) -> dict[tuple[str, int, int], int]:
        return {}


def _stale_group_answers(tmp_path: Path) -> dict[str, Any]:
    """What the control plane answers for group ``dead`` (a foreign group, three
    partitions at 257 of 1150 on local-a) after the broker leading partitions 1 and 2
    died: a real ``LagMonitor`` fed its commits and end-offset polls directly (as the
    unit tests of the monitor do), read through the real app's routes."""
    now = [1_767_261_600.0]
    topic = "sp.orders.realtime.e1"
    worker = ClusterWorker(
        "local-a", "127.0.0.1:1", MonitorSettings(), lambda: now[0],
        lambda c, t: ("orders", "realtime"),
    )  # fmt: skip
    for p in range(3):
        state = CommitState(257, int((now[0] - 60) * 1000), None, False)
        worker._apply([CommitEvent(("dead", topic, p), state)])
    ends = _LiveEnds({(topic, p): 1_150 for p in range(3)})
    worker._poll_once(ends, _NoLookup())  # type: ignore[arg-type]
    now[0] += 6
    ends.dead = {(topic, 1), (topic, 2)}
    worker._poll_once(ends, _NoLookup())  # type: ignore[arg-type]
    now[0] += 6  # the stale ends are 12 s old
    monitor = LagMonitor(static_topology({}), clock=lambda: now[0])
    monitor._workers["local-a"] = worker
    settings = ControlPlaneSettings(
        db_url=f"sqlite:///{tmp_path / 'cp.db'}", api_token="t" * 16, lag_monitor=False
    )
    paths = ["/v1/groups", "/v1/lag?group=dead", "/v1/groups/dead/lag/history"]
    with TestClient(create_app(settings)) as client:
        lag_plane(client.app).monitor = monitor
        try:
            answers = {path: client.get(path).json() for path in paths}
        finally:
            lag_plane(client.app).monitor = None
    (group,) = answers["/v1/groups"]
    assert (group["offset_lag"], group["stale_end_offsets"]) == (3 * 893, 2)
    assert group["stale_end_offset_age_s"] == 12.0
    return answers


def test_stale_end_offsets_are_shown_where_the_lag_is(
    stub_api: StubApi, browser: Browser, tmp_path: Path
) -> None:
    """With a broker down, a group's offset lag counts two partitions at their last known
    end: /v1/groups says ``stale_end_offsets: 2``, the CLI ``2679 (2 stale)``. The
    dashboard showed a plain ``2679``, as current as any, and the partitions' ends as
    if just read."""
    stub_api.answers.update(_stale_group_answers(tmp_path))
    browser.open(f"{stub_api.url}/ui#/")
    browser.wait_for(
        "document.querySelector('#view')?.dataset.view === 'fleet'", "the fleet view", 10
    )
    row = _row(browser, "dead")
    assert row is not None
    assert "2679 (2 stale)" in row["text"]
    cell = browser.evaluate(
        "(() => { const s = document.querySelector('#view tbody .stale');"
        " return s ? {text: s.innerText, title: s.title, n: s.dataset.stale,"
        " style: getComputedStyle(s).fontStyle} : null; })()"
    )
    assert cell is not None, "the stale total is marked"
    assert cell["text"] == "2679 (2 stale)" and cell["n"] == "2"
    assert "up to 12.0 s old" in cell["title"]  # the oldest age, on hover
    assert cell["style"] == "italic"  # does not look like a plain number

    browser.evaluate("location.hash = '#/groups/dead'")
    browser.wait_for(
        "document.querySelector('#view')?.dataset.view === 'groups'", "the group view", 10
    )
    title = browser.evaluate("document.querySelector('#view h2').innerText")
    assert "offset lag 2679 (2 stale)" in title
    assert browser.evaluate("!!document.querySelector('#view h2 .stale')")
    note = browser.evaluate("document.querySelector('#view .stale-note')?.innerText")
    assert note is not None and "2 partitions stale" in note and "up to 12.0 s old" in note
    rows = browser.evaluate(
        "[...document.querySelectorAll('#view tbody tr')].map((r) => ({"
        " partition: r.cells[4].innerText, end: r.cells[6].innerText,"
        " lag: r.cells[7].innerText, stale: r.classList.contains('stale-end'),"
        " marked: !!r.cells[6].querySelector('.stale')"
        " && !!r.cells[7].querySelector('.stale') }))"
    )
    by_partition = {r["partition"]: r for r in rows}
    assert by_partition["0"] == {
        "partition": "0", "end": "1150", "lag": "893", "stale": False, "marked": False,
    }  # fmt: skip
    for p in ("1", "2"):
        assert by_partition[p]["end"] == "1150 (stale 12.0 s)"
        assert by_partition[p]["lag"] == "893"
        assert by_partition[p]["stale"] and by_partition[p]["marked"]
    shot = tmp_path / "dashboard-stale.png"
    browser.screenshot(shot)
    print(f"\nscreenshot: {shot}")
