"""A stream's replication factor and min.insync.replicas (stub Kafka with a given number
of live brokers per cluster): min(3, brokers) when none is asked, resolved at creation and
kept; min.insync.replicas 2 of 3 unless the stream's config sets it; a failover to a
cluster with fewer brokers capped, not refused."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fastapi.testclient import TestClient

from streamplane.cli import streams as streams_cli
from streamplane.controlplane.service import topic_config
from tests.unit.controlplane.conftest import AUTH, BOOTSTRAPS, StubKafka, cli_over, create_stream

ON_A, ON_B = BOOTSTRAPS["local-a"], BOOTSTRAPS["local-b"]


def failover(http: TestClient, cluster: str = "local-b") -> dict[str, object]:
    resp = http.post("/v1/streams/orders/failover", json={"cluster": cluster}, headers=AUTH)
    assert resp.status_code == 200, resp.text
    doc: dict[str, object] = resp.json()
    return doc


def last_audit(http: TestClient) -> dict[str, Any]:
    entry: dict[str, Any] = http.get("/v1/audit", params={"stream": "orders"}).json()[0]
    return entry


@pytest.mark.parametrize(
    ("brokers", "replicas", "min_insync"), [(1, 1, "1"), (2, 2, "1"), (3, 3, "2"), (5, 3, "2")]
)
def test_without_a_factor_the_topics_get_min_3_brokers_replicas(
    http: TestClient, kafka: StubKafka, brokers: int, replicas: int, min_insync: str
) -> None:
    kafka.brokers[ON_A] = brokers
    doc = create_stream(http)
    assert doc["replication_factor"] == replicas  # the resolved number, kept
    assert http.get("/v1/streams/orders").json()["replication_factor"] == replicas
    topics = kafka.on("local-a")
    assert {t: (r, c["min.insync.replicas"]) for t, (_, r, c) in topics.items()} == {
        t: (replicas, min_insync)
        for t in ("sp.orders.realtime.e1", "sp.orders.bulk.e1", "sp.orders.dlq.e1")
    }
    assert doc["topic_config"] == topics["sp.orders.realtime.e1"][2]
    assert last_audit(http)["detail"]["replication_factor"] == replicas


def test_a_factor_asked_for_is_kept(http: TestClient, kafka: StubKafka) -> None:
    kafka.brokers[ON_A] = 5
    doc = create_stream(http, replication_factor=1)
    assert doc["replication_factor"] == 1
    _, replicas, config = kafka.on("local-a")["sp.orders.realtime.e1"]
    assert (replicas, config["min.insync.replicas"]) == (1, "1")


def test_the_streams_own_min_insync_replicas_is_kept(http: TestClient, kafka: StubKafka) -> None:
    kafka.brokers[ON_A] = 3
    doc = create_stream(http, config={"min.insync.replicas": 3})
    assert kafka.on("local-a")["sp.orders.realtime.e1"][2]["min.insync.replicas"] == "3"
    assert doc["config"] == {"min.insync.replicas": "3"}
    assert doc["topic_config"] == {**topic_config({}, 1_048_576), "min.insync.replicas": "3"}


@pytest.mark.parametrize(
    ("brokers", "extra", "message"),
    [
        (
            2,  # the default factor resolves to 2
            {"config": {"min.insync.replicas": "3"}},
            "min.insync.replicas=3 is above the replication factor 2",
        ),
        (
            3,
            {"replication_factor": 1, "config": {"min.insync.replicas": "2"}},
            "min.insync.replicas=2 is above the replication factor 1",
        ),
        (3, {"config": {"min.insync.replicas": "two"}}, "must be a positive integer"),
    ],
)
def test_a_min_insync_replicas_above_the_factor_is_a_400(
    http: TestClient, kafka: StubKafka, brokers: int, extra: dict[str, object], message: str
) -> None:
    kafka.brokers[ON_A] = brokers
    resp = http.post(
        "/v1/streams", json={"name": "orders", "cluster": "local-a", **extra}, headers=AUTH
    )
    assert resp.status_code == 400, resp.text
    assert message in resp.json()["detail"]
    assert kafka.on("local-a") == {}
    assert http.get("/v1/streams/orders").status_code == 404


def test_a_cluster_that_does_not_answer_is_named(http: TestClient, kafka: StubKafka) -> None:
    del kafka.cluster_ids[ON_A]
    resp = http.post("/v1/streams", json={"name": "orders", "cluster": "local-a"}, headers=AUTH)
    assert resp.status_code == 502, resp.text
    assert resp.json()["detail"].startswith("stream 'orders' not created: cluster local-a: ")


def test_a_failover_to_a_smaller_cluster_caps_the_factor(
    http: TestClient, kafka: StubKafka, caplog: pytest.LogCaptureFixture
) -> None:
    kafka.brokers.update({ON_A: 3, ON_B: 1})
    create_stream(http)
    with caplog.at_level(logging.WARNING, "streamplane.controlplane.service"):
        failover(http)
    moved = {t: (r, c["min.insync.replicas"]) for t, (_, r, c) in kafka.on("local-b").items()}
    assert moved == {"sp.orders.realtime.e2": (1, "1"), "sp.orders.bulk.e2": (1, "1")}
    detail = last_audit(http)["detail"]
    assert detail["replication_factor"] == 1 and detail["min_insync_replicas"] == 1
    assert [r.getMessage() for r in caplog.records] == [
        "stream orders moves to cluster local-b with replication factor 1, not its 3: the "
        "cluster has 1 live brokers (min.insync.replicas 1)"
    ]
    stream = http.get("/v1/streams/orders").json()
    assert stream["replication_factor"] == 3  # the stream's own, for its next moves
    failover(http, "local-a")
    back = kafka.on("local-a")["sp.orders.realtime.e3"]
    assert (back[1], back[2]["min.insync.replicas"]) == (3, "2")
    assert last_audit(http)["detail"]["replication_factor"] == 3


def test_a_failover_caps_the_streams_own_min_insync_replicas(
    http: TestClient, kafka: StubKafka
) -> None:
    kafka.brokers.update({ON_A: 3, ON_B: 2})
    create_stream(http, config={"min.insync.replicas": "3"})
    failover(http)
    _, replicas, config = kafka.on("local-b")["sp.orders.realtime.e2"]
    assert (replicas, config["min.insync.replicas"]) == (2, "2")
    assert last_audit(http)["detail"]["min_insync_replicas"] == 2


def test_a_stream_of_factor_1_keeps_it_on_a_bigger_cluster(
    http: TestClient, kafka: StubKafka
) -> None:
    """As the streams of a database from before the default (factor 1 stored)."""
    create_stream(http, replication_factor=1)
    kafka.brokers[ON_B] = 3
    failover(http)
    _, replicas, config = kafka.on("local-b")["sp.orders.realtime.e2"]
    assert (replicas, config["min.insync.replicas"]) == (1, "1")


def test_a_topic_left_by_a_capped_failover_is_adopted(http: TestClient, kafka: StubKafka) -> None:
    """The killed failover's topic has the capped factor and min.insync.replicas: the
    retry compares it with those, not with the stream's own."""
    kafka.brokers.update({ON_A: 3, ON_B: 1})
    create_stream(http)
    left = topic_config({}, 1_048_576, 1)
    assert left["min.insync.replicas"] == "1"
    kafka.admin(ON_B).create_topics([("sp.orders.realtime.e2", 6, 1, left)])
    failover(http)
    routing = http.get("/v1/streams/orders/routing").json()
    active = {s["topic"] for s in routing["segments"] if s["state"] == "active"}
    assert "sp.orders.realtime.e2" in active


def test_streams_create_leaves_the_factor_to_the_server(
    http: TestClient,
    kafka: StubKafka,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kafka.brokers[ON_A] = 4
    run = cli_over(http, monkeypatch, capsys, streams_cli)
    code, out, err = run("streams", "create", "orders", "--cluster", "local-a")
    assert code == 0, err
    code, out, err = run("streams", "describe", "orders")
    assert code == 0, err
    assert "replication factor 3" in out
    assert "min.insync.replicas=2" in out
    code, out, err = run(
        "streams", "create", "other", "--cluster", "local-a", "--replication-factor", "2"
    )
    assert code == 0, err
    assert http.get("/v1/streams/other").json()["replication_factor"] == 2
