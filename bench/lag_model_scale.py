"""The lag model at 100,000 partitions: memory per partition and cost per update.

Baseline: the model one writes first (``NaiveModel`` below): a dataclass per partition
and a ``deque(maxlen=history_size)`` of (time, time lag, offset lag) tuples, with the
same one-sample-per-bucket history. Targets: at most 1 KiB per partition with a full
history (100 MiB for 100,000 partitions), and at most 5 us per commit update (half the
10 us a commit may take at 100,000 commits/s, the rest being the decoding).

Setup: 100,000 partitions (1,000 groups x 10 topics x 10 partitions, one group per
topic), labelled, then ``history_size`` rounds 30 s apart of an end-offset observation
and a commit per partition (a full history: the model samples at end-offset
observations, the naive one at commits). Memory is measured with tracemalloc (the names
are allocated before it starts: they belong to the caller); timings are CPU time
without tracemalloc, the median of the rounds, in random partition order, loop excluded.

    .venv/bin/python bench/lag_model_scale.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import tracemalloc
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from streamplane.core.lag import LagModel

GROUPS, TOPICS, PARTITIONS = 1_000, 10, 10
T0 = 1_700_000_000_000
BUCKET_MS = 30_000
MEMORY_TARGET_B = 1024
UPDATE_TARGET_US = 5.0


@dataclass
class NaivePartition:
    committed: int = -1
    commit_ms: int = -1
    changed_ms: int = -1
    ts_offset: int = -1
    ts_ms: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    history: deque[tuple[int, float, int]] = field(default_factory=lambda: deque(maxlen=20))


class NaiveModel:
    def __init__(self, history_size: int) -> None:
        self.parts: dict[tuple[str, str, int], NaivePartition] = {}
        self.ends: dict[tuple[str, int], tuple[int, int]] = {}
        self.history_size = history_size

    def track(self, group: str, topic: str, partition: int, **labels: str) -> None:
        p = NaivePartition(labels=dict(labels))
        p.history = deque(maxlen=self.history_size)
        self.parts[(group, topic, partition)] = p

    def observe_end_offset(self, topic: str, partition: int, end: int, observed_ms: int) -> None:
        self.ends[(topic, partition)] = (end, observed_ms)

    def observe_commit(
        self, group: str, topic: str, partition: int, offset: int, commit_ms: int, lw: int | None
    ) -> None:
        p = self.parts.get((group, topic, partition))
        if p is None:
            p = self.parts[(group, topic, partition)] = NaivePartition()
        if offset != p.committed:
            p.committed = offset
            p.changed_ms = commit_ms
        p.commit_ms = commit_ms
        if lw is not None:
            p.ts_offset, p.ts_ms = offset, lw
        end, _ = self.ends.get((topic, partition), (-1, 0))
        olag = max(0, end - offset) if end >= 0 else -1
        tlag = (commit_ms - p.ts_ms) / 1000 if p.ts_offset == offset else float("nan")
        sample = (commit_ms, tlag, olag)
        history = p.history
        if history and history[-1][0] // BUCKET_MS == commit_ms // BUCKET_MS:
            history[-1] = sample
        else:
            history.append(sample)


Model = LagModel | NaiveModel


def names() -> list[tuple[str, str, int]]:
    return [
        (f"svc-{g:04d}.consumer", f"stream-{g:04d}-{t}", p)
        for g in range(GROUPS)
        for t in range(TOPICS)
        for p in range(PARTITIONS)
    ]


def populate(model: Model, keys: list[tuple[str, str, int]], rounds: int) -> list[int]:
    """Track, observe end offsets, commit ``rounds`` times; traced bytes after each step."""
    sizes = []
    for g, t, p in keys:
        model.track(g, t, p, stream=t, lane="main", cluster="east")
    sizes.append(tracemalloc.get_traced_memory()[0])
    for r in range(rounds):
        now = T0 + r * BUCKET_MS
        for i, (g, t, p) in enumerate(keys):
            model.observe_end_offset(t, p, 1_000_000 + r, now)
            model.observe_commit(g, t, p, 1_000 * r + i % 100, now + 1, now - 5_000)
        sizes.append(tracemalloc.get_traced_memory()[0])
    return sizes


def measure_memory(
    make: Callable[[], Model], keys: list[tuple[str, str, int]], rounds: int
) -> tuple[float, float, float]:
    """Bytes per partition: tracked (no commit), one sample, full history."""
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    model = make()
    sizes = populate(model, keys, rounds)
    tracemalloc.stop()
    n = len(keys)
    del model
    return (sizes[0] - base) / n, (sizes[1] - base) / n, (sizes[-1] - base) / n


def time_commits(
    model: Model, keys: list[tuple[str, str, int]], rounds: int, step_ms: int, start_ms: int
) -> float:
    """Median over ``rounds`` of the CPU time per ``observe_commit`` (us), loop excluded."""
    rng = random.Random(7)
    order = keys[:]
    per_update = []
    observe = model.observe_commit
    for r in range(rounds):
        rng.shuffle(order)
        now = start_ms + r * step_ms
        offset = 50_000 + r
        t0 = time.process_time()
        for g, t, p in order:
            observe(g, t, p, offset, now, now - 5_000)
        t1 = time.process_time()
        for _g, _t, _p in order:  # the loop alone, subtracted
            pass
        t2 = time.process_time()
        per_update.append(((t1 - t0) - (t2 - t1)) / len(order) * 1e6)
    return statistics.median(per_update)


def time_end_offsets(
    model: Model, keys: list[tuple[str, str, int]], rounds: int, step_ms: int, start_ms: int
) -> float:
    """Median over ``rounds`` of the CPU time per ``observe_end_offset`` (us)."""
    rng = random.Random(8)
    tps = [(t, p) for _, t, p in keys]
    per_update = []
    observe = model.observe_end_offset
    for r in range(rounds):
        rng.shuffle(tps)
        now = start_ms + r * step_ms
        end = 20_000_000 + r
        t0 = time.process_time()
        for t, p in tps:
            observe(t, p, end, now)
        t1 = time.process_time()
        for _t, _p in tps:
            pass
        t2 = time.process_time()
        per_update.append(((t1 - t0) - (t2 - t1)) / len(tps) * 1e6)
    return statistics.median(per_update)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    keys = names()
    history = LagModel().thresholds.history_size
    print(f"{len(keys):,} partitions, history of {history} samples each")

    ours = measure_memory(LagModel, keys, history)
    naive = measure_memory(lambda: NaiveModel(history), keys, history)
    print(
        f"\nmemory per partition (tracemalloc)   {'LagModel':>10} {'naive':>10} {'naive/ours':>11}"
    )
    for label, a, b in zip(
        ("tracked, no commit", "one sample", "full history"), ours, naive, strict=True
    ):
        print(f"  {label:<34} {a:>9,.0f}B {b:>9,.0f}B {b / a:>10.2f}x")
    total_mib = ours[2] * len(keys) / 2**20
    print(
        f"  full history, all partitions: {total_mib:,.1f} MiB; "
        f"target {MEMORY_TARGET_B} B/partition: {MEMORY_TARGET_B / ours[2]:.2f}x headroom"
    )

    model = LagModel()
    baseline = NaiveModel(history)
    for m in (model, baseline):
        for g, t, p in keys:
            m.track(g, t, p, stream=t, lane="main", cluster="east")
            m.observe_end_offset(t, p, 10_000_000, T0)
            m.observe_commit(g, t, p, 1, T0, T0)
    start = T0 + BUCKET_MS
    print(f"\nper update, us (median of {args.rounds} rounds over {len(keys):,} partitions)")
    commit_ours = time_commits(model, keys, args.rounds, BUCKET_MS, start)
    commit_naive = time_commits(baseline, keys, args.rounds, BUCKET_MS, start)
    print(
        f"  observe_commit             LagModel {commit_ours:5.2f}  naive {commit_naive:5.2f}"
        f"  (target {UPDATE_TARGET_US:.0f}: {UPDATE_TARGET_US / commit_ours:.2f}x headroom)"
    )
    start += args.rounds * BUCKET_MS
    for label, step in (("new sample, 30 s apart", BUCKET_MS), ("same bucket, 1 s apart", 1_000)):
        ours_us = time_end_offsets(model, keys, args.rounds, step, start)
        naive_us = time_end_offsets(baseline, keys, args.rounds, step, start)
        start += args.rounds * step + BUCKET_MS
        print(
            f"  observe_end_offset, {label}  LagModel {ours_us:5.2f}  naive {naive_us:5.2f}"
            "  (ours samples the history here)"
        )

    now = start + 1_000
    t0 = time.process_time()
    for g, t, p in keys[:20_000]:
        model.partition(g, t, p, now)
    query_us = (time.process_time() - t0) / 20_000 * 1e6
    t0 = time.process_time()
    aggregates = model.aggregate(now)
    aggregate_ms = (time.process_time() - t0) * 1e3
    t0 = time.process_time()
    model.sample(now + BUCKET_MS)
    sample_ms = (time.process_time() - t0) * 1e3
    print()
    print(f"partition() query       {query_us:6.2f} us")
    print(f"aggregate() over all    {aggregate_ms:6.0f} ms ({len(aggregates):,} group/topic rows)")
    print(f"sample() over all       {sample_ms:6.0f} ms")


if __name__ == "__main__":
    main()
