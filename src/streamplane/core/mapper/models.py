"""The mapper's data: brokers, partitions, partition maps, storage statistics.

Everything here is immutable. Planners read these objects and build new ones; none of
them is ever changed in place, so a plan can always show the map it started from.

Sizes and free storage are integers in bytes, which keeps every plan exact and its
JSON byte-identical from run to run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from streamplane.core.mapper.exceptions import MapperError

TopicPartition = tuple[str, int]
"""``(topic, partition)``: the key of a partition everywhere in the mapper."""


class BrokerState(StrEnum):
    """What the planners may do with a broker."""

    ACTIVE = "active"
    """Holds replicas and may receive more."""
    NEW = "new"
    """Just added: receives replicas, is never a rebalance or scale source."""
    RETIRING = "retiring"
    """Alive but being replaced: every replica it holds moves away."""
    DEAD = "dead"
    """Gone: every replica it held is re-created elsewhere."""

    @property
    def eligible(self) -> bool:
        """Whether the broker may receive replicas."""
        return self in (BrokerState.ACTIVE, BrokerState.NEW)


class PlacementStrategy(StrEnum):
    """How a replica slot picks its broker."""

    COUNT = "count"
    """The eligible broker holding the fewest replicas (seeded tie-break)."""
    STORAGE = "storage"
    """The eligible broker with the most free storage that can hold the partition."""


@dataclass(frozen=True, slots=True)
class Broker:
    """One broker: identity, rack, storage and state."""

    id: int
    rack: str | None = None
    storage_free: int = 0
    storage_total: int = 0
    state: BrokerState = BrokerState.ACTIVE

    def __post_init__(self) -> None:
        if isinstance(self.id, bool) or not isinstance(self.id, int) or self.id < 0:
            raise MapperError(f"broker id must be a non-negative integer, got {self.id!r}")
        if self.rack is not None and (not isinstance(self.rack, str) or not self.rack):
            raise MapperError(f"broker {self.id}: rack must be a non-empty string or None")
        for name in ("storage_free", "storage_total"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise MapperError(f"broker {self.id}: {name} must be a non-negative integer")
        if self.storage_total and self.storage_free > self.storage_total:
            raise MapperError(
                f"broker {self.id}: storage_free {self.storage_free} exceeds "
                f"storage_total {self.storage_total}"
            )
        if not isinstance(self.state, BrokerState):
            raise MapperError(f"broker {self.id}: unknown state {self.state!r}")


class BrokerMap(Mapping[int, Broker]):
    """Brokers by id. Iterates in ascending id order."""

    __slots__ = ("_brokers",)

    def __init__(self, brokers: Iterable[Broker] = ()) -> None:
        by_id: dict[int, Broker] = {}
        for broker in brokers:
            if broker.id in by_id:
                raise MapperError(f"broker {broker.id} is listed twice")
            by_id[broker.id] = broker
        self._brokers = {bid: by_id[bid] for bid in sorted(by_id)}

    def __getitem__(self, broker_id: int) -> Broker:
        return self._brokers[broker_id]

    def __iter__(self) -> Iterator[int]:
        return iter(self._brokers)

    def __len__(self) -> int:
        return len(self._brokers)

    def __repr__(self) -> str:
        return f"BrokerMap({list(self._brokers.values())!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BrokerMap):
            return self._brokers == other._brokers
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self._brokers.values()))

    def in_state(self, *states: BrokerState) -> tuple[int, ...]:
        """Ids of the brokers in any of ``states``, ascending."""
        return tuple(bid for bid, b in self._brokers.items() if b.state in states)

    def eligible(self) -> tuple[int, ...]:
        """Ids of the brokers that may receive replicas (active or new), ascending."""
        return tuple(bid for bid, b in self._brokers.items() if b.state.eligible)

    def with_states(self, states: Mapping[int, BrokerState]) -> BrokerMap:
        """A copy with some brokers' states changed (unknown ids are an error)."""
        unknown = sorted(set(states) - set(self._brokers))
        if unknown:
            raise MapperError(f"unknown broker ids: {unknown}")
        return BrokerMap(
            replace(b, state=states[bid]) if bid in states else b
            for bid, b in self._brokers.items()
        )

    def racks(self, ids: Iterable[int] | None = None) -> tuple[str, ...]:
        """The distinct rack names of ``ids`` (default: every broker), sorted."""
        chosen = self._brokers if ids is None else ids
        return tuple(sorted({r for bid in chosen if (r := self._brokers[bid].rack) is not None}))


