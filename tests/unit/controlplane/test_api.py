"""The HTTP API over a stub Kafka: auth, validation, error mapping, stream life cycle."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from streamplane.controlplane.app import ControlPlaneSettings, create_app
from streamplane.controlplane.migrations import LATEST_VERSION
from streamplane.controlplane.service import ControlPlaneService, topic_config
from streamplane.core.routing import routing_from_json
from streamplane.exceptions import KafkaError
from tests.unit.controlplane.conftest import (
    AUTH,
    BOOTSTRAPS,
    TOKEN,
    StubKafka,
    create_stream,
)

MUTATIONS = [
    ("POST", "/v1/clusters", {"name": "c", "bootstrap": "h:1"}),
    ("PATCH", "/v1/clusters/local-a", {"tags": {}}),
    ("DELETE", "/v1/clusters/local-b", None),
    ("POST", "/v1/streams", {"name": "s", "cluster": "local-a"}),
    ("DELETE", "/v1/streams/s", None),
    ("POST", "/v1/streams/s/failover", {"cluster": "local-b"}),
    ("POST", "/v1/streams/s/lanes", {"name": "priority"}),
    (
        "POST",
        "/v1/streams/s/segments/transition",
        {"cluster": "local-a", "topic": "t", "state": "sealed"},
    ),
]


def test_every_mutation_is_listed(app: FastAPI) -> None:
    """The auth test below covers every route that is not a read."""
    routes = {
        (m, getattr(r, "path", ""))
        for r in app.routes
        for m in getattr(r, "methods", ())
        if m not in ("GET", "HEAD")
    }
    assert routes == {(m, _template(p)) for m, p, _ in MUTATIONS}


def _template(path: str) -> str:
    parts = path.split("/")
    if len(parts) > 3:
        parts[3] = "{name}"
    return "/".join(parts)


@pytest.mark.parametrize(("method", "path", "body"), MUTATIONS)
def test_mutations_need_the_token(http: TestClient, method: str, path: str, body: object) -> None:
    missing = http.request(method, path, json=body)
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == "Bearer"
    assert "missing API token" in missing.json()["detail"]
    wrong = http.request(method, path, json=body, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 403
    assert wrong.json() == {"detail": "wrong API token"}
    basic = http.request(method, path, json=body, headers={"Authorization": "Basic dXNlcg=="})
    assert basic.status_code == 401
    # It was answered "missing API token" alone, as if none had been sent.
    assert "'Basic' is not a bearer token" in basic.json()["detail"]


def test_previous_tokens_are_accepted_during_a_rotation(
    settings: ControlPlaneSettings, service: ControlPlaneService
) -> None:
    """``--previous-token``: the old token works on every mutation while clients move
    to the new one; a token that is neither is still refused."""
    rotating = settings.model_copy(
        update={"api_token": "the-new-token", "previous_api_tokens": (TOKEN, "older-token")}
    )
    with TestClient(create_app(rotating, service)) as http:
        for token, status in ((TOKEN, 201), ("the-new-token", 201), ("older-token", 201)):
            resp = http.post(
                "/v1/streams",
                json={"name": f"s-{token[:5]}", "cluster": "local-a"},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert resp.status_code == status, resp.text
        wrong = http.post(
            "/v1/streams",
            json={"name": "s-wrong", "cluster": "local-a"},
            headers={"Authorization": "Bearer the-newest-token"},
        )
        assert wrong.status_code == 403


def test_a_previous_token_is_checked_as_the_token_is() -> None:
    with pytest.raises(ValueError, match="at least 8 characters"):
        ControlPlaneSettings(
            db_url="sqlite://", api_token="long-enough", previous_api_tokens=("x",)
        )
    with pytest.raises(ValueError, match="printable ASCII"):
        ControlPlaneSettings(
            db_url="sqlite://", api_token="long-enough", previous_api_tokens=("has a space",)
        )


def test_a_client_without_a_token_is_told_how_to_give_one(http: TestClient) -> None:
    """The Python client's 401 names its own way to pass a token (the server's message
    names the HTTP header, which a Python user does not write)."""
    from streamplane.client.control_plane import ControlPlaneClient
    from streamplane.exceptions import Unauthorized

    with ControlPlaneClient("http://testserver") as cp:
        own, cp._http = cp._http, TestClient(http.app)  # a TestClient is an httpx.Client
        own.close()
        with pytest.raises(Unauthorized) as err:
            cp.register_cluster("eu-1", "h:1")
    assert "missing API token" in str(err.value)
    assert "ControlPlaneClient(url, token=...)" in str(err.value)
    with ControlPlaneClient("http://testserver", "wrong") as cp:
        own, cp._http = cp._http, TestClient(http.app, headers=dict(cp._http.headers))
        own.close()
        with pytest.raises(Unauthorized) as err:
            cp.register_cluster("eu-1", "h:1")
    assert "ControlPlaneClient(" not in str(err.value)  # a token was given: 403 says


def test_reads_need_no_token(http: TestClient) -> None:
    create_stream(http)
    for path in (
        "/healthz",
        "/v1/clusters",
        "/v1/clusters/local-a",
        "/v1/streams",
        "/v1/streams/orders",
        "/v1/streams/orders/routing",
        "/v1/audit",
    ):
        assert http.get(path).status_code == 200, path


def test_health(http: TestClient) -> None:
    assert http.get("/healthz").json() == {
        "status": "ok",
        "version": "0.1.0",
        "schema_version": LATEST_VERSION,
    }


# ---------------------------------------------------------------------- clusters
def test_cluster_registry_and_tag_filter(http: TestClient) -> None:
    resp = http.post(
        "/v1/clusters",
        json={"name": "eu-1", "bootstrap": "k1:9092,k2:9092", "tags": {"env": "prod", "zone": "a"}},
        params={"force": "true"},  # no stub Kafka cluster answers there
        headers=AUTH,
    )
    assert resp.status_code == 201
    assert resp.json()["tags"] == {"env": "prod", "zone": "a"}
    http.post(
        "/v1/clusters",
        json={"name": "eu-2", "bootstrap": "k3:9092", "tags": {"env": "prod", "zone": "b"}},
        params={"force": "true"},
        headers=AUTH,
    )

    def names(*tags: str) -> list[str]:
        return [c["name"] for c in http.get("/v1/clusters", params={"tag": list(tags)}).json()]

    assert names() == ["eu-1", "eu-2", "local-a", "local-b"]
    assert names("env:prod") == ["eu-1", "eu-2"]
    assert names("env:prod", "zone:b") == ["eu-2"]
    assert names("env:prod", "zone:c") == []
    bad = http.get("/v1/clusters", params={"tag": "nocolon"})
    assert bad.status_code == 400
    assert "key:value" in bad.json()["detail"]
    bad = http.get("/v1/clusters", params={"tag": "env=prod:x"})  # was: [] (no such key)
    assert bad.status_code == 400
    assert "invalid tag key 'env=prod'" in bad.json()["detail"]

    patch = {"bootstrap": "k4:9093"}
    refused = http.patch("/v1/clusters/eu-2", json=patch, headers=AUTH)
    assert refused.status_code == 400
    assert "k4:9093 does not answer" in refused.json()["detail"]
    assert "to change it anyway: --force, force=true in the API" in refused.json()["detail"]
    forced = http.patch("/v1/clusters/eu-2", json=patch, params={"force": "true"}, headers=AUTH)
    patched = forced.json()
    assert patched["bootstrap"] == "k4:9093"
    assert patched["tags"] == {"env": "prod", "zone": "b"}  # untouched
    patched = http.patch("/v1/clusters/eu-2", json={"tags": {"tier": "x"}}, headers=AUTH).json()
    assert patched["tags"] == {"tier": "x"}  # replaced
    assert http.delete("/v1/clusters/eu-2", headers=AUTH).status_code == 204
    assert http.get("/v1/clusters/eu-2").status_code == 404


def test_a_new_bootstrap_must_be_the_same_cluster(http: TestClient, kafka: StubKafka) -> None:
    """A typo made the cluster look down and the health checks failed its streams
    over; another cluster's address would have sent them elsewhere."""
    kafka.cluster_ids["127.0.0.1:29092"] = "id-local-a"  # local-a, at a second address
    moved = http.patch("/v1/clusters/local-a", json={"bootstrap": "127.0.0.1:29092"}, headers=AUTH)
    assert moved.status_code == 200, moved.text
    assert moved.json()["bootstrap"] == "127.0.0.1:29092"
    elsewhere = http.patch(
        "/v1/clusters/local-a", json={"bootstrap": BOOTSTRAPS["local-b"]}, headers=AUTH
    )
    assert elsewhere.status_code == 400
    detail = elsewhere.json()["detail"]
    assert "is another Kafka cluster (id id-local-b; 127.0.0.1:29092 is id-local-a)" in detail
    typo = http.patch("/v1/clusters/local-a", json={"bootstrap": "127.0.0.1:2909"}, headers=AUTH)
    assert typo.status_code == 400 and "does not answer" in typo.json()["detail"]
    assert http.get("/v1/clusters/local-a").json()["bootstrap"] == "127.0.0.1:29092"
    # Its old address down: the new one that answers is taken.
    del kafka.cluster_ids["127.0.0.1:29092"]
    kafka.cluster_ids["127.0.0.1:39092"] = "id-local-a"
    back = http.patch("/v1/clusters/local-a", json={"bootstrap": "127.0.0.1:39092"}, headers=AUTH)
    assert back.status_code == 200, back.text


