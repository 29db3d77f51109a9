"""Adding a lane to a live stream: ``POST /v1/streams/{name}/lanes``, the client's
``add_lane`` and `streamplane streams add-lane`, over the stub Kafka admin."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from fastapi.testclient import TestClient

from streamplane.cli import streams as streams_cli
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.controlplane.service import topic_config
from streamplane.core.routing import routing_from_json
from streamplane.exceptions import Conflict, KafkaError
from tests.unit.controlplane.conftest import (
    AUTH,
    BOOTSTRAPS,
    TOKEN,
    StubKafka,
    cli_over,
    create_stream,
)


def add_lane(http: TestClient, stream: str = "orders", **body: object) -> Any:
    return http.post(f"/v1/streams/{stream}/lanes", json=body, headers=AUTH)


def test_a_lane_is_created_on_the_cluster_and_routed_at_its_place_in_a_new_epoch(
    http: TestClient, kafka: StubKafka
) -> None:
    create_stream(http, config={"retention.ms": 3600000}, partitions=4)
    before = set(kafka.on("local-a"))
    resp = add_lane(http, name="priority", before="bulk")
    assert resp.status_code == 201, resp.text
    table = routing_from_json(resp.json())
    assert table.epoch == 2
    assert table.all_lanes == ("realtime", "priority", "bulk", "dlq")
    segment = table.active("priority")
    assert (segment.cluster, segment.topic, segment.partitions) == (
        "local-a",
        "sp.orders.priority.e2",
        4,  # the stream's
    )
    # The same configs and replication as the stream's other topics.
    assert set(kafka.on("local-a")) - before == {"sp.orders.priority.e2"}
    assert kafka.on("local-a")["sp.orders.priority.e2"] == (
        4,
        1,
        topic_config({"retention.ms": "3600000"}, 1_048_576, 1),
    )
    assert kafka.on("local-a")["sp.orders.priority.e2"] == (
        4,
        *kafka.on("local-a")["sp.orders.bulk.e1"][1:],
    )
    # The stream says so too, and the routing (long poll) answers with it.
    stream = http.get("/v1/streams/orders").json()
    assert stream["lanes"] == ["realtime", "priority", "bulk"] and stream["epoch"] == 2
    assert http.get("/v1/streams").json()[0]["lanes"] == ["realtime", "priority", "bulk"]
    watched = http.get("/v1/streams/orders/routing", params={"after_epoch": 1, "timeout": 1})
    assert routing_from_json(watched.json()) == table
    (entry, *_) = http.get("/v1/audit", params={"stream": "orders"}).json()
    assert entry["action"] == "lane.add" and entry["actor"] == "api"
    assert entry["detail"] == {
        "from_epoch": 1,
        "to_epoch": 2,
        "lane": "priority",
        "lanes": ["realtime", "priority", "bulk"],
        "cluster": "local-a",
        "topic": "sp.orders.priority.e2",
        "partitions": 4,
        "replication_factor": 1,
        "min_insync_replicas": 1,
    }


def test_an_added_lane_moves_with_the_others_in_a_failover(
    http: TestClient, kafka: StubKafka
) -> None:
    create_stream(http)
    assert add_lane(http, name="late", partitions=2).status_code == 201
    resp = http.post("/v1/streams/orders/failover", json={"cluster": "local-b"}, headers=AUTH)
    assert resp.status_code == 200, resp.text
    table = routing_from_json(resp.json())
    assert table.lanes == ("realtime", "bulk", "late")
    assert table.active("late").cluster == "local-b" and table.active("late").partitions == 2
    assert "sp.orders.late.e3" in kafka.on("local-b")


def test_the_factor_is_capped_at_the_clusters_live_brokers_as_in_a_failover(
    http: TestClient, kafka: StubKafka, caplog: pytest.LogCaptureFixture
) -> None:
    kafka.brokers[BOOTSTRAPS["local-a"]] = 3
    create_stream(http)
    kafka.brokers[BOOTSTRAPS["local-a"]] = 2  # a broker down
    with caplog.at_level(logging.WARNING, "streamplane.controlplane.service"):
        assert add_lane(http, name="late").status_code == 201
    _, replicas, configs = kafka.on("local-a")["sp.orders.late.e2"]
    assert (replicas, configs["min.insync.replicas"]) == (2, "1")
    assert [r.getMessage() for r in caplog.records] == [
        "stream orders gets lane late on cluster local-a with replication factor 2, not its "
        "3: the cluster has 2 live brokers (min.insync.replicas 1)"
    ]


@pytest.mark.parametrize(
    ("stream", "body", "status", "message"),
    [
        ("nope", {"name": "late"}, 404, "unknown stream 'nope'"),
        ("orders", {"name": "bulk"}, 409, "stream 'orders' already has lane 'bulk'"),
        ("orders", {"name": "dlq"}, 409, "already has lane 'dlq' (the dlq lane is every"),
        ("orders", {"name": "Late"}, 400, "invalid lane name 'Late'"),
        ("orders", {"name": "late", "before": "nope"}, 400, "has no lane 'nope' to put"),
        ("orders", {"name": "late", "cluster": "local-z"}, 404, "local-z"),
        ("orders", {"name": "late", "partitions": 0}, 422, "partitions"),
        ("orders", {"name": "late", "partitions": True}, 422, "partitions"),
        ("orders", {"name": "late", "lanes": ["x"]}, 422, "lanes"),
        ("orders", {}, 422, "name"),
    ],
)
def test_refusals_say_why_and_change_nothing(
    http: TestClient,
    kafka: StubKafka,
    stream: str,
    body: dict[str, object],
    status: int,
    message: str,
) -> None:
    create_stream(http)
    topics = {b: set(t) for b, t in kafka.topics.items()}
    resp = add_lane(http, stream, **body)
    assert resp.status_code == status, resp.text
    assert message in resp.json()["detail"]
    assert {b: set(t) for b, t in kafka.topics.items()} == topics
    assert http.get("/v1/streams/orders").json()["epoch"] == 1


def test_lanes_split_over_clusters_need_the_cluster_named(
    http: TestClient, kafka: StubKafka
) -> None:
    create_stream(http)
    http.post(
        "/v1/streams/orders/failover", json={"cluster": "local-b", "lanes": ["bulk"]}, headers=AUTH
    )
    resp = add_lane(http, name="late")
    assert resp.status_code == 400
    assert resp.json()["detail"] == (
        "stream 'orders' has lanes active on local-a, local-b: name the cluster lane 'late' goes to"
    )
    resp = add_lane(http, name="late", cluster="local-b")
    assert resp.status_code == 201, resp.text
    assert "sp.orders.late.e3" in kafka.on("local-b")


def test_a_failed_topic_creation_adds_nothing(http: TestClient, kafka: StubKafka) -> None:
    create_stream(http)
    kafka.fail_create["sp.orders.late.e2"] = KafkaError("broker down", code="_TRANSPORT")
    resp = add_lane(http, name="late")
    assert resp.status_code == 502
    assert resp.json()["detail"].startswith("lane 'late' not added to stream 'orders': ")
    assert http.get("/v1/streams/orders").json()["lanes"] == ["realtime", "bulk"]


def test_the_client_and_the_cli_add_lanes(
    http: TestClient,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    create_stream(http)
    with ControlPlaneClient("http://testserver", TOKEN) as cp:
        own, cp._http = cp._http, TestClient(http.app, headers=dict(cp._http.headers))
        own.close()
        table = cp.add_lane("orders", "urgent", before="realtime", partitions=2)
        assert table.lanes == ("urgent", "realtime", "bulk")
        assert table.active("urgent").partitions == 2

    run = cli_over(http, monkeypatch, capsys, streams_cli)
    code, out, err = run("streams", "add-lane", "orders", "late", "--before", "bulk")
    assert code == 0, err
    assert "stream orders: lane late added (epoch 3)" in out
    assert "lanes: urgent > realtime > late > bulk > dlq" in out
    code, out, err = run("streams", "add-lane", "orders", "later", "--json")
    assert code == 0, err
    assert json.loads(out)["lanes"] == ["urgent", "realtime", "late", "bulk", "later"]
    code, out, err = run("streams", "add-lane", "orders", "bulk")
    assert code == 1
    assert "already has lane 'bulk'" in err


def test_a_repeat_after_an_attempt_that_added_the_lane_is_its_answer(
    http: TestClient,
) -> None:
    """``settle`` of a 409 (a retry sent to another replica after the first may have
    acted): the lane there as asked is the answer; otherwise the conflict stands."""
    create_stream(http)
    assert add_lane(http, name="late", before="bulk").status_code == 201
    with ControlPlaneClient("http://testserver", TOKEN) as cp:
        own, cp._http = cp._http, TestClient(http.app, headers=dict(cp._http.headers))
        own.close()
        conflict = _conflict_of(cp, "late", before="bulk")
        assert conflict is None  # the lane is there as asked
        assert _conflict_of(cp, "late", partitions=1) is not None  # not as asked


def _conflict_of(cp: ControlPlaneClient, lane: str, **asked: Any) -> Exception | None:
    """What ``add_lane`` raises when its request meets a 409 after an earlier attempt
    (the retry path's ``settle``), None when it answers."""
    real = ControlPlaneClient._json

    def as_a_retry(self: ControlPlaneClient, method: str, path: str, **kw: Any) -> Any:
        settle = kw.pop("settle", None)
        try:
            return real(self, method, path, **kw)
        except Conflict as exc:
            assert settle is not None
            return settle(exc)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ControlPlaneClient, "_json", as_a_retry)
        try:
            cp.add_lane("orders", lane, **asked)
        except Conflict as exc:
            return exc
    return None
