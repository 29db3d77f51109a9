"""The health probe on a 3-broker cluster (streams: 3 replicas, min.insync.replicas 2)
checks what the streams need, ``acks=all`` writes:

- the leader of a health partition hung (SIGSTOP): no probe reads ok. Before, a write
  not acknowledged within the probe's timeout counted as failed only if its report had
  come (it came after the purge, at a later probe): 5 of 20 probes said ok, and the
  cluster flipped ok/degraded ~55 times in 2.5 minutes;
- a metadata read that times out (a broker restarting) while the writes go through:
  degraded, not failed (before, three such probes made the cluster down);
- two brokers of three killed (the controller quorum too): the cluster is down and a
  stream on it is failed over. Before, the probe wrote with ``acks=1``, which the
  survivor took, and the cluster stayed ok/degraded: the streams took no write for 60 s+
  and were never failed over.

Its own fleets (a 3-broker cluster ``tri``, a 1-broker ``solo``: brokers are killed and
hung here) and control plane (health on: probe every 0.5 s, down after 2 s).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError as ConfluentKafkaError
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from streamplane.controlplane.cluster_io import HEALTH_TOPIC, KafkaClusterIO
from streamplane.exceptions import KafkaError
from streamplane.kafka.admin import QUIET
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.local.fleet import FleetSpec, LocalFleet
from tests.integration.failover.conftest import HEALTH_ARGS
from tests.waiting import wait_for

TRI, SOLO = "tri", "solo"
HUNG_S = 8.0  # shorter than Kafka's fencing of the hung broker (~10 s, its session timeout)


def _fleet(data_dir: Path, name: str, brokers: int) -> LocalFleet:
    fleet = LocalFleet(data_dir)
    spec = FleetSpec(
        data_dir=data_dir,
        clusters=1,
        brokers_per_cluster=brokers,
        names=(name,),
        heap_mb=384,
    )
    fleet.up(spec)
    return fleet


@pytest.fixture(scope="module")
def tri_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    fleet = _fleet(tmp_path_factory.mktemp("tri-fleet"), TRI, 3)
    yield fleet
    fleet.down(purge=True)


@pytest.fixture(scope="module")
def solo_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    fleet = _fleet(tmp_path_factory.mktemp("solo-fleet"), SOLO, 1)
    yield fleet
    fleet.down(purge=True)


def _clean_probe(io: KafkaClusterIO) -> bool:
    try:  # the health topic's partitions may still be electing their leaders
        return io.probe(1.0) is None
    except KafkaError:
        return False


def test_a_metadata_read_that_times_out_alone_does_not_fail_the_probe(
    tri_fleet: LocalFleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rolling restart: the broker the probe's admin client asked for metadata was
    restarting (it took connections, did not answer), the 1 s metadata read timed out
    and failed the probe, three in a row made a cluster down whose two other brokers
    took every write (an exploratory run). Now the writes go by the last layout read,
    and all of them acknowledged make the probe degraded (it says why), not failed."""
    io = KafkaClusterIO(tri_fleet.descriptor().cluster(TRI).bootstrap, probe_timeout=1.0)
    try:
        # Two in a row: a probe that made the health topic leaves its layout to the next
        # one (this test failed when it ran first on a fresh fleet).
        wait_for("two clean probes", lambda: _clean_probe(io) and _clean_probe(io), 60, every=0.5)

        def timed_out(*args: object, **kwargs: object) -> None:
            raise KafkaException(
                ConfluentKafkaError(
                    ConfluentKafkaError._TIMED_OUT, "Failed to get metadata: Local: Timed out"
                )
            )

        monkeypatch.setattr(io._admin, "list_topics", timed_out)
        outcomes = []
        for _ in range(3):
            try:
                outcomes.append(io.probe(1.0))
            except KafkaError as exc:  # the cluster would count as failing
                outcomes.append(f"failed: {exc}")
        assert all(
            isinstance(o, str) and o.startswith("metadata: ") and "the writes went" in o
            for o in outcomes
        ), outcomes
    finally:
        io.close()


def test_a_hung_partition_leader_never_reads_as_ok(tri_fleet: LocalFleet) -> None:
    cluster = tri_fleet.descriptor().cluster(TRI)
    io = KafkaClusterIO(cluster.bootstrap, probe_timeout=1.0)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
    try:
        wait_for("a clean probe", lambda: _clean_probe(io), 60, every=0.5)
        topic = admin.list_topics(HEALTH_TOPIC, timeout=10).topics[HEALTH_TOPIC]
        leaders = {p.id: p.leader for p in topic.partitions.values()}
        assert set(leaders.values()) == {b.node_id for b in cluster.brokers}  # one each
        pid = cluster.broker(leaders[1]).pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            outcomes: list[str] = []
            end = time.monotonic() + HUNG_S
            while time.monotonic() < end:
                started = time.monotonic()
                try:
                    problem = io.probe(1.0)
                except KafkaError as exc:  # the cluster would count as failing
                    outcomes.append(f"failed: {exc}")
                else:
                    outcomes.append("ok" if problem is None else f"{type(problem).__name__}")
                time.sleep(max(0.0, 0.5 - (time.monotonic() - started)))
        finally:
            os.kill(pid, signal.SIGCONT)
        # Degraded every time: a partial probe (str) or a stall (ProbeStall), which the
        # health loop counts as degraded for STALL_THRESHOLD_S.
        assert len(outcomes) >= 5, outcomes
        assert all(o in ("str", "ProbeStall") for o in outcomes), outcomes
        wait_for("a clean probe after SIGCONT", lambda: _clean_probe(io), 60, every=0.5)
    finally:
        io.close()


def test_two_brokers_of_three_killed_is_down_and_the_stream_failed_over(
    tmp_path_factory: pytest.TempPathFactory, tri_fleet: LocalFleet, solo_fleet: LocalFleet
) -> None:
    tri = tri_fleet.descriptor().cluster(TRI)
    cp = ControlPlaneProcess(
        tmp_path_factory.mktemp("health-cp"),
        token=f"tok-{uuid.uuid4().hex}",
        extra_args=HEALTH_ARGS,
        log_level="info",
    )
    cp.start()
    try:
        with cp.client(timeout=30) as client:
            client.register_cluster(TRI, tri.bootstrap, {"standby": SOLO})
            client.register_cluster(SOLO, solo_fleet.descriptor().cluster(SOLO).bootstrap)

            def health() -> dict[str, str]:
                return {c["name"]: c["health"] for c in client.cluster_health()["clusters"]}

            wait_for("both clusters ok", lambda: set(health().values()) == {"ok"}, 60, every=0.2)
            stream = f"hc-{uuid.uuid4().hex[:8]}"
            client.create_stream(stream, TRI, partitions=3)
            time.sleep(3.0)  # solo ok for longer than the threshold: a trusted target
            killed_at = time.monotonic()
            for broker in tri.brokers[:2]:
                tri_fleet.kill_broker(TRI, broker.node_id)
            wait_for("tri down", lambda: health()[TRI] == "down", 60, every=0.2)
            down_after = time.monotonic() - killed_at

            def actives() -> set[str]:
                table = client.routing(stream)
                return {table.active(lane).cluster for lane in table.all_lanes}

            wait_for("the stream failed over to solo", lambda: actives() == {SOLO}, 30)
            # Down in a few seconds when the dead brokers lead health partitions, after
            # the stall threshold (20 s) at worst.
            assert down_after < 40, down_after
    finally:
        cp.stop()
