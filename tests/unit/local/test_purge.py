"""`local down --purge` deletes the fleet's broker directories, running or not, and
nothing else under the data directory."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streamplane.exceptions import LocalFleetError
from streamplane.local.fleet import FleetSpec, LocalFleet, broker_in, write_broker_files

CLI = [sys.executable, "-m", "streamplane.cli"]


def make_broker(data_dir: Path, cluster: str, node_id: int) -> Path:
    """The files `local up` writes for one broker (no JVM), plus some data and a log."""
    bdir = data_dir.resolve() / cluster / f"broker-{node_id}"
    b = broker_in(bdir, node_id, 1, 2, None)
    write_broker_files(b, [b], FleetSpec(data_dir=data_dir))
    (bdir / "data" / "sp.orders.realtime.e1-0").mkdir(parents=True)
    (bdir / "data" / "sp.orders.realtime.e1-0" / "00000.log").write_bytes(b"x" * 1000)
    (bdir / "logs" / "server.log").write_text("started\n")
    return bdir


def user_files(data_dir: Path) -> list[Path]:
    """What is not the fleet's: the control plane's state, a warehouse, look-alikes."""
    paths = [
        data_dir / "control-plane" / "control-plane.db",
        data_dir / "warehouse" / "events" / "part-0.parquet",
        data_dir / "notes" / "broker-1" / "todo.txt",  # no server.properties
        data_dir / "other" / "broker-1" / "server.properties",  # not the fleet's settings
        data_dir / "local-a" / "README",  # a user's file in a cluster directory
    ]
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("log.dirs=/somewhere/else\nnode.id=1\n")
    return paths


def test_purge_after_a_plain_down_deletes_the_fleet_data_only(tmp_path: Path) -> None:
    data_dir = tmp_path / "fleet"
    brokers = [make_broker(data_dir, "local-a", 1), make_broker(data_dir, "local-b", 1)]
    brokers.append(make_broker(data_dir, "local-b", 2))  # an add-broker
    kept = user_files(data_dir)
    assert not (data_dir / "fleet.json").exists()  # a plain `local down` ran already

    proc = subprocess.run(
        [*CLI, "local", "down", "--purge", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "no local fleet running" in proc.stdout
    assert "deleted" in proc.stdout
    assert "local-a/broker-1" in proc.stdout  # local-a has a user's file: it stays
    assert "local-b" in proc.stdout
    for bdir in brokers:
        assert not bdir.exists()
    assert not (data_dir / "local-b").exists()
    for p in kept:
        assert p.is_file(), p

    again = subprocess.run(
        [*CLI, "local", "down", "--purge", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    assert "no local fleet data to delete" in again.stdout


def test_purge_of_an_empty_or_missing_data_dir(tmp_path: Path) -> None:
    assert LocalFleet(tmp_path / "never-made").purge() == []
    assert not (tmp_path / "never-made").exists()
    assert LocalFleet(tmp_path).purge() == []


def test_purge_skips_a_symlinked_cluster_dir(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    bdir = make_broker(elsewhere, "local-a", 1)
    data_dir = tmp_path / "fleet"
    data_dir.mkdir()
    (data_dir / "local-a").symlink_to(elsewhere / "local-a")
    assert LocalFleet(data_dir).purge() == []
    assert (bdir / "server.properties").is_file()


def test_purge_refuses_while_a_broker_runs_on_the_data(tmp_path: Path) -> None:
    data_dir = tmp_path / "fleet"
    running = make_broker(data_dir, "local-a", 1)
    other = make_broker(data_dir, "local-b", 1)
    # A process started with the broker's settings file, as `kafka.Kafka <file>` is.
    config_file = str(running / "server.properties")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", config_file])
    try:
        # Popen returns before the kernel has set the new program's arguments up.
        deadline = time.monotonic() + 10.0
        while config_file.encode() not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(LocalFleetError, match=f"in use by pid {proc.pid}"):
            LocalFleet(data_dir).purge()
        assert running.is_dir() and other.is_dir()  # nothing deleted
    finally:
        proc.kill()
        proc.wait()
    assert {p.name for p in LocalFleet(data_dir).purge()} == {"local-a", "local-b"}
    assert os.listdir(data_dir) == []


def test_down_purge_with_a_descriptor_deletes_its_clusters(tmp_path: Path) -> None:
    from streamplane.local.fleet import ClusterInfo, FleetDescriptor, read_broker_config

    data_dir = tmp_path.resolve()
    bdir = make_broker(data_dir, "local-a", 1)
    broker = broker_in(bdir, 1, 1, 2, None)
    assert read_broker_config(broker)["log.dirs"] == broker.log_dir
    FleetDescriptor(
        data_dir=str(data_dir),
        kafka_version="4.4.0",
        heap_mb=256,
        clusters={"local-a": ClusterInfo(name="local-a", cluster_id="x", brokers=[broker])},
    ).save(data_dir / "fleet.json")
    kept = user_files(data_dir)
    (data_dir / "local-a" / "README").unlink()
    assert LocalFleet(data_dir).down(purge=True) == 0
    assert not (data_dir / "fleet.json").exists()
    assert not (data_dir / "local-a").exists()
    assert all(p.is_file() for p in kept if p.parent.name != "local-a")
