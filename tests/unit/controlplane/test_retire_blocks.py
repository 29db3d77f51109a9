"""What holds a sealed segment back is logged, once per cause, and so is its end.

An exploratory run saw two sealed segments, read to their end, stay sealed for 4.5
minutes with nothing in the log: the sealer's consumer-group listing had missed the
group (a stale client after a cluster restart), and a segment whose end offsets could
not be read was passed over silently. Now each cause is said once (the segment, or the
stream's whole round), and when it clears that is said too, with how long it held.

The runtime's Kafka I/O is the stub of ``test_failover_api``, with failures of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import pytest
from fastapi.testclient import TestClient

from streamplane.controlplane.app import ControlPlaneSettings, create_app
from streamplane.controlplane.failover_runtime import FailoverRuntime, FailoverSettings
from streamplane.controlplane.leadership import SingleReplica
from streamplane.controlplane.service import ControlPlaneService
from streamplane.exceptions import KafkaError
from tests.unit.controlplane.conftest import AUTH, create_stream
from tests.unit.controlplane.test_failover_api import (
    _IO,
    BY_BOOTSTRAP,
    Clock,
    StubClusterIO,
)

OLD, NEW = "sp.orders.realtime.e1", "sp.orders.realtime.e2"
LOGGER = "streamplane.controlplane.failover_runtime"


@dataclass
class FlakyClusterIO(StubClusterIO):
    """``StubClusterIO`` whose group listing fails on some clusters, and end offsets on
    some topics."""

    listing_fails: dict[str, KafkaError] = field(default_factory=dict)  # cluster -> error
    ends_fail: dict[str, KafkaError] = field(default_factory=dict)  # topic -> error

    def for_bootstrap(self, bootstrap: str) -> _IO:
        return _FlakyIO(self, BY_BOOTSTRAP.get(bootstrap, bootstrap))


@dataclass
class _FlakyIO(_IO):
    stub: FlakyClusterIO

    def committed(
        self, topics: Mapping[str, int], timeout: float
    ) -> dict[str, dict[str, dict[int, int]]]:
        if self.cluster in self.stub.listing_fails:
            raise self.stub.listing_fails[self.cluster]
        return super().committed(topics, timeout)

    def end_offsets(self, topic: str, partitions: int, timeout: float) -> dict[int, int]:
        if topic in self.stub.ends_fail:
            raise self.stub.ends_fail[topic]
        return super().end_offsets(topic, partitions, timeout)


@pytest.fixture
def io() -> FlakyClusterIO:
    return FlakyClusterIO()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def runtime(service: ControlPlaneService, io: FlakyClusterIO, clock: Clock) -> FailoverRuntime:
    settings = FailoverSettings(seal_settle=0.0, seal_grace=1000.0, retire_interval=5.0)
    return FailoverRuntime(
        service, settings, leadership=SingleReplica(), io_factory=io.for_bootstrap, clock=clock
    )


@pytest.fixture
def http(settings: ControlPlaneSettings, service: ControlPlaneService) -> Iterator[TestClient]:
    with TestClient(create_app(settings, service)) as client:
        yield client


@pytest.fixture
def sealed(http: TestClient, runtime: FailoverRuntime, io: FlakyClusterIO, clock: Clock) -> None:
    """orders' realtime lane failed over from local-a (e1, 5 records a partition) to
    local-b (e2), and e1 sealed."""
    create_stream(http, partitions=2)
    resp = http.post(
        "/v1/streams/orders/failover",
        json={"cluster": "local-b", "lanes": ["realtime"]},
        headers=AUTH,
    )
    assert resp.status_code == 200, resp.text
    io.ends[OLD] = {0: 5, 1: 5}
    runtime.seal_and_retire_once()
    assert state(runtime, OLD) == "sealed"


def state(runtime: FailoverRuntime, topic: str) -> str:
    table = runtime.service.routing("orders")
    return next(s.state.value for s in table.segments if s.topic == topic)


def retire_rounds(runtime: FailoverRuntime, clock: Clock, rounds: int) -> None:
    """``rounds`` sealer rounds, a retire interval apart."""
    for _ in range(rounds):
        clock.now += 5.0
        runtime.seal_and_retire_once()


def said(caplog: pytest.LogCaptureFixture, words: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and words in r.getMessage()]


@pytest.mark.usefixtures("sealed")
def test_an_incomplete_group_listing_is_not_concluded_on_and_its_end_is_logged(
    runtime: FailoverRuntime, io: FlakyClusterIO, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    # "loud" finished e1; "quiet" only commits (the Assigner never heard of it) and has
    # not: the listing of local-a's groups cannot be complete, so nothing is concluded.
    io.commits = {"loud": {OLD: {0: 5, 1: 5}, NEW: {0: 1}}, "quiet": {OLD: {0: 5, 1: 2}}}
    io.listing_fails["local-a"] = KafkaError(
        "list consumer groups on 127.0.0.1:19092: brokers 3 coordinate consumer groups and "
        "were not asked (only 1, 2)",
        code="GROUP_LISTING_INCOMPLETE",  # as KafkaClusterIO.committed raises it
        retriable=True,
    )
    retire_rounds(runtime, clock, 3)
    assert state(runtime, OLD) == "sealed"
    blocked = said(caplog, "cannot all be read")
    assert len(blocked) == 1, blocked  # once, not every round
    assert "groups of local-a" in blocked[0] and "brokers 3 coordinate" in blocked[0]

    del io.listing_fails["local-a"]  # listed in full: quiet is found, behind on e1
    retire_rounds(runtime, clock, 2)
    assert state(runtime, OLD) == "sealed"
    assert len(said(caplog, "retire checks of orders go on")) == 1
    assert said(caplog, f"not retiring {OLD} on local-a yet") == [
        f"not retiring {OLD} on local-a yet: not settled by quiet: partition 1 at 2 of 5"
    ]

    io.commits["quiet"][OLD][1] = 5
    retire_rounds(runtime, clock, 1)
    assert state(runtime, OLD) == "retired"
    (retired,) = said(caplog, f"retired {OLD}")
    assert "(it waited on: quiet, for 10s)" in retired


@pytest.mark.usefixtures("sealed")
def test_end_offsets_that_cannot_be_read_are_logged_once(
    runtime: FailoverRuntime, io: FlakyClusterIO, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    io.commits = {"g": {OLD: {0: 5, 1: 5}}}
    io.ends_fail[OLD] = KafkaError(f"end offsets of {OLD}: no answer in 5s", code="_TIMED_OUT")
    retire_rounds(runtime, clock, 3)
    assert state(runtime, OLD) == "sealed"
    assert said(caplog, f"not retiring {OLD} on local-a yet") == [
        f"not retiring {OLD} on local-a yet: its end offsets cannot be read: end offsets of "
        f"{OLD}: no answer in 5s"
    ]
    del io.ends_fail[OLD]
    retire_rounds(runtime, clock, 1)
    assert state(runtime, OLD) == "retired"
    (retired,) = said(caplog, f"retired {OLD}")
    assert "(it waited on: end offsets not read (_TIMED_OUT), for 15s)" in retired
