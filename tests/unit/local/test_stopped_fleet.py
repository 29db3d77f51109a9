"""`local up` on a data directory that holds a stopped fleet: what it reads back from the
brokers' files, and when it refuses because another shape is asked for (no JVM here)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from streamplane.exceptions import ConfigError, LocalFleetError
from streamplane.local.fleet import (
    BrokerInfo,
    FleetSpec,
    LocalFleet,
    broker_in,
    stopped_fleet,
    stopped_fleet_differences,
    stopped_fleet_up_options,
    write_broker_files,
    write_broker_only_files,
)

CLI = [sys.executable, "-m", "streamplane.cli"]
BASE_PORT = 18700


def write_stopped_fleet(
    data_dir: Path,
    spec: FleetSpec,
    cluster_ids: dict[str, str | None] | None = None,
    base_port: int = BASE_PORT,
) -> dict[str, list[BrokerInfo]]:
    """The files `local up` leaves for ``spec`` after `local down` (no JVM): each broker's
    server.properties on ports from ``base_port`` up, a record in a topic, and the
    meta.properties formatting writes (cluster id ``cluster_ids[name]``, by default
    ``id-<name>``; None: not formatted)."""
    ids = cluster_ids or {}
    port = base_port
    written: dict[str, list[BrokerInfo]] = {}
    for name in spec.cluster_names():
        brokers = []
        for node_id in range(1, spec.brokers_per_cluster + 1):
            bdir = data_dir.resolve() / name / f"broker-{node_id}"
            brokers.append(broker_in(bdir, node_id, port, port + 1, spec.broker_rack(node_id)))
            port += 2
        for b in brokers:
            write_broker_files(b, brokers, spec)
            cluster_id = ids.get(name, f"id-{name}")
            if cluster_id is not None:
                _format(b, cluster_id)
        written[name] = brokers
    return written


def _format(b: BrokerInfo, cluster_id: str) -> None:
    data = Path(b.log_dir)
    (data / "persist-test-0").mkdir(parents=True, exist_ok=True)
    (data / "persist-test-0" / "00000000000000000000.log").write_bytes(b"record")
    (data / "meta.properties").write_text(
        f"#\n#Fri Nov 27 09:49:10 UTC 2026\nnode.id={b.node_id}\n"
        f"directory.id=abc\nversion=1\ncluster.id={cluster_id}\n"
    )


def add_broker_files(data_dir: Path, cluster: str, node_id: int, port: int, rack: str) -> None:
    """What `local add-broker` leaves: a broker-only broker copied from broker 1."""
    cluster_dir = data_dir.resolve() / cluster
    first = broker_in(cluster_dir / "broker-1", 1, 0, 0, None)
    b = broker_in(cluster_dir / f"broker-{node_id}", node_id, port, 0, rack)
    write_broker_only_files(b, first)
    _format(b, f"id-{cluster}")


def test_a_stopped_fleet_is_read_back_from_its_files(tmp_path: Path) -> None:
    spec = FleetSpec(data_dir=tmp_path, clusters=2, brokers_per_cluster=2, racks=("a", "b"))
    written = write_stopped_fleet(tmp_path, spec)
    add_broker_files(tmp_path, "local-b", 3, 18900, "c")

    found = stopped_fleet(tmp_path)

    assert list(found) == ["local-a", "local-b"]
    assert found["local-a"].cluster_id == "id-local-a"
    assert found["local-a"].brokers == written["local-a"]
    added = found["local-b"].broker(3)
    assert (added.port, added.controller_port, added.rack) == (18900, 0, "c")
    assert found["local-b"].bootstrap == "127.0.0.1:18704,127.0.0.1:18706,127.0.0.1:18900"


def test_no_stopped_fleet_in_an_empty_or_foreign_data_dir(tmp_path: Path) -> None:
    assert stopped_fleet(tmp_path / "never-made") == {}
    (tmp_path / "local-a" / "broker-1" / "data").mkdir(parents=True)  # no server.properties
    (tmp_path / "control-plane").mkdir()
    assert stopped_fleet(tmp_path) == {}


def test_a_cluster_never_formatted_gets_a_new_cluster_id(tmp_path: Path) -> None:
    spec = FleetSpec(data_dir=tmp_path, clusters=1, brokers_per_cluster=2)
    write_stopped_fleet(tmp_path, spec, {"local-a": None})
    cluster_id = stopped_fleet(tmp_path)["local-a"].cluster_id
    assert len(cluster_id) == 22 and not cluster_id.startswith("-")


def test_brokers_formatted_for_different_clusters_are_refused(tmp_path: Path) -> None:
    spec = FleetSpec(data_dir=tmp_path, clusters=1, brokers_per_cluster=2)
    brokers = write_stopped_fleet(tmp_path, spec)["local-a"]
    _format(brokers[1], "another-cluster")
    with pytest.raises(LocalFleetError, match=r"different Kafka clusters.*--purge"):
        stopped_fleet(tmp_path)


@pytest.mark.parametrize(
    "asked",
    [
        {},
        {"base_port": BASE_PORT},  # the ports it has
        {"heap_mb": 256, "broker_config": {"offset.metadata.max.bytes": "1024"}},  # settings
    ],
)
def test_the_same_shape_starts_the_stopped_fleet(tmp_path: Path, asked: dict[str, object]) -> None:
    shape = {"clusters": 2, "brokers_per_cluster": 3, "racks": ("a", "b", "c")}
    write_stopped_fleet(tmp_path, FleetSpec(data_dir=tmp_path, **shape))  # type: ignore[arg-type]
    spec = FleetSpec(data_dir=tmp_path, **shape, **asked)  # type: ignore[arg-type]
    assert stopped_fleet_differences(spec, stopped_fleet(tmp_path)) == []


def test_brokers_added_later_are_not_part_of_the_shape(tmp_path: Path) -> None:
    spec = FleetSpec(data_dir=tmp_path, clusters=1, base_port=BASE_PORT)
    write_stopped_fleet(tmp_path, spec)
    add_broker_files(tmp_path, "local-a", 2, 18900, "c")
    assert stopped_fleet_differences(spec, stopped_fleet(tmp_path)) == []


@pytest.mark.parametrize(
    ("asked", "difference"),
    [
        ({"clusters": 3}, "2 clusters (local-a, local-b) on disk, 3 clusters"),
        ({"clusters": 1}, "2 clusters (local-a, local-b) on disk, 1 cluster (local-a)"),
        ({"names": ("x", "y")}, "2 clusters (local-a, local-b) on disk, 2 clusters (x, y)"),
        ({"brokers_per_cluster": 1}, "local-a has 2 brokers on disk, 1 asked for"),
        ({"racks": ("a", "b")}, "local-a has racks none on disk, a,b asked for"),
        ({"base_port": BASE_PORT + 10}, "ports 18700-18707 on disk, 18710-18717 asked for"),
    ],
)
def test_another_shape_is_a_difference(
    tmp_path: Path, asked: dict[str, object], difference: str
) -> None:
    write_stopped_fleet(tmp_path, FleetSpec(data_dir=tmp_path, clusters=2, brokers_per_cluster=2))
    shape: dict[str, object] = {"clusters": 2, "brokers_per_cluster": 2, **asked}
    spec = FleetSpec(data_dir=tmp_path, **shape)  # type: ignore[arg-type]
    differences = stopped_fleet_differences(spec, stopped_fleet(tmp_path))
    assert len(differences) >= 1
    assert differences[0].startswith(difference), differences


@pytest.mark.parametrize(
    ("shape", "options", "as_options"),
    [
        ({"clusters": 1}, "--clusters 1 --brokers-per-cluster 1 ", {"clusters": 1}),
        (
            {"clusters": 2, "brokers_per_cluster": 3, "racks": ("a", "b")},
            "--clusters 2 --brokers-per-cluster 3 --racks a,b,a ",
            {"clusters": 2, "brokers_per_cluster": 3, "racks": ("a", "b", "a")},
        ),
    ],
)
def test_up_options_that_start_the_stopped_fleet_as_it_was(
    tmp_path: Path, shape: dict[str, object], options: str, as_options: dict[str, object]
) -> None:
    write_stopped_fleet(tmp_path, FleetSpec(data_dir=tmp_path, **shape))  # type: ignore[arg-type]
    stopped = stopped_fleet(tmp_path)
    assert stopped_fleet_up_options(stopped) == options
    again = FleetSpec(data_dir=tmp_path, **as_options)  # type: ignore[arg-type]
    assert stopped_fleet_differences(again, stopped) == []


def test_up_with_another_shape_refuses_and_deletes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("streamplane.local.fleet.require_java", lambda: "/no/java")
    write_stopped_fleet(tmp_path, FleetSpec(data_dir=tmp_path, clusters=1))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))

    with pytest.raises(ConfigError) as err:
        LocalFleet(tmp_path).up(FleetSpec(data_dir=tmp_path, clusters=2))

    message = str(err.value)
    assert "1 cluster (local-a) on disk, 2 clusters (local-a, local-b) asked for" in message
    assert "Nothing was started or deleted" in message
    assert "`streamplane local up --clusters 1 --brokers-per-cluster 1 --data-dir" in message
    assert "`streamplane local down --purge --data-dir" in message
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert stopped_fleet(tmp_path)["local-a"].cluster_id == "id-local-a"


def test_up_names_a_port_of_the_stopped_fleet_that_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("streamplane.local.fleet.require_java", lambda: "/no/java")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        write_stopped_fleet(tmp_path, FleetSpec(data_dir=tmp_path, clusters=1), base_port=port)
        with pytest.raises(LocalFleetError) as err:
            LocalFleet(tmp_path).up(FleetSpec(data_dir=tmp_path, clusters=1))
    assert f"broker 1 of local-a cannot start again on its port: port {port} is in use" in str(
        err.value
    )


def test_up_refuses_a_broker_directory_that_is_not_a_fleets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("streamplane.local.fleet.require_java", lambda: "/no/java")
    leftover = tmp_path / "local-a" / "broker-1" / "data" / "meta.properties"
    leftover.parent.mkdir(parents=True)
    leftover.write_text("cluster.id=old\n")
    with pytest.raises(LocalFleetError, match="broker-1 exists and is not a local fleet's"):
        LocalFleet(tmp_path).up(FleetSpec(data_dir=tmp_path, clusters=1))
    assert leftover.read_text() == "cluster.id=old\n"


def test_a_plain_down_says_the_data_is_kept(tmp_path: Path) -> None:
    write_stopped_fleet(tmp_path, FleetSpec(data_dir=tmp_path, clusters=1))
    proc = subprocess.run(
        [*CLI, "local", "down", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "no local fleet running" in proc.stdout
    assert "kept the fleet's data" in proc.stdout and "--purge" in proc.stdout
    assert (tmp_path / "local-a" / "broker-1" / "data" / "persist-test-0").is_dir()


def test_down_with_purge_deletes_a_stopped_fleets_data(tmp_path: Path) -> None:
    """``make run`` wants a fresh fleet: ``down(purge=True)`` after the last run's plain
    ``down`` returned at once (no descriptor), and ``up`` restarted the last run's fleet
    with its demo topics (the stream could not be created again)."""
    spec = FleetSpec(data_dir=tmp_path, clusters=2)
    write_stopped_fleet(tmp_path, spec)
    fleet = LocalFleet(tmp_path)
    assert fleet.has_data()
    assert fleet.down(purge=True) == 0
    assert not fleet.has_data() and stopped_fleet(tmp_path) == {}
