"""Each registered cluster's Kafka cluster id is recorded, and a cluster whose streams
have segments on it is not moved to another Kafka cluster by `serve --import-local`; the
API and the CLI show it.

An exploratory run served a database left from an earlier session (its fleet long
gone): the import moved ``local-a`` to the current fleet's, another Kafka cluster, and
the sealer fenced the topics of a live stream another control plane had made there
under the names of its retired segments. Nothing could tell: the store did not record
which Kafka cluster a name stood for, and the old bootstrap no longer answered.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from streamplane.cli import clusters as clusters_cli
from streamplane.cli import control_plane as cli_module
from streamplane.cli.clusters import LocalCluster
from streamplane.controlplane import service as service_module
from streamplane.controlplane.migrations import LATEST_VERSION, migrate
from streamplane.controlplane.service import ControlPlaneService, StreamSpec
from streamplane.controlplane.store import Store
from tests.unit.controlplane.conftest import AUTH, BOOTSTRAPS, StubKafka, cli_over

NEW_FLEET_A = "127.0.0.1:29092"  # where the current fleet's local-a answers


def test_version_9_keeps_the_clusters_and_learns_their_ids_later(db_url: str) -> None:
    engine = sa.create_engine(db_url)
    migrate(engine, target=8)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO clusters (name, bootstrap, tags, created_at, updated_at) "
                "VALUES ('old', 'h:1', '{\"env\": \"v8\"}', :now, :now)"
            ),
            {"now": datetime.now(UTC)},
        )
    assert migrate(engine) == [9] and LATEST_VERSION == 9
    engine.dispose()

    store = Store(db_url)
    old = store.get_cluster("old")
    assert (old.bootstrap, dict(old.tags), old.kafka_cluster_id) == ("h:1", {"env": "v8"}, None)
    assert not store.record_kafka_cluster_id("old", "h:2", "id-old")  # moved meanwhile
    assert store.record_kafka_cluster_id("old", "h:1", "id-old")
    assert not store.record_kafka_cluster_id("old", "h:1", "id-other")  # only once
    assert store.get_cluster("old").kafka_cluster_id == "id-old"
    store.close()


def test_the_cluster_documents_and_commands_show_the_id(
    http: TestClient,
    service: ControlPlaneService,
    kafka: StubKafka,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`GET /v1/clusters[/{name}]`, `clusters list` and `clusters describe` show the
    Kafka cluster id a name stands for (null, ``-``, while not learnt)."""
    del kafka.cluster_ids[BOOTSTRAPS["local-b"]]  # so that nothing learns it meanwhile
    with service.store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE clusters SET kafka_cluster_id = NULL WHERE name = 'local-b'"))
    assert http.get("/v1/clusters/local-a").json()["kafka_cluster_id"] == "id-local-a"
    listed = {c["name"]: c["kafka_cluster_id"] for c in http.get("/v1/clusters").json()}
    assert listed == {"local-a": "id-local-a", "local-b": None}

    run = cli_over(http, monkeypatch, capsys, clusters_cli)
    code, out, _ = run("clusters", "list")
    assert code == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:]}
    assert rows["local-a"][2] == "id-local-a" and rows["local-b"][2] == "-"
    code, out, _ = run("clusters", "describe", "local-a")
    assert code == 0 and "kafka cluster id id-local-a\n" in out
    code, out, _ = run("clusters", "describe", "local-b", "--json")
    assert code == 0 and json.loads(out)["kafka_cluster_id"] is None
    code, out, err = run("clusters", "describe", "nowhere")
    assert (code, out) == (1, "") and err.startswith("error: unknown cluster 'nowhere'")


def test_the_id_is_recorded_at_registration(
    http: TestClient, service: ControlPlaneService, kafka: StubKafka
) -> None:
    assert service.get_cluster("local-a").kafka_cluster_id == "id-local-a"
    kafka.cluster_ids["127.0.0.1:29094"] = "id-local-c"
    added = http.post(
        "/v1/clusters", json={"name": "local-c", "bootstrap": "127.0.0.1:29094"}, headers=AUTH
    )
    assert added.status_code == 201, added.text
    assert service.get_cluster("local-c").kafka_cluster_id == "id-local-c"
    entry = http.get("/v1/audit").json()[0]
    assert (entry["action"], entry["detail"]["kafka_cluster_id"]) == (
        "cluster.register",
        "id-local-c",
    )
    # Forced while it does not answer: not known yet.
    ghost = http.post(
        "/v1/clusters",
        json={"name": "ghost", "bootstrap": "127.0.0.1:1"},
        params={"force": "true"},
        headers=AUTH,
    )
    assert ghost.status_code == 201, ghost.text
    assert service.get_cluster("ghost").kafka_cluster_id is None


