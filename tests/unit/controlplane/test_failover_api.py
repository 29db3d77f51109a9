"""The failover protocol over the app: heartbeats, drained reports, lost, health, sealer.

The runtime's Kafka I/O is a stub (``StubClusterIO``); the sealer and the probes are
driven one round at a time (``seal_and_retire_once``, ``probe_once``), with a fake clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from unittest import mock

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from streamplane.client.control_plane import ControlPlaneClient
from streamplane.controlplane.app import ControlPlaneSettings, create_app
from streamplane.controlplane.failover_runtime import (
    HEALTH_STALE_S,
    LEADER_STALE_S,
    FailoverRuntime,
    FailoverSettings,
)
from streamplane.controlplane.leadership import SingleReplica
from streamplane.controlplane.service import ControlPlaneService, topic_config
from streamplane.core.failover import ClusterHealth
from streamplane.exceptions import KafkaError
from tests.unit.controlplane.conftest import AUTH, BOOTSTRAPS, StubKafka, create_stream

BY_BOOTSTRAP = {b: n for n, b in BOOTSTRAPS.items()}


@dataclass
class StubClusterIO:
    """Per cluster: up or down, end offsets per topic, committed offsets per group."""

    down: set[str] = field(default_factory=set)
    # Clusters whose probes succeed in part (a broker of several down): what failed.
    partial: dict[str, str] = field(default_factory=dict)
    ends: dict[str, dict[int, int]] = field(default_factory=dict)
    commits: dict[str, dict[str, dict[int, int]]] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)  # (cluster, what)
    hanging: set[str] = field(default_factory=set)  # topics whose end offsets time out
    fenced: list[str] = field(default_factory=list)  # topics fenced, in order

    def for_bootstrap(self, bootstrap: str) -> _IO:
        return _IO(self, BY_BOOTSTRAP.get(bootstrap, bootstrap))


@dataclass
class _IO:
    stub: StubClusterIO
    cluster: str

    def _check(self) -> None:
        if self.cluster in self.stub.down:
            raise KafkaError(f"{self.cluster} is down", code="_TRANSPORT")

    def probe(self, timeout: float) -> str | None:
        self._check()
        return self.stub.partial.get(self.cluster)

    def end_offsets(self, topic: str, partitions: int, timeout: float) -> dict[int, int]:
        self.stub.calls.append((self.cluster, "end_offsets"))
        self._check()
        if topic in self.stub.hanging:
            raise TimeoutError()  # as a future's result(timeout) does: not a KafkaError
        ends = self.stub.ends.get(topic, {})
        return {p: ends.get(p, 0) for p in range(partitions)}

    def committed(
        self, topics: Mapping[str, int], timeout: float
    ) -> dict[str, dict[str, dict[int, int]]]:
        self.stub.calls.append((self.cluster, "committed"))
        self._check()
        out: dict[str, dict[str, dict[int, int]]] = {}
        for group, per_topic in self.stub.commits.items():
            mine = {t: o for t, o in per_topic.items() if t in topics}
            if mine:
                out[group] = mine
        return out

    def fence(self, topic: str, timeout: float) -> None:
        self._check()
        self.stub.fenced.append(topic)

    def close(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def io() -> StubClusterIO:
    return StubClusterIO()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def runtime_settings() -> FailoverSettings:
    return FailoverSettings(
        health_enabled=False,  # probes are driven by hand
        sealing_enabled=False,  # so is the sealer
        health_threshold=3.0,
        seal_settle=0.0,
        seal_grace=1000.0,
    )


@pytest.fixture
def runtime(
    service: ControlPlaneService,
    io: StubClusterIO,
    clock: Clock,
    runtime_settings: FailoverSettings,
) -> FailoverRuntime:
    return FailoverRuntime(
        service,
        runtime_settings,
        leadership=SingleReplica(),
        io_factory=io.for_bootstrap,
        clock=clock,
    )


@pytest.fixture
def fapp(settings: ControlPlaneSettings, service: ControlPlaneService) -> FastAPI:
    return create_app(settings, service)


@pytest.fixture
def fhttp(fapp: FastAPI) -> Iterator[TestClient]:
    with TestClient(fapp) as client:
        yield client


def failover(http: TestClient, name: str = "orders", **body: object) -> dict[str, object]:
    resp = http.post(
        f"/v1/streams/{name}/failover", json={"cluster": "local-b", **body}, headers=AUTH
    )
    assert resp.status_code == 200, resp.text
    out: dict[str, object] = resp.json()
    return out


def states(service: ControlPlaneService, name: str = "orders") -> dict[str, str]:
    return {s.topic: s.state.value for s in service.routing(name).segments}


# ---------------------------------------------------------------------- endpoints
def test_producer_heartbeat(fhttp: TestClient, runtime: FailoverRuntime) -> None:
    create_stream(fhttp)
    path = "/v1/streams/orders/producers/host-1-42/heartbeat"
    assert fhttp.post(path, json={"epoch": 1}).status_code == 401
    resp = fhttp.post(path, json={"epoch": 1}, headers=AUTH)
    assert resp.json() == {
        "stream": "orders",
        "producer_id": "host-1-42",
        "epoch": 1,
        "stream_epoch": 1,
    }
    assert runtime.store.live_producers("orders", 60) == {"host-1-42": 1}
    fhttp.post(path, json={"epoch": 2}, headers=AUTH)
    assert runtime.store.live_producers("orders", 60) == {"host-1-42": 2}
    missing = fhttp.post("/v1/streams/nope/producers/p/heartbeat", json={"epoch": 1}, headers=AUTH)
    assert missing.status_code == 404
    bad = fhttp.post("/v1/streams/orders/producers/a b/heartbeat", json={"epoch": 1}, headers=AUTH)
    assert bad.status_code == 422
    assert fhttp.post(path, json={"epoch": -1}, headers=AUTH).status_code == 422


def test_a_producer_that_left_is_no_longer_live(
    fhttp: TestClient, runtime: FailoverRuntime
) -> None:
    """A closed producer counted as live for ``producer_liveness`` after its last
    heartbeat, holding up the sealing of a segment it would never write to again."""
    create_stream(fhttp)
    beat = "/v1/streams/orders/producers/host-1-42/heartbeat"
    fhttp.post(beat, json={"epoch": 1}, headers=AUTH)
    fhttp.post("/v1/streams/orders/producers/other/heartbeat", json={"epoch": 1}, headers=AUTH)
    path = "/v1/streams/orders/producers/host-1-42"
    assert fhttp.delete(path).status_code == 401
    assert fhttp.delete(path, headers=AUTH).status_code == 204
    assert runtime.store.live_producers("orders", 60) == {"other": 1}
    assert fhttp.delete(path, headers=AUTH).status_code == 204  # idempotent


def test_segments_drained_and_listing(fhttp: TestClient) -> None:
    create_stream(fhttp)
    body = {"group": "indexer", "cluster": "local-a", "topic": "sp.orders.realtime.e1"}
    resp = fhttp.post("/v1/streams/orders/segments/drained", json=body, headers=AUTH)
    assert resp.status_code == 400 and "still active" in resp.json()["detail"]
    failover(fhttp, lanes=["realtime"])
    for group in ("indexer", "archiver", "indexer"):
        resp = fhttp.post(
            "/v1/streams/orders/segments/drained", json={**body, "group": group}, headers=AUTH
        )
        assert resp.status_code == 200, resp.text
    assert resp.json()["drained_by"] == ["archiver", "indexer"]
    unknown = {**body, "topic": "sp.orders.realtime.e9"}
    resp = fhttp.post("/v1/streams/orders/segments/drained", json=unknown, headers=AUTH)
    assert resp.status_code == 400
    fhttp.post("/v1/streams/orders/producers/p1/heartbeat", json={"epoch": 2}, headers=AUTH)
    doc = fhttp.get("/v1/streams/orders/segments").json()
    assert doc["epoch"] == 2 and doc["producers"] == {"p1": 2}
    by_topic = {s["topic"]: s for s in doc["segments"]}
    assert by_topic["sp.orders.realtime.e1"]["drained_by"] == ["archiver", "indexer"]
    assert by_topic["sp.orders.realtime.e1"]["state"] == "draining"
    assert by_topic["sp.orders.realtime.e2"]["drained_by"] == []
    # by lane priority (not by name), the dlq lane last, then epoch
    assert [(s["lane"], s["epoch"]) for s in doc["segments"]] == [
        ("realtime", 1),
        ("realtime", 2),
        ("bulk", 1),
        ("dlq", 1),
    ]


def test_epoch_changed_at_is_when_the_change_was_saved(fhttp: TestClient) -> None:
    cp = ControlPlaneClient("http://testserver")
    own, cp._http = cp._http, fhttp  # a TestClient is an httpx.Client
    own.close()
    create_stream(fhttp)
    before = datetime.now(UTC)
    epoch = int(str(failover(fhttp)["epoch"]))
    after = datetime.now(UTC)
    changed = cp.epoch_changed_at("orders", epoch)
    assert changed is not None and before <= changed <= after
    assert changed.tzinfo is not None  # comparable with time.time() of the caller
    assert cp.epoch_changed_at("orders", epoch + 1) is None


def test_declare_lost_is_audited(fhttp: TestClient) -> None:
    create_stream(fhttp)
    resp = fhttp.post("/v1/streams/orders/segments/lost", json={"cluster": "local-a"}, headers=AUTH)
    assert resp.status_code == 400 and "fail its active segments over first" in resp.text
    failover(fhttp)
    resp = fhttp.post(
        "/v1/streams/orders/segments/lost",
        json={"cluster": "local-a", "reason": "disk fire"},
        headers={**AUTH, "X-Streamplane-Actor": "oncall"},
    )
    assert resp.status_code == 200, resp.text
    lost = {s["topic"] for s in resp.json()["segments"] if s["state"] == "lost"}
    assert lost == {"sp.orders.realtime.e1", "sp.orders.bulk.e1"}
    entry = fhttp.get("/v1/audit", params={"stream": "orders"}).json()[0]
    assert (entry["actor"], entry["action"], entry["detail"]["reason"]) == (
        "oncall",
        "segment.lost",
        "disk fire",
    )
    again = fhttp.post(
        "/v1/streams/orders/segments/lost", json={"cluster": "local-a"}, headers=AUTH
    )
    assert again.status_code == 400
    assert "fail its active segments over first" in again.text  # the dlq lane is there
    failover(fhttp, lanes=["dlq"])
    fhttp.post("/v1/streams/orders/segments/lost", json={"cluster": "local-a"}, headers=AUTH)
    # Nothing left there but lost (or retired) segments: said so, not "fail over first".
    last = fhttp.post("/v1/streams/orders/segments/lost", json={"cluster": "local-a"}, headers=AUTH)
    assert last.status_code == 400
    assert "retired or lost already: nothing waits on them" in last.text


def test_cluster_health_is_served(
    fhttp: TestClient, runtime: FailoverRuntime, io: StubClusterIO
) -> None:
    assert fhttp.get("/v1/clusters").json()[0]["health"]["state"] == "unknown"
    runtime.probe_once("local-a")
    io.down.add("local-b")
    runtime.probe_once("local-b")
    health = {c["name"]: c["health"] for c in fhttp.get("/v1/clusters").json()}
    assert health["local-a"]["state"] == "ok"
    assert health["local-b"]["state"] == "degraded"
    assert "local-b is down" in health["local-b"]["last_error"]
    one = fhttp.get("/v1/clusters/local-b").json()["health"]
    assert one["state"] == "degraded"
    overview = fhttp.get("/v1/health/clusters").json()
    assert overview["leader"] is True and overview["health_enabled"] is False
    assert {c["name"]: c["health"] for c in overview["clusters"]} == {
        "local-a": "ok",
        "local-b": "degraded",
    }


# ---------------------------------------------------------------------- health failover
def test_down_cluster_fails_its_streams_over(
    fhttp: TestClient,
    service: ControlPlaneService,
    runtime: FailoverRuntime,
    io: StubClusterIO,
    clock: Clock,
) -> None:
    create_stream(fhttp, "orders")
    create_stream(fhttp, "other")
    fhttp.post("/v1/streams/other/failover", json={"cluster": "local-b"}, headers=AUTH)
    runtime.probe_once("local-b")  # ok: a candidate
    io.down.add("local-a")
    for _ in range(3):
        state = runtime.probe_once("local-a")
        assert state.health is ClusterHealth.DEGRADED
        assert service.routing("orders").epoch == 1
        clock.now += 1.0
    state = runtime.probe_once("local-a")
    assert state.health is ClusterHealth.DOWN
    table = service.routing("orders")
    assert {table.active(lane).cluster for lane in table.all_lanes} == {"local-b"}  # dlq too
    entries = fhttp.get("/v1/audit", params={"stream": "orders"}).json()
    assert (entries[0]["actor"], entries[0]["action"]) == ("health", "stream.failover")
    assert "local-a is down" in entries[0]["detail"]["reason"]
    # already moved: a second down probe changes nothing
    clock.now += 1.0
    runtime.probe_once("local-a")
    assert service.routing("orders").epoch == table.epoch
    other = service.routing("other")  # its lanes were on local-b already, its dlq was not
    assert (other.active("realtime").epoch, other.active("dlq").cluster) == (2, "local-b")


def test_a_cluster_that_still_takes_writes_is_degraded_never_down(
    fhttp: TestClient,
    service: ControlPlaneService,
    runtime: FailoverRuntime,
    io: StubClusterIO,
    clock: Clock,
) -> None:
    """One broker of three down: some health partitions take no write, the others do.
    The cluster stays degraded however long it lasts, and its streams stay (a healthy
    3-broker cluster that lost one broker had its streams failed over)."""
    create_stream(fhttp, "orders")
    runtime.probe_once("local-b")  # ok: a candidate, were local-a down
    io.partial["local-a"] = "1 of 3 __streamplane_health partitions took no write"
    for _ in range(10):
        state = runtime.probe_once("local-a")
        assert state.health is ClusterHealth.DEGRADED
        assert state.last_error == io.partial["local-a"]
        clock.now += 1.0
    assert service.routing("orders").epoch == 1
    shown = fhttp.get("/v1/clusters/local-a").json()["health"]
    assert (shown["state"], shown["last_error"]) == ("degraded", io.partial["local-a"])
    del io.partial["local-a"]
    assert runtime.probe_once("local-a").health is ClusterHealth.OK


def test_bogus_cluster_never_moves_other_streams(
    fhttp: TestClient,
    service: ControlPlaneService,
    runtime: FailoverRuntime,
    io: StubClusterIO,
    clock: Clock,
) -> None:
    create_stream(fhttp, "orders")
    service.register_cluster("bogus", "127.0.0.1:1", {}, force=True)
    io.down.add("127.0.0.1:1")
    runtime.probe_once("local-a")
    runtime.probe_once("local-b")
    for _ in range(6):
        runtime.probe_once("bogus")
        clock.now += 1.0
    assert runtime.probe_once("bogus").health is ClusterHealth.DOWN
    assert service.routing("orders").epoch == 1


def test_no_healthy_standby_no_failover(
    fhttp: TestClient,
    service: ControlPlaneService,
    runtime: FailoverRuntime,
    io: StubClusterIO,
    clock: Clock,
) -> None:
    create_stream(fhttp, "orders")
    io.down.update({"local-a", "local-b"})
    for _ in range(5):
        runtime.probe_once("local-b")
        runtime.probe_once("local-a")
        clock.now += 1.0
    assert service.routing("orders").epoch == 1


# ---------------------------------------------------------------------- sealer
def test_sealer_waits_for_producers_then_seals(
    fhttp: TestClient, service: ControlPlaneService, runtime: FailoverRuntime, io: StubClusterIO
) -> None:
    create_stream(fhttp, partitions=2)
    hb = "/v1/streams/orders/producers/{}/heartbeat"
    fhttp.post(hb.format("p1"), json={"epoch": 1}, headers=AUTH)
    fhttp.post(hb.format("p2"), json={"epoch": 1}, headers=AUTH)
    failover(fhttp, lanes=["realtime"])
    io.ends["sp.orders.realtime.e1"] = {0: 7, 1: 3}
    fhttp.post(hb.format("p1"), json={"epoch": 2}, headers=AUTH)
    runtime.seal_and_retire_once()
    assert states(service)["sp.orders.realtime.e1"] == "draining"  # p2 is behind
    fhttp.post(hb.format("p2"), json={"epoch": 2}, headers=AUTH)
    runtime.seal_and_retire_once()
    seg = next(s for s in service.routing("orders").segments if s.topic == "sp.orders.realtime.e1")
    assert (seg.state.value, dict(seg.sealed_end_offsets)) == ("sealed", {0: 7, 1: 3})
    entry = fhttp.get("/v1/audit", params={"stream": "orders"}).json()[0]
    assert (entry["actor"], entry["detail"]["state"]) == ("sealer", "sealed")


def test_sealer_keeps_a_dead_clusters_segment_draining(
    fhttp: TestClient, service: ControlPlaneService, runtime: FailoverRuntime, io: StubClusterIO
) -> None:
    create_stream(fhttp)
    failover(fhttp)
    io.down.add("local-a")
    runtime.seal_and_retire_once()
    assert states(service)["sp.orders.realtime.e1"] == "draining"
    io.down.clear()
    runtime.seal_and_retire_once()
    assert states(service)["sp.orders.realtime.e1"] == "sealed"


def test_sealer_leaves_a_cluster_found_down_alone(
    fhttp: TestClient,
    service: ControlPlaneService,
    runtime: FailoverRuntime,
    io: StubClusterIO,
    clock: Clock,
) -> None:
    """Once the probes find a cluster down, the sealer makes no call to it (each would
    only time out; librdkafka's admin client has aborted the process over such
    timeouts), and seals its segments once it is back."""
    create_stream(fhttp)
    failover(fhttp)
    io.down.add("local-a")
    while runtime.probe_once("local-a").health is not ClusterHealth.DOWN:
        clock.now += 1.0
    io.calls.clear()
    runtime.seal_and_retire_once()
    assert states(service)["sp.orders.realtime.e1"] == "draining"
    assert not [c for c in io.calls if c[0] == "local-a"], io.calls
    io.down.clear()
    runtime.probe_once("local-a")
    runtime.seal_and_retire_once()
    assert states(service)["sp.orders.realtime.e1"] == "sealed"


def test_one_streams_trouble_does_not_hold_up_the_others(
    fhttp: TestClient, service: ControlPlaneService, runtime: FailoverRuntime, io: StubClusterIO
) -> None:
    create_stream(fhttp, "orders")
    create_stream(fhttp, "other")
    failover(fhttp, "orders")
    failover(fhttp, "other")
    io.hanging.add("sp.orders.realtime.e1")  # sealed first (streams go by name)
    runtime.seal_and_retire_once()  # does not raise
    assert states(service, "orders")["sp.orders.realtime.e1"] == "draining"
    assert states(service, "other")["sp.other.realtime.e1"] == "sealed"


def test_grace_period_seals_past_a_lagging_producer(
    fhttp: TestClient, service: ControlPlaneService, io: StubClusterIO
) -> None:
    rt = FailoverRuntime(
        service,
        FailoverSettings(seal_settle=0.0, seal_grace=0.001),
        leadership=SingleReplica(),
        io_factory=io.for_bootstrap,
    )
    create_stream(fhttp)
    fhttp.post("/v1/streams/orders/producers/p1/heartbeat", json={"epoch": 1}, headers=AUTH)
    failover(fhttp)
    rt.seal_and_retire_once()
    assert states(service)["sp.orders.realtime.e1"] == "sealed"


def test_the_grace_period_counts_from_when_the_segments_cluster_answers_again(
    fhttp: TestClient, service: ControlPlaneService, io: StubClusterIO, clock: Clock
) -> None:
    """A producer lagging on epoch 1 (records queued for local-a, which is down): the
    grace ran out during the outage, but the segment is sealed only a grace period after
    local-a answers again, when the queued records have had time to land."""
    rt = FailoverRuntime(
        service,
        FailoverSettings(seal_settle=0.0, seal_grace=5.0, health_threshold=1.0),
        leadership=SingleReplica(),
        io_factory=io.for_bootstrap,
        clock=clock,
    )
    create_stream(fhttp)
    fhttp.post("/v1/streams/orders/producers/p1/heartbeat", json={"epoch": 1}, headers=AUTH)
    failover(fhttp)
    old = "sp.orders.realtime.e1"
    io.down.add("local-a")
    for _ in range(3):
        rt.probe_once("local-a")
        clock.now += 1.0
    assert rt._health["local-a"].health is ClusterHealth.DOWN
    later = datetime.now(UTC) + timedelta(seconds=60)  # the outage outlasts the grace
    with mock.patch("streamplane.controlplane.failover_runtime.datetime") as dt:
        dt.now.return_value = later
        rt.seal_and_retire_once(now=clock.now)
        assert states(service)[old] == "draining"  # down: no end offsets to seal at
        io.down.clear()
        rt.probe_once("local-a")  # back
        fhttp.post("/v1/streams/orders/producers/p1/heartbeat", json={"epoch": 1}, headers=AUTH)
        clock.now += 1.0
        rt.seal_and_retire_once(now=clock.now)
        assert states(service)[old] == "draining"  # 1 s after it answered
        clock.now += 5.0
        rt.seal_and_retire_once(now=clock.now)
    assert states(service)[old] == "sealed"


def test_retire_when_every_reading_group_settled(
    fhttp: TestClient, service: ControlPlaneService, runtime: FailoverRuntime, io: StubClusterIO
) -> None:
    create_stream(fhttp, partitions=2)
    failover(fhttp, lanes=["realtime"])
    old, new = "sp.orders.realtime.e1", "sp.orders.realtime.e2"
    io.ends[old] = {0: 5, 1: 0}
    runtime.seal_and_retire_once()
    assert states(service)[old] == "sealed"
    # nobody has read the stream: not retired automatically
    runtime._last_retire_check.clear()
    runtime.seal_and_retire_once()
    assert states(service)[old] == "sealed"
    # g1 settled the old segment, g2 only read the new one
    io.commits = {"g1": {old: {0: 5}}, "g2": {new: {0: 1}}}
    runtime._last_retire_check.clear()
    runtime.seal_and_retire_once()
    assert states(service)[old] == "sealed"
    fhttp.post(
        "/v1/streams/orders/segments/drained",
        json={"group": "g2", "cluster": "local-a", "topic": old},
        headers=AUTH,
    )
    runtime._last_retire_check.clear()
    runtime.seal_and_retire_once()
    assert states(service)[old] == "retired"


def seal_then_retire(runtime: FailoverRuntime) -> None:
    """A sealing round, then one with its retire check due."""
    runtime.seal_and_retire_once()
    runtime._last_retire_check.clear()
    runtime.seal_and_retire_once()


E1, E2 = "sp.orders.realtime.e1", "sp.orders.realtime.e2"


def e1_retired_then_failed_back(
    fhttp: TestClient, service: ControlPlaneService, runtime: FailoverRuntime, io: StubClusterIO
) -> None:
    """e1 (local-a) read to its end by g-away and g-live and retired after the failover
    to local-b (e2); then the failover back (e3), with only g-live's commits on e2."""
    create_stream(fhttp, partitions=1)
    failover(fhttp, lanes=["realtime"])  # e1 -> e2 (local-b)
    io.ends[E1] = {0: 10}
    io.commits = {"g-away": {E1: {0: 10}}, "g-live": {E1: {0: 10}}}
    seal_then_retire(runtime)
    assert states(service)[E1] == "retired"
    failover(fhttp, cluster="local-a", lanes=["realtime"])  # e2 -> e3
    io.ends[E2] = {0: 7}
    io.commits = {"g-live": {E2: {0: 7}}}  # g-away's commits went with e1's topic


