"""Rebalance: move partitions off brokers that are short of free storage.

The idea is kafka-kit's ``topicmappr rebalance``:

1. **Offload targets** are the active brokers whose free storage is more than
   ``storage_threshold`` (a fraction) below the *harmonic* mean of free storage —
   or below ``storage_threshold_bytes`` when that is set.
2. The target with the least free storage moves one replica: among its
   ``partition_limit`` largest partitions (ignoring those under
   ``min_partition_size``), the first that fits goes to the non-target broker with
   the most free storage that passes the rack rule. A move must keep the source at
   or below ``mean * (1 + tolerance)`` and the destination at or above
   ``mean * (1 - tolerance)`` (arithmetic mean of free storage). A target that can
   move nothing is done; planning stops when every target is done. (kafka-kit lets
   every target move one replica per pass, round robin; serving the fullest broker
   first leaves the destinations' space to the brokers that need it most.)
3. With no fixed ``tolerance`` the planner **sweeps** ``tolerances`` and keeps the
   plan with the smallest free-storage range (then standard deviation, then fewest
   moves, then the smaller tolerance).

One guard is added to kafka-kit's rules: no move may push its source above the
current maximum free storage or its destination below the current minimum, so the
free-storage range never widens — not during a run, and so not in any plan.

Planning is deterministic: no randomness, ties broken by broker id then by
``(topic, partition)``.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

from streamplane.core.mapper.constraints import RackPolicy
from streamplane.core.mapper.exceptions import MapperError
from streamplane.core.mapper.leadership import balance_leaders
from streamplane.core.mapper.models import (
    BrokerMap,
    BrokerState,
    PartitionMap,
    storage_stats,
)
from streamplane.core.mapper.plan import Plan, SweepResult

DEFAULT_TOLERANCES: tuple[float, ...] = (
    *(round(0.01 * i, 2) for i in range(1, 21)),
    0.25,
    0.3,
    0.4,
    0.5,
)
"""Tolerances tried when none is fixed: fine steps where plans differ most."""


def _check_fraction(name: str, value: float, *, low_open: bool) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise MapperError(f"{name} must be a number, got {value!r}")
    if (value <= 0 if low_open else value < 0) or value >= 1:
        bound = "0 < x < 1" if low_open else "0 <= x < 1"
        raise MapperError(f"{name} must satisfy {bound}, got {value!r}")


def _check_count(name: str, value: int | None, minimum: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise MapperError(f"{name} must be an integer >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class RelocationParams:
    """What rebalance and scale share."""

    tolerance: float | None = None
    tolerances: tuple[float, ...] = DEFAULT_TOLERANCES
    partition_limit: int = 30
    min_partition_size: int = 0
    locality_scoped: bool = False
    min_rack_ids: int | None = None
    optimize_leadership: bool = False

    def validate(self) -> None:
        if self.tolerance is not None:
            _check_fraction("tolerance", self.tolerance, low_open=True)
        elif not self.tolerances:
            raise MapperError("tolerances must not be empty when no tolerance is fixed")
        for t in self.tolerances:
            _check_fraction("tolerances[]", t, low_open=True)
        _check_count("partition_limit", self.partition_limit, 1)
        _check_count("min_partition_size", self.min_partition_size, 0)
        _check_count("min_rack_ids", self.min_rack_ids, 1)

    def sweep(self) -> tuple[float, ...]:
        return (self.tolerance,) if self.tolerance is not None else tuple(self.tolerances)


@dataclass(frozen=True)
class RebalanceParams(RelocationParams):
    """Options of ``rebalance``."""

    storage_threshold: float = 0.2
    storage_threshold_bytes: int | None = None

    def validate(self) -> None:
        super().validate()
        _check_fraction("storage_threshold", self.storage_threshold, low_open=False)
        _check_count("storage_threshold_bytes", self.storage_threshold_bytes, 1)


@dataclass(frozen=True)
class _Run:
    tolerance: float
    replicas: dict[int, tuple[int, ...]]
    free: dict[int, int]
    moves: int
    storage_range: int
    storage_stdev: float


class Relocator:
    """Plans storage relocations from ``targets`` to ``destinations`` (see module doc)."""

    def __init__(
        self,
        pmap: PartitionMap,
        brokers: BrokerMap,
        participants: Sequence[int],
        targets: Sequence[int],
        destinations: Sequence[int],
        params: RelocationParams,
    ) -> None:
        self._parts = pmap.partitions
        self._sizes = [p.size for p in self._parts]
        self._policy = RackPolicy(brokers, params.min_rack_ids)
        self._free0 = {b: brokers[b].storage_free for b in participants}
        self._targets = list(targets)
        self._destinations = list(destinations)
        self._limit = params.partition_limit
        self._scoped = params.locality_scoped
        held: dict[int, list[int]] = {b: [] for b in self._targets}
        # An empty partition frees nothing where it leaves: moving it is pure churn.
        smallest = max(params.min_partition_size, 1)
        for i, p in enumerate(self._parts):
            if p.size < smallest:
                continue
            for b in p.replicas:
                if b in held:
                    held[b].append(i)
        # Largest first; equal sizes in (topic, partition) order.
        self._candidates = {
            b: sorted(ix, key=lambda i: (-self._sizes[i], i)) for b, ix in held.items()
        }

    def run(self, tolerance: float) -> _Run:
        free = dict(self._free0)
        mean = math.fsum(free.values()) / len(free)
        src_cap = mean * (1 + tolerance)
        dst_floor = mean * (1 - tolerance)
        replicas: dict[int, tuple[int, ...]] = {}
        candidates = {b: list(ix) for b, ix in self._candidates.items()}
        order = sorted((-free[d], d) for d in self._destinations)
        hi, lo = max(free.values()), min(free.values())
        moves = 0
        # The target with the least free storage moves next (kafka-kit goes round
        # robin, which lets a nearly-fine broker take destination space that the
        # fullest one needed); a target that cannot move anything is done.
        queue = [(free[t], t) for t in self._targets]
        heapq.heapify(queue)
        parts, sizes, policy, key = self._parts, self._sizes, self._policy, self._policy.key
        while queue:
            _, src = heapq.heappop(queue)
            room = min(src_cap, hi) - free[src]
            floor = max(dst_floor, lo)
            src_rack = key(src)
            cands = candidates[src]
            for j, i in enumerate(cands[: self._limit]):
                size = sizes[i]
                if size > room:
                    continue
                current = replicas.get(i) or parts[i].replicas
                dest = -1
                for neg_free, d in order:
                    if -neg_free - size < floor:
                        break
                    if d in current or (self._scoped and key(d) != src_rack):
                        continue
                    if policy.move_ok(current, src, d):
                        dest = d
                        break
                if dest < 0:
                    continue
                replicas[i] = tuple(dest if b == src else b for b in current)
                del order[bisect.bisect_left(order, (-free[dest], dest))]
                free[src] += size
                free[dest] -= size
                bisect.insort(order, (-free[dest], dest))
                del cands[j]
                hi, lo = max(free.values()), min(free.values())
                moves += 1
                heapq.heappush(queue, (free[src], src))
                break
        stats = storage_stats(free.values())
        return _Run(tolerance, replicas, free, moves, stats.range, stats.stdev)

    def best(self, tolerances: Sequence[float]) -> tuple[_Run, tuple[SweepResult, ...]]:
        runs = [self.run(t) for t in tolerances]
        chosen = min(runs, key=lambda r: (r.storage_range, r.storage_stdev, r.moves, r.tolerance))
        sweep = tuple(
            SweepResult(r.tolerance, r.storage_range, r.storage_stdev, r.moves) for r in runs
        )
        return chosen, sweep

    def apply(self, run: _Run) -> PartitionMap:
        return PartitionMap(
            p.with_replicas(run.replicas[i]) if i in run.replicas else p
            for i, p in enumerate(self._parts)
        )


def check_relocation_input(
    pmap: PartitionMap, brokers: BrokerMap, action: str, *, need_storage: bool = True
) -> list[int]:
    """Brokers that take part (active and new), after refusing what cannot be relocated."""
    holders = pmap.broker_ids()
    unknown = [b for b in holders if b not in brokers]
    if unknown:
        raise MapperError(f"{action}: broker(s) {unknown} hold replicas but are not known")
    leaving = [b for b in holders if not brokers[b].state.eligible]
    if leaving:
        raise MapperError(
            f"{action} only adds brokers; broker(s) {leaving} are retiring or dead — rebuild first"
        )
    participants = list(brokers.eligible())
    blind = [
        b for b in participants if brokers[b].storage_free == 0 and brokers[b].storage_total == 0
    ]
    if blind and need_storage:
        raise MapperError(f"{action}: no storage metrics for broker(s) {blind}")
    return participants


def finish(
    kind: str,
    pmap: PartitionMap,
    brokers: BrokerMap,
    relocator: Relocator,
    params: RelocationParams,
    warnings: list[str],
) -> Plan:
    """Run the sweep and wrap the best run as a plan."""
    run, sweep = relocator.best(params.sweep())
    after = relocator.apply(run)
    if run.moves == 0:
        warnings.append(
            "no relocation fits the tolerance, rack and storage limits; the map is unchanged"
        )
    if params.optimize_leadership:
        after = balance_leaders(after, eligible=set(brokers.eligible()))
    return Plan(kind, pmap, after, brokers, tuple(warnings), run.tolerance, sweep)


def offload_targets(
    brokers: BrokerMap, participants: Sequence[int], params: RebalanceParams
) -> list[int]:
    """Active brokers short of storage, fullest first."""
    active = [b for b in participants if brokers[b].state is BrokerState.ACTIVE]
    free = {b: brokers[b].storage_free for b in participants}
    if params.storage_threshold_bytes is not None:
        limit = params.storage_threshold_bytes
        chosen = [b for b in active if free[b] < limit]
    elif params.storage_threshold == 0:
        chosen = active
    else:
        hmean = storage_stats(free.values()).harmonic_mean
        chosen = [
            b for b in active if hmean > 0 and (hmean - free[b]) / hmean > params.storage_threshold
        ]
    return sorted(chosen, key=lambda b: (free[b], b))


def rebalance(
    pmap: PartitionMap, brokers: BrokerMap, params: RebalanceParams | None = None
) -> Plan:
    """Plan a storage rebalance of ``pmap`` over ``brokers`` (see the module docstring)."""
    params = params or RebalanceParams()
    params.validate()
    participants = check_relocation_input(pmap, brokers, "rebalance")
    warnings: list[str] = []
    targets = offload_targets(brokers, participants, params)
    if not targets or len(participants) < 2:
        if params.storage_threshold_bytes is not None:
            why = f"below {params.storage_threshold_bytes} bytes free"
        else:
            why = f"more than {params.storage_threshold:.0%} below the harmonic mean free storage"
        warnings.append(f"no broker is {why}; nothing to rebalance")
        return Plan("rebalance", pmap, pmap, brokers, tuple(warnings))
    chosen = set(targets)
    destinations = [b for b in participants if b not in chosen]
    relocator = Relocator(pmap, brokers, participants, targets, destinations, params)
    return finish("rebalance", pmap, brokers, relocator, params, warnings)
