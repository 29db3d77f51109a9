"""Benchmark: plan a storage rebalance for 100,000 partitions on 100 brokers.

Synthetic cluster: 100 brokers in 5 racks, 10 TiB each; 100,000 partitions with
replication factor 3 and seeded log-normal sizes (median ~1.3 GiB); the initial
placement is rack-aware but skewed (some brokers are favoured), so free storage is
uneven. The planner is ``streamplane.core.mapper.rebalance`` with its default
tolerance sweep, run twice: with the default offload threshold (20% below the
harmonic mean, kafka-kit's default) and with a tight one (5%).

Printed:
- planning time of each run, and its ratio against the 10 s target (< 1.0 is
  inside it);
- placement quality — free-storage range, standard deviation and replicas moved —
  for the initial map, the planner's maps, and the baseline this file names: a naive
  rack-aware round-robin re-placement of every partition (replica k of partition i
  on broker (i + k) mod 100, sizes ignored), as a ratio of planner over baseline.

Run: ``.venv/bin/python bench/mapper_rebalance.py [--partitions N] [--seed S]``
"""

from __future__ import annotations

import argparse
import random
import time

from streamplane.core.mapper import (
    Broker,
    BrokerMap,
    Partition,
    PartitionMap,
    Plan,
    RebalanceParams,
    rebalance,
    storage_stats,
)

TARGET_SECONDS = 10.0
BROKERS = 100
RACKS = 5
REPLICATION = 3
CAPACITY = 10 * 1024**4  # 10 TiB per broker
GIB = 1024**3


def synthetic_cluster(partitions: int, seed: int) -> tuple[PartitionMap, BrokerMap]:
    rng = random.Random(seed)
    by_rack: dict[int, list[int]] = {r: [] for r in range(RACKS)}
    for b in range(BROKERS):
        by_rack[b % RACKS].append(b)
    # Skew: each broker gets a weight in [0.6, 1.4]; favoured brokers fill up first.
    weight = {b: rng.uniform(0.6, 1.4) for b in range(BROKERS)}
    parts: list[Partition] = []
    topics = max(1, partitions // 1000)
    for i in range(partitions):
        racks = rng.sample(range(RACKS), REPLICATION)
        replicas = []
        for r in racks:
            members = by_rack[r]
            replicas.append(rng.choices(members, weights=[weight[b] for b in members])[0])
        size = int(rng.lognormvariate(0.3, 0.8) * GIB)
        parts.append(Partition(f"topic-{i % topics:03d}", i // topics, tuple(replicas), size))
    pmap = PartitionMap(parts)
    held = pmap.bytes_held()
    brokers = BrokerMap(
        Broker(
            b,
            rack=f"rack-{b % RACKS}",
            storage_free=max(CAPACITY - held.get(b, 0), 0),
            storage_total=CAPACITY,
        )
        for b in range(BROKERS)
    )
    return pmap, brokers


def round_robin(pmap: PartitionMap) -> PartitionMap:
    """The naive baseline: rack-aware round robin over broker ids, sizes ignored."""
    return PartitionMap(
        p.with_replicas((i + k) % BROKERS for k in range(REPLICATION)) for i, p in enumerate(pmap)
    )


def quality(pmap: PartitionMap, before: PartitionMap) -> tuple[int, float, int]:
    held = pmap.bytes_held()
    stats = storage_stats(CAPACITY - held.get(b, 0) for b in range(BROKERS))
    moved = sum(
        len(set(new.replicas) - set(old.replicas)) for old, new in zip(before, pmap, strict=True)
    )
    return stats.range, stats.stdev, moved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    pmap, brokers = synthetic_cluster(args.partitions, args.seed)
    print(
        f"rebalance: {len(pmap)} partitions x RF {REPLICATION} on {BROKERS} brokers "
        f"in {RACKS} racks (seed {args.seed})"
    )
    runs: dict[str, tuple[Plan, float]] = {}
    for name, params in (
        ("rebalance (defaults)", RebalanceParams()),
        ("rebalance (threshold 0.05)", RebalanceParams(storage_threshold=0.05)),
    ):
        start = time.perf_counter()
        plan = rebalance(pmap, brokers, params)
        runs[name] = (plan, time.perf_counter() - start)
        print(
            f"{name}: planning time {runs[name][1]:.2f} s (target {TARGET_SECONDS:.0f} s, "
            f"ratio {runs[name][1] / TARGET_SECONDS:.3f}); tolerance {plan.tolerance} "
            f"chosen of {len(plan.sweep)} tried"
        )
        for warning in plan.warnings:
            print(f"  warning: {warning}")

    baseline = quality(round_robin(pmap), pmap)
    rows = {"initial placement": quality(pmap, pmap)}
    rows.update({name: quality(plan.after, pmap) for name, (plan, _) in runs.items()})
    rows["round-robin baseline"] = baseline
    print(f"{'placement':<28} {'free range':>12} {'free stdev':>12} {'replicas moved':>15}")
    for name, (spread, sd, moved) in rows.items():
        print(f"{name:<28} {spread / GIB:>10.1f}Gi {sd / GIB:>10.1f}Gi {moved:>15}")
    for name in runs:
        ours = rows[name]
        print(
            f"{name} / baseline: range {ours[0] / baseline[0]:.3f}, "
            f"stdev {ours[1] / baseline[1]:.3f}, moves {ours[2] / baseline[2]:.4f}"
        )


if __name__ == "__main__":
    main()