def test_cluster_conflicts_and_unknowns(http: TestClient) -> None:
    again = http.post("/v1/clusters", json={"name": "local-a", "bootstrap": "h:1"}, headers=AUTH)
    assert again.status_code == 409
    assert again.json() == {"detail": "cluster 'local-a' is already registered"}
    missing = http.get("/v1/clusters/nope")
    assert missing.status_code == 404
    assert missing.json()["detail"] == "unknown cluster 'nope' (known: local-a, local-b)"
    assert http.patch("/v1/clusters/nope", json={}, headers=AUTH).status_code == 404
    assert http.delete("/v1/clusters/nope", headers=AUTH).status_code == 404


def test_cluster_with_segments_cannot_be_removed(http: TestClient) -> None:
    create_stream(http)
    resp = http.delete("/v1/clusters/local-a", headers=AUTH)
    assert resp.status_code == 409
    detail = resp.json()["detail"]
    # Each stream's lanes there and their states, and how to move the dlq lane too (a
    # failover moves every lane but the dlq: the error read the same after one).
    assert "(orders: bulk (active), dlq (active), realtime (active))" in detail
    assert "`--lane dlq` moves the dlq lane" in detail


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"name": "bad name", "bootstrap": "h:1"}, "invalid cluster name"),
        ({"name": "c", "bootstrap": "nohostport"}, "expected host:port"),
        ({"name": "c", "bootstrap": "h:99999"}, "expected host:port"),
        ({"name": "c", "bootstrap": "h:1", "tags": {"a:b": "x"}}, "invalid tag key"),
        ({"name": "c", "bootstrap": "h:1", "tags": {"k": "line\nbreak"}}, "invalid value"),
    ],
)
def test_bad_cluster_input_is_400(http: TestClient, body: dict[str, object], message: str) -> None:
    resp = http.post("/v1/clusters", json=body, headers=AUTH)
    assert resp.status_code == 400
    assert message in resp.json()["detail"]
    assert "\n" not in resp.json()["detail"]


