"""The Assigner service (adapter over core.assignment) and its HTTP API."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from streamplane.controlplane.app import ControlPlaneSettings, create_app
from streamplane.controlplane.assigner import AssignerService, HeartbeatAnswer
from streamplane.controlplane.service import ControlPlaneService
from streamplane.core.assignment import AssignerConfig, MemberLoad, WorkUnit
from streamplane.core.routing import RoutingTable, move_lanes, new_routing_table
from streamplane.exceptions import ConfigError

from .conftest import AUTH


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def service(table: list[RoutingTable], clock: Clock, recovery_s: float = 0.0) -> AssignerService:
    return AssignerService(
        lambda _s: table[0], AssignerConfig(lease_ttl_s=1.5), clock=clock, recovery_s=recovery_s
    )


def test_members_share_units_and_a_dead_member_loses_them_at_lease_expiry() -> None:
    clock = Clock()
    table = [new_routing_table("s", ["realtime"], "local-a", 6)]
    svc = service(table, clock)
    a = svc.heartbeat("g", "s", ["realtime"], "a", MemberLoad())
    assert len(a.work_units) == 6 and a.lease_s == 1.5
    b = svc.heartbeat("g", "s", ["realtime"], "b", MemberLoad())
    a = svc.heartbeat("g", "s", ["realtime"], "a", MemberLoad(), released=a.work_units)
    b = svc.heartbeat("g", "s", ["realtime"], "b", MemberLoad())
    assert len(a.work_units) + len(b.work_units) == 6 and a.work_units.isdisjoint(b.work_units)
    # b stops heartbeating: at its lease expiry a's next heartbeat gets everything.
    clock.now += 1.0
    a = svc.heartbeat("g", "s", ["realtime"], "a", MemberLoad())
    assert len(a.work_units) < 6
    clock.now += 0.6
    a = svc.heartbeat("g", "s", ["realtime"], "a", MemberLoad())
    assert len(a.work_units) == 6


def test_routing_change_adds_units() -> None:
    clock = Clock()
    table = [new_routing_table("s", ["realtime"], "local-a", 2)]
    svc = service(table, clock)
    svc.heartbeat("g", "s", ["realtime"], "a", MemberLoad())
    table[0] = move_lanes(table[0], ["realtime"], "local-b", partitions=3)
    a = svc.heartbeat("g", "s", ["realtime"], "a", MemberLoad())
    assert {u.cluster for u in a.work_units} == {"local-a", "local-b"}
    assert len(a.work_units) == 5  # the draining segment's 2 + the new one's 3


def test_recovery_window_answers_claims_then_rebuilds_from_them() -> None:
    clock = Clock()
    table = [new_routing_table("s", ["realtime"], "local-a", 4)]
    svc = service(table, clock, recovery_s=2.0)
    units = sorted(
        (WorkUnit("sp.s.realtime.e1", p, "local-a") for p in range(4)), key=lambda u: u.partition
    )
    a = svc.heartbeat("g", "s", ["realtime"], "a", MemberLoad(), claims=units[:2])
    assert a.work_units == frozenset(units[:2]) and a.generation == 0
    b = svc.heartbeat("g", "s", ["realtime"], "b", MemberLoad(), claims=units[2:3])
    assert b.work_units == frozenset(units[2:3])
    clock.now += 2.5
    a = svc.heartbeat("g", "s", ["realtime"], "a", MemberLoad(), claims=units[:2])
    b = svc.heartbeat("g", "s", ["realtime"], "b", MemberLoad(), claims=units[2:3])
    assert frozenset(units[:2]) <= a.work_units | a.release
    assert units[2] in b.work_units
    assert a.work_units.isdisjoint(b.work_units)
    assert a.work_units | b.work_units | a.release | b.release == frozenset(units)


def test_busy_member_gets_fewer_units() -> None:
    clock = Clock()
    table = [new_routing_table("s", ["realtime"], "local-a", 12)]
    svc = service(table, clock)
    loads = {
        "hot": MemberLoad(cpu=0.9),
        "cool-1": MemberLoad(cpu=0.2),
        "cool-2": MemberLoad(cpu=0.2),
    }
    answers: dict[str, HeartbeatAnswer] = {}
    for _ in range(6):  # a few rounds: releases are acknowledged, units move
        for m, load in loads.items():
            prev = answers.get(m)
            answers[m] = svc.heartbeat(
                "g", "s", ["realtime"], m, load, released=prev.release if prev else ()
            )
        clock.now += 0.3
    counts = {m: len(a.work_units) for m, a in answers.items()}
    assert sum(counts.values()) == 12
    assert counts["hot"] < counts["cool-1"] and counts["hot"] < counts["cool-2"]


def test_http_heartbeat_needs_a_token_and_answers(http: TestClient) -> None:
    assert (
        http.post(
            "/v1/streams",
            json={"name": "orders", "cluster": "local-a", "partitions": 3},
            headers=AUTH,
        ).status_code
        == 201
    )
    body = {"member_id": "m1", "stream": "orders", "lanes": ["realtime", "bulk"], "cpu": 0.3}
    assert http.post("/v1/groups/g/heartbeat", json=body).status_code == 401
    resp = http.post("/v1/groups/g/heartbeat", json=body, headers=AUTH)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["lease_s"] > 0
    described = http.get("/v1/groups/g/members").json()
    assert described["stream"] == "orders"
    assert http.get("/v1/groups/nope/members").status_code == 404
    bad = {**body, "stream": "other"}  # while m1 holds a lease on orders
    assert http.post("/v1/groups/g/heartbeat", json=bad, headers=AUTH).status_code == 400
    assert http.delete("/v1/groups/g/members/m1", headers=AUTH).status_code == 204


def test_a_group_name_is_free_again_once_its_members_are_gone() -> None:
    clock = Clock()
    tables = {
        "s": new_routing_table("s", ["realtime"], "local-a", 2),
        "t": new_routing_table("t", ["realtime"], "local-a", 3),
    }
    svc = AssignerService(
        tables.__getitem__, AssignerConfig(lease_ttl_s=1.5), clock=clock, recovery_s=0.0
    )
    svc.heartbeat("g", "s", ["realtime"], "a", MemberLoad())
    # a still holds a lease on s: the group cannot move to another stream
    with pytest.raises(ConfigError, match="members still live"):
        svc.heartbeat("g", "t", ["realtime"], "b", MemberLoad())
    svc.leave("g", "a")
    b = svc.heartbeat("g", "t", ["realtime"], "b", MemberLoad())
    assert {u.topic for u in b.work_units} == {"sp.t.realtime.e1"}
    assert len(b.work_units) == 3
    # the same once a member's lease ran out without a leave
    clock.now += 1.6
    c = svc.heartbeat("g", "s", ["realtime"], "c", MemberLoad())
    assert {u.topic for u in c.work_units} == {"sp.s.realtime.e1"}


def test_only_the_leader_answers_and_a_new_leader_starts_from_the_claims(
    http: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two replicas each answered the members that reached them: each member was given
    every unit and every record was handled twice. A follower now answers 503; a
    replica that becomes the leader forgets what it knew (stale) and rebuilds each
    group from its members' claims, as a restarted one does."""
    from streamplane.controlplane.failover_runtime import FailoverRuntime

    leading = [True]
    monkeypatch.setattr(FailoverRuntime, "is_leader", property(lambda self: leading[0]))
    create_stream = http.post(
        "/v1/streams", json={"name": "orders", "cluster": "local-a", "partitions": 4}, headers=AUTH
    )
    assert create_stream.status_code == 201
    body = {"member_id": "m1", "stream": "orders", "lanes": ["realtime"], "cpu": 0.3}
    first = http.post("/v1/groups/g/heartbeat", json=body, headers=AUTH)
    assert first.status_code == 200
    leading[0] = False
    for resp in (
        http.post("/v1/groups/g/heartbeat", json=body, headers=AUTH),
        http.get("/v1/groups/g/members"),
        http.delete("/v1/groups/g/members/m1", headers=AUTH),
    ):
        assert resp.status_code == 503, resp.text
        assert "follower" in resp.json()["detail"] and resp.headers["Retry-After"] == "1"
    leading[0] = True
    claims = first.json()["work_units"][:1]
    again = http.post("/v1/groups/g/heartbeat", json={**body, "claims": claims}, headers=AUTH)
    assert again.status_code == 200
    # In its recovery window: exactly what the member claims, generation 0.
    assert again.json()["work_units"] == claims and again.json()["generation"] == 0


