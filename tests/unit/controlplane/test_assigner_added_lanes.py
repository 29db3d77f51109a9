"""A group whose members read every lane of its stream follows a lane added to the
stream (``AssignerService._follows_added_lanes``): the units of the new lane join the
group's as soon as a member names it, members that have not heard of it yet are
admitted for ``LANE_CATCH_UP_S``, and a member naming other lanes is still refused."""

from __future__ import annotations

import pytest

from streamplane.controlplane.assigner import LANE_CATCH_UP_S, AssignerService
from streamplane.core.assignment import AssignerConfig, MemberLoad
from streamplane.core.routing import RoutingTable, add_lane, new_routing_table
from streamplane.exceptions import ConfigError

OLD = ["realtime", "bulk"]
NEW = ["realtime", "priority", "bulk"]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def assigner(table: list[RoutingTable], clock: Clock) -> AssignerService:
    return AssignerService(
        lambda _s: table[0], AssignerConfig(lease_ttl_s=1.5), clock=clock, recovery_s=0.0
    )


def lanes_of(units: frozenset[object]) -> set[str]:
    return {u.topic.split(".")[2] for u in units}  # type: ignore[attr-defined]


def test_the_first_member_naming_an_added_lane_brings_its_units_to_the_group() -> None:
    clock = Clock()
    table = [new_routing_table("s", OLD, "local-a", 2)]
    svc = assigner(table, clock)
    a = svc.heartbeat("g", "s", OLD, "a", MemberLoad())
    b = svc.heartbeat("g", "s", OLD, "b", MemberLoad())
    assert lanes_of(a.work_units | b.work_units) == {"realtime", "bulk"}

    table[0] = add_lane(table[0], "priority", "local-a", 2, before="bulk")
    # a has seen the new routing; b not yet: both are answered.
    a = svc.heartbeat("g", "s", NEW, "a", MemberLoad(), released=a.work_units)
    b = svc.heartbeat("g", "s", OLD, "b", MemberLoad())
    a = svc.heartbeat("g", "s", NEW, "a", MemberLoad())
    assert svc.describe("g")["lanes"] == NEW
    assert svc.describe("g")["units"] == 6
    held = a.work_units | b.work_units
    assert lanes_of(held) == {"realtime", "priority", "bulk"} and len(held) == 6

    # Past the catch-up time, a member still naming the lanes before is refused (it
    # would hold units of the new lane without reading them).
    clock.now += LANE_CATCH_UP_S
    svc.heartbeat("g", "s", NEW, "a", MemberLoad())
    with pytest.raises(ConfigError, match="consumes stream 's' lanes"):
        svc.heartbeat("g", "s", OLD, "b", MemberLoad())


def test_a_member_naming_a_chosen_few_lanes_is_still_refused() -> None:
    clock = Clock()
    table = [add_lane(new_routing_table("s", OLD, "local-a", 2), "priority", "local-a", 2)]
    svc = assigner(table, clock)
    svc.heartbeat("g", "s", ["realtime"], "a", MemberLoad())
    with pytest.raises(ConfigError, match="consumes stream 's' lanes"):
        svc.heartbeat("g", "s", ["realtime", "bulk", "priority"], "b", MemberLoad())
    svc.heartbeat("h", "s", ["realtime", "bulk", "priority"], "a", MemberLoad())
    with pytest.raises(ConfigError, match="consumes stream 's' lanes"):
        svc.heartbeat("h", "s", ["realtime", "priority"], "b", MemberLoad())
