"""What the client library logs for an application running it at INFO: not a line per
control-plane request (httpx's), nor per dead letter; one line when the producer
switches to a failover's epoch, when the records it kept for the cluster it left are
in after a long wait, when the routing watch gets an answer again, and a dead-letter
summary at most every 30 s.

An exploratory run (a consumer service at INFO) logged 163 lines, 157 of them httpx's
"HTTP Request: POST ..." (~6 a second per replica), and nothing of 27-187 dead letters
nor of the producer's failover."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import cast

import httpx
import pytest

from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.routing_watch import RoutingWatcher
from streamplane.core.routing import (
    SegmentState,
    move_lanes,
    new_routing_table,
    transition,
)
from streamplane.exceptions import ControlPlaneUnavailable
from tests.unit.client.harness import Clock, DlqBroker, consumer_of, poll
from tests.unit.client.test_producer_epoch import idle_producer
from tests.waiting import wait_for


class Healthz(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"status": "ok"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Healthz)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def lines(caplog: pytest.LogCaptureFixture, logger: str, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and r.levelno == level]


# ---------------------------------------------------------------------- HTTP requests
def test_the_clients_requests_are_not_logged_at_info_the_applications_own_are(
    server: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with ControlPlaneClient(server) as cp:
        for _ in range(3):
            cp.health()
    assert lines(caplog, "httpx", logging.INFO) == []

    with httpx.Client() as own:  # the application's own requests: logged as before
        own.get(f"{server}/healthz")
    (line,) = lines(caplog, "httpx", logging.INFO)
    assert line.startswith(f"HTTP Request: GET {server}/healthz")


def test_the_clients_requests_are_logged_at_debug_on_its_own_logger(
    server: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="streamplane.client.control_plane")
    with ControlPlaneClient(server) as cp:
        cp.health()
    assert lines(caplog, "streamplane.client.control_plane", logging.DEBUG) == [
        f'HTTP Request: GET {server}/healthz "HTTP/1.0 200 OK"'
    ]


# ---------------------------------------------------------------------- producer
PRODUCER = "streamplane.client.producer"


def test_a_failover_epoch_is_one_info_line_naming_the_lanes_and_clusters(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger=PRODUCER)
    producer = idle_producer(["realtime", "bulk"])  # epoch 1 on local-a
    assert lines(caplog, PRODUCER, logging.INFO) == []  # the table it opens with: no news

    table = move_lanes(new_routing_table("s", ["realtime", "bulk"], "local-a", 1),
                       ["realtime", "bulk"], "local-b")  # fmt: skip
    producer._apply(table)
    assert lines(caplog, PRODUCER, logging.INFO) == [
        "stream 's': producing with routing epoch 2 (was 1): realtime, bulk moved from "
        "local-a to local-b"
    ]

    # The seal of a draining segment makes an epoch too (one per segment): no lane moves.
    sealed = transition(table, "sp.s.realtime.e1", "local-a", SegmentState.SEALED)
    producer._apply(sealed)
    assert len(lines(caplog, PRODUCER, logging.INFO)) == 1
    assert lines(caplog, PRODUCER, logging.DEBUG)[-1] == (
        "stream 's': producing with routing epoch 3 (was 2): no lane moved (a segment "
        "sealed, retired or declared lost)"
    )

    # A new partition count on the same cluster; the dlq stays where it is.
    producer._apply(move_lanes(sealed, ["bulk"], "local-b", partitions=12))
    assert lines(caplog, PRODUCER, logging.INFO)[-1] == (
        "stream 's': producing with routing epoch 4 (was 3): bulk moved to new topics on local-b"
    )


def test_a_consumers_dlq_producer_says_it_writes_dead_letters(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A consumer service with a producer of its own logs the failover twice: the dead
    letters' producer says which it is."""
    caplog.set_level(logging.INFO, logger=PRODUCER)
    dlq = idle_producer(["realtime"])
    dlq._default_lane = "dlq"
    dlq._apply(move_lanes(new_routing_table("s", ["realtime"], "local-a", 1),
                          ["realtime"], "local-b"))  # fmt: skip
    assert lines(caplog, PRODUCER, logging.INFO) == [
        "stream 's': writing dead letters with routing epoch 2 (was 1): realtime moved from "
        "local-a to local-b"
    ]


