"""The Assigner over members that report like the consumer does: smoothed, noisy rates.

A stream with a busy bulk lane and an idle realtime lane, as in an exploratory run on the
fleet: the idle units all sat on one member and moved there as a block every pass, and
after a join or a leave units kept moving for 20-30 s while nothing changed. Here every
member heartbeats every 0.3 s with what a ``StreamConsumer`` reports (``_load_report``):
per unit, what it fetched (a batch now and then), smoothed over 5 s from 0 when the unit
is new to it (it starts fetching 0.5-1.5 s after it is granted); records/s handled and
CPU (a baseline, plus noise) smoothed likewise. Deterministic: one seeded generator, and
every iteration in sorted order.
"""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from streamplane.core import assignment as a
from streamplane.core.assignment import AssignerConfig, MemberLoad, UnitLoad, WorkUnit

SMOOTHING_S = 5.0  # the consumer's _LOAD_SMOOTHING_S
STEP_S = 0.1
BEAT_S = 0.3
SPEED = 6000.0  # records/s a member handles at full CPU (busy members: ~20-30% CPU)


def lane(name: str, n: int) -> list[WorkUnit]:
    return [WorkUnit(f"sp.s.{name}.e1", p, "local-a") for p in range(n)]


class _Member:
    def __init__(self, member_id: str, phase: float, rng: random.Random) -> None:
        self.member_id = member_id
        self.next_beat = phase
        self.rng = rng
        # Per unit: smoothed throughput, fetched since the last report, fetching from.
        self.units: dict[WorkUnit, list[float]] = {}
        self.release: frozenset[WorkUnit] = frozenset()
        self.handled = 0.0  # since the last report
        self.rate: float | None = None
        self.cpu: float | None = None
        self.last_report: float | None = None

    def report(self, now: float) -> MemberLoad:
        elapsed = now - self.last_report if self.last_report is not None else BEAT_S
        self.last_report = now
        keep = math.exp(-elapsed / SMOOTHING_S)

        def smooth(before: float | None, reading: float) -> float:
            return reading if before is None else before * keep + reading * (1.0 - keep)

        per_unit = {}
        for unit in sorted(self.units):
            state = self.units[unit]
            state[0] = smooth(state[0], state[1] / elapsed)
            state[1] = 0.0
            per_unit[unit] = UnitLoad(state[0])
        rate = self.handled / elapsed
        self.handled = 0.0
        cpu = min(1.0, max(0.0, 0.03 + rate / SPEED + self.rng.gauss(0.0, 0.03)))
        self.rate = smooth(self.rate, rate)
        self.cpu = smooth(self.cpu, cpu)
        return MemberLoad(self.cpu, self.rate, per_unit)


