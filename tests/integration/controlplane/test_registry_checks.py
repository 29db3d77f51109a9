"""What the control plane checks against the real fleet before it changes anything: a
hand-made topic is not adopted by a failover, tags go only on brokers and topics the
cluster has, stream-reserved names are not made by hand, and a cluster is registered
only if it answers and is not registered under another name already."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable

import pytest

from streamplane.exceptions import Conflict, ControlPlaneError, NotFound
from streamplane.kafka.admin import KafkaAdmin
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.local.fleet import FleetDescriptor
from streamplane.ops.tags_client import TagsClient


def test_a_failover_does_not_adopt_a_hand_made_topic(
    control_plane: ControlPlaneProcess,
    fleet: FleetDescriptor,
    stream_factory: Callable[..., str],
) -> None:
    """The exploratory run's repro (with RF 1: these clusters have one broker each): a
    topic of the next epoch's name made by hand with its own retention. Before, it
    became the stream's active topic, without the managed timestamp type and size."""
    stream = stream_factory("local-a", lanes=("realtime",), partitions=2)
    topic = f"sp.{stream}.realtime.e2"
    admin = KafkaAdmin(fleet.bootstrap("local-b"))
    assert admin.create_topics([(topic, 2, 1, {"retention.ms": "60000"})]) == {topic: None}
    try:
        with control_plane.client() as cp:
            with pytest.raises(Conflict) as err:
                cp.failover(stream, "local-b", lanes=["realtime"])
            detail = str(err.value)
            assert f"topic {topic} already exists on cluster local-b" in detail
            assert "retention.ms=60000 (the stream's: the default)" in detail
            assert "message.timestamp.type=the cluster's default" in detail
            assert "delete the topic" in detail
            table = cp.routing(stream)
            assert table.epoch == 1
            assert {s.cluster for s in table.segments} == {"local-a"}
        assert admin.describe_topic_configs(topic)["retention.ms"] == "60000"  # left alone
    finally:
        admin.delete_topics([topic])


def test_tags_only_on_what_the_cluster_has(
    control_plane: ControlPlaneProcess, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory("local-a")
    with control_plane.client() as cp:
        tags = TagsClient(cp)
        with pytest.raises(NotFound, match="broker 99 is not a live broker of cluster local-a"):
            tags.set_tags("local-a", "broker", 99, {"x": "y"})
        with pytest.raises(NotFound, match="topic nonexistent-topic does not exist on cluster"):
            tags.set_tags("local-a", "topic", "nonexistent-topic", {"x": "y"})
        with pytest.raises(ControlPlaneError, match="tag 'rack' is reserved") as err:
            tags.set_tags("local-a", "broker", 1, {"rack": "z"})
        assert err.value.status == 400
        assert tags.set_tags("local-a", "topic", topic, {"x": "y"})["tags"] == {"x": "y"}
        assert [t["topic"] for t in tags.list_tagged("local-a", "topic", {"x": "y"})] == [topic]
        assert tags.list_tagged("local-a", "broker", {"x": "y"}) == []


def test_a_stream_reserved_topic_name_is_not_made_by_hand(
    control_plane: ControlPlaneProcess, fleet: FleetDescriptor
) -> None:
    name = f"sp.orders.realtime.e{uuid.uuid4().int % 10_000 + 2}"
    with control_plane.client() as cp:
        with pytest.raises(
            ControlPlaneError, match=re.escape(f"topic name {name} is reserved")
        ) as err:
            TagsClient(cp).create_topic("local-b", name, partitions=6)
        assert err.value.status == 400
    assert name not in KafkaAdmin(fleet.bootstrap("local-b")).metadata().topics


def test_clusters_add_checks_the_bootstrap(
    control_plane: ControlPlaneProcess, fleet: FleetDescriptor
) -> None:
    ghost, dup = f"ghost-{uuid.uuid4().hex[:6]}", f"dupa-{uuid.uuid4().hex[:6]}"
    with control_plane.client() as cp:
        with pytest.raises(
            ControlPlaneError, match=re.escape("127.0.0.1:1 does not answer")
        ) as err:
            cp.register_cluster(ghost, "127.0.0.1:1")
        assert err.value.status == 400 and "--force" in str(err.value)
        with pytest.raises(Conflict, match="already registered as 'local-b'"):
            cp.register_cluster(dup, fleet.bootstrap("local-b"))
        names = {c["name"] for c in cp.list_clusters()}
        assert ghost not in names and dup not in names
