"""The Assigner at scale: 10,000 work units over 100 members, against a naive baseline.

Baseline: round-robin re-assignment from scratch (units sorted, members sorted, unit i to
member i mod M), recomputed on every change; what an assigner without state does.

Figures (times are medians; the machine is shared and noisy):
- full rebalance: placing every unit on the group (``set_work_units`` on 100 members
  that hold nothing), against computing the round robin;
- sticky rebalances from a balanced group: a member joins, a member leaves, ten members
  go to 95% CPU (a noisy neighbour); units moved by each (the stickiness figure) and
  the busiest member's CPU afterwards (the load-awareness figure);
- steady-state heartbeat, µs per heartbeat (nothing changes; a load-driven balancing
  check every ``rebalance_interval_s`` of simulated time is included in the p99),
  against the naive assigner, which recomputes its round robin to answer a heartbeat.

    .venv/bin/python bench/assigner_scale.py [--units 10000] [--members 100] [--runs 5]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from streamplane.core.assignment import (
    AssignerConfig,
    GroupState,
    MemberLoad,
    UnitLoad,
    WorkUnit,
    heartbeat,
    initial_state,
    leave,
    rebalance,
    set_work_units,
)

T = TypeVar("T")
SPEED = 40_000.0  # records/s a member sustains at 100% CPU
BASE_CPU = 0.05  # CPU a member uses doing nothing


def timed(fn: Callable[[], T], runs: int) -> tuple[float, T]:
    """Median wall time of ``fn`` over ``runs`` calls (seconds), and its last result."""
    times: list[float] = []
    result: T | None = None
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    assert result is not None
    return statistics.median(times), result


# -- the naive baseline -------------------------------------------------------------


def round_robin(units: Sequence[WorkUnit], members: Sequence[str]) -> dict[WorkUnit, str]:
    ordered = sorted(members)
    return {u: ordered[i % len(ordered)] for i, u in enumerate(sorted(units))}


def naive_heartbeat(
    units: Sequence[WorkUnit], members: Sequence[str], member_id: str
) -> frozenset[WorkUnit]:
    return frozenset(u for u, m in round_robin(units, members).items() if m == member_id)


# -- helpers ------------------------------------------------------------------------


def destinations(state: GroupState) -> dict[WorkUnit, str]:
    """Where each unit is going: its pending target, else its holder."""
    where = dict(state.owners)
    for unit, pending in state.pending.items():
        if pending.target is not None:
            where[unit] = pending.target
        elif unit not in state.work_units:
            del where[unit]
    return where


def moved(before: Mapping[WorkUnit, str], after: Mapping[WorkUnit, str]) -> int:
    return sum(1 for unit, member in after.items() if unit in before and before[unit] != member)


def member_load(units: frozenset[WorkUnit], throughput: Mapping[WorkUnit, float]) -> MemberLoad:
    records = math.fsum(throughput[u] for u in units)  # exact: no dependence on set order
    return MemberLoad(
        cpu=min(1.0, BASE_CPU + records / SPEED),
        records_per_s=records,
        units={u: UnitLoad(throughput[u]) for u in units},
    )


def settle(
    state: GroupState, now: float, throughput: Mapping[WorkUnit, float], hot: set[str]
) -> tuple[GroupState, float]:
    """Everyone heartbeats, releasing what it is asked, until nothing is pending and
    every member has reported what it holds."""
    for _ in range(20):
        members = state.members.values()
        if not state.pending and all(m.load.units.keys() == m.active for m in members):
            return state, now
        for member_id in sorted(state.members):
            m = state.members[member_id]
            load = member_load(m.active, throughput)
            if member_id in hot:  # a noisy neighbour: the same work costs more CPU
                load = MemberLoad(0.95, load.records_per_s, load.units)
            state, _ = heartbeat(state, member_id, load, now, released=m.releasing)
        now += 0.1
    raise RuntimeError("the group did not settle")


def peak_cpu(
    where: Mapping[WorkUnit, str], throughput: Mapping[WorkUnit, float], slow: Mapping[str, float]
) -> float:
    """The busiest member's CPU if it ran ``where`` (1.00 or more: saturated, lagging).

    A member's CPU is BASE_CPU plus its records/s over its speed; ``slow`` divides the
    speed of the members that have a noisy neighbour."""
    totals: dict[str, float] = {}
    for unit, member in where.items():
        totals[member] = totals.get(member, 0.0) + throughput[unit]
    return max(BASE_CPU + r * slow.get(m, 1.0) / SPEED for m, r in totals.items())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--units", type=int, default=10_000)
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--heartbeats", type=int, default=20_000)
    args = parser.parse_args()

    rng = random.Random(7)
    topics = max(1, args.units // 50)
    units = [
        WorkUnit(f"sp.stream{t:03d}.realtime.e1", p, f"local-{'ab'[t % 2]}")
        for t in range(topics)
        for p in range(args.units // topics)
    ]
    # Skewed, like real partitions: most are modest, a few are hot.
    throughput = {u: round(rng.lognormvariate(3.0, 1.2), 1) for u in units}
    members = [f"m{i:03d}" for i in range(args.members)]
    config = AssignerConfig(rebalance_interval_s=10.0)

    print(f"{len(units):,} work units, {len(members)} members, {args.runs} runs each")
    print()

    # Full rebalance: every unit placed from nothing.
    empty = initial_state(config)
    for member_id in members:
        empty, _ = heartbeat(empty, member_id, MemberLoad(cpu=BASE_CPU), 0.0)
    ours_s, state = timed(lambda: set_work_units(empty, units), args.runs)
    naive_s, naive = timed(lambda: round_robin(units, members), args.runs)
    print(
        f"full rebalance     ours {ours_s * 1e3:8.1f} ms   naive {naive_s * 1e3:8.1f} ms   "
        f"ratio {ours_s / naive_s:6.1f}x   (every unit placed; no throughput measured yet)"
    )
    # Members now report what they measure; balancing passes converge on it.
    state, now = settle(state, 0.1, throughput, set())
    passes, shifted = 0, 0
    while passes < 10:
        before = destinations(state)
        state = rebalance(state)
        step_moved = moved(before, destinations(state))
        state, now = settle(state, now, throughput, set())
        passes += 1
        shifted += step_moved
        if not step_moved:
            break
    balanced = state
    before = destinations(balanced)
    print(
        f"measured weights: {passes} balancing passes to a fixed point ({shifted:,} units "
        f"moved); peak CPU ours {peak_cpu(before, throughput, {}):.2f}, naive round robin "
        f"{peak_cpu(naive, throughput, {}):.2f}"
    )
    print()
    print(
        f"{'change':<22}{'ours ms':>9}{'naive ms':>10}{'ratio':>8}{'moved ours':>12}"
        f"{'moved naive':>13}{'peak CPU ours':>15}{'naive':>7}"
    )

    def report(
        name: str,
        ours_s: float,
        after: GroupState,
        naive_s: float,
        naive_after: Mapping[WorkUnit, str],
        slow: Mapping[str, float],
    ) -> None:
        where = destinations(after)
        ours_cpu = peak_cpu(where, throughput, slow)
        naive_cpu = peak_cpu(naive_after, throughput, slow)
        print(
            f"{name:<22}{ours_s * 1e3:9.1f}{naive_s * 1e3:10.1f}{ours_s / naive_s:7.1f}x"
            f"{moved(before, where):12,}{moved(naive, naive_after):13,}"
            f"{ours_cpu:15.2f}{naive_cpu:7.2f}"
        )

    newcomer = f"m{args.members:03d}"
    ours_s, joined = timed(
        lambda: heartbeat(balanced, newcomer, MemberLoad(cpu=BASE_CPU), now)[0], args.runs
    )
    naive_s, naive_joined = timed(lambda: round_robin(units, [*members, newcomer]), args.runs)
    report("member joins", ours_s, joined, naive_s, naive_joined, {})

    gone = members[len(members) // 2]
    ours_s, left = timed(lambda: leave(balanced, gone), args.runs)
    rest = [m for m in members if m != gone]
    naive_s, naive_left = timed(lambda: round_robin(units, rest), args.runs)
    report("member leaves", ours_s, left, naive_s, naive_left, {})

    # Ten members get a noisy neighbour: the same work now costs them 95% CPU.
    hot = members[:10]
    heated = balanced
    slow: dict[str, float] = {}
    for member_id in hot:
        m = heated.members[member_id]
        load = member_load(m.active, throughput)
        slow[member_id] = (0.95 - BASE_CPU) / (load.cpu - BASE_CPU)
        load = MemberLoad(0.95, load.records_per_s, load.units)
        heated, _ = heartbeat(heated, member_id, load, now)
    ours_s, cooled = timed(lambda: rebalance(heated), args.runs)
    naive_s, _ = timed(lambda: round_robin(units, members), args.runs)
    report("10 members at 95% CPU", ours_s, cooled, naive_s, naive, slow)

    # Steady state: every member heartbeats every 0.5 s of simulated time.
    loads = {m: member_load(s.active, throughput) for m, s in sorted(balanced.members.items())}
    state = balanced
    step = 0.5 / len(members)
    samples: list[int] = []
    generation = state.generation
    for k in range(args.heartbeats):
        member_id = members[k % len(members)]
        now += step
        start = time.perf_counter_ns()
        state, _ = heartbeat(state, member_id, loads[member_id], now)
        samples.append(time.perf_counter_ns() - start)
    assert state.generation == generation, "a steady heartbeat moved something"
    naive_samples: list[int] = []
    for k in range(min(args.heartbeats, 200)):
        member_id = members[k % len(members)]
        start = time.perf_counter_ns()
        naive_heartbeat(units, members, member_id)
        naive_samples.append(time.perf_counter_ns() - start)
    ours_us = statistics.median(samples) / 1e3
    p99_us = statistics.quantiles(samples, n=100)[98] / 1e3
    naive_us = statistics.median(naive_samples) / 1e3
    print()
    print(
        f"steady heartbeat   ours {ours_us:8.1f} µs (p99 {p99_us:.1f} µs, max "
        f"{max(samples) / 1e3:.0f} µs)   naive {naive_us:8.1f} µs   "
        f"ratio naive/ours {naive_us / ours_us:6.0f}x   ({len(samples):,} heartbeats, "
        f"{len(samples) * step:.0f} s simulated, nothing moved)"
    )


if __name__ == "__main__":
    main()
