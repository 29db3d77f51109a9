"""A session-scoped SparkSession (local[2], two shuffle partitions) with Delta Lake and the
``streamplane`` format registered; the fleet and control plane come from the parent conftest."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.pipeline.spark import build_session
from streamplane.pipeline.telemetry import TelemetryConfig


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    warehouse: Path = tmp_path_factory.mktemp("spark-warehouse")
    session = build_session("streamplane-tests", master="local[2]", warehouse=warehouse)
    yield session
    session.stop()


def telemetry_config(
    control_plane: ControlPlaneProcess,
    stream: str,
    group: str,
    root: Path,
    checkpoint: str = "checkpoint",
    **options: Any,
) -> TelemetryConfig:
    """A telemetry job's settings for a test: warehouse and checkpoint under ``root``."""
    return TelemetryConfig(
        stream=stream,
        group=group,
        warehouse=root / "warehouse",
        checkpoint=root / checkpoint,
        control_plane=control_plane.url,
        token=control_plane.token,
        **options,
    )
