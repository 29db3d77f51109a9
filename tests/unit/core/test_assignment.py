"""The Assigner: table tests for each behaviour, and properties over random histories.

The property test plays members that obey the protocol (process what the last answer
lists until its lease expiry, release what it says to release) and checks, after every
operation, that no unit has two live leases, that the state is consistent, and that the
generation moves exactly when some member's work changes.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from streamplane.core.assignment import (
    AssignerConfig,
    GroupState,
    MemberAssignment,
    MemberLoad,
    UnitLoad,
    WorkUnit,
    assignment_of,
    expire,
    heartbeat,
    initial_state,
    invariant_violations,
    leave,
    rebalance,
    restore,
    set_work_units,
)
from streamplane.exceptions import ConfigError


def units(n: int, topic: str = "sp.logs.realtime.e1", cluster: str = "local-a") -> list[WorkUnit]:
    return [WorkUnit(topic, p, cluster) for p in range(n)]


def load(
    cpu: float = 0.2,
    throughput: Mapping[WorkUnit, float] | None = None,
    records_per_s: float = 0.0,
    backlog: int = 0,
) -> MemberLoad:
    """``backlog`` records behind on each unit of ``throughput``."""
    per_unit = {u: UnitLoad(t, backlog) for u, t in (throughput or {}).items()}
    return MemberLoad(cpu=cpu, records_per_s=records_per_s, units=per_unit)


def counts(state: GroupState) -> dict[str, int]:
    return {m: len(s.units) for m, s in sorted(state.members.items())}


def active(state: GroupState) -> dict[str, frozenset[WorkUnit]]:
    return {m: s.active for m, s in state.members.items() if s.active}


def settle(
    state: GroupState,
    now: float,
    loads: Mapping[str, MemberLoad],
    step: float = 0.1,
    rounds: int = 10,
) -> tuple[GroupState, float]:
    """Every member in ``loads`` heartbeats, releasing what it is asked, until no release
    is pending. Returns the state and the time reached."""
    for _ in range(rounds):
        for member_id in sorted(loads):
            asked = state.members[member_id].releasing if member_id in state.members else ()
            state, _ = heartbeat(state, member_id, loads[member_id], now, released=asked)
        assert invariant_violations(state) == []
        if not state.pending:
            return state, now
        now += step
    raise AssertionError(f"releases still pending after {rounds} rounds: {state.pending}")


# -- table tests ----------------------------------------------------------------------


def test_the_answer_says_when_a_heartbeat_admitted_the_member() -> None:
    state = initial_state(AssignerConfig(lease_ttl_s=2.0), units(2))
    state, a = heartbeat(state, "a", load(), now=0.0)
    assert a.joined  # new
    state, a = heartbeat(state, "a", load(), now=1.0)
    assert not a.joined  # steady
    state, a = heartbeat(state, "a", load(), now=5.0)  # its lease ran out at 3.0
    assert a.joined and a.work_units == frozenset(units(2))  # admitted again: all free


def test_first_member_takes_everything() -> None:
    state = initial_state(AssignerConfig(), units(8))
    state, answer = heartbeat(state, "a", load(), now=10.0)
    assert answer == MemberAssignment(frozenset(units(8)), frozenset(), 12.0, 1, joined=True)
    assert invariant_violations(state) == []


def test_no_members_no_owners() -> None:
    state = initial_state(AssignerConfig(), units(3))
    assert state.owners == {}
    assert expire(state, 100.0) is state
    assert invariant_violations(state) == []


def test_second_member_gets_half_after_the_first_releases() -> None:
    state = initial_state(AssignerConfig(), units(100))
    state, a1 = heartbeat(state, "a", load(), now=0.0)
    state, b1 = heartbeat(state, "b", load(), now=0.1)
    # b gets nothing yet: a still holds everything.
    assert b1.work_units == frozenset() and b1.release == frozenset()
    state, a2 = heartbeat(state, "a", load(), now=0.2)
    assert len(a2.work_units) == 50 and len(a2.release) == 50
    assert a2.work_units | a2.release == a1.work_units
    # Not released yet: still nothing for b.
    state, b2 = heartbeat(state, "b", load(), now=0.3)
    assert b2.work_units == frozenset()
    state, a3 = heartbeat(state, "a", load(), now=0.4, released=a2.release)
    assert a3.work_units == a2.work_units and a3.release == frozenset()
    state, b3 = heartbeat(state, "b", load(), now=0.5)
    assert b3.work_units == a2.release
    assert state.pending == {}
    assert invariant_violations(state) == []


def test_partial_release_hands_over_only_what_was_released() -> None:
    state = initial_state(AssignerConfig(), units(4))
    state, _ = heartbeat(state, "a", load(), now=0.0)
    state, _ = heartbeat(state, "b", load(), now=0.0)
    state, a = heartbeat(state, "a", load(), now=0.1)
    first, second = sorted(a.release)
    state, a = heartbeat(state, "a", load(), now=0.2, released=[first])
    assert a.release == {second}
    state, b = heartbeat(state, "b", load(), now=0.3)
    assert b.work_units == {first}


def test_expired_member_units_go_to_the_others_at_the_expiry() -> None:
    state = initial_state(AssignerConfig(lease_ttl_s=2.0), units(10))
    state, _ = settle(state, 0.0, {"a": load(), "b": load()})
    assert counts(state) == {"a": 5, "b": 5}
    b_expiry = state.members["b"].lease_expiry
    # Only a keeps heartbeating.
    state, a = heartbeat(state, "a", load(), now=b_expiry - 1.0)
    state, a = heartbeat(state, "a", load(), now=b_expiry - 0.25)
    assert len(a.work_units) == 5
    state, a = heartbeat(state, "a", load(), now=b_expiry)
    assert a.work_units == frozenset(units(10))
    assert "b" not in state.members
    assert invariant_violations(state) == []


def test_expire_removes_members_and_reassigns() -> None:
    state = initial_state(AssignerConfig(lease_ttl_s=2.0), units(6))
    state, _ = settle(state, 0.0, {"a": load(), "b": load()})
    state, _ = heartbeat(state, "a", load(), now=1.5)
    b_expiry = state.members["b"].lease_expiry
    early = expire(state, b_expiry - 0.01)  # nothing due yet
    assert sorted(early.members) == ["a", "b"] and early.owners == state.owners
    state = expire(state, b_expiry)
    assert list(state.members) == ["a"]
    assert state.members["a"].units == frozenset(units(6))


def test_a_rejoining_member_after_expiry_starts_empty() -> None:
    state = initial_state(AssignerConfig(lease_ttl_s=2.0), units(4))
    state, _ = heartbeat(state, "a", load(), now=0.0)  # lease to 2.0
    state, _ = heartbeat(state, "b", load(), now=1.0)  # a is asked for two units
    state, b = heartbeat(state, "b", load(), now=2.5)  # a expired at 2.0
    assert b.work_units == frozenset(units(4)) and not b.joined
    state, a = heartbeat(state, "a", load(), now=3.0)  # a comes back as a newcomer
    assert a.work_units == frozenset() and a.joined
    assert len(assignment_of(state, "b").release) == 2
    assert invariant_violations(state) == []


def test_unacknowledged_release_moves_at_the_release_deadline() -> None:
    """A live holder gets ``release_timeout_s`` from the moment a unit is asked back to
    finish the records of it in hand and hand it back; it moved at the holder's lease
    before (2 s here), while those records were still being handled."""
    config = AssignerConfig(lease_ttl_s=2.0, release_timeout_s=6.0)
    state = initial_state(config, units(4))
    state, a = heartbeat(state, "a", load(), now=0.0)  # lease to 2.0, listing all four
    state, _ = heartbeat(state, "b", load(), now=0.5)  # a is asked for two units
    state, a = heartbeat(state, "a", load(), now=1.0)
    assert len(a.release) == 2
    # a keeps heartbeating but never releases: the two move 6 s after they were asked.
    for now in (1.9, 3.5, 5.0, 6.4):
        state, a = heartbeat(state, "a", load(), now=now)
        state, b = heartbeat(state, "b", load(), now=now + 0.05)
        assert len(a.release) == 2 and b.work_units == frozenset(), now
    state, b = heartbeat(state, "b", load(), now=6.5)
    assert len(b.work_units) == 2
    state, a = heartbeat(state, "a", load(), now=6.6)
    assert a.release == frozenset() and len(a.work_units) == 2
    assert invariant_violations(state) == []


def test_a_release_never_moves_before_the_lease_that_listed_the_unit() -> None:
    """With no time to release (``release_timeout_s=0``), the unit moves at the end of
    the holder's last lease listing it, as before."""
    state = initial_state(AssignerConfig(lease_ttl_s=2.0, release_timeout_s=0.0), units(4))
    state, _ = heartbeat(state, "a", load(), now=0.0)  # lease to 2.0
    state, _ = heartbeat(state, "b", load(), now=0.5)  # a is asked for two units
    state, a = heartbeat(state, "a", load(), now=1.0)
    assert len(a.release) == 2
    state, b = heartbeat(state, "b", load(), now=1.95)
    assert b.work_units == frozenset()
    state, b = heartbeat(state, "b", load(), now=2.0)
    assert len(b.work_units) == 2