def test_a_group_offline_across_two_failovers_still_holds_the_segment_it_never_read(
    fhttp: TestClient, service: ControlPlaneService, runtime: FailoverRuntime, io: StubClusterIO
) -> None:
    """g-away read e1 to its end and stopped; e1 was retired. After the next failover
    its commits are on no readable segment: e2 was retired once g-live settled it, and
    g-away never saw e2's records (found by an exploratory run: 1,000 of 1,000 lost).
    It holds e2 now, until it settles it or has been silent for the retention."""
    e1_retired_then_failed_back(fhttp, service, runtime, io)
    seal_then_retire(runtime)
    assert states(service)[E2] == "sealed"  # g-away has not read it

    io.commits["g-away"] = {E2: {0: 7}}  # back, and read it
    runtime._last_retire_check.clear()
    runtime.seal_and_retire_once()
    assert states(service)[E2] == "retired"


def test_a_group_silent_past_the_reader_retention_no_longer_holds_segments(
    fhttp: TestClient, service: ControlPlaneService, io: StubClusterIO, clock: Clock
) -> None:
    runtime = FailoverRuntime(
        service,
        FailoverSettings(seal_settle=0.0, seal_grace=1000.0, reader_retention=60.0),
        leadership=SingleReplica(),
        io_factory=io.for_bootstrap,
        clock=clock,
    )
    e1_retired_then_failed_back(fhttp, service, runtime, io)
    later = datetime.now(UTC) + timedelta(seconds=61)
    with mock.patch("streamplane.controlplane.failover_store.utcnow", return_value=later):
        seal_then_retire(runtime)
    assert states(service)[E2] == "retired"


