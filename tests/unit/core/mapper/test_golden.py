"""Golden files pin the exact output of every planner on fixed inputs.

Regenerate after an intended change with::

    STREAMPLANE_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/core/mapper/test_golden.py

and review the diff of ``golden/*.json`` like code. ``golden/input_cluster.json`` is the
fixed input and is never regenerated.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from streamplane.core.mapper import (
    Broker,
    BrokerMap,
    BrokerState,
    Partition,
    PartitionMap,
    PlacementStrategy,
    Plan,
    RebalanceParams,
    RebuildParams,
    ScaleParams,
    optimize_leadership,
    rebalance,
    rebuild,
    scale,
)

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("STREAMPLANE_UPDATE_GOLDEN") == "1"


def load_input() -> tuple[PartitionMap, BrokerMap]:
    """The fixed input: 12 brokers in racks r0..r2, 60 partitions of RF 3, skewed."""
    data = json.loads((GOLDEN / "input_cluster.json").read_text(encoding="utf-8"))
    brokers = BrokerMap(Broker(**b) for b in data["brokers"])
    pmap = PartitionMap(
        Partition(p["topic"], p["partition"], tuple(p["replicas"]), p["size"])
        for p in data["partitions"]
    )
    return pmap, brokers


PMAP, BROKERS = load_input()


def newcomers(*ids: int) -> list[Broker]:
    return [Broker(b, f"r{(b - 1) % 3}", 10_000, 10_000, BrokerState.NEW) for b in ids]


DEAD_5 = BROKERS.with_states({5: BrokerState.DEAD})
WITH_NEW = BrokerMap([*BROKERS.values(), *newcomers(13, 14, 15)])

SCENARIOS: dict[str, Callable[[], Plan]] = {
    "rebuild_dead_count": lambda: rebuild(PMAP, DEAD_5, RebuildParams(seed=1)),
    "rebuild_dead_storage_affinity": lambda: rebuild(
        PMAP,
        BrokerMap([*DEAD_5.values(), *newcomers(17)]),
        RebuildParams(strategy=PlacementStrategy.STORAGE, substitution_affinity=True),
    ),
    "rebuild_force_count": lambda: rebuild(PMAP, BROKERS, RebuildParams(force=True, seed=7)),
    "rebuild_force_storage": lambda: rebuild(
        PMAP, BROKERS, RebuildParams(force=True, strategy=PlacementStrategy.STORAGE)
    ),
    "rebuild_rf2": lambda: rebuild(PMAP, DEAD_5, RebuildParams(replication_factor=2, seed=3)),
    "rebuild_rf4_min_racks": lambda: rebuild(
        PMAP, BROKERS, RebuildParams(replication_factor=4, min_rack_ids=3, seed=3)
    ),
    "rebalance_sweep": lambda: rebalance(PMAP, BROKERS, RebalanceParams(storage_threshold=0.1)),
    "rebalance_nothing_to_do": lambda: rebalance(PMAP, BROKERS),
    "rebalance_fixed_tolerance": lambda: rebalance(
        PMAP, BROKERS, RebalanceParams(tolerance=0.1, storage_threshold=0.1)
    ),
    "scale_storage": lambda: scale(PMAP, WITH_NEW),
    "scale_count": lambda: scale(
        PMAP, WITH_NEW, ScaleParams(strategy=PlacementStrategy.COUNT, seed=5)
    ),
    "leadership": lambda: optimize_leadership(PMAP, BROKERS),
}


_NUMBER_LIST = re.compile(r"\[\s*(-?\d+(?:\.\d+)?(?:,\s*-?\d+(?:\.\d+)?)*)\s*\]")


def render(plan: Plan) -> str:
    document = {
        "plan": plan.to_dict(),
        "reassignment": json.loads(plan.to_reassignment_json()),
    }
    text = json.dumps(document, indent=2)
    # One line per replica list keeps the files short and their diffs readable.
    collapsed = _NUMBER_LIST.sub(
        lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text
    )
    return collapsed + "\n"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_golden(name: str) -> None:
    path = GOLDEN / f"{name}.json"
    text = render(SCENARIOS[name]())
    assert text == render(SCENARIOS[name]()), "planning is not deterministic"
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing {path}; run with STREAMPLANE_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")
