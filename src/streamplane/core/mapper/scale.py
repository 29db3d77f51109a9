"""Scale: spread existing partitions onto newly added brokers.

Only replicas move, from active brokers to brokers in state ``new``; nothing moves
between existing brokers.

- ``storage`` (default) is the rebalance planner with every active broker as an
  offload target and only the new brokers as destinations, including the tolerance
  sweep (kafka-kit's ``topicmappr scale``).
- ``count`` ignores storage: while a new broker holds fewer than its share of
  replicas (total replicas / brokers, rounded down), it takes one from the broker
  holding the most, choosing among that broker's partitions in a seeded order the
  first one the rack rule allows.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from streamplane.core.mapper.constraints import RackPolicy
from streamplane.core.mapper.exceptions import MapperError
from streamplane.core.mapper.leadership import balance_leaders
from streamplane.core.mapper.models import BrokerMap, BrokerState, PartitionMap, PlacementStrategy
from streamplane.core.mapper.plan import Plan
from streamplane.core.mapper.rebalance import (
    RelocationParams,
    Relocator,
    check_relocation_input,
    finish,
)


@dataclass(frozen=True)
class ScaleParams(RelocationParams):
    """Options of ``scale``; ``seed`` orders candidates for the count strategy."""

    strategy: PlacementStrategy = PlacementStrategy.STORAGE
    seed: int = 0

    def validate(self) -> None:
        super().validate()
        if not isinstance(self.strategy, PlacementStrategy):
            raise MapperError(f"unknown placement strategy {self.strategy!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise MapperError(f"seed must be an integer, got {self.seed!r}")


def scale(pmap: PartitionMap, brokers: BrokerMap, params: ScaleParams | None = None) -> Plan:
    """Plan moving replicas onto the new brokers of ``brokers``."""
    params = params or ScaleParams()
    params.validate()
    by_storage = params.strategy is PlacementStrategy.STORAGE
    participants = check_relocation_input(pmap, brokers, "scale", need_storage=by_storage)
    new = [b for b in participants if brokers[b].state is BrokerState.NEW]
    if not new:
        raise MapperError(
            "scale needs at least one broker in state 'new' (an empty broker to fill: "
            "BrokerState.NEW, or --new ID on the command line)"
        )
    sources = [b for b in participants if brokers[b].state is BrokerState.ACTIVE]
    warnings: list[str] = []
    if by_storage:
        sources.sort(key=lambda b: (brokers[b].storage_free, b))
        relocator = Relocator(pmap, brokers, participants, sources, new, params)
        return finish("scale", pmap, brokers, relocator, params, warnings)
    after = _scale_by_count(pmap, brokers, participants, sources, new, params, warnings)
    if params.optimize_leadership:
        after = balance_leaders(after, eligible=set(participants))
    return Plan("scale", pmap, after, brokers, tuple(warnings))


def _scale_by_count(
    pmap: PartitionMap,
    brokers: BrokerMap,
    participants: list[int],
    sources: list[int],
    new: list[int],
    params: ScaleParams,
    warnings: list[str],
) -> PartitionMap:
    parts = pmap.partitions
    policy = RackPolicy(brokers, params.min_rack_ids)
    rng = random.Random(params.seed)
    counts = {b: 0 for b in participants}
    on: dict[int, list[int]] = {b: [] for b in sources}
    for i, p in enumerate(parts):
        for b in p.replicas:
            counts[b] += 1
            if b in on:
                on[b].append(i)
    for b in sources:
        rng.shuffle(on[b])
    share = sum(counts.values()) // len(participants)
    replicas: dict[int, tuple[int, ...]] = {}
    pending = set(new)
    while pending:
        dst = min(pending, key=lambda b: (counts[b], b))
        if counts[dst] >= share:
            pending.discard(dst)
            continue
        moved = False
        for src in sorted(sources, key=lambda b: (-counts[b], b)):
            if counts[src] - counts[dst] < 2:
                break
            listed = on[src]
            for j, i in enumerate(listed):
                current = replicas.get(i) or parts[i].replicas
                if dst in current or not policy.move_ok(current, src, dst):
                    continue
                replicas[i] = tuple(dst if b == src else b for b in current)
                del listed[j]
                counts[src] -= 1
                counts[dst] += 1
                moved = True
                break
            if moved:
                break
        if not moved:
            pending.discard(dst)
            warnings.append(
                f"new broker {dst} holds {counts[dst]} replicas, short of its share "
                f"{share}: the rack rule allows no further move"
            )
    return PartitionMap(
        p.with_replicas(replicas[i]) if i in replicas else p for i, p in enumerate(parts)
    )
