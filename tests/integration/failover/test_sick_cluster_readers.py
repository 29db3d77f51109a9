"""Readers that start while the cluster a stream failed over from is still down.

That is when consumers restart (a redeploy, a crash, a new group): the stream's
active segment is on the healthy cluster, its draining segment on the sick one.

- A StreamConsumer must read the healthy cluster at once, and the sick one's records
  once it is back, losing none. (Before, it could not start at all: reading where to
  start the draining segment's partitions waited ~30 s for the dead broker and then
  raised.)
- The Spark source's planning must ask the dead cluster once per micro-batch, with a
  short probe after the first failure. (Before, it waited 10 s for each of its
  partitions in every micro-batch.)
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from streamplane.client.consumer import StreamConsumer
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.dlq import list_dead_letters, replay_dead_letters
from streamplane.client.producer import StreamProducer
from streamplane.exceptions import KafkaError
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.local.fleet import LocalFleet
from streamplane.pipeline.options import parse_read_options
from streamplane.pipeline.source import StreamplaneStreamReader
from tests.integration.failover.conftest import all_healthy
from tests.waiting import wait_for


def produce(client: ControlPlaneClient, stream: str, prefix: str, n: int) -> set[bytes]:
    values = {f"{prefix}-{i}".encode() for i in range(n)}
    with StreamProducer(stream, control_plane=client) as producer:
        for value in sorted(values):
            producer.send(value)
    return values


def read_into(
    seen: set[bytes], consumer: StreamConsumer, want: set[bytes], timeout: float
) -> set[bytes]:
    """Poll and ack until every value of ``want`` is in ``seen`` or ``timeout`` passes;
    what of ``want`` is still missing."""
    deadline = time.monotonic() + timeout
    while not want <= seen and time.monotonic() < deadline:
        for msg in consumer.poll_batch(500, 0.5):
            assert msg.value is not None
            seen.add(msg.value)
            msg.ack()
    return want - seen


class CountedWatermarks:
    """A cluster's client in the Spark source's driver, counting watermark queries."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.timeouts: list[float] = []

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> Any:
        self.timeouts.append(timeout)
        return self.client.get_watermark_offsets(tp, timeout=timeout, cached=cached)

    def close(self) -> None:
        self.client.close()


def spark_source_planning(cp: ControlPlaneProcess, client: ControlPlaneClient, stream: str) -> None:
    """Two micro-batches' planning with local-a down: its partitions are skipped after
    one query each time, local-b's are all planned."""
    options = {"stream": stream, "group": "spark-sick", "controlPlane": cp.url, "token": cp.token}
    reader = StreamplaneStreamReader(parse_read_options(options))
    try:
        counted = CountedWatermarks(reader._consumer("local-a"))
        reader._consumers["local-a"] = counted  # type: ignore[assignment]
        table = client.routing(stream)
        on_b = {
            (s.topic, p)
            for s in table.readable(table.lanes)
            if s.cluster == "local-b"
            for p in range(s.partitions)
        }
        for _ in range(2):
            infos = reader._partition_infos(table, "earliest")
            assert {(i.key.topic, i.key.partition) for i in infos} == on_b
        assert counted.timeouts == [10.0, 1.0], counted.timeouts
    finally:
        reader.stop()


def test_readers_read_the_healthy_cluster_while_the_old_one_is_down(
    fo_fleet: LocalFleet,
    fo_control_plane: ControlPlaneProcess,
    fo_client: ControlPlaneClient,
    fo_stream: Callable[..., str],
) -> None:
    stream = fo_stream("local-a", partitions=2)
    on_a = produce(fo_client, stream, "a", 200)
    broker = fo_fleet.descriptor().cluster("local-a").brokers[0]
    fo_fleet.kill_broker("local-a", broker.node_id)
    consumer: StreamConsumer | None = None
    down = True
    try:
        # The control plane's health checks fail the stream over to local-b.
        wait_for(
            "the automatic failover", lambda: fo_client.routing(stream).epoch > 1, 30, every=0.2
        )
        on_b = produce(fo_client, stream, "b", 200)
        spark_source_planning(fo_control_plane, fo_client, stream)

        seen: set[bytes] = set()

        def read_until(want: set[bytes], timeout: float, what: str) -> None:
            assert consumer is not None
            missing = read_into(seen, consumer, want, timeout)
            assert not missing, f"{len(missing)} of {what} not read in {timeout:g}s"

        consumer = StreamConsumer(stream, f"restarted-{uuid.uuid4().hex[:6]}", fo_client)
        started = time.monotonic()
        read_until(on_b, 20, "local-b's records while local-a is down")
        print(f"\nlocal-b's records read {time.monotonic() - started:.1f}s after open")
        assert not seen & on_a  # local-a cannot have served anything

        fo_fleet.start_broker("local-a", broker.node_id)
        down = False
        back = time.monotonic()
        read_until(on_a, 90, "local-a's records once it is back")
        print(f"local-a's records read {time.monotonic() - back:.1f}s after its restart")
        assert seen == on_a | on_b
    finally:
        if consumer is not None:
            consumer.close()
        if down:
            fo_fleet.start_broker("local-a", broker.node_id)
        wait_for("both clusters healthy again", lambda: all_healthy(fo_client), 60, every=0.2)