def test_a_new_bootstrap_records_its_id(
    http: TestClient, service: ControlPlaneService, kafka: StubKafka
) -> None:
    kafka.cluster_ids["127.0.0.1:29092"] = "id-local-a"  # local-a at a second address
    moved = http.patch("/v1/clusters/local-a", json={"bootstrap": "127.0.0.1:29092"}, headers=AUTH)
    assert moved.status_code == 200, moved.text
    assert service.get_cluster("local-a").kafka_cluster_id == "id-local-a"
    tags_only = http.patch("/v1/clusters/local-a", json={"tags": {"x": "y"}}, headers=AUTH)
    assert tags_only.status_code == 200
    assert service.get_cluster("local-a").kafka_cluster_id == "id-local-a"
    # Forced to another Kafka cluster: the name stands for that one from now on.
    kafka.cluster_ids["127.0.0.1:29099"] = "id-elsewhere"
    forced = http.patch(
        "/v1/clusters/local-a",
        json={"bootstrap": "127.0.0.1:29099"},
        params={"force": "true"},
        headers=AUTH,
    )
    assert forced.status_code == 200, forced.text
    assert service.get_cluster("local-a").kafka_cluster_id == "id-elsewhere"


def test_a_bootstrap_update_is_checked_by_the_recorded_id_when_the_old_one_is_gone(
    http: TestClient, service: ControlPlaneService, kafka: StubKafka
) -> None:
    """The old bootstrap no longer answers: the new one was taken whatever it was."""
    del kafka.cluster_ids[BOOTSTRAPS["local-a"]]
    kafka.cluster_ids[NEW_FLEET_A] = "id-new-fleet"
    refused = http.patch("/v1/clusters/local-a", json={"bootstrap": NEW_FLEET_A}, headers=AUTH)
    assert refused.status_code == 400
    assert (
        f"cluster 'local-a': {NEW_FLEET_A} is another Kafka cluster (id id-new-fleet; "
        f"{BOOTSTRAPS['local-a']} is id-local-a); not changed"
    ) in refused.json()["detail"]
    assert service.get_cluster("local-a").bootstrap == BOOTSTRAPS["local-a"]
    kafka.cluster_ids[NEW_FLEET_A] = "id-local-a"  # the same cluster at new ports
    moved = http.patch("/v1/clusters/local-a", json={"bootstrap": NEW_FLEET_A}, headers=AUTH)
    assert moved.status_code == 200, moved.text


# ---------------------------------------------------------------------- import-local
@pytest.fixture
def fleet(monkeypatch: pytest.MonkeyPatch) -> list[LocalCluster]:
    """The local fleet's descriptor: local-a at NEW_FLEET_A, local-b where it was."""
    clusters = [
        LocalCluster("local-a", NEW_FLEET_A, "id-new-fleet"),
        LocalCluster("local-b", BOOTSTRAPS["local-b"], "id-local-b"),
    ]
    monkeypatch.setattr(cli_module, "local_fleet", lambda _data_dir: clusters)
    return clusters