# ---------------------------------------------------------------------- streams
def test_create_stream_creates_every_topic_with_managed_configs(
    http: TestClient, kafka: StubKafka
) -> None:
    doc = create_stream(
        http, lanes=["realtime", "bulk", "late"], partitions=3, config={"retention.ms": 3600000}
    )
    routing = routing_from_json(doc["routing"])  # type: ignore[arg-type]
    assert routing.epoch == 1
    assert routing.all_lanes == ("realtime", "bulk", "late", "dlq")
    assert set(kafka.on("local-a")) == {
        "sp.orders.realtime.e1",
        "sp.orders.bulk.e1",
        "sp.orders.late.e1",
        "sp.orders.dlq.e1",
    }
    partitions, replication, config = kafka.on("local-a")["sp.orders.realtime.e1"]
    assert (partitions, replication) == (3, 1)
    assert config == {
        "retention.ms": "3600000",
        "min.insync.replicas": "1",  # one replica: the only broker of local-a
        "message.timestamp.type": "LogAppendTime",
        "max.message.bytes": str(1048576 + 64 * 1024),
    }
    assert kafka.on("local-a")["sp.orders.dlq.e1"][0] == 1
    assert doc["max_record_bytes"] == 1048576
    assert doc["topic_config"] == config
    assert doc["active_clusters"] == ["local-a"]
    described = http.get("/v1/streams/orders").json()
    assert described == doc


