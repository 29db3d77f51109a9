from __future__ import annotations

import math

import pytest

from streamplane.core.mapper import (
    Broker,
    BrokerMap,
    BrokerState,
    MapperError,
    Partition,
    PartitionMap,
    storage_stats,
)
from streamplane.exceptions import ConfigError


@pytest.mark.parametrize(
    "kwargs",
    [
        {"id": -1},
        {"id": True},
        {"id": 1, "rack": ""},
        {"id": 1, "storage_free": -5},
        {"id": 1, "storage_free": 10, "storage_total": 5},
        {"id": 1, "storage_free": 1.5},
    ],
)
def test_broker_rejects_bad_fields(kwargs: dict[str, object]) -> None:
    with pytest.raises(MapperError):
        Broker(**kwargs)  # type: ignore[arg-type]


def test_mapper_errors_are_config_errors() -> None:
    assert issubclass(MapperError, ConfigError)


def test_broker_map_orders_by_id_and_refuses_duplicates() -> None:
    bm = BrokerMap([Broker(3, "a"), Broker(1, "b"), Broker(2, "a", state=BrokerState.DEAD)])
    assert list(bm) == [1, 2, 3]
    assert bm.eligible() == (1, 3)
    assert bm.in_state(BrokerState.DEAD) == (2,)
    assert bm.racks() == ("a", "b")
    with pytest.raises(MapperError, match="listed twice"):
        BrokerMap([Broker(1), Broker(1)])


def test_broker_map_with_states() -> None:
    bm = BrokerMap([Broker(1), Broker(2)])
    changed = bm.with_states({2: BrokerState.RETIRING})
    assert changed[2].state is BrokerState.RETIRING
    assert bm[2].state is BrokerState.ACTIVE
    with pytest.raises(MapperError, match="unknown broker"):
        bm.with_states({9: BrokerState.DEAD})


@pytest.mark.parametrize(
    ("replicas", "message"),
    [
        ((), "empty"),
        ((1, 1), "repeats"),
        ((1, -2), "not a broker id"),
        ((1, True), "not a broker id"),
    ],
)
def test_partition_rejects_bad_replicas(replicas: tuple[int, ...], message: str) -> None:
    with pytest.raises(MapperError, match=message):
        Partition("t", 0, replicas)


def test_partition_rejects_bad_identity_and_size() -> None:
    with pytest.raises(MapperError):
        Partition("", 0, (1,))
    with pytest.raises(MapperError):
        Partition("t", -1, (1,))
    with pytest.raises(MapperError):
        Partition("t", 0, (1,), size=-1)


def test_partition_map_sorts_indexes_and_counts() -> None:
    pm = PartitionMap(
        [
            Partition("b", 0, (1, 2), 10),
            Partition("a", 1, (2, 3), 5),
            Partition("a", 0, (3, 1), 7),
        ]
    )
    assert [p.key for p in pm] == [("a", 0), ("a", 1), ("b", 0)]
    assert pm[("a", 1)].replicas == (2, 3)
    assert pm.get("c", 0) is None
    assert ("b", 0) in pm
    assert pm.topics() == ("a", "b")
    assert pm.broker_ids() == (1, 2, 3)
    assert pm.replica_counts() == {1: 2, 2: 2, 3: 2}
    assert pm.leader_counts() == {3: 1, 2: 1, 1: 1}
    assert pm.bytes_held() == {3: 12, 1: 17, 2: 15}
    assert pm.with_sizes({("a", 0): 1}).get("a", 0) == Partition("a", 0, (3, 1), 1)
    with pytest.raises(MapperError, match="listed twice"):
        PartitionMap([Partition("a", 0, (1,)), Partition("a", 0, (2,))])


def test_storage_stats() -> None:
    s = storage_stats([1, 2, 4])
    assert (s.count, s.minimum, s.maximum, s.range) == (3, 1, 4, 3)
    assert s.mean == pytest.approx(7 / 3)
    assert s.harmonic_mean == pytest.approx(3 / (1 + 0.5 + 0.25))
    assert s.stdev == pytest.approx(
        math.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 3)
    )
    # Zero free storage is left out of the harmonic mean (as in kafka-kit).
    assert storage_stats([0, 2, 2]).harmonic_mean == pytest.approx(2)
    assert storage_stats([]).count == 0