def test_a_releasing_holder_that_stops_heartbeating_loses_its_units_at_its_lease() -> None:
    """The release deadline gives a live holder time; a dead one loses everything at its
    lease expiry, the units it was releasing included."""
    state = initial_state(AssignerConfig(lease_ttl_s=2.0, release_timeout_s=30.0), units(4))
    state, _ = heartbeat(state, "a", load(), now=0.0)
    state, _ = heartbeat(state, "b", load(), now=0.5)  # a is asked for two units
    state, a = heartbeat(state, "a", load(), now=1.0)  # a's last heartbeat: lease to 3.0
    assert len(a.release) == 2
    state, b = heartbeat(state, "b", load(), now=2.9)
    assert b.work_units == frozenset()
    state, b = heartbeat(state, "b", load(), now=3.0)
    assert b.work_units == frozenset(units(4))
    assert invariant_violations(state) == []


@pytest.mark.parametrize(
    ("cpus", "n_units", "expected"),
    [
        ({"hot": 0.9, "x": 0.2, "y": 0.2}, 17, {"hot": 1, "x": 8, "y": 8}),
        ({"hot": 0.9, "x": 0.2, "y": 0.2, "z": 0.2}, 100, {"hot": 4, "x": 32, "y": 32, "z": 32}),
        ({"full": 1.0, "idle": 0.0}, 21, {"full": 1, "idle": 20}),
        ({"x": 0.5, "y": 0.5}, 10, {"x": 5, "y": 5}),
    ],
)
def test_capacity_follows_cpu_headroom(
    cpus: dict[str, float], n_units: int, expected: dict[str, int]
) -> None:
    state = initial_state(AssignerConfig(), units(n_units))
    loads = {m: load(cpu) for m, cpu in cpus.items()}
    for member_id, member_load in loads.items():
        state, _ = heartbeat(state, member_id, member_load, now=0.0)
    state, _ = settle(state, 0.1, loads)
    assert counts(state) == expected