def test_commits_go_on_while_a_cluster_holding_unsaved_progress_is_down(
    fo_fleet: LocalFleet, fo_client: ControlPlaneClient, fo_stream: Callable[..., str]
) -> None:
    """A consumer reads both clusters; local-a dies before its progress there is
    committed. librdkafka holds a commit to it until it answers: ``commit()`` must still
    return, and local-b's progress be committed. (Before, commit() and close() waited
    for the whole outage.)"""
    stream = fo_stream("local-a", partitions=2)
    on_a = produce(fo_client, stream, "a", 300)
    fo_client.failover(stream, "local-b")
    on_b = produce(fo_client, stream, "b", 300)
    group = f"dirty-{uuid.uuid4().hex[:6]}"
    seen: set[bytes] = set()
    consumer = StreamConsumer(stream, group, fo_client, commit_interval_s=600)
    read_into(seen, consumer, on_a | on_b, 60)
    assert seen == on_a | on_b
    broker = fo_fleet.descriptor().cluster("local-a").brokers[0]
    fo_fleet.kill_broker("local-a", broker.node_id)
    try:
        committed = threading.Event()

        def commit_and_close() -> None:
            consumer.commit()
            consumer.close()
            committed.set()

        threading.Thread(target=commit_and_close, daemon=True).start()
        assert committed.wait(30), "commit() and close() waited for the dead cluster"
        # local-b's progress is committed: the group's next member has nothing of it to
        # redo (local-a's partitions wait for local-a meanwhile).
        seen.clear()
        with StreamConsumer(stream, group, fo_client) as again:
            read_into(seen, again, {b"never"}, 5)
        assert not seen & on_b, f"{len(seen & on_b)} of local-b's records read again"
    finally:
        fo_fleet.start_broker("local-a", broker.node_id)
        wait_for("both clusters healthy again", lambda: all_healthy(fo_client), 60, every=0.2)


def test_dlq_list_and_replay_say_what_they_could_not_read(
    fo_fleet: LocalFleet, fo_client: ControlPlaneClient, fo_stream: Callable[..., str]
) -> None:
    """Dead letters on a cluster that is down: `dlq list` names the partitions it could
    not read and `dlq replay` fails after replaying the rest. (Before, both reported 0
    records and succeeded.)"""
    stream = fo_stream("local-a", partitions=1)
    with StreamProducer(stream, control_plane=fo_client) as producer:
        for i in range(20):
            producer.send(b"%d" % i, lane="dlq")
    broker = fo_fleet.descriptor().cluster("local-a").brokers[0]
    fo_fleet.kill_broker("local-a", broker.node_id)
    try:
        wait_for(
            "the automatic failover", lambda: fo_client.routing(stream).epoch > 1, 30, every=0.2
        )
        listing = list_dead_letters(fo_client, stream, limit=100)
        assert listing.letters == []
        assert {k.cluster for k in listing.unread} == {"local-a"}
        with pytest.raises(KafkaError, match="dlq partitions on local-a could not be read"):
            replay_dead_letters(fo_client, stream)
    finally:
        fo_fleet.start_broker("local-a", broker.node_id)
        wait_for("both clusters healthy again", lambda: all_healthy(fo_client), 60, every=0.2)
    assert replay_dead_letters(fo_client, stream).replayed == 20
