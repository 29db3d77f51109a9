"""A sealed segment read to its end is retired after its cluster's brokers all restarted,
without restarting the control plane.

An exploratory run: stream ``orders`` active on a 3-broker cluster, a group reading it;
all three brokers killed, the health loop failed the stream over (correct), the brokers
started again. The old segments were sealed and read to their end, and stayed sealed
for 4.5 minutes, nothing logged, until the control plane was restarted. The sealer
lists a cluster's consumer groups (ListGroups) over a long-lived kafka-python client,
which asks the brokers of its cached metadata (read again every 5 minutes); a group is
listed only by its coordinator. The client had read its metadata while only some
brokers were back; once a broker that came back later coordinated the group again, the
group was left out without an error, and seen as a reader that had not settled the
segment.

Here the restart is done in that order, every step waited on: brokers killed (the
group's coordinator first; the stream fails over), two of three started (the cluster
answers: the segment is sealed and the sealer's client reads the metadata of those two),
the third started, and the group's ``__consumer_offsets`` partition given back to it (a
preferred-leader election, as the brokers run every 5 minutes). Then the group reads the
old segment to its end, and it must be retired within ``RETIRE_BOUND_S``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient

from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.producer import StreamProducer
from streamplane.kafka.admin import QUIET, KafkaAdmin
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.local.fleet import ClusterInfo, FleetSpec, LocalFleet, wait_healthy
from tests.integration.failover.conftest import (
    HEALTH_ARGS,
    all_healthy,
    consume_ids,
    segment_states,
)
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

RECORDS = 300
RETIRE_BOUND_S = 30.0
OFFSETS_TOPIC = "__consumer_offsets"


@pytest.fixture(scope="module")
def trio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    """One 3-broker cluster, ``trio`` (its brokers get killed here)."""
    data_dir = tmp_path_factory.mktemp("retire-trio")
    fleet = LocalFleet(data_dir)
    spec = FleetSpec(
        data_dir=data_dir, clusters=1, brokers_per_cluster=3, names=("trio",), heap_mb=384
    )
    fleet.up(spec)
    yield fleet
    fleet.down(purge=True)


@pytest.fixture(scope="module")
def solo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    """One single-broker cluster, ``solo``: where the stream fails over to."""
    data_dir = tmp_path_factory.mktemp("retire-solo")
    fleet = LocalFleet(data_dir)
    fleet.up(FleetSpec(data_dir=data_dir, clusters=1, names=("solo",), heap_mb=384))
    yield fleet
    fleet.down(purge=True)


@pytest.fixture
def client(
    tmp_path_factory: pytest.TempPathFactory, trio: LocalFleet, solo: LocalFleet
) -> Iterator[ControlPlaneClient]:
    """A control plane with health checks and the sealer on, over trio and solo."""
    cp = ControlPlaneProcess(
        tmp_path_factory.mktemp("retire-cp"),
        token=f"tok-{uuid.uuid4().hex}",
        extra_args=HEALTH_ARGS,
        log_level="info",
    )
    cp.start()
    try:
        with cp.client(timeout=60) as c:
            c.register_cluster("trio", cluster(trio).bootstrap, {"standby": "solo"})
            c.register_cluster("solo", cluster(solo).bootstrap, {"standby": "trio"})
            wait_for("both clusters healthy", lambda: all_healthy(c), 60, every=0.2)
            yield c
    finally:
        cp.stop()


def cluster(fleet: LocalFleet) -> ClusterInfo:
    (only,) = fleet.descriptor().clusters.values()
    return only


def offsets_partition(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group``, as Kafka computes it (Java's
    ``String.hashCode``, then ``Utils.abs``)."""
    h = 0
    for ch in group:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return (h & 0x7FFFFFFF) % partitions


def offsets_layout(admin: AdminClient) -> dict[int, tuple[int, list[int]]]:
    """``__consumer_offsets``: partition -> (leader, replicas)."""
    topic = admin.list_topics(OFFSETS_TOPIC, timeout=10).topics[OFFSETS_TOPIC]
    return {p.id: (p.leader, list(p.replicas)) for p in topic.partitions.values()}