def test_hot_member_sheds_when_its_cpu_rises() -> None:
    config = AssignerConfig(rebalance_interval_s=5.0)
    state = initial_state(config, units(30))
    loads = {m: load(0.2) for m in ("a", "b", "c")}
    state, now = settle(state, 0.0, loads)
    assert counts(state) == {"a": 10, "b": 10, "c": 10}
    loads["a"] = load(0.95)
    state, now = settle(state, now + 0.1, loads)  # not due yet: sticky
    assert counts(state) == {"a": 10, "b": 10, "c": 10}
    state, now = settle(state, 5.5, loads)
    assert counts(state)["a"] < 10
    assert sum(counts(state).values()) == 30


def test_speed_from_records_per_s_is_stable() -> None:
    # Two members process the same records/s, one at 80% CPU: it is four times slower.
    state = initial_state(AssignerConfig(), units(50))
    loads = {
        "slow": load(0.8, records_per_s=100.0),
        "fast": load(0.2, records_per_s=100.0),
    }
    state, _ = settle(state, 0.0, loads)
    assert counts(state) == {"fast": 40, "slow": 10}
    # They now report what that assignment costs them (CPU follows the load). Both sit at
    # 32%: a rule on headroom alone would now split 25/25; their speeds did not change.
    state, _ = heartbeat(state, "slow", load(0.32, records_per_s=40.0), now=1.0)
    state, _ = heartbeat(state, "fast", load(0.32, records_per_s=160.0), now=1.0)
    before = dict(state.owners)
    state = rebalance(state)
    assert dict(state.owners) == before and state.pending == {}


def test_lightly_loaded_members_are_balanced_by_weight() -> None:
    """Two members at 2-3% CPU (handlers waiting on I/O), one holding every busy unit
    (as a run on the real fleet left them): their own records/s per CPU made each one's
    capacity its current load, and the skew stayed; below min_measured_cpu they are
    taken as alike and the weight is shared."""
    config = AssignerConfig(rebalance_interval_s=1.0)
    busy, light = units(6, topic="sp.s.bulk.e1"), units(6, topic="sp.s.realtime.e1")

    def weight(u: WorkUnit) -> float:
        return 45.0 if u in busy else 5.0

    def reported(state: GroupState, member: str, cpu: float) -> MemberLoad:
        mine = {u: weight(u) for u in state.members[member].units}
        return load(cpu, throughput=mine, records_per_s=sum(mine.values()))

    cpus = {"a": 0.03, "b": 0.02}
    claims = {"a": (load(0.03), busy), "b": (load(0.02), light)}
    state = restore(config, [*busy, *light], claims, now=0.0)
    assert {m: set(s.units) for m, s in state.members.items()} == {
        "a": set(busy),
        "b": set(light),
    }
    now = 0.0
    for _ in range(3):  # passes, each with the loads the last one left
        loads = {m: reported(state, m, cpu) for m, cpu in cpus.items()}
        state, now = settle(state, now + 1.5, loads)
    carried = {m: sum(map(weight, s.units)) for m, s in state.members.items()}
    assert carried["a"] == pytest.approx(150.0, rel=0.2), carried
    assert carried["b"] == pytest.approx(150.0, rel=0.2), carried


