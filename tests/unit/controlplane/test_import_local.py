"""`control-plane serve --import-local`: the local fleet's clusters, registered or refreshed."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamplane.cli import control_plane as cli_module
from streamplane.controlplane.service import ControlPlaneService
from streamplane.exceptions import ConfigError
from streamplane.local.fleet import FleetDescriptor
from tests.unit.controlplane.conftest import StubKafka


def test_refreshing_keeps_the_users_tags(
    service: ControlPlaneService,
    kafka: StubKafka,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """A restart's import gives the new bootstrap and keeps the tags a user set (env was
    reset to local at every restart)."""
    service.update_cluster("local-a", None, {"env": "staging", "team": "infra"})
    fleet = [("local-a", "127.0.0.1:29092"), ("local-c", "127.0.0.1:29093")]
    kafka.cluster_ids["127.0.0.1:29093"] = "id-local-c"  # a new cluster is registered if it answers
    monkeypatch.setattr(cli_module, "local_fleet_clusters", lambda _data_dir: fleet)
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