def in_sync_somewhere(admin: AdminClient, node: int) -> bool:
    """Whether ``node`` is an in-sync replica of any partition of the cluster."""
    topics = admin.list_topics(timeout=10).topics.values()
    return any(node in p.isrs for t in topics for p in t.partitions.values())


def test_a_segment_read_to_its_end_is_retired_after_its_cluster_restarted(
    client: ControlPlaneClient, trio: LocalFleet
) -> None:
    info = cluster(trio)
    admin = AdminClient({"bootstrap.servers": info.bootstrap, **QUIET})
    scratch = f"retire-warmup-{uuid.uuid4().hex[:8]}"
    assert KafkaAdmin(info.bootstrap).create_topics([(scratch, 1, 1, {})])[scratch] is None
    warmup = Consumer({"bootstrap.servers": info.bootstrap, "group.id": scratch, **QUIET})
    try:  # a first commit creates __consumer_offsets
        warmup.commit(offsets=[TopicPartition(scratch, 0, 0)], asynchronous=False)
    finally:
        warmup.close()
    layout = wait_for("__consumer_offsets", lambda: offsets_layout(admin), 30, every=0.5)
    group = f"g-{uuid.uuid4().hex[:8]}"
    partition = offsets_partition(group, len(layout))
    late = layout[partition][1][0]  # the group's preferred coordinator: started last

    stream = f"retire-{uuid.uuid4().hex[:8]}"
    client.create_stream(stream, "trio", partitions=3, lanes=["realtime"])
    old = client.routing(stream).active("realtime").topic
    with StreamProducer(stream, client) as producer:
        for n in range(RECORDS):
            producer.send(b"%d" % n)

    brokers = [b.node_id for b in info.brokers]
    # ``late`` dies first, and the others once the controller has taken it out of every
    # in-sync replica set: killed together, a partition whose last in-sync replica was
    # ``late`` stays offline until it is back (a broker back from a kill -9 is not
    # eligible before it has caught up), and the cluster does not answer with two
    # brokers (trio stayed down for 120 s in one CI run).
    trio.kill_broker("trio", late)
    wait_for(f"broker {late} out of every in-sync replica set",
             lambda: not in_sync_somewhere(admin, late), 60, every=0.5)  # fmt: skip
    for node in brokers:
        if node != late:
            trio.kill_broker("trio", node)
    try:
        wait_for(
            f"{stream} failed over to solo",
            lambda: client.routing(stream).active("realtime").cluster == "solo",
            60,
            every=0.2,
        )
        for node in brokers:
            if node != late:
                trio.start_broker("trio", node, wait=False)
        wait_for(
            f"{old} sealed with two brokers of three back",
            lambda: segment_states(client, stream)[old] == "sealed",
            120,
            every=0.5,
        )
        time.sleep(7.0)  # a retire round (every 5 s) reads trio's groups with two brokers
    finally:
        if late in brokers:
            trio.start_broker("trio", late, wait=False)
        wait_healthy(cluster(trio), timeout_s=120)

    def coordinator_back() -> bool:
        leader, _ = offsets_layout(admin)[partition]
        if leader == late:
            return True
        admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(OFFSETS_TOPIC, partition)])
        return False

    wait_for(f"broker {late} coordinating {group} again", coordinator_back, 60, every=1.0)

    seen, _ = consume_ids(client, stream, group, set(range(RECORDS)), 90)
    assert seen >= set(range(RECORDS))
    read_at = time.monotonic()
    wait_for(
        f"{old} retired within {RETIRE_BOUND_S:g}s of being read to its end",
        lambda: segment_states(client, stream)[old] == "retired",
        RETIRE_BOUND_S,
        every=0.5,
    )
    print(f"{old} retired {time.monotonic() - read_at:.1f}s after it was read to its end")
