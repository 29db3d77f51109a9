from __future__ import annotations

from pathlib import Path

import pytest

from streamplane.exceptions import ConfigError
from streamplane.local.fleet import FleetSpec, broker_in, read_broker_config, write_broker_files


@pytest.mark.parametrize(
    ("clusters", "names"),
    [(1, ["local-a"]), (2, ["local-a", "local-b"]), (27, ["local-a", "local-z", "local-aa"])],
)
def test_default_cluster_names(clusters: int, names: list[str]) -> None:
    got = FleetSpec(data_dir=Path("/tmp"), clusters=clusters).cluster_names()
    assert len(got) == clusters
    assert set(names) <= set(got)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"clusters": 0},
        {"brokers_per_cluster": 0},
        {"racks": ("a", "")},
        {"base_port": 80},
        {"heap_mb": 16},
        {"clusters": 2, "names": ("x",)},
        {"clusters": 2, "names": ("x", "x")},
    ],
)
def test_invalid_specs(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        FleetSpec(data_dir=Path("/tmp"), **kwargs).validate()  # type: ignore[arg-type]


def test_cluster_ids_never_start_with_a_dash() -> None:
    from streamplane.local.fleet import new_cluster_id

    ids = [new_cluster_id() for _ in range(5000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)


def _written_broker_config(tmp_path: Path, spec: FleetSpec) -> dict[str, str]:
    broker = broker_in(tmp_path / "broker-1", 1, 9092, 9093, None)
    write_broker_files(broker, [broker], spec)
    return read_broker_config(broker)


@pytest.mark.parametrize("heap_mb", [128, 256, 512])
def test_cleaner_dedupe_buffer_fits_the_broker_heap(tmp_path: Path, heap_mb: int) -> None:
    """Kafka's default 128 MiB dedupe buffer killed 256 MiB brokers at start-up (OOM)."""
    config = _written_broker_config(tmp_path, FleetSpec(data_dir=tmp_path, heap_mb=heap_mb))
    dedupe = int(config["log.cleaner.dedupe.buffer.size"])
    assert 1024 * 1024 <= dedupe <= heap_mb * 1024 * 1024 // 4


def test_broker_config_overrides_the_heap_sized_defaults(tmp_path: Path) -> None:
    spec = FleetSpec(
        data_dir=tmp_path, heap_mb=256, broker_config={"log.cleaner.dedupe.buffer.size": "5000000"}
    )
    assert _written_broker_config(tmp_path, spec)["log.cleaner.dedupe.buffer.size"] == "5000000"
