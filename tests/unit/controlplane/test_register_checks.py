"""Registering a cluster checks its bootstrap as changing one does: it must answer, and
be a Kafka cluster (by cluster id) no other name is registered for, unless forced.

An exploratory run registered ``ghost`` at 127.0.0.1:1 (nothing listens) and ``dupa`` at
local-b's bootstrap (local-b's Kafka cluster a second time): both were accepted.
"""

from __future__ import annotations

from fastapi.testclient import TestClient

from streamplane.controlplane.service import ControlPlaneService
from tests.unit.controlplane.conftest import AUTH, BOOTSTRAPS, StubKafka


def register(http: TestClient, name: str, bootstrap: str, **params: str) -> tuple[int, str]:
    r = http.post(
        "/v1/clusters", json={"name": name, "bootstrap": bootstrap}, params=params, headers=AUTH
    )
    return r.status_code, r.json().get("detail", "")


def test_a_bootstrap_that_does_not_answer_is_refused(http: TestClient) -> None:
    status, detail = register(http, "ghost", "127.0.0.1:1")
    assert status == 400
    assert detail.startswith("cluster 'ghost': 127.0.0.1:1 does not answer (")
    assert detail.endswith("not registered (to register it anyway: --force, force=true in the API)")
    assert http.get("/v1/clusters/ghost").status_code == 404
    assert register(http, "ghost", "127.0.0.1:1", force="true")[0] == 201


def test_a_kafka_cluster_registered_under_another_name_is_refused(
    http: TestClient, kafka: StubKafka
) -> None:
    status, detail = register(http, "dupa", BOOTSTRAPS["local-b"])
    assert status == 409
    assert (
        f"cluster 'dupa': {BOOTSTRAPS['local-b']} is Kafka cluster id-local-b, already "
        f"registered as 'local-b' ({BOOTSTRAPS['local-b']}): one name per Kafka cluster"
    ) in detail
    kafka.cluster_ids["b-other-listener:9092"] = "id-local-b"  # same cluster, other address
    status, detail = register(http, "dupa", "b-other-listener:9092")
    assert status == 409 and "already registered as 'local-b'" in detail
    assert http.get("/v1/clusters/dupa").status_code == 404
    kafka.cluster_ids["127.0.0.1:29094"] = "id-local-c"
    assert register(http, "local-c", "127.0.0.1:29094")[0] == 201


def test_a_registered_cluster_that_does_not_answer_is_passed_over(
    http: TestClient, kafka: StubKafka
) -> None:
    del kafka.cluster_ids[BOOTSTRAPS["local-a"]]  # local-a is down: it cannot be compared
    kafka.cluster_ids["127.0.0.1:29094"] = "id-local-c"
    assert register(http, "local-c", "127.0.0.1:29094")[0] == 201


def test_a_name_taken_is_a_409_before_kafka_is_asked(http: TestClient) -> None:
    status, detail = register(http, "local-a", "127.0.0.1:1")
    assert (status, detail) == (409, "cluster 'local-a' is already registered")


def test_changing_a_bootstrap_to_another_registered_cluster_is_refused(
    http: TestClient, service: ControlPlaneService, kafka: StubKafka
) -> None:
    service.register_cluster("spare", "127.0.0.1:29095", force=True)  # down: id unknown
    r = http.patch("/v1/clusters/spare", json={"bootstrap": BOOTSTRAPS["local-b"]}, headers=AUTH)
    assert r.status_code == 409
    assert "already registered as 'local-b'" in r.json()["detail"]
    assert service.get_cluster("spare").bootstrap == "127.0.0.1:29095"
