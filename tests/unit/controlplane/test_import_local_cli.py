"""`streamplane clusters import-local` (through the API) re-points as safely as `serve
--import-local`: a cluster with segments of streams on it is not moved to another Kafka
cluster unless --force; the refusal names the cluster, both Kafka cluster ids and how to
force it, the other clusters are imported, and the exit code is 1.

It used to force every move (and, at an unchanged bootstrap, take whatever Kafka cluster
answered there for the cluster's), which `serve --import-local` had stopped doing after
a registry left from an earlier fleet fenced a live stream's topics on the current one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from streamplane.cli import clusters as clusters_cli
from streamplane.controlplane.service import ControlPlaneService, StreamSpec
from tests.unit.controlplane.conftest import AUTH, BOOTSTRAPS, CliRun, StubKafka, cli_over

NEW_FLEET_A = "127.0.0.1:29092"  # where the current fleet's local-a answers
DOWN_C = "127.0.0.1:29094"  # local-c: in the fleet, not answering


@pytest.fixture
def run(
    http: TestClient,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> CliRun:
    """``run(*args)``: ``streamplane clusters import-local --data-dir TMP *args`` against
    the app, the fleet's descriptor naming local-a at NEW_FLEET_A, local-b where it is
    registered and local-c (new, down)."""
    fleet = [("local-a", NEW_FLEET_A), ("local-b", BOOTSTRAPS["local-b"]), ("local-c", DOWN_C)]
    monkeypatch.setattr(clusters_cli, "local_fleet_clusters", lambda _data_dir: fleet)
    cli = cli_over(http, monkeypatch, capsys, clusters_cli)
    return lambda *args: cli("clusters", "import-local", "--data-dir", str(tmp_path), *args)


def test_a_cluster_with_segments_is_not_moved_to_another_kafka_cluster(
    run: CliRun, service: ControlPlaneService, kafka: StubKafka
) -> None:
    service.create_stream(StreamSpec("orders", "local-a"))
    del kafka.cluster_ids[BOOTSTRAPS["local-a"]]  # the earlier fleet is long gone
    kafka.cluster_ids[NEW_FLEET_A] = "id-new-fleet"
    code, out, err = run("--json")
    assert code == 1
    assert err.splitlines() == [
        f"refused: cluster 'local-a' not re-pointed from {BOOTSTRAPS['local-a']} to "
        f"{NEW_FLEET_A}: {NEW_FLEET_A} is another Kafka cluster (id id-new-fleet; "
        "registered: id-local-a), and the registry holds segments of streams orders there; "
        "to re-point it anyway: `streamplane clusters update local-a --bootstrap "
        f"{NEW_FLEET_A} --force` (or `clusters import-local --force`)",
        "error: 1 local cluster(s) not re-pointed (see above); the others were imported",
    ]
    a = service.get_cluster("local-a")
    assert (a.bootstrap, a.kafka_cluster_id) == (BOOTSTRAPS["local-a"], "id-local-a")
    # the others are imported: local-c registered although it does not answer
    assert [c["name"] for c in json.loads(out)] == ["local-b", "local-c"]
    assert service.get_cluster("local-c").bootstrap == DOWN_C


def test_force_moves_it(run: CliRun, service: ControlPlaneService, kafka: StubKafka) -> None:
    service.create_stream(StreamSpec("orders", "local-a"))
    kafka.cluster_ids[NEW_FLEET_A] = "id-new-fleet"
    code, out, err = run("--force")
    assert (code, err) == (0, "")
    a = service.get_cluster("local-a")
    assert (a.bootstrap, a.kafka_cluster_id) == (NEW_FLEET_A, "id-new-fleet")
    assert "id-new-fleet" in out  # the table shows each cluster's Kafka cluster id


def test_a_cluster_without_segments_moves_to_the_new_fleet(
    run: CliRun, service: ControlPlaneService, kafka: StubKafka
) -> None:
    """After `local down --purge`, `local up` makes new Kafka clusters, maybe at new
    ports: nothing on them is the registry's, so they are taken without --force."""
    service.create_stream(StreamSpec("orders", "local-b"))  # segments elsewhere only
    kafka.cluster_ids[NEW_FLEET_A] = "id-new-fleet"
    code, _, err = run()
    assert (code, err) == (0, "")
    a = service.get_cluster("local-a")
    assert (a.bootstrap, a.kafka_cluster_id) == (NEW_FLEET_A, "id-new-fleet")


def test_an_unchanged_bootstrap_keeps_its_recorded_kafka_cluster_id(
    run: CliRun, service: ControlPlaneService, kafka: StubKafka
) -> None:
    """Whatever answers at an unchanged bootstrap now is not taken for the cluster: the
    sealer compares the two before it fences (as `serve --import-local` does)."""
    kafka.cluster_ids[BOOTSTRAPS["local-b"]] = "id-impostor"
    kafka.cluster_ids[NEW_FLEET_A] = "id-local-a"
    assert run()[0] == 0
    assert service.get_cluster("local-b").kafka_cluster_id == "id-local-b"


def test_the_api_refuses_a_protected_forced_move_with_a_409(
    http: TestClient, service: ControlPlaneService, kafka: StubKafka
) -> None:
    service.create_stream(StreamSpec("orders", "local-a"))
    kafka.cluster_ids[NEW_FLEET_A] = "id-new-fleet"
    path = "/v1/clusters/local-a"
    body = {"bootstrap": NEW_FLEET_A}
    protected = {"force": "true", "protect_segments": "true"}
    refused = http.patch(path, json=body, params=protected, headers=AUTH)
    assert refused.status_code == 409
    assert refused.json()["detail"].startswith("cluster 'local-a' not re-pointed from ")
    assert service.get_cluster("local-a").bootstrap == BOOTSTRAPS["local-a"]
    forced = http.patch(path, json=body, params={"force": "true"}, headers=AUTH)
    assert forced.status_code == 200
    assert forced.json()["kafka_cluster_id"] == "id-new-fleet"