def test_follower_does_nothing(
    service: ControlPlaneService, io: StubClusterIO, fhttp: TestClient
) -> None:
    class Follower:
        is_leader = False

        def add_listener(self, listener: Callable[[bool], None]) -> None:
            listener(False)

        def start(self) -> None: ...

        def stop(self) -> None: ...

    rt = FailoverRuntime(
        service,
        FailoverSettings(sealing_enabled=True, seal_settle=0, sealer_interval=0.01),
        leadership=Follower(),
        io_factory=io.for_bootstrap,
    )
    assert rt.is_leader is False
    create_stream(fhttp)
    failover(fhttp)
    rt.start()
    rt.stop()
    assert states(service)["sp.orders.realtime.e1"] == "draining"


def test_health_nobody_keeps_current_is_unknown(
    fhttp: TestClient, runtime: FailoverRuntime
) -> None:
    """Records another process wrote while health checks are off here, and records no
    leader rewrote for HEALTH_STALE_S, are served as unknown (before: a dead cluster
    showed the ``ok`` an earlier process had written)."""
    now = datetime.now(UTC)
    runtime.store.save_health("local-a", "ok", now, None, "other-host:1:abcdef")
    assert fhttp.get("/v1/clusters/local-a").json()["health"]["state"] == "unknown"
    runtime.probe_once("local-a")  # this process's probe (driven by hand here)
    assert fhttp.get("/v1/clusters/local-a").json()["health"]["state"] == "ok"
    later = now + timedelta(seconds=HEALTH_STALE_S + 5)
    with mock.patch("streamplane.controlplane.failover_runtime.utcnow", return_value=later):
        assert fhttp.get("/v1/clusters/local-a").json()["health"]["state"] == "unknown"
        overview = fhttp.get("/v1/health/clusters").json()
        assert {c["name"]: c["health"] for c in overview["clusters"]}["local-a"] == "unknown"


