"""Ending a consumer: SIGTERM whose handler calls ``close()``, ``close()`` while it
opens (a producer's too), and the stream deleted under a running consumer (real fleet
and control plane).

Found by an exploratory run (an application following docs/client.md): ``close()``
from a SIGTERM handler hung for good (the handler runs on the main thread, which held
the poll's lock); and after ``streams delete`` a running consumer went on for good
with no records and warnings only, while the producer raised NotFound."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.producer import StreamProducer
from streamplane.exceptions import NotFound, ProduceError
from tests.waiting import wait_for

from .records import produce_numbers

HERE = Path(__file__).parent


@pytest.mark.parametrize("how", ["iterate", "run"])
def test_sigterm_handler_closing_an_idle_consumer_commits_and_exits(
    control_plane: Any, stream_factory: Any, tmp_path: Path, how: str
) -> None:
    """The process has handled every record and waits for more (an idle stream, where a
    flag checked per record is never looked at) when SIGTERM comes: it exits, having
    committed (commit_interval_s=60: the closing commit), so the next member of the
    group is handed nothing again."""
    client: ControlPlaneClient = control_plane.client()
    stream = stream_factory(cluster="local-a", partitions=2)
    total = 300
    produce_numbers(client, stream, total)
    group = f"g-{uuid.uuid4().hex[:6]}"
    out = tmp_path / "handled.txt"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "sigterm_consumer_process.py"),
            control_plane.url,
            control_plane.token,
            stream,
            group,
            str(out),
            how,
        ],
        # The modules this test imports (the source tree it runs against, not only the
        # installed package), and the tests' root.
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[2]), *sys.path])},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(
            f"the consumer process to handle {total} records",
            lambda: out.exists() and out.read_text().count("\n") >= total,
            60,
            every=0.1,
        )
        proc.send_signal(signal.SIGTERM)
        try:
            stdout, _ = proc.communicate(timeout=60)  # a hang guard: before, for good
        except subprocess.TimeoutExpired:
            pytest.fail("close() from the SIGTERM handler hung")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0
    assert "exited" in stdout
    handled = out.read_text().splitlines()
    assert len(handled) == total == len(set(handled))

    again: list[StreamMessage] = []
    with StreamConsumer(stream, group, client) as consumer:
        for _ in range(15):  # 3 s: the group's units are granted within a heartbeat
            msg = consumer.poll(0.2)
            if msg is not None:
                again.append(msg)
    assert again == [], "records handled again: the closing commit was not made"


def test_run_raises_not_found_once_the_stream_is_deleted(
    control_plane: Any, stream_factory: Any
) -> None:
    """``run`` ends by raising NotFound ("stream 'x' was deleted"), as the producer's
    ``send`` does, and ``close`` then returns."""
    client: ControlPlaneClient = control_plane.client()
    stream = stream_factory(cluster="local-a", partitions=2)
    produce_numbers(client, stream, 200)
    consumer = StreamConsumer(stream, f"g-{uuid.uuid4().hex[:6]}", client)
    handled = threading.Event()
    raised: list[BaseException] = []
    stop = threading.Event()  # the test's own clean-up, should run not end

    def run() -> None:
        try:
            consumer.run(lambda _msg: handled.set(), concurrency=4, stop=stop)
        except BaseException as exc:
            raised.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    try:
        assert handled.wait(60), "run() handled nothing"
        client.delete_stream(stream)
        runner.join(60)  # a hang guard: the watch hears of it within a long poll
        assert not runner.is_alive(), "run() went on after the stream was deleted"
    finally:
        stop.set()
        runner.join(10)
    assert len(raised) == 1 and isinstance(raised[0], NotFound), raised
    assert f"stream {stream!r} was deleted" in str(raised[0])
    closer = threading.Thread(target=consumer.close, daemon=True)
    closer.start()
    closer.join(60)
    assert not closer.is_alive(), "close() hung after the stream was deleted"


class ClosingOnRouting(ControlPlaneClient):
    """A client that calls ``closing()`` (``close`` of the consumer or producer it
    serves) as it reads the routing, the first step of ``open``: as a signal handler
    would."""

    closing: Callable[[], object] = staticmethod(lambda: None)

    def routing(self, name: str) -> Any:
        table = super().routing(name)
        self.closing()
        return table


def test_close_while_opening_closes_what_the_open_started(
    control_plane: Any, stream_factory: Any
) -> None:
    """``close`` comes while ``open`` runs (a SIGTERM handler as ``with StreamConsumer``
    starts): it found nothing open, yet ``open`` went on to start the group's heartbeat,
    the dlq producer and the Kafka clients, and nothing closed them (the member kept its
    partitions as long as the process lived). Now ``open`` closes them as it ends, and
    the iteration hands out nothing."""
    client: ControlPlaneClient = control_plane.client()
    stream = stream_factory(cluster="local-a", partitions=2)
    produce_numbers(client, stream, 50)
    group = f"g-{uuid.uuid4().hex[:6]}"
    closing = ClosingOnRouting(control_plane.url, token=control_plane.token)
    consumer = StreamConsumer(stream, group, closing)
    closing.closing = consumer.close
    with consumer:
        assert list(consumer) == []
    assert consumer._torn_down
    for kafka_consumer in consumer._consumers.values():
        with pytest.raises(RuntimeError):  # confluent-kafka: "Consumer closed"
            kafka_consumer.assignment()
    membership = consumer._membership
    assert membership is not None and membership._thread is not None
    assert not membership._thread.is_alive()

    def members() -> Any:
        try:
            return client.describe_group(group).get("members")
        except NotFound:
            return None

    wait_for("the member to leave its group", lambda: not members(), 10)


def test_a_producer_closed_while_opening_lets_go_of_what_the_open_started(
    control_plane: Any, stream_factory: Any
) -> None:
    """The producer's ``close`` found nothing open and returned; the open went on to
    start its Kafka producers and its heartbeat, which counted it live for the sealer
    for as long as the process lived. Now the open lets them go as it ends, and the
    producer leaves the stream's live producers."""
    client: ControlPlaneClient = control_plane.client()
    stream = stream_factory(cluster="local-a", partitions=2)
    closing = ClosingOnRouting(control_plane.url, token=control_plane.token)
    producer = StreamProducer(stream, closing)
    closing.closing = producer.close
    with producer, pytest.raises(ProduceError, match="the producer is closed"):
        producer.send(b"x")
    assert producer._producers == {}
    assert producer.heartbeat._thread is None
    assert client.segments(stream)["producers"] == {}
