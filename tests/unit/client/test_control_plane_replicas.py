"""ControlPlaneClient with several control-plane replicas: real HTTP servers on free
loopback ports stand for replicas that refuse connections, hang (a stopped process:
the kernel accepts, nobody answers), answer 503 or drop the connection, next to one that
answers. A request moves to the next replica when one cannot serve, and stays there;
requests whose repeat would do something twice are not sent again after a failure that
may have reached a replica."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from unittest import mock
from urllib.parse import parse_qs, urlsplit

import pytest

from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.membership import GroupMembership
from streamplane.client.producer_heartbeat import ProducerHeartbeat
from streamplane.client.routing_watch import RoutingWatcher
from streamplane.core.routing import (
    RoutingTable,
    move_lanes,
    new_routing_table,
    routing_to_json,
)
from streamplane.exceptions import (
    ConfigError,
    Conflict,
    ControlPlaneError,
    ControlPlaneUnavailable,
)
from tests.waiting import wait_for

Answer = tuple[int, Any]  # (status, JSON document or None for no body)


class ControlPlaneState:
    """What the replicas share (their database): one stream's routing, its members."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.table: RoutingTable | None = new_routing_table("orders", ["realtime"], "local-a", 3)
        self.created: dict[str, Any] | None = None  # the body a stream was created with
        self.asked: list[dict[str, Any]] = []  # the body of every create request
        # A replication factor a create leaves to the server: min(3, live brokers).
        self.default_replication_factor = 3
        self.changed = threading.Event()  # set by every change

    def failover(self, cluster: str, partitions: int | None) -> Answer:
        with self.lock:
            assert self.table is not None
            if partitions is None and self.table.active("realtime").cluster == cluster:
                return 400, {"detail": f"realtime already active on {cluster}; nothing to move"}
            self.table = move_lanes(self.table, ["realtime"], cluster, partitions)
            self.lock.notify_all()
            self.changed.set()
            return 200, routing_to_json(self.table)

    def watch(self, after_epoch: int | None, timeout: float) -> Answer:
        deadline = time.monotonic() + timeout
        with self.lock:
            while after_epoch is not None and self.table is not None:
                left = deadline - time.monotonic()
                if self.table.epoch > after_epoch or left <= 0:
                    break
                self.lock.wait(left)
            if self.table is None:
                return 404, {"detail": "unknown stream 'orders'"}
            return 200, routing_to_json(self.table)


