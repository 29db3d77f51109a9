"""Shared pytest set-up: tests under tests/integration get the ``integration`` marker, and
with pytest-xdist (``make test`` runs two workers) the integration tests run in groups.

Each worker starts the session fixtures its tests ask for (a fleet, a control plane, a
Spark session), so the tests sharing a costly one run on one worker: a group is an
integration directory, the Spark tests (``pipeline``) being one, and the directories
whose tests kill brokers or use the three-broker rack cluster (``failover``, ``ops``,
``local``) another. Unit tests have no group and go wherever a worker is free. The
longest groups are handed out first, so that no worker is left with one of them at the
end. (The scheduler groups by test id: xdist's own ``loadgroup`` sets the id through an
attribute pytest 9 no longer has.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

INTEGRATION_DIR = Path(__file__).parent / "integration"
# Integration directories sharing a group (the others are a group each).
SHARED_GROUPS = {"pipeline": "spark", "failover": "brokers", "ops": "brokers", "local": "brokers"}
LONGEST_FIRST = ("spark", "brokers")


def group_of(nodeid: str) -> str | None:
    """The group of the test ``nodeid`` (``tests/integration/<directory>/...``), or None
    for a unit test."""
    parts = nodeid.split("::", 1)[0].split("/")
    if parts[:2] != ["tests", "integration"] or len(parts) < 4:
        return None
    return SHARED_GROUPS.get(parts[2], parts[2])


def _rank(item: pytest.Item) -> int:
    group = group_of(item.nodeid)
    if group is None:
        return len(LONGEST_FIRST) + 1
    return LONGEST_FIRST.index(group) if group in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
    items.sort(key=_rank)  # stable: the order within a rank is kept


@pytest.hookimpl(optionalhook=True)  # xdist's hook: unknown with -p no:xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's scope scheduler, a scope being a group (or one unit test), handed out in
    collection order (``_rank``: run with ``--no-loadscope-reorder``)."""
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class ByGroup(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid) or nodeid

    return ByGroup(config, log)