def test_create_stream_defaults(http: TestClient) -> None:
    doc = create_stream(http)
    assert doc["lanes"] == ["realtime", "bulk"]
    assert (doc["partitions"], doc["dlq_partitions"], doc["replication_factor"]) == (6, 1, 1)


@pytest.mark.parametrize(
    ("extra", "status", "message"),
    [
        ({"name": "Bad_Name"}, 400, "invalid stream name"),
        ({"name": "orders\n"}, 400, "invalid stream name"),
        ({"lanes": ["bulk\n"]}, 400, "invalid lane name"),
        ({"lanes": ["dlq"]}, 400, "the dlq lane is implicit"),
        ({"lanes": ["a", "a"]}, 400, "listed twice"),
        ({"lanes": ["9x"]}, 400, "invalid lane name"),
        ({"lanes": []}, 422, "lanes: List should have at least 1 item"),
        ({"partitions": 0}, 422, "partitions: Input should be greater than or equal to 1"),
        ({"max_record_bytes": "big"}, 422, "max_record_bytes: Input should be a valid integer"),
        ({"partitions": True}, 422, "partitions: Value error, a boolean is not an integer"),
        ({"config": {"max.message.bytes": "5"}}, 400, "set max_record_bytes instead"),
        ({"config": {"message.timestamp.type": "CreateTime"}}, 400, "LogAppendTime"),
        ({"config": {"Bad Key": "1"}}, 400, "invalid topic config key"),
        ({"cluster": "nope"}, 404, "unknown cluster 'nope'"),
        ({"surprise": 1}, 422, "surprise: Extra inputs are not permitted"),
    ],
)
def test_bad_stream_input(
    http: TestClient, kafka: StubKafka, extra: dict[str, object], status: int, message: str
) -> None:
    body = {"name": "orders", "cluster": "local-a", **extra}
    resp = http.post("/v1/streams", json=body, headers=AUTH)
    assert resp.status_code == status, resp.text
    detail = resp.json()["detail"]
    assert isinstance(detail, str)
    assert message in detail
    assert "\n" not in detail
    assert kafka.on("local-a") == {}  # nothing created


def test_invalid_json_is_one_line_422(http: TestClient) -> None:
    resp = http.post(
        "/v1/streams", content=b"{not json", headers={**AUTH, "content-type": "application/json"}
    )
    assert resp.status_code == 422
    assert resp.json()["detail"].startswith("the body is not valid JSON")


def test_duplicate_stream_is_409_and_touches_no_topic(http: TestClient, kafka: StubKafka) -> None:
    create_stream(http)
    before = dict(kafka.on("local-a"))
    resp = http.post("/v1/streams", json={"name": "orders", "cluster": "local-b"}, headers=AUTH)
    assert resp.status_code == 409
    assert resp.json() == {"detail": "stream 'orders' already exists"}
    assert kafka.on("local-a") == before
    assert kafka.on("local-b") == {}


def test_failed_topic_creation_persists_nothing_and_cleans_up(
    http: TestClient, kafka: StubKafka
) -> None:
    kafka.fail_create["sp.orders.bulk.e1"] = KafkaError(
        "create topic sp.orders.bulk.e1: timed out", code="_TIMED_OUT", retriable=True
    )
    resp = http.post("/v1/streams", json={"name": "orders", "cluster": "local-a"}, headers=AUTH)
    assert resp.status_code == 502
    detail = resp.json()["detail"]
    assert detail.startswith("stream 'orders' not created: cluster local-a: create topic")
    assert "timed out" in detail
    assert http.get("/v1/streams/orders").status_code == 404
    assert kafka.on("local-a") == {}  # the topics that were created are gone again
    assert http.get("/v1/audit").json()[0]["action"] == "cluster.register"