def test_records_in_for_the_cluster_left_after_a_long_wait_are_an_info_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The cluster the stream left was down: its producer's queue empties only once it
    answers (here: only events queued, at once), so the wait is what tells."""
    caplog.set_level(logging.DEBUG, logger=PRODUCER)
    producer = idle_producer(["realtime"])
    table = new_routing_table("s", ["realtime"], "local-b", 1)
    producer._apply(dataclasses.replace(table, epoch=2))
    producer.epoch_switch_times[2] -= 42.0  # the switch was 42 s ago

    def let_go() -> bool:
        producer.poll()  # serves the retired producer's queue; lets it go once empty
        return not producer._retired

    wait_for("the retired producer let go", let_go, 10)
    (line,) = [m for m in lines(caplog, PRODUCER, logging.INFO) if "queued for" in m]
    assert line.startswith(
        "stream 's': the records queued for local-a (routing epoch 1) are all delivered or "
        "reported failed, 42."
    )
    assert line.endswith(" s after the routing left it")


# ---------------------------------------------------------------------- routing watch
class AwayThenBack:
    """A control plane whose first watch poll cannot reach it; the next ones answer."""

    def __init__(self) -> None:
        self.table = new_routing_table("orders", ["realtime"], "local-a", 3)
        self.polls = 0

    def routing(self, stream: str) -> object:
        return self.table

    def watch_routing(self, stream: str, after_epoch: int, timeout: float = 25.0) -> object:
        self.polls += 1
        if self.polls == 1:
            raise ControlPlaneUnavailable("control plane at http://cp:8470 is unreachable")
        threading.Event().wait(0.05)
        return self.table


def test_the_routing_watch_says_when_the_control_plane_answers_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="streamplane.client.routing_watch")
    watcher = RoutingWatcher(cast(ControlPlaneClient, AwayThenBack()), "orders")
    watcher.start()
    try:
        wait_for(
            "the watch answered again",
            lambda: lines(caplog, "streamplane.client.routing_watch", logging.INFO),
            10,
        )
    finally:
        watcher.stop()
    assert lines(caplog, "streamplane.client.routing_watch", logging.WARNING) == [
        "routing watch for orders: control plane unreachable: keeping routing epoch 1"
    ]
    assert lines(caplog, "streamplane.client.routing_watch", logging.INFO) == [
        "routing watch for orders: the control plane answers again (epoch 1)"
    ]


# ---------------------------------------------------------------------- dead letters
DLQ = "streamplane.client.dlq_writer"


def test_dead_letters_are_one_warning_at_most_every_30_s_never_a_line_each(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    broker = DlqBroker()
    c, _ = consumer_of(100, broker)
    handed = poll(c, clock, 0)

    def dead_letter(offsets: range) -> None:
        for m in handed:
            if m.offset in offsets:
                m.reject(f"bad record {m.offset}")
        poll(c, clock, 0.2)  # the batch goes out
        broker.deliver()
        poll(c, clock, 0.2)  # written: settled

    dead_letter(range(0, 20))  # the first after a quiet spell: told at once
    assert lines(caplog, DLQ, logging.WARNING) == [
        "stream 's': 20 records dead-lettered in the last 1 s, last reason: bad record 19"
    ]
    dead_letter(range(20, 40))  # within 30 s: counted, not told
    clock.now += 10
    dead_letter(range(40, 45))
    assert len(lines(caplog, DLQ, logging.WARNING)) == 1

    clock.now += 20  # 30 s after the first summary
    dead_letter(range(45, 46))
    assert lines(caplog, DLQ, logging.WARNING)[1:] == [
        "stream 's': 25 records dead-lettered in the last 31 s, last reason: bad record 44"
    ]
    assert c.stats["dlq"] == 46
    assert c._dlq is not None
    clock.now += 5  # written 0.2 s before, the clock's last step: 5.2 s ago
    c._dlq.close(clock.now)  # what is left is told as the consumer closes
    assert lines(caplog, DLQ, logging.WARNING)[2:] == [
        "stream 's': 1 record dead-lettered in the last 6 s, last reason: bad record 45"
    ]
    # Nothing per record, at any level, from the client.
    streamplane = [r for r in caplog.records if r.name.startswith("streamplane.")]
    assert len(streamplane) == 3
