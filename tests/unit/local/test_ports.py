"""Fleet ports: chosen outside the ephemeral range, a warning for --base-port inside it,
and a broker whose port is taken says so (quoting only this start's log lines)."""

from __future__ import annotations

import os
import random
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamplane.exceptions import LocalFleetError
from streamplane.local import fleet as fleet_mod
from streamplane.local.fleet import (
    BrokerInfo,
    ClusterInfo,
    FleetDescriptor,
    FleetSpec,
    LocalFleet,
    broker_in,
    choose_ports,
    ephemeral_overlap_warning,
    ephemeral_port_range,
    port_after,
)

LINUX = (32768, 60999)
CLI_UP = [sys.executable, "-m", "streamplane.cli", "local", "up"]


def always_free(_port: int) -> bool:
    return True


# ---------------------------------------------------------------------- choosing


@pytest.mark.parametrize("seed", range(20))
def test_chosen_ports_are_below_the_ephemeral_range(seed: int) -> None:
    ports = choose_ports(8, LINUX, always_free, rng=random.Random(seed))
    assert len(set(ports)) == 8
    assert all(20000 <= p < LINUX[0] for p in ports), ports


def test_only_free_and_not_avoided_ports_are_chosen() -> None:
    busy = set(range(20000, 32768, 2))
    avoid = {20001, 20003}
    ports = choose_ports(50, LINUX, lambda p: p not in busy, avoid=avoid, rng=random.Random(1))
    assert len(set(ports)) == 50
    assert not (set(ports) & (busy | avoid))


def test_an_added_broker_takes_the_first_free_port_after_the_fleets() -> None:
    """A fleet started at --base-port 23720 (ports 23720-23725): an added broker listens
    at 23726, or the next free port after it (it took any free port, 22566)."""
    fleet = set(range(23720, 23726))
    assert port_after(fleet, LINUX, always_free) == 23726
    assert port_after(fleet, LINUX, lambda p: p not in {23726, 23727}) == 23728
    # At the ephemeral range's edge: past it, never inside it.
    assert port_after({32765, 32766, 32767}, LINUX, always_free) == 61000
    assert port_after({61000, 61001}, LINUX, always_free) == 61002
    # Nothing free after the fleet's ports: any free port (below the range first).
    nothing_after = port_after({65535}, LINUX, lambda p: p < 40000)
    assert 20000 <= nothing_after < LINUX[0]


def test_search_wraps_around_and_then_uses_ports_above_the_range() -> None:
    free = {20000, 20001, 61000}
    ports = choose_ports(3, LINUX, lambda p: p in free, rng=random.Random(7))
    assert sorted(ports) == [20000, 20001, 61000]


def test_never_a_port_inside_the_range_even_when_nothing_else_is_free() -> None:
    with pytest.raises(LocalFleetError, match="--base-port"):
        choose_ports(1, LINUX, lambda p: LINUX[0] <= p <= LINUX[1], rng=random.Random(0))


def test_a_low_ephemeral_range_searches_below_it_and_above_it() -> None:
    ports = choose_ports(40, (10000, 60000), always_free, rng=random.Random(3))
    assert all(1024 <= p < 10000 or p > 60000 for p in ports)


def test_default_fleet_ports_are_outside_this_machines_ephemeral_range() -> None:
    """What `local up` without --base-port uses: real free ports, none ephemeral."""
    low, high = ephemeral_port_range()
    ports = fleet_mod._allocate_ports(8, None)
    assert len(set(ports)) == 8
    assert not [p for p in ports if low <= p <= high], (ports, (low, high))


def test_ephemeral_range_is_read_from_proc_with_a_fallback(tmp_path: Path) -> None:
    f = tmp_path / "ip_local_port_range"
    f.write_text("40000\t50000\n")
    assert ephemeral_port_range(f) == (40000, 50000)
    f.write_text("garbage")
    assert ephemeral_port_range(f) == LINUX
    assert ephemeral_port_range(tmp_path / "missing") == LINUX


# ---------------------------------------------------------------------- --base-port warning


@pytest.mark.parametrize(
    ("first", "count", "warned"),
    [(39300, 4, True), (32766, 4, True), (60999, 2, True), (29000, 4, False), (61000, 8, False)],
)
def test_base_port_warning(first: int, count: int, warned: bool) -> None:
    warning = ephemeral_overlap_warning(first, count, LINUX)
    if not warned:
        assert warning is None
        return
    assert warning is not None
    assert "\n" not in warning
    assert f"{first}-{first + count - 1}" in warning
    assert "32768-60999" in warning and "connect to itself" in warning


def test_spec_warns_only_for_a_base_port_in_the_range() -> None:
    assert FleetSpec(data_dir=Path("/tmp")).port_warning(LINUX) is None
    assert FleetSpec(data_dir=Path("/tmp"), base_port=20000).port_warning(LINUX) is None
    spec = FleetSpec(data_dir=Path("/tmp"), clusters=2, brokers_per_cluster=3, base_port=39300)
    assert "39300-39311" in (spec.port_warning(LINUX) or "")