def test_saturated_members_do_not_trade_units_on_cpu_noise() -> None:
    """Three members reading a backlog flat out on a shared host: each gets the
    scheduler's share of CPU, a little different at each pass. R / c made the one with
    the larger share look overloaded, and every pass moved units between members that
    were all saturated (a fleet run: a generation every ~10 s)."""
    config = AssignerConfig(rebalance_interval_s=1.0)
    claims = {m: (load(0.5), units(4, topic=f"sp.s.{m}.e1")) for m in ("a", "b", "c")}
    state = restore(config, [u for _, us in claims.values() for u in us], claims, now=0.0)
    generation = state.generation
    rng = random.Random(7)
    now = 0.0
    for _ in range(20):  # passes, each with another draw of the CPU shares
        loads = {}
        for m, member in state.members.items():
            rate = rng.uniform(280.0, 320.0)
            mine = {u: rate / len(member.units) for u in member.units}
            cpu = rng.uniform(0.35, 0.65)
            loads[m] = load(cpu, throughput=mine, records_per_s=rate, backlog=100_000)
        state, now = settle(state, now + 1.5, loads)
    assert state.generation == generation
    assert counts(state) == {"a": 4, "b": 4, "c": 4}


def test_saturated_member_sheds_to_a_member_with_room() -> None:
    config = AssignerConfig(rebalance_interval_s=1.0)
    behind, caught_up = units(6, topic="sp.s.bulk.e1"), units(6, topic="sp.s.realtime.e1")
    claims = {"a": (load(0.9), behind), "b": (load(0.1), caught_up)}
    state = restore(config, [*behind, *caught_up], claims, now=0.0)
    loads = {
        "a": load(0.9, throughput={u: 100.0 for u in behind}, records_per_s=600.0, backlog=50_000),
        "b": load(0.1, throughput={u: 10.0 for u in caught_up}, records_per_s=60.0),
    }
    state, _ = settle(state, 1.5, loads)
    # b reads 600 records/s per CPU as a does; it has room for half of the 660.
    assert set(state.members["b"].units) > set(caught_up)
    assert 2 <= len(set(state.members["b"].units) & set(behind)) <= 4


def test_weights_come_from_measured_throughput() -> None:
    hot, *cold = units(9)
    throughput = {hot: 800.0} | {u: 100.0 for u in cold}  # 1600 records/s in all
    state = initial_state(AssignerConfig(), [hot, *cold])
    state, _ = heartbeat(state, "a", load(throughput=throughput), now=0.0)
    state, _ = heartbeat(state, "b", load(), now=0.0)
    state, _ = settle(state, 0.1, {"a": load(throughput=throughput), "b": load()})
    holder_of_hot = state.owners[hot]
    assert len(state.members[holder_of_hot].units) == 1  # the hot unit alone is half
    assert counts(state) == {"a": 1, "b": 8} or counts(state) == {"a": 8, "b": 1}


def test_unmeasured_units_weigh_the_median() -> None:
    measured = units(4)
    unmeasured = units(4, topic="sp.other.bulk.e1")
    throughput = dict(zip(measured, [10.0, 10.0, 30.0, 30.0], strict=True))
    state = initial_state(AssignerConfig(imbalance_tolerance=0.0), measured + unmeasured)
    state, _ = heartbeat(state, "a", load(throughput=throughput), now=0.0)
    state, _ = heartbeat(state, "b", load(), now=0.0)
    state, _ = settle(state, 0.1, {"a": load(throughput=throughput), "b": load()})

    # Total 80 + 4 * 20 (the median) = 160: each member carries 80.
    def weight(u: WorkUnit) -> float:
        return throughput.get(u, 20.0)

    for member in state.members.values():
        assert sum(weight(u) for u in member.units) == pytest.approx(80.0)


def test_steady_heartbeats_move_nothing() -> None:
    config = AssignerConfig(rebalance_interval_s=1.0)
    state = initial_state(config, units(40))
    loads = {m: load(0.3) for m in ("a", "b", "c")}
    state, now = settle(state, 0.0, loads)
    owners, generation = dict(state.owners), state.generation
    for step in range(1, 60):  # 6 s: several load-driven checks come and go
        for member_id in sorted(loads):
            state, answer = heartbeat(state, member_id, loads[member_id], now + 0.1 * step)
            assert answer.release == frozenset()
            assert answer.generation == generation
    assert dict(state.owners) == owners
    assert state.generation == generation
    assert rebalance(state).owners == state.owners


