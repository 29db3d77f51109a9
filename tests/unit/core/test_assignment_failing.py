"""Members whose handler fails: the capacity signal is what a member handles successfully.

A member reports records/s handled successfully (acked) and, per unit, what it reads of
it (fetched: the unit's offered load). A member whose handler raises on every record (its
database down) reads its units and handles none of them: it must shed its load to the
healthy members, not keep it (it dead-letters its share of good records).
"""

from __future__ import annotations

from collections.abc import Callable

from streamplane.core import assignment as a
from streamplane.core.assignment import AssignerConfig, GroupState, MemberLoad, UnitLoad, WorkUnit

UNITS = [WorkUnit("sp.s.bulk.e1", p, "local-a") for p in range(9)]
RATE = 100.0  # records/s offered on each unit
MEMBERS = ("a", "b", "c")
# What a member handles successfully of what it reads (1.0: all; 0.0: fails everything).
Success = Callable[[str, float], float]


def balanced(config: AssignerConfig) -> GroupState:
    claims = {m: (MemberLoad(), UNITS[3 * i : 3 * i + 3]) for i, m in enumerate(MEMBERS)}
    return a.restore(config, UNITS, claims, now=0.0)


def beat(state: GroupState, now: float, success: Success, cpu: float = 0.05) -> GroupState:
    """Every member heartbeats what it reads and handles, releasing what it is asked."""
    for member in sorted(state.members):
        held = sorted(state.members[member].units)
        per_unit = {u: UnitLoad(RATE) for u in held}
        handled = RATE * len(held) * success(member, now)
        load = MemberLoad(cpu, handled, per_unit)
        asked = state.members[member].releasing
        state, _ = a.heartbeat(state, member, load, now, released=asked)
        assert not a.invariant_violations(state)
    return state


def run(state: GroupState, start: float, end: float, success: Success) -> GroupState:
    now = start
    while now < end:
        state = beat(state, now, success)
        now = round(now + 0.5, 6)
    return state


def counts(state: GroupState) -> dict[str, int]:
    return {m: len(s.active) for m, s in sorted(state.members.items())}


def test_a_member_that_fails_everything_sheds_its_units_to_healthy_ones() -> None:
    """It reported records handed out (every attempt and retry): it looked fast and
    kept its three units, dead-lettering a third of the stream."""
    state = balanced(AssignerConfig(rebalance_interval_s=1.0))

    def success(member: str, now: float) -> float:
        return 0.0 if member == "a" else 1.0

    state = run(state, 0.0, 20.0, success)
    held = counts(state)
    assert held["a"] == 0 and sorted([held["b"], held["c"]]) == [4, 5], held


def test_a_shed_member_stays_shed_for_the_memory_then_gets_units_again() -> None:
    """Holding nothing it reads nothing and looks healthy: without a memory it was
    given units at the next pass and shed them again, every pass."""
    state = balanced(AssignerConfig(rebalance_interval_s=1.0))  # failure_memory_s: 60 s
    seen = []

    def success(member: str, now: float) -> float:
        return 0.0 if member == "a" and now < 40.0 else 1.0

    now = 0.0
    while now < 90.0:
        state = beat(state, now, success)
        seen.append((now, state.generation, counts(state)["a"]))
        now = round(now + 0.5, 6)
    shed = [t for t, _, held in seen if held == 0]
    assert shed and shed[0] < 5.0
    # Shed once, and so it stays for the memory (it was last seen failing as it shed).
    assert len({(g, held) for t, g, held in seen if shed[0] + 2.0 <= t < 60.0}) == 1
    # Its database came back at 40 s: once the memory has run out it takes its share.
    assert counts(state)["a"] >= 2


def test_when_every_member_fails_nothing_moves() -> None:
    """No member is healthy: the data, or something they all share, fails; nobody is
    singled out (and nothing divides by a total of zero)."""
    state = balanced(AssignerConfig(rebalance_interval_s=1.0))
    generation = state.generation
    state = run(state, 0.0, 30.0, lambda member, now: 0.0)
    assert state.generation == generation
    assert counts(state) == {"a": 3, "b": 3, "c": 3}


def test_a_failing_minority_of_records_everywhere_singles_nobody_out() -> None:
    """Poison records on every unit: each member handles 40% of what it reads."""
    state = balanced(AssignerConfig(rebalance_interval_s=1.0))
    generation = state.generation
    state = run(state, 0.0, 30.0, lambda member, now: 0.4)
    assert state.generation == generation


def test_a_member_with_no_records_is_not_failing() -> None:
    """A member that holds only idle units handles nothing and reads nothing: it is
    given its share of the busy units as soon as there are some."""
    idle = [WorkUnit("sp.s.realtime.e1", p, "local-a") for p in range(3)]
    config = AssignerConfig(rebalance_interval_s=1.0)
    claims = {"a": (MemberLoad(), idle), "b": (MemberLoad(), UNITS[:5])}
    claims["c"] = (MemberLoad(), UNITS[5:])
    state = a.restore(config, [*UNITS, *idle], claims, now=0.0)
    for now in (0.0, 1.5, 3.0, 4.5):
        for member in ("a", "b", "c"):
            held = sorted(state.members[member].units)
            per_unit = {u: UnitLoad(0.0 if u in idle else RATE) for u in held}
            handled = sum(x.throughput for x in per_unit.values())
            asked = state.members[member].releasing
            load = MemberLoad(0.05, handled, per_unit)
            state, _ = a.heartbeat(state, member, load, now, released=asked)
    assert {m: sum(1 for u in s.active if u in UNITS) for m, s in state.members.items()} == {
        "a": 3,
        "b": 3,
        "c": 3,
    }


def test_a_failing_members_units_weigh_what_they_offer() -> None:
    """The unit's weight is its offered load (what is fetched of it), not what its
    holder manages to handle: the healthy members take it at its real weight."""
    state = balanced(AssignerConfig(rebalance_interval_s=1.0))
    state = run(state, 0.0, 20.0, lambda member, now: 0.0 if member == "a" else 1.0)
    assert set(state.unit_weights.values()) == {RATE}
