from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from streamplane.local.fleet import ClusterInfo, FleetSpec, LocalFleet

TINY_METADATA_BYTES = 512


@pytest.fixture(scope="session")
def tiny_cluster(
    tmp_path_factory: pytest.TempPathFactory, control_plane: Any
) -> Iterator[ClusterInfo]:
    """A one-broker cluster whose offset.metadata.max.bytes is only 512, registered as 'tiny'."""
    data_dir = tmp_path_factory.mktemp("tiny-fleet")
    fleet = LocalFleet(data_dir)
    desc = fleet.up(
        FleetSpec(
            data_dir=data_dir,
            clusters=1,
            names=("tiny",),
            heap_mb=256,
            broker_config={"offset.metadata.max.bytes": str(TINY_METADATA_BYTES)},
        )
    )
    cluster = desc.cluster("tiny")
    control_plane.client().register_cluster("tiny", cluster.bootstrap, tags={"env": "tiny"})
    yield cluster
    control_plane.client().delete_cluster("tiny")
    fleet.down(purge=True)
