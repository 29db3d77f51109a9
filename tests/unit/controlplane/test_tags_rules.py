"""Tags only on what the cluster has, ``rack`` is the broker's real rack, and topic names
in a stream's namespace are not made by hand (stub Kafka: ``StubOpsAdmin``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from streamplane.controlplane.app import ControlPlaneSettings, create_app
from streamplane.controlplane.service import ControlPlaneService
from streamplane.controlplane.tags_api import _put, broker_tags
from streamplane.core.routing import commitlog_topic, physical_topic, stream_owning_topic
from streamplane.exceptions import KafkaError
from streamplane.ops.stub import StubOpsAdmin
from tests.unit.controlplane.conftest import AUTH, BOOTSTRAPS, TOKEN, StubKafka, make_service

BASE = "/v1/clusters/local-a"


@pytest.fixture
def stub() -> StubOpsAdmin:
    return StubOpsAdmin.cluster({1: "a", 2: "b", 3: "c", 4: "a"}, {("orders-in", 0): (1, 2)})


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ControlPlaneService]:
    svc = make_service(f"sqlite:///{tmp_path / 'cp.db'}", StubKafka())
    svc.register_cluster("local-a", BOOTSTRAPS["local-a"], {})
    yield svc
    svc.close()


@pytest.fixture
def client(service: ControlPlaneService, stub: StubOpsAdmin) -> Iterator[TestClient]:
    settings = ControlPlaneSettings(db_url=service.store.url, api_token=TOKEN, lag_monitor=False)
    app = create_app(settings, service)
    app.state.ops_admin_factory = lambda bootstrap: stub
    with TestClient(app) as c:
        yield c


def put_tags(client: TestClient, kind: str, name: object, tags: dict[str, str]) -> tuple[int, str]:
    r = client.put(f"{BASE}/{kind}/{name}/tags", json={"tags": tags}, headers=AUTH)
    return r.status_code, r.json().get("detail", "")


def broker_ids(client: TestClient, *tags: str) -> list[int]:
    found = client.get(f"{BASE}/brokers", params=[("tag", t) for t in tags]).json()
    return [b["broker_id"] for b in found]


# ---------------------------------------------------------------------- tags on what exists
def test_a_broker_the_cluster_does_not_have_is_a_404(
    client: TestClient, stub: StubOpsAdmin
) -> None:
    status, detail = put_tags(client, "brokers", 99, {"x": "y"})
    assert status == 404
    assert detail == "broker 99 is not a live broker of cluster local-a (live: 1, 2, 3, 4)"
    stub.dead.add(4)  # down: the cluster cannot tell it from one that never was
    assert put_tags(client, "brokers", 4, {"x": "y"})[0] == 404
    assert broker_ids(client, "x:y") == []
    assert put_tags(client, "brokers", 1, {"x": "y"}) == (200, "")
    assert broker_ids(client, "x:y") == [1]


def test_a_topic_the_cluster_does_not_have_is_a_404(client: TestClient) -> None:
    status, detail = put_tags(client, "topics", "nonexistent-topic", {"x": "y"})
    assert status == 404
    assert detail == "topic nonexistent-topic does not exist on cluster local-a"
    assert client.get(f"{BASE}/topics").json() == []
    assert put_tags(client, "topics", "orders-in", {"x": "y"}) == (200, "")


def test_a_cluster_that_does_not_answer_is_a_502_and_nothing_is_stored(
    client: TestClient, stub: StubOpsAdmin
) -> None:
    stub.fail["brokers"] = KafkaError("describe cluster: no broker answered", code="_TRANSPORT")
    stub.fail["partitions"] = KafkaError("describe topics: no broker answered", code="_TRANSPORT")
    status, detail = put_tags(client, "brokers", 1, {"x": "y"})
    assert status == 502 and detail.startswith("cluster local-a: "), detail
    status, detail = put_tags(client, "topics", "orders-in", {"x": "y"})
    assert status == 502 and detail.startswith("cluster local-a: "), detail
    del stub.fail["brokers"], stub.fail["partitions"]
    assert broker_ids(client, "x:y") == []
    assert client.get(f"{BASE}/topics").json() == []


# ---------------------------------------------------------------------- rack
def test_rack_is_reserved_and_the_real_rack_is_what_tags_show(client: TestClient) -> None:
    status, detail = put_tags(client, "brokers", 1, {"rack": "z"})
    assert status == 400
    assert "tag 'rack' is reserved" in detail and "broker.rack" in detail
    assert broker_ids(client, "rack:a") == [1, 4]
    assert broker_ids(client, "rack:z") == []
    r = client.put(f"{BASE}/brokers/1/tags", json={"tags": {"tier": "ssd"}}, headers=AUTH)
    assert r.json() == {
        "cluster": "local-a",
        "broker_id": 1,
        "rack": "a",
        "tags": {"tier": "ssd", "rack": "a"},
    }


def test_a_rack_tag_stored_before_it_was_reserved_does_not_hide_the_real_one(
    client: TestClient, service: ControlPlaneService
) -> None:
    _put(service, broker_tags, {"cluster": "local-a", "broker_id": 1}, {"rack": "z", "t": "1"})
    assert broker_ids(client, "rack:a") == [1, 4]
    assert broker_ids(client, "rack:z") == []
    one = client.get(f"{BASE}/brokers", params=[("tag", "t:1")]).json()
    assert one[0]["tags"] == {"t": "1", "rack": "a"}


# ---------------------------------------------------------------------- stream namespace
def test_stream_owning_topic() -> None:
    assert stream_owning_topic(physical_topic("orders", "realtime", 2)) == "orders"
    assert stream_owning_topic(commitlog_topic("orders")) == "orders"
    assert stream_owning_topic("sp.orders.anything-else") == "orders"
    for free in ("orders.v2", "sp.orders", "sp.Orders.realtime.e1", "spx.orders.a", "sp..a"):
        assert stream_owning_topic(free) is None, free


@pytest.mark.parametrize("topic", ["sp.orders.realtime.e2", "sp.orders.__commitlog"])
def test_a_topic_name_in_a_streams_namespace_is_refused(
    client: TestClient, stub: StubOpsAdmin, topic: str
) -> None:
    body = {"name": topic, "partitions": 6, "replication_factor": 1}
    r = client.post(f"{BASE}/topics", json=body, headers=AUTH)
    assert r.status_code == 400
    detail = r.json()["detail"]
    assert f"topic name {topic} is reserved" in detail and "stream 'orders'" in detail
    assert not [c for c in stub.calls if c[0] == "create_topic"]
    body["name"] = "orders.v2"
    assert client.post(f"{BASE}/topics", json=body, headers=AUTH).status_code == 201
