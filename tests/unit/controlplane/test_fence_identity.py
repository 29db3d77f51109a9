"""The sealer fences or reopens a retired segment only on the registered Kafka cluster.

An exploratory run's registry had ``local-a`` moved to another Kafka cluster, where
another control plane ran a live stream under the same names: the sealer fenced 4 of
its topics (``max.message.bytes=0``: every write refused). The cluster answering at the
registered bootstrap is now compared with the Kafka cluster id recorded for it first.
"""

from __future__ import annotations

import logging
from unittest import mock

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from streamplane.controlplane.failover_runtime import FailoverRuntime, FailoverSettings
from streamplane.controlplane.leadership import SingleReplica
from streamplane.controlplane.service import ControlPlaneService
from tests.unit.controlplane.conftest import BOOTSTRAPS, StubKafka, create_stream
from tests.unit.controlplane.test_failover_api import (
    E1,
    Clock,
    StubClusterIO,
    failover,
    seal_then_retire,
    states,
)

A = BOOTSTRAPS["local-a"]
FOREIGN = (
    f"the cluster answering at {A} is another Kafka cluster (id id-impostor, registered "
    f"id-local-a); if it is local-a now: streamplane clusters update local-a --bootstrap "
    f"{A} --force"
)


@pytest.fixture
def io() -> StubClusterIO:
    return StubClusterIO()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def runtime(service: ControlPlaneService, io: StubClusterIO, clock: Clock) -> FailoverRuntime:
    """A runtime whose watch is over at once (``retired_watch=0``); sealer and probes
    driven by hand."""
    settings = FailoverSettings(seal_settle=0.0, seal_grace=1000.0, retired_watch=0.0)
    return FailoverRuntime(
        service, settings, leadership=SingleReplica(), io_factory=io.for_bootstrap, clock=clock
    )


def retire_e1(http: TestClient, runtime: FailoverRuntime, io: StubClusterIO, stream: str) -> None:
    """Stream ``stream`` failed over to local-b, its e1 (on local-a) read and retired."""
    create_stream(http, stream, partitions=1)
    failover(http, stream, lanes=["realtime"])
    topic = f"sp.{stream}.realtime.e1"
    io.ends[topic] = {0: 10}
    io.commits[f"g-{stream}"] = {topic: {0: 10}}
    seal_then_retire(runtime)


def next_round(runtime: FailoverRuntime, clock: Clock) -> None:
    clock.now += 5.0
    runtime.seal_and_retire_once()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_no_fence_on_another_kafka_cluster_at_the_registered_bootstrap(
    http: TestClient,
    service: ControlPlaneService,
    runtime: FailoverRuntime,
    io: StubClusterIO,
    kafka: StubKafka,
    clock: Clock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    retire_e1(http, runtime, io, "orders")
    assert states(service)[E1] == "retired" and io.fenced == []
    kafka.cluster_ids[A] = "id-impostor"  # another Kafka cluster took local-a's address
    with caplog.at_level(logging.WARNING, logger="streamplane"):
        next_round(runtime, clock)
        next_round(runtime, clock)
    assert io.fenced == []
    assert _warnings(caplog) == [f"not fencing {E1} on local-a: {FOREIGN}"]  # once

    # The operator's word: the cluster answering there is local-a from now on.
    service.update_cluster("local-a", A, force=True)
    next_round(runtime, clock)
    assert io.fenced == [E1]


def test_no_reopen_from_another_kafka_cluster_at_the_registered_bootstrap(
    http: TestClient,
    service: ControlPlaneService,
    runtime: FailoverRuntime,
    io: StubClusterIO,
    kafka: StubKafka,
    clock: Clock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The other cluster's topic of the same name holds its own records: they are no
    late records of this stream's."""
    retire_e1(http, runtime, io, "orders")
    kafka.cluster_ids[A] = "id-impostor"
    io.ends[E1] = {0: 500}
    with caplog.at_level(logging.WARNING, logger="streamplane"):
        next_round(runtime, clock)
    assert states(service)[E1] == "retired" and io.fenced == []
    assert _warnings(caplog) == [f"not reopening {E1} on local-a: {FOREIGN}"]


def test_the_cluster_id_is_asked_once_per_round(
    http: TestClient,
    service: ControlPlaneService,
    runtime: FailoverRuntime,
    io: StubClusterIO,
    clock: Clock,
) -> None:
    retire_e1(http, runtime, io, "orders")
    retire_e1(http, runtime, io, "payments")
    with mock.patch.object(service, "kafka_cluster_id", wraps=service.kafka_cluster_id) as asked:
        next_round(runtime, clock)
    assert sorted(io.fenced) == [E1, "sp.payments.realtime.e1"]
    assert [c.args[0] for c in asked.call_args_list] == [A]


def test_a_cluster_registered_before_its_id_was_recorded_gets_it_first(
    http: TestClient,
    service: ControlPlaneService,
    runtime: FailoverRuntime,
    io: StubClusterIO,
    clock: Clock,
) -> None:
    """A database from before version 9: the first answer at the registered bootstrap
    is recorded (by the health probe, or by the watch's check), and fencing goes on."""
    retire_e1(http, runtime, io, "orders")
    with service.store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE clusters SET kafka_cluster_id = NULL"))
    runtime.probe_once("local-b")
    assert service.get_cluster("local-b").kafka_cluster_id == "id-local-b"
    next_round(runtime, clock)
    assert io.fenced == [E1]
    assert service.get_cluster("local-a").kafka_cluster_id == "id-local-a"