def test_within_tolerance_nothing_moves() -> None:
    config = AssignerConfig(imbalance_tolerance=0.2)
    state = initial_state(config, units(10))
    state, _ = settle(state, 0.0, {"a": load(0.2), "b": load(0.2)})
    assert counts(state) == {"a": 5, "b": 5}
    # b's headroom shrinks a little: the targets move to 5.33 / 4.67, inside 20%.
    state = heartbeat(state, "b", load(0.3), now=1.0)[0]
    assert rebalance(state).pending == {}


def test_generation_increases_on_change_only() -> None:
    state = initial_state(AssignerConfig(), units(4))
    assert state.generation == 0
    state, a = heartbeat(state, "a", load(), now=0.0)
    assert a.generation == 1
    state, a = heartbeat(state, "a", load(), now=0.5)
    assert a.generation == 1  # nothing changed
    state, b = heartbeat(state, "b", load(), now=0.6)
    assert b.generation == 2  # a was asked to release two units
    state, b = heartbeat(state, "b", load(), now=0.7)
    assert b.generation == 2
    state, a = heartbeat(state, "a", load(), now=0.8, released=assignment_of(state, "a").release)
    assert a.generation == 3  # b has them now
    state, a = heartbeat(state, "a", load(), now=0.9, released=[WorkUnit("elsewhere", 0, "x")])
    assert a.generation == 3  # releasing a unit one does not hold is ignored
    assert set_work_units(state, units(4)).generation == 3
    assert leave(state, "nobody") is state
    state = set_work_units(state, units(6))
    assert state.generation == 4


def test_leave_hands_units_over_at_once() -> None:
    state = initial_state(AssignerConfig(), units(6))
    state, _ = settle(state, 0.0, {"a": load(), "b": load(), "c": load()})
    gen = state.generation
    state = leave(state, "c")
    assert "c" not in state.members
    assert counts(state) == {"a": 3, "b": 3}
    assert state.pending == {}
    assert state.generation > gen
    assert invariant_violations(state) == []


def test_leave_of_a_pending_target_keeps_the_unit_where_it_is() -> None:
    state = initial_state(AssignerConfig(), units(4))
    state, _ = heartbeat(state, "a", load(), now=0.0)
    state, _ = heartbeat(state, "b", load(), now=0.0)
    state, a = heartbeat(state, "a", load(), now=0.1)
    assert len(a.release) == 2
    state = leave(state, "b")
    assert state.pending == {}
    assert assignment_of(state, "a").work_units == frozenset(units(4))


def test_last_member_leaving_frees_everything() -> None:
    state = initial_state(AssignerConfig(), units(3))
    state, _ = heartbeat(state, "a", load(), now=0.0)
    state = leave(state, "a")
    assert state.members == {} and state.owners == {} and state.pending == {}
    state, a = heartbeat(state, "b", load(), now=0.5)
    assert a.work_units == frozenset(units(3))


def test_new_units_are_placed_and_removed_units_asked_back() -> None:
    state = initial_state(AssignerConfig(), units(4))
    state, _ = settle(state, 0.0, {"a": load(), "b": load()})
    removed = sorted(state.members["a"].units)[0]
    added = WorkUnit("sp.logs.realtime.e2", 0, "local-b")
    state = set_work_units(state, [u for u in units(4) if u != removed] + [added])
    assert added in state.owners
    assert state.pending[removed].target is None
    a = assignment_of(state, "a")
    assert removed in a.release and removed not in a.work_units
    state, a = heartbeat(state, "a", load(), now=0.5, released=a.release)
    assert removed not in state.owners and removed not in state.pending
    assert invariant_violations(state) == []


def test_readding_a_unit_before_its_release_gives_no_second_owner() -> None:
    state = initial_state(AssignerConfig(), units(2))
    state, _ = settle(state, 0.0, {"a": load(), "b": load()})
    unit = sorted(state.members["a"].units)[0]
    state = set_work_units(state, [u for u in units(2) if u != unit])
    state = set_work_units(state, units(2))
    # a was told nothing yet and keeps the unit; nobody else got it in between.
    assert state.owners[unit] == "a"
    assert unit in assignment_of(state, "a").work_units
    assert invariant_violations(state) == []


def test_voluntary_release_frees_the_unit_and_balance_places_it() -> None:
    state = initial_state(AssignerConfig(), units(4))
    state, _ = settle(state, 0.0, {"a": load(), "b": load()})
    generation = state.generation
    unit = sorted(state.members["a"].units)[0]
    # a hands back a unit nobody asked for; a, now the lightest, is the best place for it.
    # (A member that wants less work reports its CPU; one that stops calls leave.)
    state, a = heartbeat(state, "a", load(), now=0.5, released=[unit])
    assert state.owners[unit] == "a" and unit in a.work_units
    assert state.generation == generation  # in the end, nobody's work changed
    state = leave(state, "a")
    assert state.owners[unit] == "b"


