"""Leadership optimisation: reorder replica lists so preferred leaders are balanced.

Only the order of each replica list changes (its first broker is Kafka's preferred
leader), so applying the result moves no data.

"Balanced" means each broker leads in proportion to the replicas it holds: a broker
in ``k``-replica partitions is expected to lead ``1/k`` of them. kafka-kit's
``OptimizeLeaderFollower`` sorts replica lists by leader/follower ratio and hopes;
here the problem is solved exactly. Moving one leadership along a chain of brokers
``u -> ... -> v`` (each hop: a partition led by one broker that has the next as a
replica) lowers ``u`` by one and raises ``v`` by one; it is applied whenever ``u`` is
more than one leadership above its share relative to ``v``. When no such chain is
left, the sum of squared deviations from the shares is minimal (the augmenting-path
criterion for semi-matchings), and the spread is as small as the map allows.

Current leaders are the starting point, so a balanced map is returned unchanged and
an unbalanced one changes as few leaders as the chain moves need.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from functools import reduce

from streamplane.core.mapper.models import BrokerMap, PartitionMap
from streamplane.core.mapper.plan import Plan


def balance_leaders(pmap: PartitionMap, *, eligible: Collection[int] | None = None) -> PartitionMap:
    """Reorder replica lists so leadership is balanced.

    ``eligible`` limits which brokers may lead (for example, not dead ones); a
    partition with no eligible replica keeps its order.
    """
    allowed = None if eligible is None else set(eligible)
    parts = pmap.partitions
    cand: list[tuple[int, ...]] = [
        p.replicas if allowed is None else tuple(b for b in p.replicas if b in allowed)
        for p in parts
    ]
    sizes = {len(c) for c in cand if c}
    if not sizes:
        return pmap
    scale = reduce(math.lcm, sizes)

    leader: list[int | None] = []
    leads: dict[int, int] = {}
    share: dict[int, int] = {}
    for p, c in zip(parts, cand, strict=True):
        if not c:
            leader.append(None)
            continue
        first = p.leader if p.leader in c else c[0]
        leader.append(first)
        for b in c:
            share[b] = share.get(b, 0) + scale // len(c)
            leads.setdefault(b, 0)
        leads[first] += 1
    # dev[b] = scale * (leaderships - share): integers, so comparisons are exact.
    dev = {b: scale * leads[b] - share[b] for b in share}
    via: dict[int, dict[int, set[int]]] = {b: {} for b in share}
    for i, c in enumerate(cand):
        lead = leader[i]
        if lead is None:
            continue
        for b in c:
            if b != lead:
                via[lead].setdefault(b, set()).add(i)

    def transfer(i: int, src: int, dst: int) -> None:
        c = cand[i]
        for b in c:
            if b != src:
                via[src][b].discard(i)
        for b in c:
            if b != dst:
                via[dst].setdefault(b, set()).add(i)
        leader[i] = dst
        dev[src] -= scale
        dev[dst] += scale

    def direct_pass() -> int:
        moved = 0
        for u in sorted(dev, key=lambda b: (-dev[b], b)):
            while True:
                targets = [v for v, led in via[u].items() if led]
                if not targets:
                    break
                v = min(targets, key=lambda b: (dev[b], b))
                if dev[u] - dev[v] <= scale:
                    break
                transfer(min(via[u][v]), u, v)
                moved += 1
        return moved

    def chain_pass() -> bool:
        for u in sorted(dev, key=lambda b: (-dev[b], b)):
            prev: dict[int, int] = {}
            queue = [u]
            seen = {u}
            for x in queue:
                for y in sorted(via[x]):
                    if y not in seen and via[x][y]:
                        seen.add(y)
                        prev[y] = x
                        queue.append(y)
            if len(queue) == 1:
                continue
            v = min(queue[1:], key=lambda b: (dev[b], b))
            if dev[u] - dev[v] <= scale:
                continue
            hops: list[tuple[int, int]] = []
            node = v
            while node != u:
                hops.append((prev[node], node))
                node = prev[node]
            # Last hop first: each transfer leaves the earlier hops' edges intact.
            for src, dst in hops:
                transfer(min(via[src][dst]), src, dst)
            return True
        return False

    while True:
        direct_pass()
        if not chain_pass():
            break

    out = []
    for p, lead in zip(parts, leader, strict=True):
        if lead is None or lead == p.leader:
            out.append(p)
        else:
            out.append(p.with_replicas((lead, *(b for b in p.replicas if b != lead))))
    return PartitionMap(out)


def optimize_leadership(pmap: PartitionMap, brokers: BrokerMap) -> Plan:
    """A plan that only reorders replica lists; only active and new brokers lead."""
    eligible = set(brokers.eligible())
    after = balance_leaders(pmap, eligible=eligible)
    warnings: list[str] = []
    stranded = sum(1 for p in pmap if not any(b in eligible for b in p.replicas))
    if stranded:
        warnings.append(
            f"{stranded} partition(s) have no active replica and keep their leader; "
            "rebuild them first"
        )
    return Plan("leadership", pmap, after, brokers, tuple(warnings))