def test_broker_rejecting_the_request_is_400(http: TestClient, kafka: StubKafka) -> None:
    kafka.fail_create["sp.orders.realtime.e1"] = KafkaError(
        "Replication factor: 3 larger than available brokers: 1",
        code="INVALID_REPLICATION_FACTOR",
    )
    resp = http.post(
        "/v1/streams",
        json={"name": "orders", "cluster": "local-a", "replication_factor": 3},
        headers=AUTH,
    )
    assert resp.status_code == 400
    assert "larger than available brokers" in resp.json()["detail"]


def test_existing_topic_with_records_is_a_conflict(http: TestClient, kafka: StubKafka) -> None:
    kafka.admin("127.0.0.1:19092").create_topics([("sp.orders.dlq.e1", 1, 1, {})])
    kafka.written["sp.orders.dlq.e1"] = 3
    resp = http.post("/v1/streams", json={"name": "orders", "cluster": "local-a"}, headers=AUTH)
    assert resp.status_code == 409
    assert "sp.orders.dlq.e1 already exists" in resp.json()["detail"]
    assert set(kafka.on("local-a")) == {"sp.orders.dlq.e1"}  # someone else's: left alone


def test_existing_topic_with_other_partitions_is_a_conflict(
    http: TestClient, kafka: StubKafka
) -> None:
    kafka.admin("127.0.0.1:19092").create_topics([("sp.orders.bulk.e1", 2, 1, {})])
    resp = http.post("/v1/streams", json={"name": "orders", "cluster": "local-a"}, headers=AUTH)
    assert resp.status_code == 409
    assert "2 partitions (the stream's: 6)" in resp.json()["detail"]
    assert set(kafka.on("local-a")) == {"sp.orders.bulk.e1"}


def test_empty_topics_left_by_a_killed_create_are_adopted(
    http: TestClient, kafka: StubKafka
) -> None:
    """A control plane killed between creating a stream's topics and saving the stream
    left them behind: every later create of the name was a 409 and a delete a 404, until
    someone deleted the topics by hand. Empty, with the partitions wanted, no producer
    can have known them: they are taken."""
    left = topic_config({}, 1_048_576)  # what the killed create gave them
    kafka.admin("127.0.0.1:19092").create_topics(
        [("sp.orders.realtime.e1", 6, 1, left), ("sp.orders.bulk.e1", 6, 1, left)]
    )
    resp = http.post("/v1/streams", json={"name": "orders", "cluster": "local-a"}, headers=AUTH)
    assert resp.status_code == 201, resp.text
    assert set(kafka.on("local-a")) == {
        "sp.orders.realtime.e1",
        "sp.orders.bulk.e1",
        "sp.orders.dlq.e1",
    }


def test_delete_stream_with_and_without_topics(http: TestClient, kafka: StubKafka) -> None:
    create_stream(http, "one")
    create_stream(http, "two")
    assert http.delete("/v1/streams/one", headers=AUTH).status_code == 204
    assert not any(t.startswith("sp.one.") for t in kafka.on("local-a"))
    resp = http.delete("/v1/streams/two", params={"delete_topics": "false"}, headers=AUTH)
    assert resp.status_code == 204
    assert len([t for t in kafka.on("local-a") if t.startswith("sp.two.")]) == 3
    assert http.get("/v1/streams").json() == []
    assert http.delete("/v1/streams/two", headers=AUTH).status_code == 404


def test_a_stream_made_again_goes_on_from_the_deleted_ones_epoch(
    http: TestClient, kafka: StubKafka
) -> None:
    """A client still watching a deleted stream (after_epoch=N) follows the new one: its
    epoch goes on from the old one's (it restarted at 1, below every watcher's N, and
    producers kept writing to the deleted topics); the new topics never meet topics
    kept from the old stream."""
    create_stream(http, "one")
    resp = http.post("/v1/streams/one/failover", json={"cluster": "local-b"}, headers=AUTH)
    assert resp.status_code == 200, resp.text
    old_epoch = http.get("/v1/streams/one/routing").json()["epoch"]
    assert old_epoch >= 2
    resp = http.delete("/v1/streams/one", params={"delete_topics": "false"}, headers=AUTH)
    assert resp.status_code == 204
    create_stream(http, "one")
    routing = http.get("/v1/streams/one/routing", params={"after_epoch": old_epoch - 1})
    assert routing.json()["epoch"] == old_epoch + 1
    assert f"sp.one.realtime.e{old_epoch + 1}" in kafka.on("local-a")
    assert http.delete("/v1/streams/one", headers=AUTH).status_code == 204
    create_stream(http, "one")
    assert http.get("/v1/streams/one/routing").json()["epoch"] == old_epoch + 2
    create_stream(http, "never-deleted")
    assert http.get("/v1/streams/never-deleted/routing").json()["epoch"] == 1