def test_joining_member_takes_few_units() -> None:
    state = initial_state(AssignerConfig(), units(200))
    loads = {f"m{i}": load() for i in range(10)}
    state, now = settle(state, 0.0, loads)
    before = dict(state.owners)
    loads["m10"] = load()
    state, _ = settle(state, now + 0.1, loads)
    moved = sum(1 for u, m in state.owners.items() if before.get(u) != m)
    assert moved == len(state.members["m10"].units) == 18  # 200 / 11, no other movement


@pytest.mark.parametrize("sigma", [0.3, 0.8])
def test_joining_member_takes_its_share_of_skewed_units(
    sigma: float,
) -> None:
    rng = random.Random(5)
    all_units = units(300)
    throughput = {u: round(rng.lognormvariate(3.0, sigma), 1) for u in all_units}
    state = initial_state(AssignerConfig(), all_units)
    # One member measured every unit once; the state remembers the figures.
    loads = {"m00": load(throughput=throughput)} | {f"m{i:02d}": load() for i in range(1, 10)}
    state, now = settle(state, 0.0, loads)
    before = dict(state.owners)
    loads["new"] = load()
    state, _ = settle(state, now + 0.1, loads)
    moved = {u: m for u, m in state.owners.items() if before[u] != m}
    # Almost all to the newcomer (rounding it off may send one of the units on their way
    # to it elsewhere instead), about its share of the weight, with few units.
    assert sum(1 for m in moved.values() if m != "new") <= 2
    share = sum(throughput[u] for u, m in moved.items() if m == "new") / sum(throughput.values())
    assert 0.9 / 11 <= share <= 1.1 / 11
    assert len(moved) < 300 / 11


def test_heartbeat_answer_is_what_assignment_of_says() -> None:
    state = initial_state(AssignerConfig(), units(5))
    state, a = heartbeat(state, "a", load(), now=3.0)
    assert assignment_of(state, "a") == replace(a, joined=False)  # the answer's own flag
    state, a = heartbeat(state, "a", load(), now=4.0)
    assert assignment_of(state, "a") == a
    with pytest.raises(ConfigError):
        assignment_of(state, "nobody")


def test_lease_never_shrinks_when_time_goes_backwards() -> None:
    state = initial_state(AssignerConfig(lease_ttl_s=2.0), units(1))
    state, a = heartbeat(state, "a", load(), now=10.0)
    state, a = heartbeat(state, "a", load(), now=9.0)
    assert a.lease_expiry == 12.0


@pytest.mark.parametrize(
    "make",
    [
        lambda: AssignerConfig(lease_ttl_s=0),
        lambda: AssignerConfig(lease_ttl_s=float("nan")),
        lambda: AssignerConfig(imbalance_tolerance=-0.1),
        lambda: AssignerConfig(imbalance_tolerance=1.0),
        lambda: AssignerConfig(min_capacity=0),
        lambda: AssignerConfig(min_capacity=1.5),
        lambda: AssignerConfig(rebalance_interval_s=0),
        lambda: MemberLoad(cpu=1.2),
        lambda: MemberLoad(cpu=-0.1),
        lambda: MemberLoad(cpu=float("nan")),
        lambda: MemberLoad(records_per_s=-1),
        lambda: UnitLoad(throughput=-1),
        lambda: UnitLoad(throughput=float("inf")),
        lambda: UnitLoad(backlog=-1),
        lambda: WorkUnit("", 0, "c"),
        lambda: WorkUnit("t", -1, "c"),
        lambda: WorkUnit("t", 0, ""),
        lambda: heartbeat(initial_state(), "", MemberLoad(), 0.0),
        lambda: heartbeat(initial_state(), "a", MemberLoad(), float("nan")),
        lambda: expire(initial_state(), float("inf")),
    ],
)
def test_bad_input_is_a_config_error(make: Callable[[], object]) -> None:
    with pytest.raises(ConfigError):
        make()


def test_member_load_keeps_its_own_copy() -> None:
    unit = units(1)[0]
    mutable = {unit: UnitLoad(5.0)}
    member_load = MemberLoad(units=mutable)
    mutable.clear()
    assert member_load.units == {unit: UnitLoad(5.0)}


def test_work_units_sort_by_topic_partition_cluster() -> None:
    a, b, c = WorkUnit("a", 2, "z"), WorkUnit("a", 10, "a"), WorkUnit("b", 0, "a")
    assert sorted([c, b, a]) == [a, b, c]
    assert len({a, WorkUnit("a", 2, "z")}) == 1


# -- determinism ---------------------------------------------------------------------

