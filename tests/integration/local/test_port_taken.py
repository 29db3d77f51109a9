"""Fleet ports stay out of the ephemeral range; a restart blocked by a client holding the
broker's port (a TCP self-connection) says which port and what holds it."""

from __future__ import annotations

import os
import socket
import struct

import pytest

from streamplane.exceptions import LocalFleetError
from streamplane.local.fleet import (
    FleetDescriptor,
    LocalFleet,
    cluster_status,
    ephemeral_port_range,
    wait_healthy,
)


def test_default_ports_are_outside_the_ephemeral_range(fleet: FleetDescriptor) -> None:
    low, high = ephemeral_port_range()
    ports = [
        p for c in fleet.clusters.values() for b in c.brokers for p in (b.port, b.controller_port)
    ]
    assert not [p for p in ports if low <= p <= high], (ports, (low, high))


def test_restart_blocked_by_a_self_connected_socket_names_port_and_holder(
    local_fleet: LocalFleet,
) -> None:
    broker = local_fleet.descriptor().cluster("local-b").broker(1)
    local_fleet.kill_broker("local-b", 1)
    try:
        with socket.socket() as s:
            # The killed broker's side of its connections lingers on the port (TIME_WAIT):
            # without SO_REUSEADDR the bind failed on a loaded host (the CI run). Cleared
            # once bound, as a client's socket has it: with it set, Kafka's own
            # SO_REUSEADDR listener could share the port.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((broker.host, broker.port))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
            s.connect((broker.host, broker.port))  # what a client retrying the port can do
            with pytest.raises(LocalFleetError) as err:
                local_fleet.start_broker("local-b", 1)
            # Close with a reset: a closed client socket in TIME_WAIT would hold the port
            # for a minute more.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        msg = str(err.value)
        assert f"port {broker.port} is in use" in msg
        assert f"pid {os.getpid()}" in msg and "connected to itself" in msg
    finally:
        local_fleet.start_broker("local-b", 1)
    cluster = local_fleet.descriptor().cluster("local-b")
    wait_healthy(cluster, timeout_s=60)
    assert cluster_status(cluster).up
