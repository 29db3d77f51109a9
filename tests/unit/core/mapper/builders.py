"""Small builders for mapper tests: clusters, maps and a rack-aware random placement."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence

from streamplane.core.mapper import (
    Broker,
    BrokerMap,
    BrokerState,
    Partition,
    PartitionMap,
    RackPolicy,
)

TIB = 1024**4


def brokers_in_racks(
    racks: int,
    per_rack: int,
    *,
    first_id: int = 1,
    total: int = 1000,
    free: Mapping[int, int] | None = None,
    state: BrokerState = BrokerState.ACTIVE,
) -> list[Broker]:
    """Brokers ``first_id..`` spread round robin over racks ``r0, r1, ...``."""
    out = []
    for n in range(racks * per_rack):
        bid = first_id + n
        out.append(
            Broker(
                bid,
                rack=f"r{n % racks}",
                storage_free=(free or {}).get(bid, total),
                storage_total=total,
                state=state,
            )
        )
    return out


def pmap_of(
    layout: Mapping[str, Sequence[Sequence[int]]], sizes: Mapping[str, Sequence[int]] | None = None
) -> PartitionMap:
    """``{"t": [[1, 2], [2, 3]]}`` -> partitions t-0 and t-1 with those replicas."""
    parts = []
    for topic, lists in layout.items():
        for i, replicas in enumerate(lists):
            size = (sizes or {}).get(topic, [0] * len(lists))[i]
            parts.append(Partition(topic, i, tuple(replicas), size))
    return PartitionMap(parts)


def with_free_from_map(brokers: Iterable[Broker], pmap: PartitionMap) -> BrokerMap:
    """Brokers whose free storage is their total minus the bytes ``pmap`` puts on them."""
    held = pmap.bytes_held()
    out = []
    for b in brokers:
        free = max(b.storage_total - held.get(b.id, 0), 0)
        out.append(Broker(b.id, b.rack, free, b.storage_total, b.state))
    return BrokerMap(out)


def random_placement(
    rng: random.Random,
    brokers: Sequence[Broker],
    partitions: int,
    replication: int,
    *,
    topics: int = 2,
    max_size: int = 100,
    skew: bool = True,
) -> PartitionMap:
    """A rack-valid placement; with ``skew`` some brokers are favoured."""
    by_rack: dict[str | None, list[Broker]] = {}
    for b in brokers:
        by_rack.setdefault(b.rack, []).append(b)
    racks = sorted(by_rack, key=str)
    weight = {b.id: (rng.uniform(0.2, 2.0) if skew else 1.0) for b in brokers}
    parts = []
    for i in range(partitions):
        chosen = rng.sample(racks, replication)
        replicas = []
        for rack in chosen:
            members = by_rack[rack]
            replicas.append(rng.choices(members, weights=[weight[b.id] for b in members])[0].id)
        parts.append(
            Partition(f"t{i % topics}", i // topics, tuple(replicas), rng.randint(0, max_size))
        )
    return PartitionMap(parts)


def rack_violations(
    pmap: PartitionMap, brokers: BrokerMap, min_rack_ids: int | None = None
) -> list[str]:
    policy = RackPolicy(brokers, min_rack_ids)
    return [f"{p.topic}-{p.partition}" for p in pmap if not policy.satisfied(p.replicas)]