_SCENARIO = """
import json
from streamplane.core.assignment import *
us = [WorkUnit(f"t{t}", p, "c") for t in range(3) for p in range(20)]
tp = {u: float((u.partition * 7 + len(u.topic)) % 11) for u in us}
s = initial_state(AssignerConfig(seed=3), us)
now = 0.0
for step in range(40):
    m = f"m{step % 5}"
    held = s.members[m].units if m in s.members else frozenset()
    ld = MemberLoad(cpu=(step % 4) / 4, units={u: UnitLoad(tp[u]) for u in held})
    rel = s.members[m].releasing if m in s.members else ()
    s, _ = heartbeat(s, m, ld, now, released=rel)
    now += 0.3
print(json.dumps(sorted([str(u), m] for u, m in s.owners.items()) + [s.generation]))
"""


def run_scenario(state_seed: str) -> object:
    env = dict(os.environ, PYTHONHASHSEED=state_seed)
    out = subprocess.run(
        [sys.executable, "-c", _SCENARIO], env=env, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout)


def test_same_input_same_output_whatever_the_hash_seed() -> None:
    assert run_scenario("1") == run_scenario("2")


def test_seed_breaks_ties_differently() -> None:
    def owners(seed: int) -> dict[WorkUnit, str]:
        # "b" joins first and takes the only unit; when it leaves, c, d and e tie.
        state = initial_state(AssignerConfig(seed=seed), units(1))
        for member_id in ("b", "c", "d", "e"):
            state = heartbeat(state, member_id, load(), now=0.0)[0]
        state = leave(state, "b")
        return dict(state.owners)

    assert owners(1) == owners(1)
    assert len({tuple(owners(seed).values()) for seed in range(8)}) > 1


# -- properties over random histories -------------------------------------------------

MEMBERS = ("m0", "m1", "m2", "m3")
UNIVERSE = units(6) + units(4, topic="sp.logs.bulk.e1", cluster="local-b")
STEPS = (0.0, 0.25, 0.5, 1.0, 2.0, 2.5)  # exact in binary; 2.0 is the lease itself


