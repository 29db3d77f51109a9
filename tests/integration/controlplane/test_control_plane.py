"""The control plane against the real fleet: topics, failover, watch latency, outages."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from streamplane.client.consumer import StreamConsumer
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.producer import StreamProducer
from streamplane.controlplane.service import topic_config
from streamplane.core.routing import RoutingTable, SegmentState, commitlog_topic
from streamplane.exceptions import (
    ConfigError,
    Conflict,
    ControlPlaneError,
    ControlPlaneUnavailable,
    NotFound,
    Unauthorized,
)
from streamplane.kafka.admin import KafkaAdmin
from streamplane.local.control_plane_process import ControlPlaneProcess, free_port
from streamplane.local.fleet import FleetDescriptor
from tests.waiting import wait_for


def _topics(fleet: FleetDescriptor, cluster: str) -> dict[str, int]:
    md = KafkaAdmin(fleet.bootstrap(cluster)).metadata()
    return {name: len(t.partitions) for name, t in md.topics.items()}


def _wait_gone(
    fleet: FleetDescriptor, cluster: str, topics: set[str], timeout_s: float = 30
) -> None:
    wait_for(
        f"topics {sorted(topics)} gone from {cluster}",
        lambda: not topics & set(_topics(fleet, cluster)),
        timeout_s,
        every=0.2,
    )


def test_health_and_registered_clusters(control_plane: ControlPlaneProcess) -> None:
    with control_plane.client() as cp:
        assert cp.health()["status"] == "ok"
        names = {c["name"] for c in cp.list_clusters({"env": "local"})}
        assert {"local-a", "local-b"} <= names


def test_create_stream_makes_every_topic_with_log_append_time(
    control_plane: ControlPlaneProcess, fleet: FleetDescriptor, stream_factory: Callable[..., str]
) -> None:
    name = stream_factory(
        "local-a",
        lanes=("realtime", "bulk", "late"),
        partitions=3,
        max_record_bytes=200_000,
        config={"retention.ms": "3600000"},
    )
    with control_plane.client() as cp:
        table = cp.routing(name)
        desc = cp.describe_stream(name)
    assert table.epoch == 1
    expected = {f"sp.{name}.{lane}.e1": 3 for lane in ("realtime", "bulk", "late")}
    expected[f"sp.{name}.dlq.e1"] = 1
    on_a = _topics(fleet, "local-a")
    assert {t: on_a.get(t) for t in expected} == expected
    admin = KafkaAdmin(fleet.bootstrap("local-a"))
    for topic in expected:
        configs = admin.describe_topic_configs(topic)
        assert configs["message.timestamp.type"] == "LogAppendTime"
        assert configs["max.message.bytes"] == str(200_000 + 64 * 1024)
        assert configs["retention.ms"] == "3600000"
    assert desc["max_record_bytes"] == 200_000
    assert {s.topic for s in table.segments} == set(expected)


def test_delete_stream_removes_its_topics(
    control_plane: ControlPlaneProcess, fleet: FleetDescriptor
) -> None:
    name = f"del-{uuid.uuid4().hex[:8]}"
    with control_plane.client() as cp:
        table = cp.create_stream(name, "local-a", partitions=1)
        topics = {s.topic for s in table.segments}
        assert topics <= set(_topics(fleet, "local-a"))
        cp.delete_stream(name)
        with pytest.raises(NotFound, match=f"unknown stream '{name}'"):
            cp.describe_stream(name)
    _wait_gone(fleet, "local-a", topics)


def test_topics_left_by_a_killed_create_are_adopted_unless_written(
    control_plane: ControlPlaneProcess, fleet: FleetDescriptor
) -> None:
    """What a control plane killed between creating a stream's topics and saving it
    leaves: empty topics of the name. They are taken (they blocked the name for good);
    one holding a record is not."""
    name = f"orph-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdmin(fleet.bootstrap("local-a"))
    configs = topic_config({}, 1_048_576)  # what the stream gives its topics
    left: list[tuple[str, int, int, dict[str, str]]] = [
        (f"sp.{name}.realtime.e1", 2, 1, configs),
        (f"sp.{name}.bulk.e1", 2, 1, configs),
    ]
    assert set(admin.create_topics(left).values()) == {None}
    assert admin.end_offsets(f"sp.{name}.bulk.e1") == {0: 0, 1: 0}
    assert admin.end_offsets(f"sp.{name}.nothing.e1") == {}
    with control_plane.client() as cp:
        table = cp.create_stream(name, "local-a", partitions=2)
        assert {s.topic for s in table.segments} <= set(_topics(fleet, "local-a"))
        cp.delete_stream(name)
        _wait_gone(fleet, "local-a", {s.topic for s in table.segments})
        written = f"w{name}"
        topic = f"sp.{written}.realtime.e1"
        assert admin.create_topics([(topic, 1, 1, {})]) == {topic: None}
        producer = Producer({"bootstrap.servers": fleet.bootstrap("local-a")})
        producer.produce(topic, b"x")
        assert producer.flush(10) == 0
        with pytest.raises(Conflict, match="it has held records"):
            cp.create_stream(written, "local-a", partitions=1)
    admin.delete_topics([topic])


def test_consumer_sets_up_the_commitlog_side_topic_and_delete_removes_it(
    control_plane: ControlPlaneProcess, fleet: FleetDescriptor
) -> None:
    """After its first commit a consumer creates, in the background, the side topic it
    would spill commit-log state to (a first spill then never waits for a new topic's
    leader); deleting the stream deletes it with the lane topics."""
    name = f"side-{uuid.uuid4().hex[:8]}"
    side = commitlog_topic(name)
    with control_plane.client() as cp:
        cp.create_stream(name, "local-a", partitions=1)
        with StreamProducer(name, cp) as producer:
            producer.send(b"one")
        with StreamConsumer(name, "g", cp, assigner=False) as consumer:
            msg = wait_for("the record sent", lambda: consumer.poll(0.5), 30)
            assert side not in _topics(fleet, "local-a")  # not at open: after a commit
            msg.ack()
            consumer.commit()
            wait_for(
                f"side topic {side} created after the first commit",
                lambda: side in _topics(fleet, "local-a"),
                30,
                every=0.2,
            )
        cp.delete_stream(name)
    _wait_gone(fleet, "local-a", {side})


def test_delete_stream_can_keep_topics(
    control_plane: ControlPlaneProcess, fleet: FleetDescriptor
) -> None:
    name = f"keep-{uuid.uuid4().hex[:8]}"
    with control_plane.client() as cp:
        table = cp.create_stream(name, "local-a", partitions=1)
        cp.delete_stream(name, delete_topics=False)
    topics = {s.topic for s in table.segments}
    assert topics <= set(_topics(fleet, "local-a"))
    KafkaAdmin(fleet.bootstrap("local-a")).delete_topics(topics)


def test_failover_creates_topics_on_the_target_and_bumps_the_epoch(
    control_plane: ControlPlaneProcess, fleet: FleetDescriptor, stream_factory: Callable[..., str]
) -> None:
    name = stream_factory("local-a", partitions=2)
    with control_plane.client() as cp:
        new = cp.failover(name, "local-b", partitions=4, reason="drill")
        audit = cp.audit(name)
    assert new.epoch == 2
    for lane in ("realtime", "bulk"):
        active = new.active(lane)
        assert (active.cluster, active.topic, active.partitions) == (
            "local-b",
            f"sp.{name}.{lane}.e2",
            4,
        )
        old = next(s for s in new.segments if s.lane == lane and s.epoch == 1)
        assert (old.cluster, old.state) == ("local-a", SegmentState.DRAINING)
    assert new.active("dlq").cluster == "local-a"
    on_b = _topics(fleet, "local-b")
    assert on_b.get(f"sp.{name}.realtime.e2") == 4
    assert on_b.get(f"sp.{name}.bulk.e2") == 4
    configs = KafkaAdmin(fleet.bootstrap("local-b")).describe_topic_configs(f"sp.{name}.bulk.e2")
    assert configs["message.timestamp.type"] == "LogAppendTime"
    assert audit[0]["action"] == "stream.failover"
    assert audit[0]["detail"]["reason"] == "drill"


def test_watcher_is_released_within_a_second_of_a_failover(
    control_plane: ControlPlaneProcess,
    stream_factory: Callable[..., str],
    record_property: Callable[[str, object], None],
) -> None:
    name = stream_factory("local-a", partitions=1)
    released: list[tuple[float, RoutingTable]] = []

    def watch() -> None:
        with control_plane.client() as cp:
            table = cp.watch_routing(name, after_epoch=1, timeout=25)
            released.append((time.monotonic(), table))

    watcher = threading.Thread(target=watch)
    watcher.start()
    time.sleep(1.0)  # let the long poll reach the server and park
    assert not released, "the watch answered before any change"
    with control_plane.client() as cp:
        started = time.monotonic()
        cp.failover(name, "local-b")
        answered = time.monotonic()
    watcher.join(timeout=10)
    assert released, "the watcher was not released"
    at, table = released[0]
    assert table.epoch == 2
    # The server wakes watchers as soon as the new routing is saved, before it answers
    # the failover call, so the release usually comes first (a negative lag).
    after_answer = at - answered
    after_start = at - started
    record_property("watch_release_after_failover_answer_s", round(after_answer, 4))
    record_property("watch_release_after_failover_start_s", round(after_start, 4))
    print(
        f"\nwatch released {after_answer * 1000:+.1f} ms relative to the failover's answer, "
        f"{after_start * 1000:.1f} ms after the failover call started "
        f"(call took {(answered - started) * 1000:.0f} ms, including topic creation)"
    )
    assert after_answer < 1.0


def test_a_hundred_watchers_are_all_released(
    control_plane: ControlPlaneProcess,
    stream_factory: Callable[..., str],
    record_property: Callable[[str, object], None],
) -> None:
    name = stream_factory("local-a", partitions=1)
    released: list[tuple[float, int]] = []
    lock = threading.Lock()
    with control_plane.client() as shared:  # one pool of 100 connections for all

        def watch() -> None:
            table = shared.watch_routing(name, after_epoch=1, timeout=25)
            with lock:
                released.append((time.monotonic(), table.epoch))

        watchers = [threading.Thread(target=watch) for _ in range(100)]
        for w in watchers:
            w.start()
        time.sleep(2.0)  # let every long poll park on the server
        assert not released
        with control_plane.client() as cp:
            cp.failover(name, "local-b")
            answered = time.monotonic()
        for w in watchers:
            w.join(timeout=20)
    assert len(released) == 100
    assert {epoch for _, epoch in released} == {2}
    slowest = max(at for at, _ in released) - answered
    record_property("hundred_watchers_slowest_release_s", round(slowest, 4))
    print(f"\n100 watchers: the last was released {slowest * 1000:+.1f} ms after the failover")
    assert slowest < 1.0


def test_watch_times_out_with_the_same_epoch(
    control_plane: ControlPlaneProcess, stream_factory: Callable[..., str]
) -> None:
    name = stream_factory("local-a", partitions=1)
    with control_plane.client() as cp:
        table = cp.watch_routing(name, after_epoch=1, timeout=0.5)
    assert table.epoch == 1


def test_replication_factor_beyond_the_brokers_is_a_clear_400(
    control_plane: ControlPlaneProcess, fleet: FleetDescriptor
) -> None:
    name = f"rf-{uuid.uuid4().hex[:8]}"
    with control_plane.client() as cp, pytest.raises(ControlPlaneError) as err:
        cp.create_stream(name, "local-a", partitions=1, replication_factor=3)
    assert err.value.status == 400
    assert f"stream '{name}' not created" in str(err.value)
    assert "replication factor of 3 cannot be reached" in str(err.value)
    assert "\n" not in str(err.value)
    with control_plane.client() as cp, pytest.raises(NotFound):
        cp.describe_stream(name)
    assert not any(t.startswith(f"sp.{name}.") for t in _topics(fleet, "local-a"))


def test_a_cluster_that_does_not_answer_is_a_502_naming_it(
    control_plane: ControlPlaneProcess,
) -> None:
    """Creating a stream on a cluster nothing answers for: a 502 naming the cluster, and
    no stream. (The admin future's own TimeoutError reached the API as a 500.)"""
    cluster = f"gone-{uuid.uuid4().hex[:6]}"
    name = f"on-{cluster}"
    with control_plane.client() as cp:
        cp.register_cluster(cluster, f"127.0.0.1:{free_port()}", {}, force=True)
        try:
            with pytest.raises(ControlPlaneError) as err:
                cp.create_stream(name, cluster, partitions=1)
            assert err.value.status == 502, err.value
            assert cluster in str(err.value) and "\n" not in str(err.value)
            with pytest.raises(NotFound):
                cp.describe_stream(name)
        finally:
            cp.delete_cluster(cluster)


def test_bad_input_errors(control_plane: ControlPlaneProcess) -> None:
    with control_plane.client() as cp:
        with pytest.raises(NotFound, match="unknown stream 'no-such-stream'"):
            cp.routing("no-such-stream")
        with pytest.raises(NotFound, match="unknown cluster 'nowhere'"):
            cp.create_stream("valid-name", "nowhere")
        with pytest.raises(ConfigError, match="invalid stream name"):  # before any request
            cp.create_stream("Not_Valid", "local-a")
        with pytest.raises(ControlPlaneError, match="invalid stream name"):
            cp.describe_stream("Not_Valid")
        with pytest.raises(ControlPlaneError, match="partitions") as err:
            cp.create_stream("valid-name", "local-a", partitions=0)
        assert err.value.status == 422
    anonymous = ControlPlaneClient(control_plane.url)
    with anonymous, pytest.raises(Unauthorized, match="missing API token"):
        anonymous.create_stream("valid-name", "local-a")
    wrong = ControlPlaneClient(control_plane.url, token="wrong-token")
    with wrong, pytest.raises(Unauthorized, match="wrong API token"):
        wrong.register_cluster("x", "h:1")


def test_unreachable_control_plane() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with ControlPlaneClient(url, timeout=2.0) as cp, pytest.raises(ControlPlaneUnavailable) as err:
        cp.routing("anything")
    message = str(err.value)
    assert url in message
    assert "unreachable" in message
    assert "\n" not in message


def test_stop_and_start_keeps_the_state(
    control_plane: ControlPlaneProcess, stream_factory: Callable[..., str]
) -> None:
    name = stream_factory("local-a", partitions=1)
    control_plane.stop()
    try:
        with control_plane.client() as cp, pytest.raises(ControlPlaneUnavailable):
            cp.routing(name)
    finally:
        control_plane.start()
    with control_plane.client() as cp:
        assert cp.routing(name).epoch == 1
