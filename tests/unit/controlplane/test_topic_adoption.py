"""Adopting an existing topic of a new epoch: only one exactly as the stream would create
it (empty, partitions, replication factor, topic configs); anything else is a 409 that
names the topic, the cluster and what differs, with the routing unchanged (stub Kafka).

An exploratory run made ``sp.orders.realtime.e2`` by hand on local-b (RF 1,
retention.ms=60000, no managed configs) and failed ``orders`` (RF 3) over to it: the
control plane adopted it, "left by an unsaved change", and the stream's active topic had
RF 1, a one-minute retention and CreateTime timestamps.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from streamplane.controlplane.cluster_io import TopicDescription
from streamplane.controlplane.service import topic_config
from streamplane.exceptions import KafkaError
from tests.unit.controlplane.conftest import (
    AUTH,
    BOOTSTRAPS,
    StubAdmin,
    StubKafka,
    create_stream,
)

ON_B = BOOTSTRAPS["local-b"]
MANAGED = topic_config({}, 1_048_576)  # what the stream gives every topic of its own


def failover(http: TestClient, **body: object) -> tuple[int, str]:
    resp = http.post(
        "/v1/streams/orders/failover",
        json={"cluster": "local-b", "lanes": ["realtime"], **body},
        headers=AUTH,
    )
    return resp.status_code, resp.json().get("detail", "")


def test_a_hand_made_topic_is_refused_naming_what_differs(
    http: TestClient, kafka: StubKafka
) -> None:
    create_stream(http, replication_factor=3)
    hand_made = ("sp.orders.realtime.e2", 6, 1, {"retention.ms": "60000"})
    assert kafka.admin(ON_B).create_topics([hand_made]) == {"sp.orders.realtime.e2": None}
    status, detail = failover(http)
    assert status == 409, detail
    assert "topic sp.orders.realtime.e2 already exists on cluster local-b" in detail
    assert "replication factor 1 (the stream's: 3)" in detail
    assert "retention.ms=60000 (the stream's: the default)" in detail
    assert "message.timestamp.type=the cluster's default (the stream's: LogAppendTime)" in detail
    assert "max.message.bytes=the cluster's default (the stream's: 1114112)" in detail
    assert "delete the topic" in detail
    stream = http.get("/v1/streams/orders").json()
    assert stream["epoch"] == 1  # the routing did not change
    assert {s["cluster"] for s in stream["routing"]["segments"]} == {"local-a"}
    assert kafka.on("local-b") == {"sp.orders.realtime.e2": (6, 1, {"retention.ms": "60000"})}


def test_a_topic_with_one_config_more_is_refused_and_this_calls_topics_are_deleted(
    http: TestClient, kafka: StubKafka
) -> None:
    """Also for a config the stream does not set (min.insync.replicas here): the topic's
    own configs must be the stream's, no more, no less. The topics this call created
    are deleted again."""
    create_stream(http)
    extra = {**MANAGED, "min.insync.replicas": "1"}
    kafka.admin(ON_B).create_topics([("sp.orders.bulk.e2", 6, 1, extra)])
    status, detail = failover(http, lanes=["realtime", "bulk"])
    assert status == 409, detail
    assert "sp.orders.bulk.e2" in detail and "min.insync.replicas=1" in detail
    assert set(kafka.on("local-b")) == {"sp.orders.bulk.e2"}  # realtime.e2 deleted again
    assert http.get("/v1/streams/orders").json()["epoch"] == 1


def test_an_empty_topic_as_the_stream_would_create_it_is_adopted(
    http: TestClient, kafka: StubKafka
) -> None:
    """What a killed failover of a stream with RF 3 and its own config leaves behind."""
    create_stream(http, replication_factor=3, config={"retention.ms": "3600000"})
    left = topic_config({"retention.ms": "3600000"}, 1_048_576)
    kafka.admin(ON_B).create_topics([("sp.orders.realtime.e2", 6, 3, left)])
    status, detail = failover(http)
    assert status == 200, detail
    routing = http.get("/v1/streams/orders/routing").json()
    active = [s for s in routing["segments"] if s["state"] == "active" and s["lane"] == "realtime"]
    assert active[0]["topic"] == "sp.orders.realtime.e2"


def test_a_topic_that_cannot_be_described_is_a_502_and_nothing_changes(
    http: TestClient, kafka: StubKafka, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_stream(http)
    kafka.admin(ON_B).create_topics([("sp.orders.realtime.e2", 6, 1, MANAGED)])

    def broken(self: StubAdmin, topic: str, timeout: float = 10.0) -> TopicDescription:
        raise KafkaError("describe configs: timed out", code="_TIMED_OUT", retriable=True)

    monkeypatch.setattr(StubAdmin, "describe_topic", broken)
    status, detail = failover(http)
    assert status == 502, detail
    assert "sp.orders.realtime.e2 exists already and could not be described" in detail
    assert "local-b" in detail
    assert http.get("/v1/streams/orders").json()["epoch"] == 1