class AssignerMachine(RuleBasedStateMachine):
    """Members that follow the protocol, against the Assigner."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.state = initial_state()
        self.throughput: dict[WorkUnit, float] = {}
        # What each member believes: the last answer's units and lease expiry.
        self.belief: dict[str, tuple[frozenset[WorkUnit], float]] = {}
        self.asked: dict[str, frozenset[WorkUnit]] = {}
        # Per member, the units it was asked back and still holds: since when at the
        # latest they were asked (its previous answered heartbeat, as the consumer
        # counts), so the unit is its own until release_timeout_s after that.
        self.releasing_since: dict[str, dict[WorkUnit, float]] = {}
        self.last_beat: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    @initialize(
        throughput=st.lists(st.sampled_from([0.0, 1.0, 5.0, 50.0]), min_size=10, max_size=10),
        initial=st.sets(st.sampled_from(UNIVERSE)),
        tolerance=st.sampled_from([0.0, 0.1, 0.3]),
    )
    def start(self, throughput: list[float], initial: set[WorkUnit], tolerance: float) -> None:
        self.throughput = dict(zip(UNIVERSE, throughput, strict=True))
        config = AssignerConfig(imbalance_tolerance=tolerance, rebalance_interval_s=1.0)
        self.state = initial_state(config, initial)

    def apply(self, new_state: GroupState) -> None:
        old = self.state
        assert invariant_violations(new_state) == []
        assert new_state.generation >= old.generation
        changed = active(new_state) != active(old)
        assert (new_state.generation > old.generation) == changed
        self.state = new_state

    def member_load(self, member_id: str) -> MemberLoad:
        believed = self.belief.get(member_id, (frozenset(), 0.0))[0]
        return MemberLoad(
            cpu=self.cpu.get(member_id, 0.2),
            units={u: UnitLoad(self.throughput[u]) for u in believed},
        )

    @rule(
        member_id=st.sampled_from(MEMBERS),
        dt=st.sampled_from(STEPS),
        cpu=st.sampled_from([None, 0.0, 0.2, 0.9, 1.0]),
        ack=st.sampled_from(["all", "none", "one"]),
        drop=st.booleans(),
        junk=st.booleans(),
    )
    def beat(
        self,
        member_id: str,
        dt: float,
        cpu: float | None,
        ack: str,
        drop: bool,
        junk: bool,
    ) -> None:
        self.now += dt
        if cpu is not None:
            self.cpu[member_id] = cpu
        asked = sorted(self.asked.get(member_id, frozenset()))
        released = {"all": asked, "none": [], "one": asked[:1]}[ack]
        believed, expiry = self.belief.get(member_id, (frozenset(), 0.0))
        if drop and believed:
            dropped = min(believed)
            released.append(dropped)  # stops it first, then hands it back
            self.belief[member_id] = (believed - {dropped}, expiry)
        if junk:
            released.append(WorkUnit("never.assigned", 0, "nowhere"))
        new_state, answer = heartbeat(
            self.state, member_id, self.member_load(member_id), self.now, released=released
        )
        assert answer.lease_expiry >= self.now + new_state.config.lease_ttl_s
        assert answer.work_units.isdisjoint(answer.release)
        assert answer.work_units <= new_state.work_units
        self.apply(new_state)
        self.belief[member_id] = (answer.work_units, answer.lease_expiry)
        self.asked[member_id] = answer.release
        # No unit reaches a member while a live holder asked for it has not handed it
        # back and its release time (counted from before it was asked) is not over.
        timeout = new_state.config.release_timeout_s
        for other, since in self.releasing_since.items():
            if other == member_id or other not in new_state.members:
                continue
            for unit in answer.work_units & since.keys():
                assert self.now >= since[unit] + timeout, (unit, other, since[unit])
        before = self.last_beat.get(member_id, self.now)
        mine = self.releasing_since.get(member_id, {})
        self.releasing_since[member_id] = {
            u: mine.get(u, before) for u in answer.release if u not in released
        }
        self.last_beat[member_id] = self.now

    @rule(dt=st.sampled_from(STEPS))
    def tick(self, dt: float) -> None:
        self.now += dt
        self.apply(expire(self.state, self.now))

    @rule(member_id=st.sampled_from(MEMBERS))
    def depart(self, member_id: str) -> None:
        # A member leaving has stopped: it believes nothing any more.
        self.belief.pop(member_id, None)
        self.asked.pop(member_id, None)
        self.releasing_since.pop(member_id, None)
        self.last_beat.pop(member_id, None)
        self.apply(leave(self.state, member_id))

    @rule(new_units=st.sets(st.sampled_from(UNIVERSE)))
    def reroute(self, new_units: set[WorkUnit]) -> None:
        self.apply(set_work_units(self.state, new_units))

    @rule()
    def balance_now(self) -> None:
        self.apply(rebalance(self.state))

    @precondition(lambda self: bool(self.state.members))
    @rule()
    def settle_then_check(self) -> None:
        """Live members heartbeat and release as asked: everything ends owned once."""
        live = sorted(self.state.members)
        self.settle_only(live)  # rounds of 0.125 s: well within the lease, nobody expires
        state = self.state
        assert sorted(state.members) == live
        owned = [u for m in state.members.values() for u in m.active]
        assert sorted(owned) == sorted(state.work_units)  # each unit exactly once
        # Balancing twice over the same loads: the second pass moves nothing.
        self.apply(rebalance(self.state))
        self.settle_only(live)
        again = rebalance(self.state)
        assert again.pending == {} and dict(again.owners) == dict(self.state.owners)

    def settle_only(self, live: list[str]) -> None:
        """Rounds of heartbeats, releasing as asked, until nothing is pending and every
        member has reported the units it holds now."""
        for _ in range(20):
            members = self.state.members.values()
            if not self.state.pending and all(m.load.units.keys() == m.active for m in members):
                return
            for member_id in live:
                self.beat(member_id, 0.0, None, "all", False, False)
            self.now += 0.125
        raise AssertionError(f"never settled: {self.state.pending}")

    @invariant()
    def single_live_lease(self) -> None:
        for unit in UNIVERSE:
            believers = [
                m for m, (held, expiry) in self.belief.items() if unit in held and expiry > self.now
            ]
            assert len(believers) <= 1, (unit, believers)
            if believers:
                # The Assigner agrees: the believer is still the unit's holder.
                assert self.state.owners.get(unit) == believers[0]


AssignerMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestAssignerProperties = AssignerMachine.TestCase


def test_restore_from_claims_keeps_owners_and_places_the_rest() -> None:
    from streamplane.core.assignment import assignment_of, invariant_violations, restore

    all_units = units(6)
    claims = {
        "b": (MemberLoad(cpu=0.2), [all_units[0], all_units[1]]),
        "a": (MemberLoad(cpu=0.2), [all_units[1], all_units[2]]),  # unit 1 claimed twice
        "c": (MemberLoad(cpu=0.2), [WorkUnit("gone", 0, "x")]),  # not in the routing
    }
    state = restore(AssignerConfig(lease_ttl_s=2.0), all_units, claims, now=10.0)
    assert invariant_violations(state) == []
    assert state.owners[all_units[1]] == "a"  # first claimer in member-id order
    assert state.owners[all_units[0]] == "b"
    assert state.owners[all_units[2]] == "a"
    assert set(state.owners) == set(all_units)  # unclaimed units were placed
    assert WorkUnit("gone", 0, "x") not in state.owners
    assert all_units[1] not in assignment_of(state, "b").work_units
