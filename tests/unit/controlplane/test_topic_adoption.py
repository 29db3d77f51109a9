"""Adopting an existing topic of a new epoch: only one exactly as the stream would create
it (empty, partitions, replication factor, topic configs); anything else is a 409 that
names the topic, the cluster and what differs, with the routing unchanged (stub Kafka).

An exploratory run made ``sp.orders.realtime.e2`` by hand on local-b (RF 1,
retention.ms=60000, no managed configs) and failed ``orders`` (RF 3) over to it: the
control plane adopted it, "left by an unsaved change", and the stream's active topic had
RF 1, a one-minute retention and CreateTime timestamps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from streamplane.controlplane import service as service_module
from streamplane.controlplane.cluster_io import TopicDescription
from streamplane.controlplane.service import ControlPlaneService, StreamSpec, topic_config
from streamplane.exceptions import KafkaError
from tests.unit.controlplane.conftest import (
    AUTH,
    BOOTSTRAPS,
    StubAdmin,
    StubKafka,
    create_stream,
    make_service,
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
    kafka.brokers.update({BOOTSTRAPS["local-a"]: 3, ON_B: 3})
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
    assert "min.insync.replicas=the cluster's default (the stream's: 2)" in detail
    assert "delete the topic" in detail
    stream = http.get("/v1/streams/orders").json()
    assert stream["epoch"] == 1  # the routing did not change
    assert {s["cluster"] for s in stream["routing"]["segments"]} == {"local-a"}
    assert kafka.on("local-b") == {"sp.orders.realtime.e2": (6, 1, {"retention.ms": "60000"})}


def test_a_topic_with_one_config_more_is_refused_and_this_calls_topics_are_deleted(
    http: TestClient, kafka: StubKafka
) -> None:
    """Also for a config the stream does not set (cleanup.policy here): the topic's own
    configs must be the stream's, no more, no less. The topics this call created are
    deleted again."""
    create_stream(http)
    extra = {**MANAGED, "cleanup.policy": "compact"}
    kafka.admin(ON_B).create_topics([("sp.orders.bulk.e2", 6, 1, extra)])
    status, detail = failover(http, lanes=["realtime", "bulk"])
    assert status == 409, detail
    assert "sp.orders.bulk.e2" in detail and "cleanup.policy=compact" in detail
    assert set(kafka.on("local-b")) == {"sp.orders.bulk.e2"}  # realtime.e2 deleted again
    assert http.get("/v1/streams/orders").json()["epoch"] == 1


def test_an_empty_topic_as_the_stream_would_create_it_is_adopted(
    http: TestClient, kafka: StubKafka
) -> None:
    """What a killed failover of a stream with RF 3 and its own config leaves behind."""
    kafka.brokers.update({BOOTSTRAPS["local-a"]: 3, ON_B: 3})
    create_stream(http, replication_factor=3, config={"retention.ms": "3600000"})
    left = topic_config({"retention.ms": "3600000"}, 1_048_576, 3)
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


# ---------------------------------------------------------------- concurrent replicas
# An exploratory run sent two failovers of a stream at once through two replicas: the
# loser found the topic the winner had just created, could not read its offsets (its
# partitions' leaders not elected yet: "Broker: Not leader for partition") and answered
# 502 with that Kafka error 4 times in 5, instead of the documented 409 (epoch moved).
NOT_LEADER = KafkaError(
    "offsets of sp.orders.realtime.e2: Broker: Not leader for partition",
    code="NOT_LEADER_FOR_PARTITION",
    retriable=True,
)


def _another_replica_fails_over_first(
    db_url: str, kafka: StubKafka, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This replica's next topic creation finds the stream failed over to local-b by
    another replica (same database) just before: its topic made and its routing saved."""
    _another_replica_first(
        db_url,
        kafka,
        monkeypatch,
        lambda other: other.failover("orders", "local-b", ["realtime"], actor="other-replica"),
    )


def _another_replica_first(
    db_url: str,
    kafka: StubKafka,
    monkeypatch: pytest.MonkeyPatch,
    act: Callable[[ControlPlaneService], object],
) -> None:
    """Before this replica's next topic creation, another replica (same database) does
    ``act``."""
    original = StubAdmin.create_topics
    done: list[bool] = []

    def create_topics(self: StubAdmin, topics: Any, timeout: float = 30.0) -> Any:
        if not done:
            done.append(True)
            other = make_service(db_url, kafka)
            try:
                act(other)
            finally:
                other.close()
        return original(self, topics, timeout)

    monkeypatch.setattr(StubAdmin, "create_topics", create_topics)


def test_losing_a_concurrent_failover_is_a_409_not_the_winners_topic_trouble(
    http: TestClient, db_url: str, kafka: StubKafka, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_stream(http)
    monkeypatch.setattr(service_module, "EXISTING_TOPIC_WAIT_S", 0.3, raising=False)

    def not_open_yet(self: StubAdmin, topic: str, timeout: float = 10.0) -> dict[int, int]:
        raise NOT_LEADER

    monkeypatch.setattr(StubAdmin, "end_offsets", not_open_yet)
    _another_replica_fails_over_first(db_url, kafka, monkeypatch)
    status, detail = failover(http)
    assert status == 409, detail
    assert detail == (
        "stream 'orders' moved on to epoch 2 while this change was prepared from epoch 1: retry"
    )
    assert "sp.orders.realtime.e2" in kafka.on("local-b")  # the winner's topic is kept
    assert http.get("/v1/streams/orders").json()["epoch"] == 2


def test_a_topic_just_made_by_another_replica_is_waited_for(
    http: TestClient, db_url: str, kafka: StubKafka, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its leaders elected a moment later, it is described, adopted, and the save's
    compare-and-set answers (409): the winner's topic is not deleted."""
    create_stream(http)
    original = StubAdmin.end_offsets
    answers: list[int] = []

    def leaders_a_moment_later(self: StubAdmin, topic: str, timeout: float = 10.0) -> Any:
        answers.append(1)
        if len(answers) <= 2:
            raise NOT_LEADER
        return original(self, topic, timeout)

    monkeypatch.setattr(StubAdmin, "end_offsets", leaders_a_moment_later)
    _another_replica_fails_over_first(db_url, kafka, monkeypatch)
    status, detail = failover(http)
    assert status == 409, detail
    assert "moved on to epoch 2 while this change was prepared from epoch 1" in detail
    assert len(answers) == 3
    assert "sp.orders.realtime.e2" in kafka.on("local-b")


def test_losing_a_concurrent_create_is_a_409(
    http: TestClient, db_url: str, kafka: StubKafka, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service_module, "EXISTING_TOPIC_WAIT_S", 0.3, raising=False)

    def not_open_yet(self: StubAdmin, topic: str, timeout: float = 10.0) -> dict[int, int]:
        raise NOT_LEADER

    monkeypatch.setattr(StubAdmin, "end_offsets", not_open_yet)
    _another_replica_first(
        db_url,
        kafka,
        monkeypatch,
        lambda other: other.create_stream(
            StreamSpec(name="orders", cluster="local-a"), "other-replica"
        ),
    )
    resp = http.post("/v1/streams", json={"name": "orders", "cluster": "local-a"}, headers=AUTH)
    assert resp.status_code == 409, resp.text
    assert resp.json()["detail"] == "stream 'orders' already exists"
    assert kafka.on("local-a")  # the winner's topics are kept