def test_delete_stream_removes_the_commitlog_side_topic(http: TestClient, kafka: StubKafka) -> None:
    """A consumer that spilled commit-log state made ``sp.<stream>.__commitlog``: it goes
    with the stream (a stream nobody spilled for has none, and that is no error)."""
    create_stream(http, "one")
    create_stream(http, "two")
    kafka.admin(BOOTSTRAPS["local-a"]).create_topics([("sp.one.__commitlog", 1, 1, {})])
    assert http.delete("/v1/streams/one", headers=AUTH).status_code == 204
    assert "sp.one.__commitlog" not in kafka.on("local-a")
    assert http.delete("/v1/streams/two", headers=AUTH).status_code == 204
    assert not any(t.startswith(("sp.one.", "sp.two.")) for t in kafka.on("local-a"))


def test_delete_stream_kafka_failure_keeps_the_stream(http: TestClient, kafka: StubKafka) -> None:
    create_stream(http)
    kafka.fail_delete["sp.orders.bulk.e1"] = KafkaError("broker down", code="_TRANSPORT")
    resp = http.delete("/v1/streams/orders", headers=AUTH)
    assert resp.status_code == 502
    assert "delete_topics=false" in resp.json()["detail"]
    assert http.get("/v1/streams/orders").status_code == 200
    kafka.fail_delete.clear()
    assert http.delete("/v1/streams/orders", headers=AUTH).status_code == 204  # retry works


def test_unknown_and_invalid_stream_names(http: TestClient) -> None:
    for path in ("/v1/streams/nope", "/v1/streams/nope/routing"):
        resp = http.get(path)
        assert resp.status_code == 404
        assert resp.json() == {"detail": "unknown stream 'nope'"}
    resp = http.get("/v1/streams/UPPER")
    assert resp.status_code == 400
    assert "invalid stream name" in resp.json()["detail"]


# ---------------------------------------------------------------------- failover
def test_failover_moves_lanes_in_a_new_epoch(http: TestClient, kafka: StubKafka) -> None:
    create_stream(http)
    resp = http.post(
        "/v1/streams/orders/failover",
        json={"cluster": "local-b", "reason": "local-a is sick"},
        headers=AUTH,
    )
    assert resp.status_code == 200, resp.text
    table = routing_from_json(resp.json())
    assert table.epoch == 2
    assert table.active("realtime").cluster == "local-b"
    assert table.active("realtime").topic == "sp.orders.realtime.e2"
    assert table.active("dlq").cluster == "local-a"  # the dlq stays unless named
    draining = {s.topic for s in table.segments if s.state == "draining"}
    assert draining == {"sp.orders.realtime.e1", "sp.orders.bulk.e1"}
    assert set(kafka.on("local-b")) == {"sp.orders.realtime.e2", "sp.orders.bulk.e2"}
    assert kafka.on("local-b")["sp.orders.realtime.e2"][2]["message.timestamp.type"] == (
        "LogAppendTime"
    )
    entry = http.get("/v1/audit", params={"stream": "orders"}).json()[0]
    assert entry["action"] == "stream.failover"
    assert entry["detail"]["reason"] == "local-a is sick"
    assert (entry["detail"]["from_epoch"], entry["detail"]["to_epoch"]) == (1, 2)
    assert http.get("/v1/streams/orders").json()["active_clusters"] == ["local-a", "local-b"]


