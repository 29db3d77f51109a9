"""Broker and topic tags, tag queries, and topics placed on tagged brokers (stub Kafka)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from streamplane.controlplane.app import ControlPlaneSettings, create_app
from streamplane.ops.stub import StubOpsAdmin
from tests.unit.controlplane.conftest import (
    AUTH,
    BOOTSTRAPS,
    TOKEN,
    StubKafka,
    make_service,
)

BASE = "/v1/clusters/local-a"


@pytest.fixture
def stub() -> StubOpsAdmin:
    return StubOpsAdmin.cluster(
        {1: "a", 2: "b", 3: "c", 4: "a", 5: "b"}, {("old", 0): (1, 2), ("other", 0): (3,)}
    )


@pytest.fixture
def client(tmp_path: Path, stub: StubOpsAdmin) -> Iterator[TestClient]:
    db = f"sqlite:///{tmp_path / 'cp.db'}"
    service = make_service(db, StubKafka())
    service.register_cluster("local-a", BOOTSTRAPS["local-a"], {})
    app = create_app(ControlPlaneSettings(db_url=db, api_token=TOKEN, lag_monitor=False), service)
    app.state.ops_admin_factory = lambda bootstrap: stub
    with TestClient(app) as c:
        yield c


def _tag(client: TestClient, kind: str, name: object, tags: dict[str, str]) -> None:
    r = client.put(f"{BASE}/{kind}/{name}/tags", json={"tags": tags}, headers=AUTH)
    assert r.status_code == 200, r.text


def test_tags_are_set_replaced_and_queried_with_and(client: TestClient) -> None:
    _tag(client, "brokers", 1, {"tier": "ssd", "pool": "x"})
    _tag(client, "brokers", 2, {"tier": "ssd"})
    _tag(client, "brokers", 4, {"tier": "hdd"})
    ssd = client.get(f"{BASE}/brokers", params=[("tag", "tier:ssd")]).json()
    assert [b["broker_id"] for b in ssd] == [1, 2]
    both = client.get(f"{BASE}/brokers", params=[("tag", "tier:ssd"), ("tag", "pool:x")]).json()
    assert [b["broker_id"] for b in both] == [1]
    rack_a = client.get(f"{BASE}/brokers", params=[("tag", "rack:a")]).json()
    assert [b["broker_id"] for b in rack_a] == [1, 4]
    _tag(client, "topics", "old", {"team": "ops"})
    _tag(client, "topics", "other", {"team": "web"})
    ops = client.get(f"{BASE}/topics", params=[("tag", "team:ops")]).json()
    assert ops == [{"cluster": "local-a", "topic": "old", "tags": {"team": "ops"}}]
    _tag(client, "topics", "old", {})
    assert client.get(f"{BASE}/topics", params=[("tag", "team:ops")]).json() == []


def test_errors(client: TestClient) -> None:
    assert client.put(f"{BASE}/brokers/1/tags", json={"tags": {}}).status_code == 401
    bad = {"Authorization": "Bearer nope-nope-nope"}
    assert client.put(f"{BASE}/brokers/1/tags", json={"tags": {}}, headers=bad).status_code == 403
    r = client.put("/v1/clusters/nope/brokers/1/tags", json={"tags": {}}, headers=AUTH)
    assert r.status_code == 404
    r = client.put(f"{BASE}/brokers/1/tags", json={"tags": {"bad key!": "x"}}, headers=AUTH)
    assert r.status_code in (400, 422)
    assert client.get(f"{BASE}/brokers", params=[("tag", "novalue")]).status_code == 400


def test_topic_is_placed_on_the_brokers_matching_the_tags(
    client: TestClient, stub: StubOpsAdmin
) -> None:
    for bid in (1, 2, 3):
        _tag(client, "brokers", bid, {"tier": "ssd"})
    body = {
        "name": "placed",
        "partitions": 6,
        "replication_factor": 3,
        "broker_tags": {"tier": "ssd"},
        "tags": {"team": "ops"},
    }
    r = client.post(f"{BASE}/topics", json=body, headers=AUTH)
    assert r.status_code == 201, r.text
    doc = r.json()
    assert doc["brokers"] == [1, 2, 3]
    for replicas in doc["assignment"].values():
        assert sorted(replicas) == [1, 2, 3]
    assert sorted(r[0] for r in doc["assignment"].values()) == [1, 1, 2, 2, 3, 3]
    assert stub.replicas[("placed", 0)] == tuple(doc["assignment"]["0"])
    tagged = client.get(f"{BASE}/topics", params=[("tag", "team:ops")]).json()
    assert tagged[0]["topic"] == "placed"
    assert client.post(f"{BASE}/topics", json=body, headers=AUTH).status_code == 409


def test_placement_refuses_too_few_brokers_or_racks(client: TestClient) -> None:
    body: dict[str, object] = {
        "name": "t2",
        "partitions": 1,
        "replication_factor": 2,
        "broker_tags": {"rack": "a"},
    }
    r = client.post(f"{BASE}/topics", json=body, headers=AUTH)
    assert r.status_code == 400 and "distinct racks" in r.json()["detail"], r.text
    body["min_rack_ids"] = 1
    assert client.post(f"{BASE}/topics", json=body, headers=AUTH).status_code == 201
    body = {"name": "t3", "replication_factor": 3, "broker_tags": {"tier": "none"}}
    r = client.post(f"{BASE}/topics", json=body, headers=AUTH)
    assert r.status_code == 400 and "0 live broker(s)" in r.json()["detail"]
