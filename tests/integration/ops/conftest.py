"""Ops tests run on the session's three-broker rack cluster ("racked": brokers 1-3 in racks
a, b, c). ``racked4`` adds a fourth broker (rack a) once, for replacement and scale;
it stays for the rest of the session."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from streamplane.cli.local import local
from streamplane.exceptions import KafkaError
from streamplane.kafka.clients import make_producer
from streamplane.local.fleet import ClusterInfo, LocalFleet, wait_healthy
from streamplane.ops.kafka_ops import KafkaOpsAdmin
from tests.waiting import wait_for


@pytest.fixture(scope="session")
def racked4(rack_local_fleet: LocalFleet, rack_cluster: ClusterInfo) -> ClusterInfo:
    cluster = rack_local_fleet.descriptor().cluster("racked")
    if len(cluster.brokers) < 4:  # as an operator would: `streamplane local add-broker`
        args = ["add-broker", "racked", "--rack", "a", "--data-dir", rack_local_fleet.data_dir]
        out = CliRunner().invoke(local, [str(a) for a in args])
        assert out.exit_code == 0, out.output
        assert "added broker 4 to racked" in out.output, out.output
        assert "ops map scale --cluster racked --new 4" in out.output, out.output
        cluster = rack_local_fleet.descriptor().cluster("racked")
        wait_healthy(cluster, timeout_s=60)
    return cluster


@pytest.fixture
def ops_admin(rack_cluster: ClusterInfo) -> Iterator[KafkaOpsAdmin]:
    admin = KafkaOpsAdmin(rack_cluster.bootstrap)
    yield admin
    admin.close()


@pytest.fixture
def placed_topic(rack_cluster: ClusterInfo) -> Iterator[Callable[..., str]]:
    """``placed_topic({0: [1, 2], 1: [2, 3]})``: a topic with an explicit assignment."""
    created: list[str] = []
    admin = KafkaOpsAdmin(rack_cluster.bootstrap)

    def make(assignment: dict[int, Sequence[int]], prefix: str = "ops") -> str:
        name = f"{prefix}.{uuid.uuid4().hex[:8]}"
        admin.create_topic(name, assignment)
        created.append(name)

        def up() -> bool:
            try:
                states = admin.partitions({name}) if name in _topics(admin) else {}
            except KafkaError:
                states = {}  # listed by one broker, not yet known to the one asked
            return len(states) == len(assignment) and all(s.leader >= 0 for s in states.values())

        wait_for(f"topic {name} up, every partition with a leader", up, 30, every=0.2)
        return name

    yield make
    from streamplane.kafka.admin import KafkaAdmin

    KafkaAdmin(rack_cluster.bootstrap).delete_topics(created)
    admin.close()


def _topics(admin: KafkaOpsAdmin) -> set[str]:
    return {t for t, _ in admin.partitions()}


def produce(bootstrap: str, topic: str, partition: int, megabytes: float) -> None:
    """Incompressible records (distinct random bytes) into one partition."""
    producer = make_producer(bootstrap, {"compression.type": "none"})
    for _ in range(int(megabytes * 100)):
        producer.produce(topic, value=os.urandom(10_000), partition=partition)
        producer.poll(0)
    assert producer.flush(60) == 0


def cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamplane.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def cli_popen(*args: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "streamplane.cli", *args], stdout=out, stderr=subprocess.STDOUT
        )