class Promotable:
    """A replica's leadership, a follower until ``promote()``."""

    def __init__(self) -> None:
        self.is_leader = False
        self._listeners: list[Callable[[bool], None]] = []

    def add_listener(self, listener: Callable[[bool], None]) -> None:
        self._listeners.append(listener)
        listener(self.is_leader)

    def promote(self) -> None:
        self.is_leader = True
        for listener in self._listeners:
            listener(True)

    def start(self) -> None: ...

    def stop(self) -> None: ...


def test_a_follower_promoted_later_starts_from_the_claims(
    settings: ControlPlaneSettings, service: ControlPlaneService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower never answers a group request (they are forwarded to the leader before
    they reach its Assigner), so only the leadership can tell its Assigner that it was
    not the leader. A follower promoted long after its start took itself for the leader
    it had been since start: no recovery window, and the first member to heartbeat was
    given every unit while the others still held theirs (an exploratory run: a live
    member lost 4 units 1.4 s after a takeover, 126 records handled twice)."""
    import streamplane.controlplane.failover_runtime as failover_runtime

    leadership = Promotable()
    monkeypatch.setattr(failover_runtime, "leadership_for", lambda *a, **k: leadership)
    app = create_app(settings, service)
    with TestClient(app) as http:
        created = http.post(
            "/v1/streams",
            json={"name": "orders", "cluster": "local-a", "partitions": 4},
            headers=AUTH,
        )
        assert created.status_code == 201
        assigner = app.state.assigner
        assigner._recover_until = 0.0  # its start-up window long over, as a follower
        leadership.promote()
        unit = {"cluster": "local-a", "topic": "sp.orders.realtime.e1", "partition": 0}
        body = {"member_id": "m1", "stream": "orders", "lanes": ["realtime"], "claims": [unit]}
        answer = http.post("/v1/groups/g/heartbeat", json=body, headers=AUTH)
        assert answer.status_code == 200, answer.text
        # In the new leader's recovery window: exactly what the member claims.
        assert answer.json()["work_units"] == [unit] and answer.json()["generation"] == 0


def test_a_paused_control_plane_rebuilds_its_groups_from_the_claims() -> None:
    """The control plane was stopped for 15 s (SIGSTOP, a frozen host) while both
    members kept heartbeating into the void, fail-static with their units. On resume
    every lease read expired: the first member to heartbeat was given every unit and
    the other admitted afresh (an exploratory run: 188 records handled twice). Now a
    gap of more than a lease with no heartbeat answered, while members held leases, is
    taken for a pause of this process: the groups are rebuilt from the members'
    claims after the recovery window, as after a restart, and nothing moves."""
    clock = Clock()
    table = [new_routing_table("s", ["realtime"], "local-a", 4)]
    svc = service(table, clock, recovery_s=2.0)
    clock.now += 2.5  # past the start's recovery window
    svc.tick()  # (the ticker runs every 0.1 s in the control plane)
    a = svc.heartbeat("g", "s", ["realtime"], "a", MemberLoad())
    b = svc.heartbeat("g", "s", ["realtime"], "b", MemberLoad())
    for _ in range(4):  # a releases what b is to hold
        clock.now += 0.3
        svc.tick()
        a = svc.heartbeat("g", "s", ["realtime"], "a", MemberLoad(), released=a.release)
        b = svc.heartbeat("g", "s", ["realtime"], "b", MemberLoad())
    held_a, held_b = a.work_units, b.work_units
    assert held_a and held_b and len(held_a | held_b) == 4

    clock.now += 15.0  # paused: nothing answered, no tick
    a = svc.heartbeat("g", "s", ["realtime"], "a", MemberLoad(), claims=held_a)
    assert a.work_units == held_a and not a.joined  # its claims, not every unit
    b = svc.heartbeat("g", "s", ["realtime"], "b", MemberLoad(), claims=held_b)
    assert b.work_units == held_b
    clock.now += 2.5  # the window is over: rebuilt from the claims, nothing moves
    a = svc.heartbeat("g", "s", ["realtime"], "a", MemberLoad(), claims=held_a)
    b = svc.heartbeat("g", "s", ["realtime"], "b", MemberLoad(), claims=held_b)
    assert a.work_units == held_a and b.work_units == held_b
    assert not a.joined and not b.joined


def test_a_group_whose_members_all_stopped_is_not_taken_for_a_pause() -> None:
    """Every member of a group stopped at once (a redeploy, a test's end) and a new
    member came 5 s later: the process ran all along (its ticker ticked), so the new
    member gets the units at once. (Taken for a pause of the control plane, it waited
    out a recovery window with nothing: an integration test's three members got 0 of 12
    units over 8 heartbeats.)"""
    clock = Clock()
    table = [new_routing_table("s", ["realtime"], "local-a", 4)]
    svc = service(table, clock, recovery_s=2.0)
    clock.now += 2.5
    svc.tick()
    svc.heartbeat("g", "s", ["realtime"], "a", MemberLoad())
    svc.heartbeat("g", "s", ["realtime"], "b", MemberLoad())
    for _ in range(50):  # both stopped; the control plane runs on
        clock.now += 0.1
        svc.tick()
    c = svc.heartbeat("g", "s", ["realtime"], "c", MemberLoad())
    assert len(c.work_units) == 4 and c.generation > 0


def test_the_ticker_runs_in_the_app_and_stops_with_it() -> None:
    svc = AssignerService(lambda _s: new_routing_table("s", ["realtime"], "local-a", 1))
    svc.start(interval_s=0.01)
    try:
        first = svc._last_tick
        assert first is not None
        import time

        deadline = time.monotonic() + 5
        while svc._last_tick == first and time.monotonic() < deadline:
            time.sleep(0.01)
        assert svc._last_tick != first
    finally:
        svc.stop()
    assert svc._ticker is None


def test_a_member_alone_after_the_others_died_is_not_taken_for_a_pause() -> None:
    """The others stopped heartbeating, this one did not: their leases expire as ever."""
    clock = Clock()
    table = [new_routing_table("s", ["realtime"], "local-a", 4)]
    svc = service(table, clock, recovery_s=2.0)
    clock.now += 2.5
    a = svc.heartbeat("g", "s", ["realtime"], "a", MemberLoad())
    svc.heartbeat("g", "s", ["realtime"], "b", MemberLoad())
    for _ in range(10):  # a beats every 0.5 s; b is dead
        clock.now += 0.5
        a = svc.heartbeat("g", "s", ["realtime"], "a", MemberLoad(), released=a.release)
    assert len(a.work_units) == 4