def test_empty_topics_left_by_a_killed_failover_are_adopted(
    fhttp: TestClient, kafka: StubKafka
) -> None:
    """A control plane killed between creating the new epoch's topics and saving it left
    them behind, and every failover of the stream (the health loop's too, silently)
    failed on "topic ... already exists" until they were deleted by hand."""
    create_stream(fhttp)
    left = topic_config({}, 1_048_576)  # what the killed failover gave them
    kafka.admin(BOOTSTRAPS["local-b"]).create_topics(
        [("sp.orders.realtime.e2", 6, 1, left), ("sp.orders.bulk.e2", 6, 1, left)]
    )
    moved = failover(fhttp)
    assert moved["epoch"] == 2
    assert {"sp.orders.realtime.e2", "sp.orders.bulk.e2"} <= set(kafka.on("local-b"))


def test_followers_read_the_leaders_published_url(runtime: FailoverRuntime, clock: Clock) -> None:
    assert runtime.leader_url() is None  # nothing published
    runtime.store.publish_leader("other-host:1:abcdef", "http://cp-2:8470")
    clock.now += 2  # past the one-second cache
    assert runtime.leader_url() == "http://cp-2:8470"
    runtime.store.publish_leader(runtime.replica, "http://me:8470")
    clock.now += 2
    assert runtime.leader_url() is None  # its own, from when it led: not a leader to call
    runtime.store.publish_leader("other-host:1:abcdef", "http://cp-2:8470")
    clock.now += 2
    later = datetime.now(UTC) + timedelta(seconds=LEADER_STALE_S + 1)
    with mock.patch("streamplane.controlplane.failover_runtime.utcnow", return_value=later):
        assert runtime.leader_url() is None  # not republished for 30 s: stale


