"""A throwaway local stack for benchmarks: one Kafka cluster and a control plane."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from streamplane.client.control_plane import ControlPlaneClient
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.local.fleet import FleetDescriptor, FleetSpec, LocalFleet


@dataclass
class Stack:
    fleet: FleetDescriptor
    control_plane: ControlPlaneProcess
    client: ControlPlaneClient


@contextlib.contextmanager
def local_stack(clusters: int = 1) -> Iterator[Stack]:
    with tempfile.TemporaryDirectory() as tmp:
        fleet = LocalFleet(Path(tmp) / "fleet")
        desc = fleet.up(FleetSpec(data_dir=Path(tmp) / "fleet", clusters=clusters))
        cp = ControlPlaneProcess(Path(tmp) / "cp")
        try:
            cp.start()
            client = ControlPlaneClient(cp.url, token=cp.token)
            for c in desc.clusters.values():
                client.register_cluster(c.name, c.bootstrap)
            yield Stack(desc, cp, client)
        finally:
            cp.stop()
            fleet.down(purge=True)