def test_failover_one_lane_with_new_partition_count(http: TestClient, kafka: StubKafka) -> None:
    create_stream(http)
    resp = http.post(
        "/v1/streams/orders/failover",
        json={"cluster": "local-a", "lanes": ["bulk"], "partitions": 12},
        headers=AUTH,
    )
    table = routing_from_json(resp.json())
    assert table.active("bulk").partitions == 12
    assert table.active("realtime").epoch == 1
    assert kafka.on("local-a")["sp.orders.bulk.e2"][0] == 12


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"cluster": "nope"}, 404, "unknown cluster 'nope'"),
        ({"cluster": "local-b", "lanes": ["late"]}, 400, "has no lane 'late'"),
        ({"cluster": "local-b", "lanes": []}, 422, "lanes"),
        ({"cluster": "local-b", "partitions": 0}, 422, "partitions"),
        ({"cluster": "local-a"}, 400, "already active on local-a; nothing to move"),
    ],
)
def test_bad_failover(
    http: TestClient, kafka: StubKafka, body: dict[str, object], status: int, message: str
) -> None:
    create_stream(http)
    resp = http.post("/v1/streams/orders/failover", json=body, headers=AUTH)
    assert resp.status_code == status, resp.text
    assert message in resp.json()["detail"]
    assert kafka.on("local-b") == {}
    assert http.get("/v1/streams/orders/routing").json()["epoch"] == 1


def test_failed_failover_leaves_routing_alone(http: TestClient, kafka: StubKafka) -> None:
    create_stream(http)
    kafka.fail_create["sp.orders.bulk.e2"] = KafkaError("timed out", code="_TIMED_OUT")
    resp = http.post("/v1/streams/orders/failover", json={"cluster": "local-b"}, headers=AUTH)
    assert resp.status_code == 502
    assert "not moved" in resp.json()["detail"]
    assert http.get("/v1/streams/orders/routing").json()["epoch"] == 1
    assert kafka.on("local-b") == {}


def test_segment_life_cycle(http: TestClient) -> None:
    create_stream(http)
    http.post("/v1/streams/orders/failover", json={"cluster": "local-b"}, headers=AUTH)
    body = {
        "cluster": "local-a",
        "topic": "sp.orders.bulk.e1",
        "state": "sealed",
        "sealed_end_offsets": {"0": 10, "1": 7},
    }
    resp = http.post("/v1/streams/orders/segments/transition", json=body, headers=AUTH)
    assert resp.status_code == 200, resp.text
    table = routing_from_json(resp.json())
    sealed = next(s for s in table.segments if s.topic == "sp.orders.bulk.e1")
    assert (sealed.state, dict(sealed.sealed_end_offsets)) == ("sealed", {0: 10, 1: 7})
    assert table.epoch == 3
    backwards = {**body, "state": "draining"}
    resp = http.post("/v1/streams/orders/segments/transition", json=backwards, headers=AUTH)
    assert resp.status_code == 400
    assert "cannot go from sealed to draining" in resp.json()["detail"]
    bad_keys = {**body, "state": "retired", "sealed_end_offsets": {"x": 1}}
    resp = http.post("/v1/streams/orders/segments/transition", json=bad_keys, headers=AUTH)
    assert resp.status_code == 400


def test_actor_header_goes_to_the_audit_log(http: TestClient) -> None:
    http.post(
        "/v1/streams",
        json={"name": "orders", "cluster": "local-a"},
        headers={**AUTH, "X-Streamplane-Actor": "alice"},
    )
    entry = http.get("/v1/audit", params={"stream": "orders"}).json()[0]
    assert (entry["actor"], entry["action"]) == ("alice", "stream.create")


def test_openapi_documents_models_and_errors(http: TestClient) -> None:
    doc = http.get("/openapi.json").json()
    create = doc["paths"]["/v1/streams"]["post"]
    assert set(create["responses"]) >= {"201", "400", "401", "403", "404", "409", "422", "502"}
    assert create["responses"]["401"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorResponse"
    }
    assert create["security"] == [{"HTTPBearer": []}]
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    # Each model under a plain name (two HeartbeatIn read as module-qualified names).
    assert not [name for name in doc["components"]["schemas"] if "__" in name]
    routing = doc["paths"]["/v1/streams/{name}/routing"]["get"]
    params = {p["name"]: p for p in routing["parameters"]}
    assert params["timeout"]["schema"]["anyOf"][0]["maximum"] == 60.0