def test_a_group_holds_only_the_segments_of_the_lanes_it_reads(
    fhttp: TestClient, service: ControlPlaneService, runtime: FailoverRuntime, io: StubClusterIO
) -> None:
    """g-rt reads the realtime lane only, g-all both lanes; after a failover of both
    lanes and the dlq (as a down cluster's is), g-all settled e1 of realtime and bulk and
    g-rt e1 of realtime. Both lanes' e1 are retired: g-rt does not read bulk (before, it
    held bulk's e1 forever, and every group held the dlq's). The dlq's e1, with dead
    letters that no group reads, stays sealed until a group reads the dlq lane to its
    end (the replay group does), or an operator retires it."""
    create_stream(fhttp, partitions=1, lanes=["realtime", "bulk"])
    failover(fhttp, lanes=["realtime", "bulk", "dlq"])
    rt1, bulk1, dlq1 = "sp.orders.realtime.e1", "sp.orders.bulk.e1", "sp.orders.dlq.e1"
    io.ends.update({rt1: {0: 10}, bulk1: {0: 4}, dlq1: {0: 3}})
    io.commits = {"g-rt": {rt1: {0: 10}}, "g-all": {rt1: {0: 10}, bulk1: {0: 4}}}
    # g-alerts reads the dlq lane and has acked every dead letter: the dlq's e1 still
    # waits for the replay (an exploratory run: retired at once, and its 100 dead
    # letters left `dlq list` and `dlq replay`).
    io.commits["g-alerts"] = {dlq1: {0: 3}}
    seal_then_retire(runtime)
    assert (states(service)[rt1], states(service)[bulk1]) == ("retired", "retired")
    assert states(service)[dlq1] == "sealed"

    io.commits["sp-dlq-replay.orders"] = {dlq1: {0: 3}}  # the stream's replay group
    runtime._last_retire_check.clear()
    runtime.seal_and_retire_once()
    assert states(service)[dlq1] == "retired"


