"""A lane added to a live stream reaches its clients without a restart: a consumer of
every lane (``lanes=None``) reads it at its priority (``StreamConsumer._rank_lanes``),
and a producer sends to it as soon as the change is saved, before its routing watch
has brought it (``StreamProducer._route_after_refresh``). Without Kafka."""

from __future__ import annotations

from typing import Any, cast

import pytest
from confluent_kafka import Message

import streamplane.client.consumer as consumer_module
from streamplane.client.consumer import StreamConsumer
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.partition_state import PartitionKey
from streamplane.client.routing_watch import RoutingWatcher
from streamplane.core.routing import RoutingTable, add_lane, new_routing_table
from streamplane.exceptions import ConfigError
from tests.unit.client.harness import BULK, REALTIME, Clock, fetched, two_lane_consumer
from tests.unit.client.test_producer_epoch import idle_producer

TABLE = new_routing_table("s", ["realtime", "bulk"], "local-a", 1)
WITH_PRIORITY = add_lane(TABLE, "priority", "local-a", 1, before="bulk")
PRIORITY = PartitionKey("local-a", "sp.s.priority.e2", 0)


class Fetcher:
    """A lane's Kafka client on local-a: what it was told to read."""

    def __init__(self, config: object = None) -> None:
        self.assigned: list[tuple[str, int]] = []

    def incremental_assign(self, tps: list[Any]) -> None:
        self.assigned += [(tp.topic, tp.partition) for tp in tps]

    def incremental_unassign(self, tps: list[Any]) -> None: ...

    def consume(self, max_records: int, timeout: float) -> list[Message]:
        return []  # (what it fetched is fed to ``_accept`` by the test)

    def pause(self, tps: object) -> None: ...

    def resume(self, tps: object) -> None: ...


class NothingCommitted:
    def load(self, partitions: object) -> dict[object, object]:
        return {}


def every_lane_consumer(monkeypatch: pytest.MonkeyPatch) -> StreamConsumer:
    """A consumer of every lane (``lanes=None``) of stream ``s`` reading realtime and
    bulk (one partition each) on local-a."""
    monkeypatch.setattr(consumer_module, "Consumer", Fetcher)
    c = two_lane_consumer()
    assert c._follows_stream_lanes  # made with lanes=None
    c._consumers = {("local-a", 0): Fetcher(), ("local-a", 1): Fetcher()}  # type: ignore[dict-item]
    c._fetch_order = sorted(c._consumers.items(), key=lambda item: -item[0][1])
    c._commit_stores["local-a"] = NothingCommitted()  # type: ignore[assignment]
    c._bootstraps["local-a"] = "127.0.0.1:9"
    return c


def test_a_consumer_of_every_lane_reads_an_added_lane_at_its_priority(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = every_lane_consumer(monkeypatch)
    bulk_client = c._consumers["local-a", 1]
    c._accept("local-a", fetched(BULK, 0, 3))  # buffered before the lane is added
    assert [m.offset for m in c.poll_batch(1, 0)] == [0]  # one in the application's hands

    c._on_routing(WITH_PRIORITY)  # the routing watch
    c._housekeeping()  # (the consuming thread applies it)

    assert c._lanes == ["realtime", "priority", "bulk"]
    assert c._states[BULK].priority == 2 and c._states[PRIORITY].priority == 1
    assert c._consumers["local-a", 2] is bulk_client  # bulk's client, one priority down
    assert cast(Fetcher, c._consumers["local-a", 1]).assigned == [(PRIORITY.topic, 0)]
    c._accept("local-a", fetched(PRIORITY, 0, 2) + fetched(BULK, 3, 1) + fetched(REALTIME, 0, 1))
    out = c.poll_batch(100, 0)
    assert [(m.lane, m.offset) for m in out] == [
        ("realtime", 0),
        ("priority", 0),
        ("priority", 1),
        ("bulk", 1),  # what was buffered is kept, in order
        ("bulk", 2),
        ("bulk", 3),
    ]


def test_a_consumer_of_chosen_lanes_keeps_them(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = every_lane_consumer(monkeypatch)
    c._follows_stream_lanes = False  # as made with lanes=["realtime", "bulk"]
    c._on_routing(WITH_PRIORITY)
    c._housekeeping()
    assert c._lanes == ["realtime", "bulk"] and PRIORITY not in c._states


class LaneJustAdded:
    """A control plane where lane ``priority`` was just added: ``routing`` answers
    with it, while the watch has not brought it yet (it never answers here)."""

    def __init__(self) -> None:
        self.asked = 0

    def routing(self, stream: str) -> RoutingTable:
        self.asked += 1
        return WITH_PRIORITY

    def watch_routing(self, stream: str, after_epoch: int, timeout: float = 25.0) -> RoutingTable:
        raise AssertionError("not started")


def test_a_producer_sends_to_a_lane_added_before_its_watch_brought_it() -> None:
    producer = idle_producer(["realtime", "bulk"])
    control_plane = LaneJustAdded()
    watcher = RoutingWatcher(cast(ControlPlaneClient, control_plane), "s")
    watcher._table = TABLE
    watcher.add_listener(producer._apply)
    producer._watcher = watcher

    producer.send(b"first", lane="priority")
    assert producer.epoch == 2 and producer.active_topic("priority") == "sp.s.priority.e2"
    assert control_plane.asked == 1
    # A lane no routing has is refused, the routing asked again at most every second.
    with pytest.raises(ConfigError, match="has no lane 'nope'"):
        producer.send(b"x", lane="nope")
    assert control_plane.asked == 1  # asked less than a second ago
    producer._lanes_refreshed_at -= 1.0  # a second later
    with pytest.raises(ConfigError, match="has no lane 'nope'"):
        producer.send(b"x", lane="nope")
    assert control_plane.asked == 2