class Group:
    """Members of one group, the records produced to its units, and the Assigner."""

    def __init__(self, rates: dict[WorkUnit, float], members: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.rates = rates
        self.produced = dict.fromkeys(rates, 0.0)
        self.read = dict.fromkeys(rates, 0.0)
        self.state = a.initial_state(AssignerConfig(lease_ttl_s=1.5), rates)
        self.members: dict[str, _Member] = {}
        self.now = 0.0
        self.moves: list[tuple[float, WorkUnit]] = []  # (when, unit): it got a new holder
        for i in range(members):
            self.join(f"m{i}")

    def join(self, member_id: str) -> None:
        rng = random.Random(self.rng.random())
        self.members[member_id] = _Member(member_id, self.rng.uniform(0.0, BEAT_S), rng)

    def leave(self, member_id: str) -> None:
        self.state = a.leave(self.state, member_id)
        del self.members[member_id]

    def destinations(self) -> dict[WorkUnit, str]:
        where = dict(self.state.owners)
        for unit, pending in self.state.pending.items():
            if pending.target is not None:
                where[unit] = pending.target
        return where

    def run(self, until: float) -> None:
        rng = self.rng
        before = self.destinations()
        while self.now < until:
            for unit in sorted(self.rates):
                rate = self.rates[unit] * STEP_S
                if rate >= 5.0:
                    self.produced[unit] += max(0.0, rng.gauss(rate, math.sqrt(rate)))
                elif rng.random() < rate:
                    self.produced[unit] += 1.0  # a record now and then
            for member_id in sorted(self.members):
                member = self.members[member_id]
                for unit in sorted(member.units):
                    state = member.units[unit]
                    # A fetch returns now and then, with everything waiting.
                    if self.now < state[2] or unit in member.release or rng.random() > 0.4:
                        continue
                    fetched = self.produced[unit] - self.read[unit]
                    self.read[unit] = self.produced[unit]
                    state[1] += fetched
                    member.handled += fetched
            for member_id in sorted(self.members):
                member = self.members[member_id]
                if self.now + 1e-9 < member.next_beat:
                    continue
                member.next_beat += BEAT_S
                released = member.release
                for unit in released:
                    member.units.pop(unit, None)
                self.state, answer = a.heartbeat(
                    self.state, member_id, member.report(self.now), self.now, released=released
                )
                assert not a.invariant_violations(self.state)
                for unit in sorted(answer.work_units - member.units.keys()):
                    member.units[unit] = [0.0, 0.0, self.now + rng.uniform(0.5, 1.5)]
                for unit in sorted(member.units.keys() - answer.work_units - answer.release):
                    del member.units[unit]
                member.release = answer.release
            after = self.destinations()
            self.moves += [(self.now, u) for u, m in sorted(after.items()) if before.get(u, m) != m]
            before = after
            self.now = round(self.now + STEP_S, 6)

    def moved_since(self, since: float) -> list[tuple[float, WorkUnit]]:
        return [(t, u) for t, u in self.moves if t >= since]

    def idle_counts(self, idle: list[WorkUnit]) -> dict[str, int]:
        where = self.destinations()
        counts = Counter(where[u] for u in idle)
        return {m: counts.get(m, 0) for m in sorted(self.members)}


BULK = lane("bulk", 8)
REALTIME = lane("realtime", 8)


def rates(seed: int, trickle: float) -> dict[WorkUnit, float]:
    """Bulk partitions at 300-500 records/s, realtime ones idle (``trickle`` a second)."""
    rng = random.Random(seed)
    return {u: rng.uniform(300.0, 500.0) for u in BULK} | dict.fromkeys(REALTIME, trickle)


@pytest.mark.parametrize("members", [3, 4, 5, 6])
@pytest.mark.parametrize("trickle", [0.0, 0.5])
def test_idle_units_are_spread_over_the_members_and_stay_put(members: int, trickle: float) -> None:
    """They all sat on one member (the 1% floor made each one a filler of the weight
    balance) and moved as a block; a burst on the lane then waited on that member."""
    group = Group(rates(members, trickle), members, seed=members)
    group.run(30.0)
    fair = len(REALTIME) / members
    for t in range(30, 90, 5):
        group.run(float(t))
        counts = group.idle_counts(REALTIME)
        assert max(counts.values()) <= math.ceil(fair) + 1, (t, counts)
        assert min(counts.values()) >= math.floor(fair) - 1, (t, counts)
    assert [u for _, u in group.moved_since(30.0) if u in REALTIME] == []


@pytest.mark.parametrize("members", [3, 4, 5, 6])
def test_after_a_join_or_a_leave_the_group_settles_at_once(members: int) -> None:
    """Units kept moving 20-30 s after a change: the units that had just changed hands
    read low on their new holders (their rate smoothed from nothing), the measured
    speeds wandered with the CPU noise, and passes acted on both. Each change now
    moves units at once (its own pass, and the releases that follow, within 2 s);
    afterwards loads and membership are stable, and so is the assignment (five runs:
    no later move; 3-31 before, by member count). One is let pass: a pass may still
    find, on the noise, a real gain in an arrangement whole units cannot balance."""
    later = []
    for run in range(5):
        seed = 10 + members + 100 * run
        group = Group(rates(seed, 0.5), members, seed=seed)
        group.run(60.0)
        group.join("late")
        group.run(120.0)
        group.leave("m0")
        group.run(180.0)
        at_once = [*_window(60.0), *_window(120.0)]
        later += [(run, t, u) for t, u in group.moved_since(60.0) if t not in at_once]
    assert len(later) <= 1, later


def _window(start: float) -> list[float]:
    """The times within two seconds of ``start`` (a pass and the releases it asks)."""
    return [round(start + STEP_S * i, 6) for i in range(20)]


def test_a_unit_that_changed_hands_weighs_what_it_did_while_its_new_holder_starts() -> None:
    """Six units of 100 records/s, two members, then a third: it takes two units, and
    for a while reads ~0 of them. Weighed at that reading it looked idle and was given
    more; once its readings caught up it held too much and gave units back."""
    units = lane("bulk", 6)
    config = AssignerConfig(rebalance_interval_s=1.0)
    claims = {"a": (MemberLoad(), units[:3]), "b": (MemberLoad(), units[3:])}
    state = a.restore(config, units, claims, now=0.0)

    def report(member: str, starting: frozenset[WorkUnit] = frozenset()) -> MemberLoad:
        mine = sorted(state.members[member].units)
        per_unit = {u: UnitLoad(0.0 if u in starting else 100.0) for u in mine}
        return MemberLoad(0.02, sum(x.throughput for x in per_unit.values()), per_unit)

    now = 0.0
    for member in ("a", "b"):  # measured: the Assigner remembers 100 a unit
        state, _ = a.heartbeat(state, member, report(member), now)
    state = a.rebalance(state)
    now = 1.0
    state, _ = a.heartbeat(state, "c", MemberLoad(), now)  # joins: two units are its share
    for member in ("a", "b"):
        asked = state.members[member].releasing
        state, _ = a.heartbeat(state, member, report(member), now, released=asked)
    taken = state.members["c"].units
    assert len(taken) == 2 and not state.pending
    generation = state.generation
    for step in range(1, 30):  # 15 s of passes while c's readings of its units catch up
        now = 1.0 + 0.5 * step
        caught_up = 100.0 * (1.0 - math.exp(-(now - 1.5) / SMOOTHING_S)) if now > 1.5 else 0.0
        per_unit = {u: UnitLoad(caught_up) for u in sorted(taken)}
        load_c = MemberLoad(0.02, caught_up * 2, per_unit)
        state, _ = a.heartbeat(state, "c", load_c, now)
        for member in ("a", "b"):
            state, _ = a.heartbeat(state, member, report(member), now)
        assert state.generation == generation, (
            now,
            {m: len(s.units) for m, s in state.members.items()},
        )


def test_speeds_that_wander_within_the_tolerance_move_nothing() -> None:
    """Three alike members past min_measured_cpu, four equal units (one member holds
    two: out of the band at every pass, which only a big enough gain may change). Each
    pass their speeds (records/s per CPU, from smoothed noisy CPU) came out up to 10%
    apart, the targets followed, and some passes found a "better" arrangement."""
    units = lane("bulk", 4)
    config = AssignerConfig(rebalance_interval_s=1.0)
    claims = {"a": (MemberLoad(), units[:2]), "b": (MemberLoad(), units[2:3])}
    claims["c"] = (MemberLoad(), units[3:])
    state = a.restore(config, units, claims, now=0.0)
    generation = state.generation
    rng = random.Random(3)
    now = 0.0
    for _ in range(40):  # passes
        now += 1.5
        for member in ("a", "b", "c"):
            mine = sorted(state.members[member].units)
            rate = 400.0 * len(mine)
            cpu = rate / 4000.0 * rng.uniform(0.95, 1.05)
            load = MemberLoad(cpu, rate, {u: UnitLoad(400.0) for u in mine})
            asked = state.members[member].releasing
            state, _ = a.heartbeat(state, member, load, now, released=asked)
    assert state.generation == generation


def test_free_idle_units_are_shared_out_not_given_to_the_lightest_member() -> None:
    """Four busy units on three members (one holds two), then an idle lane of six: each
    weighed 1% of a busy unit, and all six went to the two lightest members."""
    busy, idle = lane("bulk", 4), lane("realtime", 6)
    claims = {"a": (MemberLoad(), busy[:2]), "b": (MemberLoad(), busy[2:3])}
    claims["c"] = (MemberLoad(), busy[3:])
    state = a.restore(AssignerConfig(), busy, claims, now=0.0)
    for member in ("a", "b", "c"):
        mine = {u: UnitLoad(500.0) for u in state.members[member].units}
        if member == "a":  # it read the realtime lane before: it is idle
            mine |= {u: UnitLoad(0.0) for u in idle}
        state, _ = a.heartbeat(state, member, MemberLoad(0.02, 500.0 * len(mine), mine), 0.1)
    state = a.set_work_units(state, [*busy, *idle])
    assert Counter(state.owners[u] for u in idle) == {"a": 2, "b": 2, "c": 2}