def test_each_stream_has_its_replay_group_and_the_shared_one_holds_nothing(
    fhttp: TestClient, service: ControlPlaneService, runtime: FailoverRuntime, io: StubClusterIO
) -> None:
    """The dlq segment waits for the stream's own replay group, sp-dlq-replay.orders
    (replays of different streams once shared sp-dlq-replay, and one failed while the
    other ran): another stream's replay group does not stand in for it, and the group
    all replays shared before does not hold it once the stream's group settled it (a
    replay takes its progress over; its commits, never moved again, held the segment
    until Kafka expired them)."""
    create_stream(fhttp, partitions=1, lanes=["realtime"])
    failover(fhttp, lanes=["realtime", "dlq"])
    rt1, dlq1 = "sp.orders.realtime.e1", "sp.orders.dlq.e1"
    io.ends.update({rt1: {0: 10}, dlq1: {0: 3}})
    io.commits = {
        "g-rt": {rt1: {0: 10}},
        "sp-dlq-replay": {dlq1: {0: 1}},  # shared, before: replayed the first letter
        "sp-dlq-replay.payments": {dlq1: {0: 3}},  # (another stream's, cannot be here)
    }
    seal_then_retire(runtime)
    assert states(service)[rt1] == "retired"
    assert states(service)[dlq1] == "sealed"  # sp-dlq-replay.orders has not run

    io.commits["sp-dlq-replay.orders"] = {dlq1: {0: 3}}  # took over 1, replayed 2
    runtime._last_retire_check.clear()
    runtime.seal_and_retire_once()
    assert states(service)[dlq1] == "retired"