@dataclass(frozen=True, slots=True)
class Partition:
    """One partition: where its replicas live (leader first) and how big it is."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    size: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not self.topic:
            raise MapperError(f"topic must be a non-empty string, got {self.topic!r}")
        where = f"{self.topic}-{self.partition}"
        if (
            isinstance(self.partition, bool)
            or not isinstance(self.partition, int)
            or self.partition < 0
        ):
            raise MapperError(f"{self.topic}: partition must be a non-negative integer")
        if not isinstance(self.replicas, tuple):
            object.__setattr__(self, "replicas", tuple(self.replicas))
        if not self.replicas:
            raise MapperError(f"{where}: replica list is empty")
        for rid in self.replicas:
            if isinstance(rid, bool) or not isinstance(rid, int) or rid < 0:
                raise MapperError(f"{where}: replica {rid!r} is not a broker id")
        if len(set(self.replicas)) != len(self.replicas):
            raise MapperError(f"{where}: replica list {list(self.replicas)} repeats a broker")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 0:
            raise MapperError(f"{where}: size must be a non-negative integer")

    @property
    def key(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def leader(self) -> int:
        """The preferred leader: the first replica."""
        return self.replicas[0]

    def with_replicas(self, replicas: Iterable[int]) -> Partition:
        return replace(self, replicas=tuple(replicas))


class PartitionMap:
    """Partitions sorted by ``(topic, partition)``; each key appears once."""

    __slots__ = ("_index", "partitions")

    partitions: tuple[Partition, ...]

    def __init__(self, partitions: Iterable[Partition] = ()) -> None:
        ordered = tuple(sorted(partitions, key=lambda p: p.key))
        index: dict[TopicPartition, int] = {}
        for i, p in enumerate(ordered):
            if p.key in index:
                raise MapperError(f"partition {p.topic}-{p.partition} is listed twice")
            index[p.key] = i
        self.partitions = ordered
        self._index = index

    def __repr__(self) -> str:
        return f"PartitionMap({list(self.partitions)!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PartitionMap):
            return self.partitions == other.partitions
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.partitions)

    def __iter__(self) -> Iterator[Partition]:
        return iter(self.partitions)

    def __len__(self) -> int:
        return len(self.partitions)

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def get(self, topic: str, partition: int) -> Partition | None:
        i = self._index.get((topic, partition))
        return None if i is None else self.partitions[i]

    def __getitem__(self, key: TopicPartition) -> Partition:
        return self.partitions[self._index[key]]

    def topics(self) -> tuple[str, ...]:
        return tuple(sorted({p.topic for p in self.partitions}))

    def broker_ids(self) -> tuple[int, ...]:
        """Every broker id that holds a replica, ascending."""
        return tuple(sorted({b for p in self.partitions for b in p.replicas}))

    def replica_counts(self) -> dict[int, int]:
        """Replicas held per broker (only brokers that hold at least one)."""
        counts: dict[int, int] = {}
        for p in self.partitions:
            for b in p.replicas:
                counts[b] = counts.get(b, 0) + 1
        return counts

    def leader_counts(self) -> dict[int, int]:
        """Preferred leaderships per broker (only brokers that lead at least one)."""
        counts: dict[int, int] = {}
        for p in self.partitions:
            counts[p.leader] = counts.get(p.leader, 0) + 1
        return counts

    def bytes_held(self) -> dict[int, int]:
        """Bytes of partition data held per broker."""
        held: dict[int, int] = {}
        for p in self.partitions:
            for b in p.replicas:
                held[b] = held.get(b, 0) + p.size
        return held

    def with_sizes(self, sizes: Mapping[TopicPartition, int]) -> PartitionMap:
        """A copy whose partitions take their size from ``sizes`` where listed."""
        return PartitionMap(
            replace(p, size=sizes[p.key]) if p.key in sizes else p for p in self.partitions
        )


@dataclass(frozen=True, slots=True)
class StorageStats:
    """Free-storage statistics over a set of brokers, in bytes."""

    count: int
    minimum: int
    maximum: int
    mean: float
    harmonic_mean: float
    stdev: float

    @property
    def range(self) -> int:
        """``maximum - minimum``: the spread that rebalancing narrows."""
        return self.maximum - self.minimum


def storage_stats(free: Iterable[int]) -> StorageStats:
    """Statistics of free storage values (population standard deviation).

    The harmonic mean ignores brokers with no free storage, as kafka-kit does; it is
    what rebalancing compares brokers against, because it leans toward the fuller
    brokers and so singles out the ones that are really short of space.
    """
    values = list(free)
    if not values:
        return StorageStats(0, 0, 0, 0.0, 0.0, 0.0)
    n = len(values)
    mean = math.fsum(values) / n
    positive = [v for v in values if v > 0]
    hmean = len(positive) / math.fsum(1.0 / v for v in positive) if positive else 0.0
    stdev = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / n)
    return StorageStats(n, min(values), max(values), mean, hmean, stdev)
