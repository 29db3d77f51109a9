"""Shared pytest set-up: tests under tests/integration get the ``integration`` marker and,
for pytest-xdist (``make test`` runs two workers with ``--dist loadgroup``), a group.

Each worker starts the session fixtures its tests ask for (a fleet, a control plane, a
Spark session), so the tests sharing a costly one go to one worker: the tests of the
session's three-broker rack cluster together, those of the Spark session together, the
rest of an integration directory together (its package fixtures: the failover fleet).
Unit tests have no group and go wherever a worker is free. The longest groups come
first so that no worker is left with one of them at the end."""

from __future__ import annotations

from pathlib import Path

import pytest

INTEGRATION_DIR = Path(__file__).parent / "integration"
RACK_FIXTURES = frozenset({"rack_local_fleet", "rack_cluster"})
# The groups that take longest (minutes of Spark, in the session or in CLI processes;
# the failover fleet's kills and waits).
LONGEST_FIRST = ("spark", "failover", "pipeline")


def _group(item: pytest.Item) -> str | None:
    path = Path(str(item.fspath))
    if INTEGRATION_DIR not in path.parents:
        return None
    fixtures = set(getattr(item, "fixturenames", ()))
    if fixtures & RACK_FIXTURES:
        return "racks"
    if "spark" in fixtures:
        return "spark"
    return path.relative_to(INTEGRATION_DIR).parts[0]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    groups = {}
    for item in items:
        group = _group(item)
        groups[item.nodeid] = group
        if group is not None:
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.xdist_group(group))

    def rank(item: pytest.Item) -> int:
        group = groups[item.nodeid]
        return LONGEST_FIRST.index(group) if group in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the order within a rank is kept