def _import(service: ControlPlaneService, tmp_path: Path) -> list[str]:
    return cli_module.import_local_fleet(service, tmp_path)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_import_does_not_move_a_cluster_with_segments_to_another_kafka_cluster(
    service: ControlPlaneService,
    kafka: StubKafka,
    fleet: list[LocalCluster],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    service.create_stream(StreamSpec("orders", "local-a"))
    service.create_stream(StreamSpec("payments", "local-a"))
    del kafka.cluster_ids[BOOTSTRAPS["local-a"]]  # the earlier fleet is long gone
    kafka.cluster_ids[NEW_FLEET_A] = "id-new-fleet"
    with caplog.at_level(logging.WARNING, logger="streamplane"):
        assert _import(service, tmp_path) == ["local-a", "local-b"]  # and serving goes on
    assert service.get_cluster("local-a").bootstrap == BOOTSTRAPS["local-a"]
    assert service.get_cluster("local-a").kafka_cluster_id == "id-local-a"
    assert "cluster.update" not in {
        e.action for e in service.audit() if e.detail.get("cluster") == "local-a"
    }
    assert _warnings(caplog) == [
        f"local fleet: cluster 'local-a' not re-pointed from {BOOTSTRAPS['local-a']} to "
        f"{NEW_FLEET_A}: {NEW_FLEET_A} is another Kafka cluster (id id-new-fleet; "
        "registered: id-local-a), and the registry holds segments of streams orders, "
        "payments there; to re-point it anyway: `streamplane clusters update local-a "
        f"--bootstrap {NEW_FLEET_A} --force`, or serve a fresh registry (--db)"
    ]


def test_import_does_not_move_a_cluster_with_segments_of_an_unknown_kafka_cluster(
    service: ControlPlaneService,
    kafka: StubKafka,
    fleet: list[LocalCluster],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A database from before version 9 (no id recorded) whose fleet is gone: which
    Kafka cluster local-a was cannot be told, so the new one cannot be taken for it."""
    service.create_stream(StreamSpec("orders", "local-a"))
    with service.store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE clusters SET kafka_cluster_id = NULL"))
    del kafka.cluster_ids[BOOTSTRAPS["local-a"]]
    kafka.cluster_ids[NEW_FLEET_A] = "id-new-fleet"
    with caplog.at_level(logging.WARNING, logger="streamplane"):
        _import(service, tmp_path)
    assert service.get_cluster("local-a").bootstrap == BOOTSTRAPS["local-a"]
    [warning] = _warnings(caplog)
    assert (
        f"{NEW_FLEET_A} is Kafka cluster id-new-fleet, and the one registered is not known "
        f"({BOOTSTRAPS['local-a']} does not answer)"
    ) in warning


def test_import_moves_a_cluster_with_segments_to_its_own_kafka_cluster_at_new_ports(
    service: ControlPlaneService,
    kafka: StubKafka,
    fleet: list[LocalCluster],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    service.create_stream(StreamSpec("orders", "local-a"))
    del kafka.cluster_ids[BOOTSTRAPS["local-a"]]
    kafka.cluster_ids[NEW_FLEET_A] = "id-local-a"
    with caplog.at_level(logging.WARNING, logger="streamplane"):
        _import(service, tmp_path)
    moved = service.get_cluster("local-a")
    assert (moved.bootstrap, moved.kafka_cluster_id) == (NEW_FLEET_A, "id-local-a")
    assert _warnings(caplog) == []


def test_import_moves_a_cluster_without_segments_to_another_kafka_cluster(
    service: ControlPlaneService, kafka: StubKafka, fleet: list[LocalCluster], tmp_path: Path
) -> None:
    """After `local down --purge`, `local up` makes new Kafka clusters: nothing on them
    is the registry's, so the import takes them, and records their ids."""
    service.create_stream(StreamSpec("orders", "local-b"))  # segments elsewhere only
    kafka.cluster_ids[NEW_FLEET_A] = "id-new-fleet"
    _import(service, tmp_path)
    moved = service.get_cluster("local-a")
    assert (moved.bootstrap, moved.kafka_cluster_id) == (NEW_FLEET_A, "id-new-fleet")


def test_import_keeps_the_recorded_id_of_a_cluster_at_the_same_bootstrap(
    service: ControlPlaneService, kafka: StubKafka, fleet: list[LocalCluster], tmp_path: Path
) -> None:
    """Whatever answers at an unchanged bootstrap now is not taken for the cluster: the
    sealer compares the two before it fences."""
    kafka.cluster_ids[BOOTSTRAPS["local-b"]] = "id-impostor"
    kafka.cluster_ids[NEW_FLEET_A] = "id-local-a"
    _import(service, tmp_path)
    assert service.get_cluster("local-b").kafka_cluster_id == "id-local-b"


@pytest.mark.parametrize(
    ("registered", "answering", "streams", "refused"),
    [
        ("id-a", "id-a", ["s"], False),  # the same cluster at new ports
        ("id-a", "id-b", [], False),  # nothing of the registry's there
        ("id-a", "id-b", ["s"], True),
        (None, "id-b", ["s"], True),  # not known which it was
        ("id-a", None, ["s"], True),  # the new address does not answer
    ],
)
def test_repoint_refusal(
    registered: str | None, answering: str | None, streams: list[str], refused: bool
) -> None:
    reason = service_module.repoint_refusal("c", "h:1", "h:2", registered, answering, streams)
    assert (reason is not None) == refused
