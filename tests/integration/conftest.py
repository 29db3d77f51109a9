"""Session-scoped real Kafka fleets, started through the same code as `streamplane local up`.

- ``fleet``: two single-broker clusters, local-a and local-b (started once per session).
- ``rack_fleet``: one three-broker cluster with racks a, b, c (started only if a test asks).
- ``control_plane``: `streamplane control-plane serve` as a subprocess (SQLite in a temp
  dir, a known token) with local-a and local-b registered; ``stream_factory`` makes streams.
Factories create uniquely named topics, producers and consumers and clean up after.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from streamplane.exceptions import NotFound
from streamplane.kafka.admin import KafkaAdmin
from streamplane.kafka.clients import make_consumer, make_producer
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.local.fleet import ClusterInfo, FleetDescriptor, FleetSpec, LocalFleet


def _start(tmp: Path, spec: FleetSpec) -> tuple[LocalFleet, FleetDescriptor]:
    fleet = LocalFleet(tmp)
    return fleet, fleet.up(spec)


@pytest.fixture(scope="session")
def local_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    data_dir = tmp_path_factory.mktemp("fleet")
    fleet, _ = _start(data_dir, FleetSpec(data_dir=data_dir, clusters=2, heap_mb=384))
    yield fleet
    fleet.down(purge=True)


@pytest.fixture(scope="session")
def fleet(local_fleet: LocalFleet) -> FleetDescriptor:
    return local_fleet.descriptor()


@pytest.fixture(scope="session")
def rack_local_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    data_dir = tmp_path_factory.mktemp("rack-fleet")
    spec = FleetSpec(
        data_dir=data_dir,
        clusters=1,
        brokers_per_cluster=3,
        racks=("a", "b", "c"),
        names=("racked",),
        heap_mb=384,
    )
    fleet, _ = _start(data_dir, spec)
    yield fleet
    fleet.down(purge=True)


@pytest.fixture(scope="session")
def rack_cluster(rack_local_fleet: LocalFleet) -> ClusterInfo:
    return rack_local_fleet.descriptor().cluster("racked")


@pytest.fixture
def topic_factory(fleet: FleetDescriptor) -> Iterator[Callable[..., str]]:
    """Create a uniquely named topic: ``topic_factory(cluster_name_or_info, partitions=1)``."""
    created: list[tuple[str, str]] = []

    def make(
        cluster: str | ClusterInfo = "local-a",
        partitions: int = 1,
        replication: int = 1,
        config: dict[str, str] | None = None,
    ) -> str:
        bootstrap = (
            cluster.bootstrap if isinstance(cluster, ClusterInfo) else fleet.bootstrap(cluster)
        )
        name = f"t.{uuid.uuid4().hex[:10]}"
        err = KafkaAdmin(bootstrap).create_topics([(name, partitions, replication, config or {})])[
            name
        ]
        if err is not None:
            raise err
        created.append((bootstrap, name))
        return name

    yield make
    for bootstrap, name in created:
        KafkaAdmin(bootstrap).delete_topics([name])


@pytest.fixture
def producer_factory() -> Iterator[Callable[..., Producer]]:
    producers: list[Producer] = []

    def make(bootstrap: str, **extra: Any) -> Producer:
        p = make_producer(bootstrap, extra)
        producers.append(p)
        return p

    yield make
    for p in producers:
        p.flush(10)


@pytest.fixture
def consumer_factory() -> Iterator[Callable[..., Consumer]]:
    consumers: list[Consumer] = []

    def make(bootstrap: str, group: str | None = None, **extra: Any) -> Consumer:
        c = make_consumer(bootstrap, group or f"g.{uuid.uuid4().hex[:8]}", extra)
        consumers.append(c)
        return c

    yield make
    for c in consumers:
        c.close()


# ---------------------------------------------------------------------- control plane
@pytest.fixture(scope="session")
def control_plane(
    tmp_path_factory: pytest.TempPathFactory, fleet: FleetDescriptor
) -> Iterator[ControlPlaneProcess]:
    """The control plane (subprocess) with local-a and local-b registered (tag env=local)."""
    # Health checks off: tests that kill brokers must not fail other tests' streams
    # over (the failover tests run their own control plane with health on).
    cp = ControlPlaneProcess(
        tmp_path_factory.mktemp("control-plane"),
        token=f"tok-{uuid.uuid4().hex}",
        extra_args=["--no-health"],
    )
    cp.start()
    try:
        with cp.client() as client:
            for cluster in fleet.clusters.values():
                client.register_cluster(cluster.name, cluster.bootstrap, {"env": "local"})
        yield cp
    finally:
        cp.stop()


@pytest.fixture
def stream_factory(control_plane: ControlPlaneProcess) -> Iterator[Callable[..., str]]:
    """Create a uniquely named stream: ``stream_factory("local-a", partitions=3, ...)``.

    Keyword arguments go to ``ControlPlaneClient.create_stream``; the streams (and their
    topics) are deleted after the test, with the control plane started again if a test
    left it stopped.
    """
    created: list[str] = []

    def make(
        cluster: str = "local-a",
        *,
        lanes: Sequence[str] = ("realtime", "bulk"),
        partitions: int = 3,
        **kwargs: Any,
    ) -> str:
        name = f"s-{uuid.uuid4().hex[:10]}"
        with control_plane.client() as client:
            client.create_stream(name, cluster, lanes=lanes, partitions=partitions, **kwargs)
        created.append(name)
        return name

    yield make
    control_plane.start()
    with control_plane.client() as client:
        for name in created:
            with contextlib.suppress(NotFound):
                client.delete_stream(name)