def test_cli_prints_the_warning_for_a_base_port_in_the_range(tmp_path: Path) -> None:
    low, high = ephemeral_port_range()
    with socket.socket() as s:  # held, so `up` stops at the port check, before any JVM
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert low <= port <= high
        proc = subprocess.run(
            [*CLI_UP, "--base-port", str(port), "--data-dir", str(tmp_path / "f")],
            capture_output=True,
            text=True,
            check=False,
        )
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, proc.stderr
    assert "ephemeral port range" in warnings[0]
    assert proc.returncode != 0


# ---------------------------------------------------------------------- a taken port


@pytest.fixture
def fake_java(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A `java` on PATH that logs what Kafka logs when its port is taken, then exits."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    java = bin_dir / "java"
    java.write_text(
        "#!/bin/sh\n"
        'echo "[now] ERROR [KafkaServer id=1] Fatal error during startup. Prepare to shutdown '
        "(kafka.server.BrokerServer) org.apache.kafka.common.KafkaException: Socket server "
        'failed to bind to 127.0.0.1:$FAKE_PORT: Address already in use."\n'
        "exit 1\n"
    )
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    yield java


class _NoJars:
    def classpath(self) -> str:
        return "none"


def _one_broker_fleet(tmp_path: Path, port: int, controller_port: int) -> LocalFleet:
    data_dir = tmp_path / "fleet"
    b = broker_in(data_dir / "local-a" / "broker-1", 1, port, controller_port, None)
    logs = Path(b.log_file).parent
    logs.mkdir(parents=True)
    (logs / "stdout.log").write_text("[earlier] ERROR stale failure from an earlier run\n" * 5)
    Path(b.log_file).write_text("[earlier] ERROR stale server.log line\n" * 5)
    desc = FleetDescriptor(
        data_dir=str(data_dir),
        kafka_version="4.0.0",
        heap_mb=256,
        clusters={"local-a": ClusterInfo(name="local-a", cluster_id="x", brokers=[b])},
    )
    desc.save(data_dir / "fleet.json")
    return LocalFleet(data_dir, distribution=_NoJars())  # type: ignore[arg-type]


def _two_ports_free_now() -> tuple[int, int]:
    return tuple(fleet_mod._allocate_ports(2, None))  # type: ignore[return-value]


def test_start_failure_quotes_only_this_starts_log_lines(
    tmp_path: Path, fake_java: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port, controller_port = _two_ports_free_now()
    monkeypatch.setenv("FAKE_PORT", str(port))
    fleet = _one_broker_fleet(tmp_path, port, controller_port)
    with pytest.raises(LocalFleetError) as err:
        fleet.start_broker("local-a", 1)
    msg = str(err.value)
    assert f"port {port} is in use" in msg
    assert "Address already in use" in msg
    assert "stale" not in msg


def test_start_broker_names_the_port_and_what_holds_it(
    tmp_path: Path, fake_java: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reported bug: a client socket connected to itself holds the broker's port."""
    port, controller_port = _two_ports_free_now()
    monkeypatch.setenv("FAKE_PORT", str(port))
    fleet = _one_broker_fleet(tmp_path, port, controller_port)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.connect(("127.0.0.1", port))  # TCP simultaneous open: connected to itself
        with pytest.raises(LocalFleetError) as err:
            fleet.start_broker("local-a", 1)
    msg = str(err.value)
    assert f"port {port} is in use" in msg
    assert f"pid {os.getpid()}" in msg
    assert "connected to itself" in msg
    assert "stale" not in msg


def test_a_listener_on_the_controller_port_is_named(
    tmp_path: Path, fake_java: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port, controller_port = _two_ports_free_now()
    monkeypatch.setenv("FAKE_PORT", str(controller_port))
    fleet = _one_broker_fleet(tmp_path, port, controller_port)
    with socket.socket() as s:
        s.bind(("127.0.0.1", controller_port))
        s.listen()
        with pytest.raises(LocalFleetError) as err:
            fleet.start_broker("local-a", 1)
    assert f"port {controller_port} is in use" in str(err.value)
    assert "listening" in str(err.value)


def test_broker_info_unchanged() -> None:
    """The descriptor format did not change (no new fields on BrokerInfo)."""
    assert set(BrokerInfo.model_fields) == {
        "node_id", "host", "port", "controller_port", "rack", "pid",
        "log_dir", "config_file", "log_file",
    }  # fmt: skip


def test_the_control_planes_port_is_below_the_ephemeral_range() -> None:
    """As the brokers': a client retrying a stopped control plane on an ephemeral port
    can connect to itself and hold the port."""
    from streamplane.local.control_plane_process import free_port

    low, _high = ephemeral_port_range()
    assert all(free_port() < low for _ in range(20))
