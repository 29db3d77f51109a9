"""Bad input to `streamplane local ...` gives one clear line and a non-zero exit."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from streamplane.exceptions import PrerequisiteMissing
from streamplane.local.distribution import KafkaDistribution
from streamplane.local.fleet import BrokerInfo, ClusterInfo, FleetDescriptor

CLI = [sys.executable, "-m", "streamplane.cli"]


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env=env or dict(os.environ), check=False
    )


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error")]
    assert proc.returncode != 0
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_help_on_every_command() -> None:
    for args in (["--help"], ["local", "--help"], ["local", "up", "--help"], ["run", "--help"]):
        proc = run_cli(*args)
        assert proc.returncode == 0, proc.stderr
        assert "Usage:" in proc.stdout


def test_port_taken(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = run_cli("local", "up", "--base-port", str(port), "--data-dir", str(tmp_path / "f"))
    assert f"port {port}" in one_error_line(proc)
    assert "already in use" in proc.stderr


def test_java_missing(tmp_path: Path) -> None:
    env = dict(os.environ, PATH=str(tmp_path))  # no java, no mvn
    proc = run_cli("local", "up", "--data-dir", str(tmp_path / "f"), env=env)
    assert "Java is not on PATH" in one_error_line(proc)


def test_maven_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    dist = KafkaDistribution(cache_dir=tmp_path / "cache")
    with pytest.raises(PrerequisiteMissing, match="Maven"):
        dist.resolve()


def test_data_dir_not_writable(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    proc = run_cli("local", "up", "--data-dir", str(blocker / "fleet"))
    assert "not writable" in one_error_line(proc)


def test_bad_counts_and_racks(tmp_path: Path) -> None:
    assert "--clusters" in one_error_line(run_cli("local", "up", "--clusters", "0"))
    proc = run_cli("local", "up", "--racks", "a,,b", "--data-dir", str(tmp_path))
    assert "--racks" in one_error_line(proc)


def _descriptor(tmp_path: Path) -> None:
    broker = BrokerInfo(
        node_id=1,
        host="127.0.0.1",
        port=1,
        controller_port=2,
        rack=None,
        pid=None,
        log_dir=str(tmp_path),
        config_file=str(tmp_path / "server.properties"),
        log_file=str(tmp_path / "server.log"),
    )
    desc = FleetDescriptor(
        data_dir=str(tmp_path),
        kafka_version="4.4.0",
        heap_mb=256,
        clusters={"local-a": ClusterInfo(name="local-a", cluster_id="x", brokers=[broker])},
    )
    desc.save(tmp_path / "fleet.json")


def test_unknown_cluster_name(tmp_path: Path) -> None:
    _descriptor(tmp_path)
    proc = run_cli("local", "kill-broker", "local-zz", "1", "--data-dir", str(tmp_path))
    line = one_error_line(proc)
    assert "unknown cluster 'local-zz'" in line
    assert "local-a" in line


def test_unknown_broker_id(tmp_path: Path) -> None:
    _descriptor(tmp_path)
    proc = run_cli("local", "start-broker", "local-a", "7", "--data-dir", str(tmp_path))
    assert "no broker 7" in one_error_line(proc)


def test_down_with_nothing_running_is_fine(tmp_path: Path) -> None:
    proc = run_cli("local", "down", "--data-dir", str(tmp_path))
    assert proc.returncode == 0
    assert "no local fleet running" in proc.stdout


def test_status_without_fleet(tmp_path: Path) -> None:
    proc = run_cli("local", "status", "--data-dir", str(tmp_path))
    assert "streamplane local up" in one_error_line(proc)