class Replica:
    """One control-plane replica: answers from the shared state unless told otherwise
    (``mode``: "ok", "503" as a follower that knows no leader, "proxy-502" as a load
    balancer with no backend, "kafka-502" as the control plane's own Kafka error,
    "drop" closing the connection unanswered, "stopped" as a SIGSTOPped process: no
    request is answered, those in flight included, until ``thaw`` is set, and then
    the connection is closed). ``delay_s`` holds back every request but
    a GET before it is acted on, ``gate`` (an event) too; ``kill()`` ends it as kill -9
    does (requests in flight unanswered, connections refused)."""

    def __init__(self, state: ControlPlaneState, mode: str = "ok") -> None:
        self.state = state
        self.mode = mode
        self.delay_s = 0.0
        self.gate: threading.Event | None = None
        self.killed = False
        self.thaw = threading.Event()
        self.requests: list[str] = []  # "METHOD /path" of every request that arrived
        replica = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                url = urlsplit(self.path)
                replica.requests.append(f"{self.command} {url.path}")
                if replica.mode == "drop":
                    self.close_connection = True
                    return
                if self.command != "GET":
                    time.sleep(replica.delay_s)
                    if replica.gate is not None:
                        replica.gate.wait(5)
                status, doc = replica.answer(self.command, url.path, parse_qs(url.query), body)
                if replica.mode == "stopped":
                    replica.thaw.wait(60)
                    self.close_connection = True
                    return
                if replica.killed:
                    self.close_connection = True
                    return
                data = b"" if doc is None else json.dumps(doc).encode()
                if isinstance(doc, str):
                    data = doc.encode()
                self.send_response(status)
                if data:
                    ctype = "text/html" if isinstance(doc, str) else "application/json"
                    self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PATCH = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def kill(self) -> None:
        self.killed = True
        self.close()
        with self.state.lock:
            self.state.lock.notify_all()  # its long polls in flight end (unanswered)

    def answer(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> Answer:
        if self.mode == "stopped":
            self.thaw.wait(60)
            return 503, {"detail": "never sent: the connection is closed unanswered"}
        if self.mode == "503":
            return 503, {
                "detail": "this control-plane replica is a follower and knows no leader's URL"
            }
        if self.mode == "proxy-502":
            return 502, "<html><body>502 Bad Gateway</body></html>"
        if self.mode == "kafka-502":
            return 502, {"detail": "cluster local-a: create topics timed out"}
        state = self.state
        if method == "GET" and path == "/v1/streams/orders/routing":
            after = query.get("after_epoch")
            timeout = float(query.get("timeout", ["0"])[0])
            return state.watch(int(after[0]) if after else None, timeout)
        if method == "POST" and path == "/v1/streams/orders/failover":
            return state.failover(body["cluster"], body.get("partitions"))
        if method == "POST" and path.startswith("/v1/groups/") and path.endswith("/heartbeat"):
            unit = {"cluster": "local-a", "topic": "sp.orders.realtime.e1", "partition": 0}
            return 200, {
                "work_units": [unit],
                "release": [],
                "lease_s": 1.5,
                "generation": 1,
                "joined": True,
            }
        if method == "DELETE" and path.startswith("/v1/groups/"):
            return 204, None
        if method == "POST" and path.startswith("/v1/streams/orders/producers/"):
            return 200, {"epoch": body["epoch"]}
        if method == "DELETE" and path.startswith("/v1/streams/orders/producers/"):
            return 204, None
        if method == "POST" and path == "/v1/streams":
            with state.lock:
                state.asked.append(body)
                if state.created is not None:
                    return 409, {"detail": f"stream {body['name']!r} already exists"}
                state.created = {"replication_factor": state.default_replication_factor, **body}
                state.table = new_routing_table(
                    body["name"], body["lanes"], body["cluster"], body["partitions"]
                )
                state.changed.set()
                return 201, self._stream_doc()
        if method == "GET" and path == "/v1/streams/orders":
            return (200, self._stream_doc()) if state.created else (404, {"detail": "unknown"})
        if method == "DELETE" and path == "/v1/streams/orders":
            with state.lock:
                if state.table is None:
                    return 404, {"detail": "unknown stream 'orders'"}
                state.table = None
                state.lock.notify_all()
                state.changed.set()
                return 204, None
        if method == "GET" and path == "/v1/streams":
            return 200, []
        return 404, {"detail": "Not Found"}

    def _stream_doc(self) -> dict[str, Any]:
        created, table = self.state.created, self.state.table
        assert created is not None and table is not None
        keys = ("lanes", "partitions", "dlq_partitions", "replication_factor", "config")
        doc = {k: created[k] for k in keys}
        doc.update(
            name=created["name"],
            max_record_bytes=created["max_record_bytes"],
            active_clusters=[created["cluster"]],
            routing=routing_to_json(table),
        )
        return doc


class Hung:
    """A replica whose process is stopped (SIGSTOP): connections are accepted by the
    kernel, requests are never answered."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def close(self) -> None:
        self.sock.close()


def refusing_url() -> str:
    """A port nothing listens on (a killed replica): connections are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def state() -> ControlPlaneState:
    return ControlPlaneState()


@pytest.fixture
def make_replica(state: ControlPlaneState) -> Iterator[Callable[..., Replica]]:
    made: list[Replica] = []

    def make(mode: str = "ok") -> Replica:
        made.append(Replica(state, mode))
        return made[-1]

    yield make
    for r in made:
        if not r.killed:
            r.close()


@pytest.fixture
def short_kafka_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls that wait for Kafka (stream creation, failover) time out after 0.5 s."""
    monkeypatch.setattr("streamplane.client.control_plane.KAFKA_CALL_TIMEOUT", 0.5)


@pytest.fixture
def hung() -> Iterator[Hung]:
    h = Hung()
    yield h
    h.close()


# ---------------------------------------------------------------------- the URLs
def test_several_urls_as_a_string_or_a_list() -> None:
    with ControlPlaneClient("http://a:8470, http://b:8470/") as cp:
        assert cp.urls == ("http://a:8470", "http://b:8470")
        assert cp.url == "http://a:8470"
        assert repr(cp) == "ControlPlaneClient('http://a:8470,http://b:8470')"
    with ControlPlaneClient(["http://a:8470", "https://b:8470,http://c:1"]) as cp:
        assert cp.urls == ("http://a:8470", "https://b:8470", "http://c:1")
    with ControlPlaneClient("http://a:8470") as cp:  # one, as before
        assert cp.urls == ("http://a:8470",) and cp.url == "http://a:8470"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://a:1,,http://b:2", "invalid control-plane URL list 'http://a:1,,http://b:2': "
         "element 2 is empty"),
        ("http://a:1,", "element 2 is empty"),
        ("http://a:1,b:8470", "invalid control-plane URL 'b:8470' (element 2 of "
         "'http://a:1,b:8470'): expected http(s)://host:port"),
        ("http://a:1,127.0.0.1:8470", "'127.0.0.1:8470' (element 2 of"),
        ("http://a:1,ftp://b:2", "'ftp://b:2' (element 2 of"),
        ("http://a:1,http://a:1", "'http://a:1' is given twice"),
        ("", "no control-plane URL given"),
        ("localhost:8470", "invalid control-plane URL 'localhost:8470': expected http(s)"),
    ],
)  # fmt: skip
def test_bad_urls_are_named(url: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        ControlPlaneClient(url)
    assert message in str(err.value)


# ---------------------------------------------------------------------- moving on
def test_a_refused_replica_is_passed_over_and_the_next_one_kept(
    make_replica: Callable[..., Replica], caplog: pytest.LogCaptureFixture
) -> None:
    b = make_replica()
    dead = refusing_url()
    with ControlPlaneClient(f"{dead},{b.url}") as cp:
        assert cp.routing("orders").epoch == 1
        assert cp.url == b.url  # sticky: requests go to b from now on
        assert cp.routing("orders").epoch == 1
    assert b.requests == ["GET /v1/streams/orders/routing"] * 2
    assert any(f"using {b.url} ({dead} is unreachable" in r.message for r in caplog.records)


@pytest.mark.parametrize("mode", ["503", "proxy-502", "drop"])
def test_a_replica_that_cannot_serve_is_passed_over(
    make_replica: Callable[..., Replica], mode: str
) -> None:
    a, b = make_replica(mode), make_replica()
    with ControlPlaneClient([a.url, b.url]) as cp:
        assert cp.routing("orders").epoch == 1
        assert cp.routing("orders").epoch == 1
    assert len(a.requests) == 1  # asked once, then passed over
    assert len(b.requests) == 2


def test_a_hung_replica_is_passed_over_after_the_timeout(
    make_replica: Callable[..., Replica], hung: Hung
) -> None:
    b = make_replica()
    with ControlPlaneClient([hung.url, b.url], timeout=0.5) as cp:
        started = time.monotonic()
        assert cp.routing("orders").epoch == 1
        assert 0.4 < time.monotonic() - started < 5
        started = time.monotonic()
        assert cp.routing("orders").epoch == 1
        assert time.monotonic() - started < 0.4  # no second wait: b is kept


def test_the_control_planes_own_502_is_not_moved_on(
    make_replica: Callable[..., Replica],
) -> None:
    """Its 502 says a Kafka cluster failed: every replica would say the same."""
    a, b = make_replica("kafka-502"), make_replica()
    with ControlPlaneClient([a.url, b.url]) as cp, pytest.raises(ControlPlaneError) as err:
        cp.failover("orders", "local-b")
    assert err.value.status == 502
    assert "create topics timed out" in str(err.value)
    assert b.requests == []


def test_every_replica_failing_names_each(make_replica: Callable[..., Replica], hung: Hung) -> None:
    dead = refusing_url()
    with (
        ControlPlaneClient([dead, hung.url], timeout=0.3) as cp,
        pytest.raises(ControlPlaneUnavailable) as err,
    ):
        cp.routing("orders")
    message = str(err.value)
    assert message.startswith("every control-plane replica failed: ")
    assert f"{dead} is unreachable: " in message
    assert f"{hung.url} did not answer in time (ReadTimeout)" in message
    # one replica there but unable to serve (503): not "unreachable"
    follower = make_replica("503")
    with (
        ControlPlaneClient([dead, follower.url]) as cp,
        pytest.raises(ControlPlaneError) as answered,
    ):
        cp.group_heartbeat("g", "m1", "orders", ["realtime"])
    assert not isinstance(answered.value, ControlPlaneUnavailable)
    assert answered.value.status == 503
    assert f"{follower.url} answered HTTP 503: this control-plane replica is a follower" in str(
        answered.value
    )


def test_one_url_keeps_its_errors() -> None:
    dead = refusing_url()
    with ControlPlaneClient(dead) as cp, pytest.raises(ControlPlaneUnavailable) as err:
        cp.routing("orders")
    assert str(err.value).startswith(f"control plane at {dead} is unreachable: ")


# ---------------------------------------------------------------------- what is sent twice
def test_a_failover_with_partitions_is_not_sent_twice(
    state: ControlPlaneState, make_replica: Callable[..., Replica], short_kafka_calls: None
) -> None:
    a, b = make_replica(), make_replica()
    a.delay_s = 0.7  # it acts, but after the client gave up on it (0.5 s)
    with (
        ControlPlaneClient([a.url, b.url]) as cp,
        pytest.raises(ControlPlaneUnavailable) as err,
    ):
        cp.failover("orders", "local-b", partitions=6)
    assert "may have been done there, so it was not sent to another replica" in str(err.value)
    assert b.requests == []
    wait_for("a's failover", lambda: state.table is not None and state.table.epoch == 2, 5)


def test_a_failover_done_by_a_replica_that_did_not_answer_is_a_success(
    state: ControlPlaneState, make_replica: Callable[..., Replica], short_kafka_calls: None
) -> None:
    """Without a partition count it is sent to the next replica, and the repeat refused
    there ("nothing to move") means the earlier attempt moved the lanes: a success."""
    a, b = make_replica(), make_replica()
    a.delay_s = 0.7  # it acts after the client gave up on it (0.5 s)
    b.gate = state.changed  # b answers once a has acted
    with ControlPlaneClient([a.url, b.url]) as cp:
        table = cp.failover("orders", "local-b")
    assert table.epoch == 2 and table.active("realtime").cluster == "local-b"
    assert b.requests == ["POST /v1/streams/orders/failover", "GET /v1/streams/orders/routing"]
    assert state.table is not None and state.table.epoch == 2  # moved once


def test_a_stream_created_by_a_replica_that_did_not_answer_is_a_success(
    state: ControlPlaneState, make_replica: Callable[..., Replica], short_kafka_calls: None
) -> None:
    """A 409 "already exists" after a retry, for exactly what was asked: the earlier
    attempt created it."""
    state.table = None
    a, b = make_replica(), make_replica()
    a.delay_s = 0.7
    b.gate = state.changed
    with ControlPlaneClient([a.url, b.url]) as cp:
        table = cp.create_stream("orders", "local-a", lanes=["realtime"], partitions=3)
    assert table.stream == "orders" and table.active("realtime").partitions == 3
    assert b.requests == ["POST /v1/streams", "GET /v1/streams/orders"]


def test_a_stream_made_by_an_earlier_attempt_with_the_servers_factor_is_a_success(
    state: ControlPlaneState, make_replica: Callable[..., Replica], short_kafka_calls: None
) -> None:
    """No replication factor asked: none is sent (the server resolves min(3, brokers),
    here 3), and the earlier attempt's stream, of factor 3, is what was asked."""
    state.table = None
    a, b = make_replica(), make_replica()
    a.delay_s = 0.7
    b.gate = state.changed
    with ControlPlaneClient([a.url, b.url]) as cp:
        table = cp.create_stream("orders", "local-a", lanes=["realtime"], partitions=3)
    assert table.stream == "orders"
    assert b.requests == ["POST /v1/streams", "GET /v1/streams/orders"]
    assert [("replication_factor" in body) for body in state.asked] == [False, False]
    assert state.created is not None and state.created["replication_factor"] == 3


def test_a_stream_made_with_another_factor_than_the_one_asked_is_a_conflict(
    state: ControlPlaneState, make_replica: Callable[..., Replica]
) -> None:
    a, b = make_replica(), make_replica()
    state.created = {  # what is there: replication factor 3, not the 2 asked for
        "name": "orders", "cluster": "local-a", "lanes": ["realtime"], "partitions": 3,
        "dlq_partitions": 1, "replication_factor": 3, "config": {},
        "max_record_bytes": 1048576,
    }  # fmt: skip
    a.mode = "drop"  # the request reached a, its answer was lost
    with ControlPlaneClient([a.url, b.url]) as cp, pytest.raises(Conflict) as err:
        cp.create_stream(
            "orders", "local-a", lanes=["realtime"], partitions=3, replication_factor=2
        )
    assert "already exists (an earlier attempt of this request" in str(err.value)
    assert state.asked[-1]["replication_factor"] == 2


def test_a_conflict_after_a_retry_that_is_not_what_was_asked_is_named(
    state: ControlPlaneState, make_replica: Callable[..., Replica]
) -> None:
    a, b = make_replica(), make_replica()
    state.created = {  # what is there: 6 partitions, not the 3 asked for
        "name": "orders", "cluster": "local-a", "lanes": ["realtime"], "partitions": 6,
        "dlq_partitions": 1, "replication_factor": 1, "config": {},
        "max_record_bytes": 1048576,
    }  # fmt: skip
    a.mode = "drop"  # the request reached a, its answer was lost
    with ControlPlaneClient([a.url, b.url]) as cp, pytest.raises(Conflict) as err:
        cp.create_stream("orders", "local-a", lanes=["realtime"], partitions=3)
    assert "already exists (an earlier attempt of this request" in str(err.value)


def test_a_conflict_after_a_refused_replica_is_a_plain_conflict(
    state: ControlPlaneState, make_replica: Callable[..., Replica]
) -> None:
    """A refused connection reached nothing: the stream was there before."""
    b = make_replica()
    with ControlPlaneClient([refusing_url(), b.url]) as cp:
        cp.create_stream("orders", "local-a", lanes=["realtime"], partitions=3)
        with pytest.raises(Conflict) as err:
            cp.create_stream("orders", "local-a", lanes=["realtime"], partitions=3)
    assert str(err.value) == "stream 'orders' already exists"


def test_a_delete_done_by_a_replica_that_did_not_answer_is_a_success(
    state: ControlPlaneState, make_replica: Callable[..., Replica], short_kafka_calls: None
) -> None:
    a, b = make_replica(), make_replica()
    a.delay_s = 0.7
    b.gate = state.changed  # b answers 404 once a has deleted it
    with ControlPlaneClient([a.url, b.url]) as cp:
        cp.delete_stream("orders")
    assert state.table is None
    assert b.requests == ["DELETE /v1/streams/orders"]


# ---------------------------------------------------------------------- the clients
def test_the_routing_watch_moves_with_its_long_poll(
    state: ControlPlaneState, make_replica: Callable[..., Replica]
) -> None:
    """The replica a producer watches through dies mid-poll; a failover is made through
    the other: the watch follows it there within a second or so."""
    a, b = make_replica(), make_replica()
    with ControlPlaneClient([a.url, b.url]) as cp, ControlPlaneClient(b.url) as admin:
        watcher = RoutingWatcher(cp, "orders", poll_timeout_s=5.0)
        seen: list[int] = []
        watcher.add_listener(lambda t: seen.append(t.epoch))
        watcher.start()
        wait_for("a long poll at a", lambda: len(a.requests) == 2, 5)
        a.kill()  # the poll in flight ends unanswered, new connections are refused
        admin.failover("orders", "local-b")  # through the other replica
        wait_for("the watch to see epoch 2", lambda: seen == [2], 5)
        assert watcher.table.active("realtime").cluster == "local-b"
        assert cp.url == b.url
        watcher.stop()


def test_the_routing_watch_leaves_a_stopped_replica_when_the_heartbeat_does(
    state: ControlPlaneState, make_replica: Callable[..., Replica]
) -> None:
    """The replica a producer watches through is stopped (SIGSTOP) mid-poll, and a
    failover is made through the other. The poll would hang until its read timeout
    (here 20 + 10 s); the producer's heartbeat times out there (1 s) and moves on, and
    the watch follows it: the new epoch is seen within a few seconds."""
    a, b = make_replica(), make_replica()
    try:
        with (
            ControlPlaneClient([a.url, b.url], timeout=1.0) as cp,
            ControlPlaneClient(b.url) as admin,
        ):
            watcher = RoutingWatcher(cp, "orders", poll_timeout_s=20.0)
            seen: list[int] = []
            watcher.add_listener(lambda t: seen.append(t.epoch))
            watcher.start()
            wait_for("a long poll at a", lambda: len(a.requests) == 2, 5)
            a.mode = "stopped"
            admin.failover("orders", "local-b")  # a is woken, but answers nothing
            beat = ProducerHeartbeat(cp, "orders", lambda: 1, interval_s=0.2)
            beat.start()
            try:
                wait_for("the heartbeat at b", lambda: cp.url == b.url, 5)
                wait_for("the watch to see epoch 2", lambda: seen == [2], 5)
            finally:
                beat.leave()
                watcher.stop()
    finally:
        a.thaw.set()


def test_a_producer_heartbeat_moves_on(make_replica: Callable[..., Replica]) -> None:
    b = make_replica()
    with ControlPlaneClient([refusing_url(), b.url]) as cp:
        beat = ProducerHeartbeat(cp, "orders", lambda: 7, interval_s=0.05)
        beat.start()
        wait_for("three beats", lambda: beat.sent >= 3, 5)
        beat.leave()
    assert beat.last_epoch_sent == 7


def test_a_member_on_a_follower_of_a_stopped_leader_reaches_the_new_leader(
    make_replica: Callable[..., Replica], hung: Hung
) -> None:
    """Its replica forwards to the stopped leader (5 s) past the heartbeat's 2 s: the
    heartbeat times out there and moves on, past the stopped leader itself, to the replica
    that leads now. The member is not left fail-static: it is answered and keeps its
    lease."""
    follower, leader = make_replica(), make_replica()
    follower.delay_s = 5.0  # its forward to the stopped leader
    with ControlPlaneClient([follower.url, hung.url, leader.url]) as cp:
        member = GroupMembership(cp, "g", "orders", ["realtime"], interval_s=0.2)
        started = time.monotonic()
        member.start()  # raises if no replica answers
        took = time.monotonic() - started
        try:
            assert member.connected and len(member.owned) == 1
            assert 3.5 < took < 6  # 2 s at the follower, 2 s at the stopped leader
            wait_for("heartbeats answered by the leader", lambda: len(leader.requests) >= 4, 5)
            assert member.connected and member.may_commit() and not member.lease_lapsed()
            assert cp.url == leader.url
            assert len(follower.requests) == 1
        finally:
            member.stop()


def test_the_cli_takes_several_urls(
    make_replica: Callable[..., Replica], capsys: pytest.CaptureFixture[str]
) -> None:
    from streamplane.cli.main import main

    b = make_replica()
    for argv, code in (
        (["streams", "list", "--url", f"{refusing_url()},{b.url}", "--json"], 0),
        (["streams", "list", "--url", f"{b.url},,http://c:1"], 1),
    ):
        with mock.patch.object(sys, "argv", ["streamplane", *argv]):
            try:
                main()
                got = 0
            except SystemExit as exc:
                got = int(exc.code or 0)
        assert got == code
    out, err = capsys.readouterr()
    assert json.loads(out) == []
    assert f"error: invalid control-plane URL list '{b.url},,http://c:1': element 2 is empty" in err


def test_a_client_closed_under_a_long_poll_does_not_move_it(
    make_replica: Callable[..., Replica], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing the client ends the poll in flight: that is no replica failing, and the
    watch thread must not go on to the next replica (it raised "the client has been
    closed" there)."""
    crashed: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: crashed.append(args.exc_value))
    a, b = make_replica(), make_replica()
    cp = ControlPlaneClient([a.url, b.url])
    watcher = RoutingWatcher(cp, "orders", poll_timeout_s=1.0)
    watcher.start()
    wait_for("a long poll at a", lambda: len(a.requests) == 2, 5)
    watcher.stop()
    cp.close()
    thread = watcher._thread
    assert thread is not None
    thread.join(30)  # its poll ends within poll_timeout_s; a hang guard (busy machines)
    assert not thread.is_alive()
    assert crashed == []
    assert b.requests == []
