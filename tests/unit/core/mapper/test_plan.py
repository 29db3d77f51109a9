from __future__ import annotations

import json

import pytest

from streamplane.core.mapper import (
    Broker,
    BrokerMap,
    BrokerState,
    MapperError,
    Plan,
    ReplicaMove,
)

from .builders import pmap_of

BROKERS = BrokerMap(
    [
        Broker(1, "a", 100, 1000),
        Broker(2, "b", 200, 1000),
        Broker(3, "c", 300, 1000),
        Broker(4, "a", 900, 1000, BrokerState.NEW),
        Broker(5, "b", 0, 0, BrokerState.DEAD),
    ]
)
BEFORE = pmap_of({"t": [[1, 2], [5, 3], [2, 3], [3, 1]]}, sizes={"t": [10, 20, 30, 40]})
AFTER = pmap_of({"t": [[4, 2], [4, 3], [3, 2], [3, 1, 2]]}, sizes={"t": [10, 20, 30, 40]})


def plan() -> Plan:
    return Plan("rebuild", BEFORE, AFTER, BROKERS, ("careful",))


def test_moves_pair_sources_and_destinations() -> None:
    assert plan().moves() == (
        ReplicaMove("t", 0, 1, 4, 10),
        ReplicaMove("t", 1, 5, 4, 20),
        ReplicaMove("t", 3, None, 2, 40),
    )


def test_diff_counts_moves_bytes_and_storage() -> None:
    diff = plan().diff()
    rows = {b.broker_id: b for b in diff.brokers}
    assert diff.partitions_changed == 4
    assert diff.replicas_moved == 3
    assert diff.bytes_moved == 70
    assert diff.leadership_changes == 3
    assert (rows[4].moves_in, rows[4].bytes_in, rows[4].storage_free_after) == (2, 30, 870)
    assert (rows[1].moves_out, rows[1].storage_free_after) == (1, 110)
    assert rows[2].storage_free_after == 160
    assert rows[5].storage_free_before is None and rows[5].storage_free_after is None
    assert (rows[3].leaders_before, rows[3].leaders_after) == (1, 2)
    text = diff.render()
    assert "free before" in text.splitlines()[0]
    assert "3 replicas move" in text.splitlines()[-1]
    json.dumps(diff.to_dict())


def test_unknown_broker_in_plan_diff() -> None:
    before = pmap_of({"t": [[9]]})
    after = pmap_of({"t": [[1]]})
    rows = {b.broker_id: b for b in Plan("x", before, after, BROKERS).diff().brokers}
    assert rows[9].state is None and rows[9].storage_free_before is None


def test_reassignment_json_of_a_plan_skips_no_ops() -> None:
    same = Plan("x", BEFORE, BEFORE, BROKERS)
    assert json.loads(same.to_reassignment_json()) == {"version": 1, "partitions": []}
    full = json.loads(same.to_reassignment_json(only_changed=False))
    assert len(full["partitions"]) == 4
    changed = json.loads(plan().to_reassignment_json())
    assert [p["partition"] for p in changed["partitions"]] == [0, 1, 2, 3]


def test_plan_must_keep_partitions() -> None:
    with pytest.raises(MapperError):
        Plan("x", BEFORE, pmap_of({"t": [[1]]}), BROKERS)


def test_to_dict_is_json() -> None:
    data = plan().to_dict()
    assert data["warnings"] == ["careful"]
    assert data["storage_range"]["before"] == 800
    json.dumps(data)


def test_render_uses_binary_units() -> None:
    big = BrokerMap([Broker(1, "a", 3 * 1024**4, 4 * 1024**4), Broker(2, "b", 2048, 4096)])
    text = Plan("x", pmap_of({"t": [[1]]}), pmap_of({"t": [[2]]}), big).diff().render()
    assert "3.0TiB" in text
    assert "2.0KiB" in text
