"""Whether a broker just started answers: a probe that connected to itself (its port in
the ephemeral range, TCP simultaneous open) is no answer and leaves nothing holding the
port; a broker that gives no answer in time is not left running, and one that died says
why (its bind error) even when the wait ends as it dies."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamplane.exceptions import LocalFleetError
from streamplane.local import fleet as fleet_mod
from streamplane.local.fleet import BrokerInfo, broker_in, sockets_on_port


class _ConnectsToItself(socket.socket):
    """A socket the kernel gives the port it connects to as source port: what a probe
    of a port in the ephemeral range gets now and then (24,717 tries in 0.8 s, measured)."""

    def connect_ex(self, address: Any) -> int:
        self.bind(address)
        return super().connect_ex(address)


def _free_port() -> int:
    return fleet_mod.free_ports(1)[0]


def _broker(tmp_path: Path, port: int) -> BrokerInfo:
    b = broker_in(tmp_path / "local-a" / "broker-1", 1, port, 0, None)
    Path(b.log_file).parent.mkdir(parents=True)
    return b


def _tcp_sockets_on(port: int) -> list[tuple[int, str, bool]]:
    return sockets_on_port(Path("/proc/net/tcp").read_text(), port)


def test_a_probe_connected_to_itself_is_no_answer_and_leaves_nothing_on_the_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = _free_port()
    b = _broker(tmp_path, port)
    monkeypatch.setattr(socket, "socket", _ConnectsToItself)
    answered = fleet_mod._port_open(b)
    monkeypatch.undo()
    assert not answered
    # Reset, not closed: a self-connection closed the usual way stays in TIME_WAIT.
    assert _tcp_sockets_on(port) == []


def test_a_listener_is_an_answer(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        b = _broker(tmp_path, listener.getsockname()[1])
        assert fleet_mod._port_open(b)


def test_nobody_listening_is_no_answer(tmp_path: Path) -> None:
    assert not fleet_mod._port_open(_broker(tmp_path, _free_port()))


@pytest.fixture
def hung_broker(tmp_path: Path) -> Iterator[tuple[BrokerInfo, subprocess.Popen[bytes]]]:
    """A process started with a broker's settings file that never listens."""
    b = _broker(tmp_path, _free_port())
    Path(b.log_file).write_text("[now] INFO [BrokerServer id=1] Waiting for the controller\n")
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)", b.config_file],
        stdin=subprocess.DEVNULL,
    )
    try:
        yield b.model_copy(update={"pid": proc.pid}), proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_a_broker_giving_no_answer_in_time_is_stopped_and_the_error_says_so(
    hung_broker: tuple[BrokerInfo, subprocess.Popen[bytes]],
) -> None:
    b, proc = hung_broker
    with pytest.raises(LocalFleetError) as err:
        fleet_mod._wait_broker(b, 0.0, {})
    msg = str(err.value)
    assert "did not answer in 0s" in msg
    assert f"stopped it (pid {proc.pid})" in msg
    assert "Waiting for the controller" in msg  # its last log lines
    # Not left running: the next start-broker would refuse it as "already running".
    assert not fleet_mod._is_our_broker(b.pid, b.config_file)


def test_a_broker_that_died_by_the_deadline_names_its_bind_error(tmp_path: Path) -> None:
    b = _broker(tmp_path, _free_port())
    Path(b.log_file).write_text(
        "[now] ERROR [KafkaServer id=1] Fatal error during startup. Prepare to shutdown "
        "(kafka.server.BrokerServer) org.apache.kafka.common.KafkaException: Socket server "
        f"failed to bind to 127.0.0.1:{b.port}: Address already in use.\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.DEVNULL)
    proc.wait()
    with pytest.raises(LocalFleetError) as err:
        fleet_mod._wait_broker(b.model_copy(update={"pid": proc.pid}), 0.0, {})
    msg = str(err.value)
    assert "exited during start-up" in msg or "could not listen" in msg
    assert f"failed to bind to 127.0.0.1:{b.port}" in msg
