"""Rebuild: re-place replicas that sit on brokers being replaced.

Minimal movement is the default: a replica moves only when its broker is retiring,
dead, or absent from the broker list, and it keeps its position in the replica list
(a leader slot stays the leader slot). Everything else stays put.

Slots are filled one replica position at a time across all partitions — every
leader slot first, then every first follower, and so on (kafka-kit's
``placeByPosition``) — which spreads leaders as evenly as followers.

- ``count`` picks the eligible broker holding the fewest replicas; ties go to a
  seeded random choice, so the same input and seed always give the same map.
- ``storage`` visits partitions largest first and picks the eligible broker with
  the most free storage that can hold the partition (times ``size_factor``).

Every pick passes the rack rule (see ``constraints.RackPolicy``). With
``substitution_affinity`` each replaced broker is paired with one new broker in the
same rack (inferred from its partitions' other replicas when the broker is gone
without a rack), and all its replicas go there when the rules allow — the common
"broker 7 died, broker 17 replaces it in the same rack" repair.

``force`` re-places every replica from scratch; ``replication_factor`` grows (new
slots are filled) or shrinks (slots on replaced brokers are dropped first, then the
tail) every replica list.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from streamplane.core.mapper.constraints import CountSelector, RackPolicy, StorageSelector
from streamplane.core.mapper.exceptions import MapperError, PlacementError
from streamplane.core.mapper.leadership import balance_leaders
from streamplane.core.mapper.models import (
    BrokerMap,
    BrokerState,
    Partition,
    PartitionMap,
    PlacementStrategy,
)
from streamplane.core.mapper.plan import Plan

_MAX_LISTED = 5


@dataclass(frozen=True)
class RebuildParams:
    """Options of ``rebuild``; ``validate`` checks them together."""

    strategy: PlacementStrategy = PlacementStrategy.COUNT
    force: bool = False
    replication_factor: int | None = None
    min_rack_ids: int | None = None
    substitution_affinity: bool = False
    optimize_leadership: bool = False
    size_factor: float = 1.0
    seed: int = 0

    def validate(self) -> None:
        if not isinstance(self.strategy, PlacementStrategy):
            raise MapperError(f"unknown placement strategy {self.strategy!r}")
        rf = self.replication_factor
        if rf is not None and (isinstance(rf, bool) or not isinstance(rf, int) or rf < 1):
            raise MapperError(f"replication_factor must be a positive integer, got {rf!r}")
        mr = self.min_rack_ids
        if mr is not None and (isinstance(mr, bool) or not isinstance(mr, int) or mr < 1):
            raise MapperError(f"min_rack_ids must be a positive integer, got {mr!r}")
        if not (isinstance(self.size_factor, int | float) and math.isfinite(self.size_factor)):
            raise MapperError("size_factor must be a finite number")
        if self.size_factor <= 0:
            raise MapperError("size_factor must be greater than 0")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise MapperError(f"seed must be an integer, got {self.seed!r}")
        if self.force and self.substitution_affinity:
            raise MapperError(
                "substitution_affinity keeps replicas where the replaced broker had them; "
                "it cannot be combined with force"
            )


def rebuild(pmap: PartitionMap, brokers: BrokerMap, params: RebuildParams | None = None) -> Plan:
    """Plan a rebuild of ``pmap`` over ``brokers`` (see the module docstring)."""
    params = params or RebuildParams()
    params.validate()
    warnings: list[str] = []
    unknown = [b for b in pmap.broker_ids() if b not in brokers]
    if unknown:
        warnings.append(
            f"broker(s) {unknown} hold replicas but are not in the broker list; "
            "treating them as dead"
        )
    replaced = set(brokers.in_state(BrokerState.RETIRING, BrokerState.DEAD)) | set(unknown)
    eligible = brokers.eligible()
    policy = RackPolicy(brokers, params.min_rack_ids)
    _warn_partial_racks(brokers, eligible, warnings)

    parts = pmap.partitions
    work: list[list[int | None]] = []
    for p in parts:
        slots: list[int | None] = (
            [None] * len(p.replicas)
            if params.force
            else [None if b in replaced else b for b in p.replicas]
        )
        if params.replication_factor is not None:
            slots = _resize(slots, params.replication_factor)
        work.append(slots)

    open_sizes = sorted({len(s) for s in work if None in s})
    if open_sizes:
        if not eligible:
            raise PlacementError("no active or new broker can receive replicas")
        for n in open_sizes:
            policy.check_feasible(eligible, n)

    affinity: dict[int, int] = {}
    if params.substitution_affinity:
        affinity = _substitution_affinities(pmap, brokers, replaced, warnings)

    if params.strategy is PlacementStrategy.STORAGE and not any(p.size for p in parts):
        warnings.append("no partition sizes are known; storage placement only sees free space")

    failures = _place(parts, work, brokers, eligible, replaced, affinity, policy, params, warnings)
    if failures:
        listed = "; ".join(failures[:_MAX_LISTED])
        more = f" (and {len(failures) - _MAX_LISTED} more)" if len(failures) > _MAX_LISTED else ""
        raise PlacementError(f"{len(failures)} replica(s) could not be placed: {listed}{more}")

    after = PartitionMap(
        p.with_replicas(b for b in slots if b is not None) if slots != list(p.replicas) else p
        for p, slots in zip(parts, work, strict=True)
    )
    if params.optimize_leadership:
        after = balance_leaders(after, eligible=set(eligible))

    dead = set(brokers.in_state(BrokerState.DEAD)) | set(unknown)
    stranded = [p for p, q in zip(parts, after, strict=True) if set(p.replicas) <= dead and q != p]
    if stranded:
        warnings.append(
            f"{len(stranded)} partition(s) have every replica on a dead broker "
            f"({_listed(stranded)}): "
            "no replica is left to copy from, so their moves wait until a dead broker "
            "comes back (with unclean leader election, the new replicas start empty: "
            "their records are lost)"
        )
    broken = [p for p in after if not policy.satisfied(p.replicas)]
    if broken:
        warnings.append(
            f"{len(broken)} partition(s) keep replicas that share a rack ({_listed(broken)}); "
            "minimal movement leaves replicas on healthy brokers where they are — "
            "use force to re-place them"
        )
    if after == pmap and not params.force and params.replication_factor is None:
        warnings.append("nothing to rebuild: no replica is on a retiring, dead or unknown broker")
    return Plan("rebuild", pmap, after, brokers, tuple(warnings))


def _listed(parts: Sequence[Partition]) -> str:
    """The first partitions of ``parts`` by name, for a warning."""
    return ", ".join(f"{p.topic}-{p.partition}" for p in parts[:_MAX_LISTED])


def _resize(slots: list[int | None], rf: int) -> list[int | None]:
    out = list(slots)
    while len(out) > rf and None in out:
        # Drop empty slots from the end first: those replicas are moving anyway.
        del out[len(out) - 1 - out[::-1].index(None)]
    del out[rf:]
    out.extend([None] * (rf - len(out)))
    return out


def _warn_partial_racks(brokers: BrokerMap, eligible: Sequence[int], warnings: list[str]) -> None:
    rackless = [b for b in eligible if brokers[b].rack is None]
    if rackless and len(rackless) < len(eligible):
        warnings.append(
            f"broker(s) {rackless} have no rack; each counts as its own rack, so rack "
            "separation is not guaranteed for replicas placed there"
        )


def _admits(policy: RackPolicy, members: Sequence[int], final_size: int) -> Callable[[int], bool]:
    taken = set(members)
    racks = {policy.key(b) for b in members}
    repeat_ok = len(racks) >= policy.required(final_size)

    def ok(bid: int) -> bool:
        return bid not in taken and (repeat_ok or policy.key(bid) not in racks)

    return ok


def _place(
    parts: Sequence[Partition],
    work: list[list[int | None]],
    brokers: BrokerMap,
    eligible: Sequence[int],
    replaced: set[int],
    affinity: dict[int, int],
    policy: RackPolicy,
    params: RebuildParams,
    warnings: list[str],
) -> list[str]:
    storage = params.strategy is PlacementStrategy.STORAGE
    count_sel: CountSelector | None = None
    storage_sel: StorageSelector | None = None
    if storage:
        free = {b: brokers[b].storage_free for b in eligible}
        if params.force:
            held = PartitionMap(parts).bytes_held()
            for b in eligible:
                free[b] += held.get(b, 0)
        storage_sel = StorageSelector(free)
        order = sorted(range(len(parts)), key=lambda i: (-parts[i].size, i))
    else:
        counts = {b: 0 for b in eligible}
        if not params.force:
            for slots in work:
                for member in slots:
                    if member is not None:
                        counts[member] += 1
        count_sel = CountSelector(counts, random.Random(params.seed))
        order = list(range(len(parts)))

    failures: list[str] = []
    refused_affinity = 0
    longest = max((len(s) for s in work), default=0)
    for pos in range(longest):
        for i in order:
            slots = work[i]
            if pos >= len(slots) or slots[pos] is not None:
                continue
            p = parts[i]
            members = [b for b in slots if b is not None]
            ok = _admits(policy, members, len(slots))
            request = math.ceil(p.size * params.size_factor) if storage else 0
            choice: int | None = None
            old = p.replicas[pos] if pos < len(p.replicas) else None
            sub = affinity.get(old) if old is not None and old in replaced else None
            if sub is not None:
                fits = storage_sel is None or storage_sel.free_of(sub) >= request
                if ok(sub) and fits:
                    choice = sub
                else:
                    refused_affinity += 1
            if choice is None:
                if storage_sel is not None:
                    choice = storage_sel.select(request, ok)
                elif count_sel is not None:
                    choice = count_sel.select(ok)
            if choice is None:
                if any(ok(b) for b in eligible):
                    reason = f"no allowed broker has {request} bytes of free storage"
                else:
                    reason = "no eligible broker passes the rack rule"
                failures.append(f"{p.topic}-{p.partition} slot {pos}: {reason}")
                continue
            if storage_sel is not None:
                storage_sel.take(choice, request)
            elif count_sel is not None:
                count_sel.take(choice)
            slots[pos] = choice
    if refused_affinity:
        warnings.append(
            f"{refused_affinity} replica(s) could not follow their substitution affinity "
            "(rack or storage constraint) and were placed by strategy instead"
        )
    return failures


def _substitution_affinities(
    pmap: PartitionMap, brokers: BrokerMap, replaced: set[int], warnings: list[str]
) -> dict[int, int]:
    """Pair each replaced broker that holds replicas with a new broker in its rack."""
    new = list(brokers.in_state(BrokerState.NEW))
    cluster_racks = set(brokers.racks())
    used: set[int] = set()
    out: dict[int, int] = {}
    holders = set(pmap.broker_ids())
    for old in sorted(replaced & holders):
        known = brokers.get(old)
        if known is not None and known.rack is not None:
            racks = {known.rack}
        elif cluster_racks:
            racks = _racks_available(pmap, brokers, old)
        else:
            racks = set()
        match = next(
            (b for b in new if b not in used and (not cluster_racks or brokers[b].rack in racks)),
            None,
        )
        if match is None:
            where = f"rack(s) {sorted(racks)}" if racks else "any rack"
            warnings.append(
                f"no unused new broker in {where} to substitute broker {old}; "
                "its replicas are placed by strategy"
            )
            continue
        out[old] = match
        used.add(match)
    return out


def _racks_available(pmap: PartitionMap, brokers: BrokerMap, gone: int) -> set[str]:
    """Racks a broker without a known rack may have been in (kafka-kit's inference).

    Every rack seen in partitions the broker was not part of, minus the racks of its
    co-replicas: a replacement there fits every replica set it joins.
    """
    seen: set[str] = set()
    beside: set[str] = set()
    for p in pmap:
        racks = {r for b in p.replicas if b != gone and (r := _rack_of(brokers, b))}
        (beside if gone in p.replicas else seen).update(racks)
    return seen - beside


def _rack_of(brokers: BrokerMap, bid: int) -> str | None:
    broker = brokers.get(bid)
    return None if broker is None else broker.rack
