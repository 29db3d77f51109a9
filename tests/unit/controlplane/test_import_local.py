"""`control-plane serve --import-local`: the local fleet's clusters, registered or refreshed."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from streamplane.cli import control_plane as cli_module
from streamplane.cli.clusters import LocalCluster
from streamplane.controlplane.service import ControlPlaneService
from streamplane.exceptions import ConfigError
from streamplane.local.fleet import FleetDescriptor
from tests.unit.controlplane.conftest import BOOTSTRAPS, StubKafka


def test_refreshing_keeps_the_users_tags(
    service: ControlPlaneService,
    kafka: StubKafka,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """A restart's import gives the new bootstrap and keeps the tags a user set (env was
    reset to local at every restart)."""
    service.update_cluster("local-a", None, {"env": "staging", "team": "infra"})
    fleet = [
        LocalCluster("local-a", "127.0.0.1:29092", "id-local-a"),
        LocalCluster("local-c", "127.0.0.1:29093", "id-local-c"),
    ]
    kafka.cluster_ids["127.0.0.1:29093"] = "id-local-c"  # a new cluster is registered if it answers
    monkeypatch.setattr(cli_module, "local_fleet", lambda _data_dir: fleet)
    assert cli_module.import_local_fleet(service, tmp_path) == ["local-a", "local-c"]
    refreshed = service.get_cluster("local-a")
    assert refreshed.bootstrap == "127.0.0.1:29092"
    assert refreshed.tags == {"env": "staging", "team": "infra"}
    assert service.get_cluster("local-c").tags == {"env": "local"}


def test_a_broken_descriptor_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "fleet.json"
    path.write_text('{"version": 1}')
    with pytest.raises(ConfigError, match="is not a fleet descriptor") as err:
        FleetDescriptor.load(path)
    assert "\n" not in str(err.value)


def test_a_kafka_cluster_registered_under_another_name_is_not_imported_again(
    service: ControlPlaneService,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As `clusters import-local` refuses it: one Kafka cluster, one name (serve
    registered the fleet's local-a again as a second name of what the registry calls
    local-b, when the descriptor's local-a was that Kafka cluster)."""
    local_b = service.get_cluster("local-b")
    assert local_b.kafka_cluster_id is not None
    fleet = [LocalCluster("local-x", "127.0.0.1:29094", local_b.kafka_cluster_id)]
    monkeypatch.setattr(cli_module, "local_fleet", lambda _data_dir: fleet)
    with caplog.at_level(logging.WARNING, logger="streamplane"):
        assert cli_module.import_local_fleet(service, tmp_path) == []
    assert "local-x" not in {c.name for c in service.list_clusters()}
    [warning] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warning.startswith(
        f"local fleet: cluster 'local-x' not imported: 127.0.0.1:29094 is Kafka cluster "
        f"{local_b.kafka_cluster_id}, already registered as 'local-b' ({local_b.bootstrap})"
    )


def test_an_unchanged_fleet_is_imported_without_an_audit_entry(
    service: ControlPlaneService, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Each restart of `serve --import-local` wrote a cluster.update per cluster, nothing
    changed (an operator's audit log filled with them)."""
    fleet = [
        LocalCluster(name, bootstrap, service.get_cluster(name).kafka_cluster_id or "")
        for name, bootstrap in BOOTSTRAPS.items()
    ]
    monkeypatch.setattr(cli_module, "local_fleet", lambda _data_dir: fleet)
    before = len(service.audit())
    assert cli_module.import_local_fleet(service, tmp_path) == list(BOOTSTRAPS)
    assert len(service.audit()) == before