def join(http: TestClient, group: str, lanes: list[str]) -> None:
    """A member of ``group`` heartbeats to the Assigner, reading ``lanes`` of orders."""
    resp = http.post(
        f"/v1/groups/{group}/heartbeat",
        json={"member_id": f"{group}-1", "stream": "orders", "lanes": lanes},
        headers=AUTH,
    )
    assert resp.status_code == 200, resp.text


def test_a_group_that_has_not_committed_yet_holds_the_segments_of_its_lanes(
    fhttp: TestClient, service: ControlPlaneService, runtime: FailoverRuntime, io: StubClusterIO
) -> None:
    """g-new's member joined after the failover (it heartbeats to the Assigner) and has
    committed nothing yet: it reads e1 first, so e1 is not retired when g-old has settled
    it (before, only groups with commits counted, and g-new's reading of e1 found it
    retired). g-bulk reads another lane and holds nothing here."""
    create_stream(fhttp, partitions=1, lanes=["realtime", "bulk"])
    failover(fhttp, lanes=["realtime"])
    io.ends[E1] = {0: 10}
    io.commits = {"g-old": {E1: {0: 10}}}
    join(fhttp, "g-new", ["realtime"])
    join(fhttp, "g-bulk", ["bulk"])
    seal_then_retire(runtime)
    assert states(service)[E1] == "sealed"

    io.commits["g-new"] = {E1: {0: 10}}
    runtime._last_retire_check.clear()
    runtime.seal_and_retire_once()
    assert states(service)[E1] == "retired"


def test_a_deleted_streams_readers_do_not_hold_the_stream_created_again(
    fhttp: TestClient, runtime: FailoverRuntime
) -> None:
    """g-old read the first `orders`; the stream was deleted and created again: g-old
    must not hold the new stream's segments for the reader retention (7 days)."""
    create_stream(fhttp)
    join(fhttp, "g-old", ["realtime"])
    runtime.store.record_drained("orders", "local-a", E1, "g-old")  # as retiring E1 does
    day = 86_400.0
    assert runtime.store.reader_lanes("orders", day) == {"g-old": {"realtime"}}
    assert runtime.store.drained_topics("orders", day) == {"g-old": {E1}}
    assert fhttp.delete("/v1/streams/orders", headers=AUTH).status_code == 204
    create_stream(fhttp)
    assert runtime.store.reader_lanes("orders", day) == {}
    assert runtime.store.drained_topics("orders", day) == {}


