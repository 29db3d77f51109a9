"""Placement constraints and broker selection.

The rack rule: the replicas of one partition sit in distinct racks. ``min_rack_ids``
relaxes it to "at least ``min_rack_ids`` distinct racks" (never more than the number of
replicas). A broker without a rack is its own rack, so it never collides with another;
that keeps rack-less test clusters usable and mirrors kafka-kit, where an empty
locality never fails a constraint.

Selection helpers keep their state incrementally, so placing hundreds of thousands of
replicas stays linear in practice.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Iterable, Mapping, Sequence

from streamplane.core.mapper.exceptions import MapperError, PlacementError, RackConstraintError
from streamplane.core.mapper.models import BrokerMap


class RackPolicy:
    """The rack rule for one planning run."""

    __slots__ = ("_keys", "min_rack_ids")

    def __init__(self, brokers: BrokerMap, min_rack_ids: int | None = None) -> None:
        if min_rack_ids is not None and (
            isinstance(min_rack_ids, bool) or not isinstance(min_rack_ids, int) or min_rack_ids < 1
        ):
            raise MapperError(f"min_rack_ids must be a positive integer, got {min_rack_ids!r}")
        self.min_rack_ids = min_rack_ids
        # The NUL prefix keeps synthetic per-broker racks apart from any real rack name.
        self._keys: dict[int, str] = {
            bid: (b.rack if b.rack is not None else f"\0{bid}") for bid, b in brokers.items()
        }

    def key(self, broker_id: int) -> str:
        """The rack a broker counts as (its own id when it has no rack)."""
        key = self._keys.get(broker_id)
        return key if key is not None else f"\0{broker_id}"

    def required(self, replica_count: int) -> int:
        """Distinct racks a replica set of this size must span."""
        if self.min_rack_ids is None:
            return replica_count
        return min(self.min_rack_ids, replica_count)

    def distinct(self, replicas: Iterable[int]) -> int:
        return len({self.key(b) for b in replicas})

    def satisfied(self, replicas: Sequence[int]) -> bool:
        return self.distinct(replicas) >= self.required(len(replicas))

    def may_add(self, members: Sequence[int], candidate: int, final_size: int) -> bool:
        """Whether ``candidate`` may join a replica set that will hold ``final_size``.

        A new rack is always fine; a repeated rack only once the members already span
        the required number of racks. Filling slots one by one under this rule always
        ends with a compliant set when every slot finds a broker.
        """
        racks = {self.key(b) for b in members}
        return self.key(candidate) not in racks or len(racks) >= self.required(final_size)

    def move_ok(self, replicas: Sequence[int], source: int, destination: int) -> bool:
        """Whether replacing ``source`` by ``destination`` keeps the set compliant.

        A set that already breaks the rule may still move, as long as the move does
        not make it span fewer racks.
        """
        moved = [destination if b == source else b for b in replicas]
        if self.satisfied(moved):
            return True
        return not self.satisfied(replicas) and self.distinct(moved) >= self.distinct(replicas)

    def check_feasible(self, eligible: Sequence[int], replica_count: int) -> None:
        """Raise when ``eligible`` brokers cannot host a set of ``replica_count``."""
        if len(eligible) < replica_count:
            raise PlacementError(
                f"replication factor {replica_count} needs {replica_count} brokers but only "
                f"{len(eligible)} can receive replicas"
            )
        racks = sorted({self.key(b) for b in eligible})
        needed = self.required(replica_count)
        if len(racks) < needed:
            named = ", ".join(r for r in racks if not r.startswith("\0"))
            hint = (
                f"; pass min_rack_ids={len(racks)} to accept fewer racks than replicas"
                if self.min_rack_ids is None or self.min_rack_ids > len(racks)
                else ""
            )
            raise RackConstraintError(
                f"replication factor {replica_count} needs {needed} distinct racks but the "
                f"eligible brokers span only {len(racks)} ({named}){hint}"
            )


class CountSelector:
    """Picks the broker with the fewest replicas; ties are broken by a seeded RNG.

    Brokers sit in buckets by replica count. A pick tries a few random members of
    the lowest bucket before scanning it, so the common case costs O(1) and the
    choice is uniform among the passing brokers of the lowest passing bucket.
    """

    __slots__ = ("_buckets", "_counts", "_levels", "_pos", "_rng")

    _RANDOM_TRIES = 4

    def __init__(self, counts: Mapping[int, int], rng: random.Random) -> None:
        self._rng = rng
        self._counts = dict(counts)
        self._buckets: dict[int, list[int]] = {}
        self._pos: dict[int, int] = {}
        for bid in sorted(self._counts):
            self._push(bid, self._counts[bid])
        self._levels = sorted(self._buckets)

    @property
    def counts(self) -> dict[int, int]:
        return dict(self._counts)

    def _push(self, bid: int, level: int) -> None:
        bucket = self._buckets.setdefault(level, [])
        self._pos[bid] = len(bucket)
        bucket.append(bid)

    def select(self, ok: Callable[[int], bool]) -> int | None:
        """The chosen broker among those passing ``ok``, or None."""
        for level in self._levels:
            bucket = self._buckets[level]
            for _ in range(self._RANDOM_TRIES):
                bid = bucket[self._rng.randrange(len(bucket))]
                if ok(bid):
                    return bid
            passing = [bid for bid in bucket if ok(bid)]
            if passing:
                return passing[self._rng.randrange(len(passing))]
        return None

    def take(self, bid: int) -> None:
        """Record one more replica on ``bid``."""
        level = self._counts[bid]
        bucket = self._buckets[level]
        i = self._pos.pop(bid)
        last = bucket.pop()
        if last != bid:
            bucket[i] = last
            self._pos[last] = i
        if not bucket:
            del self._buckets[level]
            self._levels.remove(level)
        self._counts[bid] = level + 1
        if level + 1 not in self._buckets:
            bisect.insort(self._levels, level + 1)
        self._push(bid, level + 1)


class StorageSelector:
    """Picks the broker with the most free storage that can hold a request."""

    __slots__ = ("_free", "_order")

    def __init__(self, free: Mapping[int, int]) -> None:
        self._free = dict(free)
        self._order = sorted((-f, bid) for bid, f in self._free.items())

    @property
    def free(self) -> dict[int, int]:
        return dict(self._free)

    def free_of(self, bid: int) -> int:
        return self._free[bid]

    def select(self, request: int, ok: Callable[[int], bool]) -> int | None:
        for neg_free, bid in self._order:
            if -neg_free < request:
                return None
            if ok(bid):
                return bid
        return None

    def take(self, bid: int, request: int) -> None:
        old = self._free[bid]
        del self._order[bisect.bisect_left(self._order, (-old, bid))]
        self._free[bid] = old - request
        bisect.insort(self._order, (-(old - request), bid))
