from __future__ import annotations

from pathlib import Path

import pytest

from streamplane.exceptions import ConfigError
from streamplane.local.fleet import FleetSpec


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
