"""`streamplane clusters import-local` (through the API) re-points as safely as `serve
--import-local`: a cluster with segments of streams on it is not moved to another Kafka
cluster unless --force; the refusal names the cluster, both Kafka cluster ids and how to
force it, the other clusters are imported, and the exit code is 1.

It used to force every move (and, at an unchanged bootstrap, take whatever Kafka cluster
answered there for the cluster's), which `serve --import-local` had stopped doing after
a registry left from an earlier fleet fenced a live stream's topics on the current one.

A Kafka cluster registered under another name is neither registered again under the
fleet's name nor moved to (the fleet's descriptor tells each cluster's Kafka cluster id,
up or down), unless --force: it used to be registered (forced, so unchecked), and one
Kafka cluster had two names.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from streamplane.cli import clusters as clusters_cli
from streamplane.cli.clusters import LocalCluster
from streamplane.controlplane.service import ControlPlaneService, StreamSpec
from tests.unit.controlplane.conftest import AUTH, BOOTSTRAPS, CliRun, StubKafka, cli_over

NEW_FLEET_A = "127.0.0.1:29092"  # where the current fleet's local-a answers
DOWN_C = "127.0.0.1:29094"  # local-c: in the fleet, not answering


@pytest.fixture
def fleet() -> list[tuple[str, str]]:
    """The fleet's clusters, (name, bootstrap): local-a at NEW_FLEET_A, local-b where it
    is registered and local-c (new, down); a test may change it before ``run``."""
    return [("local-a", NEW_FLEET_A), ("local-b", BOOTSTRAPS["local-b"]), ("local-c", DOWN_C)]


@pytest.fixture
def run(
    http: TestClient,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    kafka: StubKafka,
    fleet: list[tuple[str, str]],
) -> CliRun:
    """``run(*args)``: ``streamplane clusters import-local --data-dir TMP *args`` against
    the app, the fleet's descriptor naming the clusters of ``fleet``, each with the Kafka
    cluster id its bootstrap answers with (``id-<name>`` for one that does not answer)."""

    def local_fleet(_data_dir: Path) -> list[LocalCluster]:
        return [LocalCluster(n, b, kafka.cluster_ids.get(b, f"id-{n}")) for n, b in fleet]

    monkeypatch.setattr(clusters_cli, "local_fleet", local_fleet)
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
        "error: 1 local cluster refused (see above); the others were imported",
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


def test_a_kafka_cluster_registered_under_another_name_is_not_registered_again(
    run: CliRun, service: ControlPlaneService, fleet: list[tuple[str, str]]
) -> None:
    """The fleet names local-x the Kafka cluster registered as local-a (by hand, say):
    it is refused, naming local-a; the other clusters are imported."""
    fleet[0] = ("local-x", BOOTSTRAPS["local-a"])
    code, out, err = run("--json")
    assert code == 1
    a = BOOTSTRAPS["local-a"]
    assert err.splitlines() == [
        f"refused: cluster 'local-x' not imported: {a} is Kafka cluster id-local-a, already "
        f"registered as 'local-a' ({a}): one name per Kafka cluster; to import it as "
        "'local-x': `streamplane clusters remove local-a` first; to give it both names: "
        f"`streamplane clusters add local-x {a} --force` (or `clusters import-local --force`)",
        "error: 1 local cluster refused (see above); the others were imported",
    ]
    assert [c["name"] for c in json.loads(out)] == ["local-b", "local-c"]
    assert [c.name for c in service.list_clusters()] == ["local-a", "local-b", "local-c"]


def test_a_cluster_is_not_moved_to_a_kafka_cluster_registered_under_another_name(
    run: CliRun, service: ControlPlaneService, fleet: list[tuple[str, str]]
) -> None:
    """No stream has segments on local-a (a move the server takes), but the fleet's
    local-a is the Kafka cluster registered as local-b."""
    b = BOOTSTRAPS["local-b"]
    fleet[0] = ("local-a", b)
    code, _, err = run()
    assert code == 1
    assert err.splitlines()[0] == (
        f"refused: cluster 'local-a' not re-pointed: {b} is Kafka cluster id-local-b, "
        f"already registered as 'local-b' ({b}): one name per Kafka cluster; to import it "
        "as 'local-a': `streamplane clusters remove local-b` first; to give it both names: "
        f"`streamplane clusters update local-a --bootstrap {b} --force` (or `clusters "
        "import-local --force`)"
    )
    a = service.get_cluster("local-a")
    assert (a.bootstrap, a.kafka_cluster_id) == (BOOTSTRAPS["local-a"], "id-local-a")


def test_a_cluster_that_does_not_answer_is_told_by_its_descriptor_id(
    run: CliRun, service: ControlPlaneService, kafka: StubKafka
) -> None:
    """local-c does not answer: its Kafka cluster id is the descriptor's, recorded for
    the cluster registered as c-prod (which answers elsewhere)."""
    kafka.cluster_ids["127.0.0.1:39094"] = "id-local-c"
    service.register_cluster("c-prod", "127.0.0.1:39094")
    code, _, err = run()
    assert code == 1
    assert err.startswith(
        f"refused: cluster 'local-c' not imported: {DOWN_C} is Kafka cluster id-local-c, "
        "already registered as 'c-prod' (127.0.0.1:39094)"
    )
    assert "local-c" not in [c.name for c in service.list_clusters()]


def test_a_cluster_registered_without_an_id_at_the_same_bootstrap_is_the_same(
    run: CliRun, service: ControlPlaneService
) -> None:
    """A name registered (forced) at local-c's bootstrap while it did not answer has no
    Kafka cluster id recorded: at the same brokers, it is the same Kafka cluster."""
    service.register_cluster("c-old", DOWN_C, force=True)
    assert service.get_cluster("c-old").kafka_cluster_id is None
    code, _, err = run()
    assert code == 1
    assert err.startswith(
        f"refused: cluster 'local-c' not imported: {DOWN_C} is Kafka cluster id-local-c, "
        f"already registered as 'c-old' ({DOWN_C})"
    )


def test_force_registers_it_under_both_names(
    run: CliRun, service: ControlPlaneService, fleet: list[tuple[str, str]]
) -> None:
    fleet[0] = ("local-x", BOOTSTRAPS["local-a"])
    code, _, err = run("--force")
    assert (code, err) == (0, "")
    assert service.get_cluster("local-x").kafka_cluster_id == "id-local-a"