def test_records_landing_in_a_retired_segment_reopen_it(
    fhttp: TestClient,
    service: ControlPlaneService,
    runtime: FailoverRuntime,
    io: StubClusterIO,
    clock: Clock,
) -> None:
    """A producer paused across the failover (kill -STOP) wrote to e1 after e1 was
    retired: an exploratory run lost 7,497 acknowledged records that way (no group
    reads a retired segment). The sealer watches what it retired: e1 goes back to
    sealed, is read, and is retired again once settled."""
    create_stream(fhttp, partitions=1)
    failover(fhttp, lanes=["realtime"])
    io.ends[E1] = {0: 10}
    io.commits = {"g1": {E1: {0: 10}}}
    seal_then_retire(runtime)
    assert states(service)[E1] == "retired"
    clock.now += 5.0
    runtime.seal_and_retire_once()
    assert states(service)[E1] == "retired"  # nothing new

    io.ends[E1] = {0: 7510}  # the paused producer resumed
    clock.now += 5.0
    runtime.seal_and_retire_once()
    assert states(service)[E1] == "sealed"
    entry = fhttp.get("/v1/audit", params={"stream": "orders"}).json()[0]
    assert (entry["actor"], entry["detail"]["state"]) == ("sealer", "sealed")
    clock.now += 5.0
    runtime.seal_and_retire_once()
    # g1 was recorded as having drained e1 when it was retired: that does not settle
    # the late records (it was retired again at once, before anyone read them).
    assert states(service)[E1] == "sealed"

    io.commits["g1"] = {E1: {0: 7510}}  # read
    clock.now += 5.0
    runtime.seal_and_retire_once()
    assert states(service)[E1] == "retired"


def test_a_new_leader_goes_on_watching_the_segments_retired_before_it(
    fhttp: TestClient,
    service: ControlPlaneService,
    runtime: FailoverRuntime,
    runtime_settings: FailoverSettings,
    io: StubClusterIO,
) -> None:
    """The watch was in the retiring leader's memory: after a leader change, records
    landing in a retired segment were never read."""
    create_stream(fhttp, partitions=1)
    failover(fhttp, lanes=["realtime"])
    io.ends[E1] = {0: 10}
    io.commits = {"g1": {E1: {0: 10}}}
    seal_then_retire(runtime)
    assert states(service)[E1] == "retired"

    successor = FailoverRuntime(
        service, runtime_settings, leadership=SingleReplica(), io_factory=io.for_bootstrap,
        clock=Clock(),
    )  # fmt: skip
    io.ends[E1] = {0: 25}  # a paused producer resumed
    successor.seal_and_retire_once()
    assert states(service)[E1] == "sealed"
    successor._last_retire_check.clear()
    successor.seal_and_retire_once()
    # g1's drained report from the first retirement does not settle the late records,
    # for this leader either.
    assert states(service)[E1] == "sealed"
    io.commits["g1"] = {E1: {0: 25}}
    successor._last_retire_check.clear()
    successor.seal_and_retire_once()
    assert states(service)[E1] == "retired"


@pytest.fixture
def e1_retired_watch0(
    fhttp: TestClient,
    service: ControlPlaneService,
    runtime_settings: FailoverSettings,
    io: StubClusterIO,
    clock: Clock,
) -> FailoverRuntime:
    """A runtime whose watch is over at once (``retired_watch=0``), e1 just retired."""
    settings = runtime_settings.model_copy(update={"retired_watch": 0.0})
    runtime = FailoverRuntime(
        service, settings, leadership=SingleReplica(), io_factory=io.for_bootstrap, clock=clock
    )
    create_stream(fhttp, partitions=1)
    failover(fhttp, lanes=["realtime"])
    io.ends[E1] = {0: 10}
    io.commits = {"g1": {E1: {0: 10}}}
    seal_then_retire(runtime)
    assert states(service)[E1] == "retired" and io.fenced == []
    return runtime


def test_a_retired_segment_is_fenced_once_its_watch_is_over(
    e1_retired_watch0: FailoverRuntime,
    fhttp: TestClient,
    service: ControlPlaneService,
    io: StubClusterIO,
    clock: Clock,
) -> None:
    """Past the watch a late write was acknowledged by the broker and never read; the
    segment's topic is fenced (refuses writes) instead, once, and audited."""
    runtime = e1_retired_watch0
    clock.now += 5.0
    runtime.seal_and_retire_once()
    assert io.fenced == [E1]
    entry = fhttp.get("/v1/audit", params={"stream": "orders"}).json()[0]
    assert entry["action"] == "segment.fenced" and entry["detail"]["topic"] == E1
    clock.now += 5.0
    runtime.seal_and_retire_once()
    assert io.fenced == [E1]  # not again

    # A record the broker took while the fence was being applied is still read.
    io.ends[E1] = {0: 11}
    clock.now += 5.0
    runtime.seal_and_retire_once()
    assert states(service)[E1] == "sealed"


def test_the_fence_waits_for_a_down_cluster(
    e1_retired_watch0: FailoverRuntime, io: StubClusterIO, clock: Clock
) -> None:
    runtime = e1_retired_watch0
    io.down.add("local-a")
    clock.now += 5.0
    runtime.seal_and_retire_once()  # warned, not raised
    assert io.fenced == []
    io.down.clear()
    clock.now += 5.0
    runtime.seal_and_retire_once()
    assert io.fenced == [E1]
