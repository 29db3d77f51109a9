"""The Assigner as a control-plane service: groups, heartbeats, leases.

The decisions are the pure ``core.assignment``; this adapter keeps one ``GroupState``
per group in memory, derives each group's work units from its stream's routing table
(every partition of every readable segment of the group's lanes), and runs the clock.
A group whose members read all of its stream's lanes follows a lane added to the
stream: the first member naming it brings its units into the group, and members that
have not heard of it yet are admitted meanwhile (``_follows_added_lanes``).

State is in memory on purpose: a restarted control plane (or a replica that has just
become the leader: only the leader's Assigner answers) rebuilds it from the members
themselves. For ``recovery_s`` after start (a little more than a lease), heartbeats are
answered with exactly the units each member claims to hold, so nothing moves while the
Assigner cannot yet know who holds what; then the state is rebuilt from those claims
(``core.assignment.restore``) and normal balancing resumes. ``describe`` shows a group
in its window as the Assigner knows it: the members heard so far with the units each
claims, the group's units no member claims, and when the window ends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from streamplane.core import assignment as core
from streamplane.core.assignment import AssignerConfig, MemberLoad, WorkUnit
from streamplane.core.routing import RoutingTable, is_lanes_as_of_an_epoch
from streamplane.exceptions import ConfigError, NotFound


@dataclass(frozen=True)
class HeartbeatAnswer:
    work_units: frozenset[WorkUnit]
    release: frozenset[WorkUnit]
    lease_s: float  # the lease runs for this long from the answer
    generation: int
    joined: bool = False  # the member was admitted (new, or its lease had expired)


@dataclass(frozen=True)
class _Claim:
    """What a member said in a heartbeat during the recovery window."""

    load: MemberLoad
    units: frozenset[WorkUnit]
    heard_at: float  # when (the Assigner's clock): its answer's lease ran from then


# How long after a group took on lanes added to its stream (``_follows_added_lanes``) a
# member still naming the lanes before may heartbeat: its routing watch has not told it
# yet (about a second). Past it, a member naming fewer lanes is refused as one naming
# other lanes is: it would hold units of the new lanes without reading them.
LANE_CATCH_UP_S = 15.0


@dataclass
class _Group:
    stream: str
    lanes: tuple[str, ...]
    epoch: int = -1
    state: core.GroupState | None = None
    # During recovery: each member's last claim.
    claims: dict[str, _Claim] = field(default_factory=dict)
    # Lanes the group took on as they were added to its stream: until when a member
    # not naming them yet is admitted (``LANE_CATCH_UP_S``).
    catch_up_until: dict[str, float] = field(default_factory=dict)


class AssignerService:
    def __init__(
        self,
        routing: Callable[[str], RoutingTable],
        config: AssignerConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        recovery_s: float | None = None,
    ) -> None:
        self._routing = routing
        self.config = config or AssignerConfig(lease_ttl_s=1.5)
        self._clock = clock
        self._recovery_s = recovery_s if recovery_s is not None else self.config.lease_ttl_s + 1.0
        self._recover_until = clock() + self._recovery_s
        self._groups: dict[str, _Group] = {}
        self._lock = threading.Lock()
        self._leading = True
        # When this process was last seen running (``tick``); None until the ticker
        # starts: pause detection needs it (``_check_pause``).
        self._last_tick: float | None = None
        self._ticker: threading.Thread | None = None
        self._stop_ticking = threading.Event()

    def start(self, interval_s: float = 0.1) -> None:
        """Tick every ``interval_s`` on a daemon thread (``tick``), so that a pause of
        this process is told apart from members going quiet."""
        if self._ticker is not None:
            return
        self.tick()
        self._stop_ticking.clear()

        def run() -> None:
            while not self._stop_ticking.wait(interval_s):
                self.tick()

        self._ticker = threading.Thread(target=run, name="assigner-ticker", daemon=True)
        self._ticker.start()

    def stop(self) -> None:
        self._stop_ticking.set()
        if self._ticker is not None:
            self._ticker.join(2)
            self._ticker = None

    def tick(self) -> None:
        """This process runs now. A tick that finds the last one more than a lease ago
        (or a heartbeat that does) means the process did not run meanwhile."""
        now = self._clock()
        with self._lock:
            self._check_pause(now)
            self._last_tick = now

    def lead(self, leader: bool) -> None:
        """Whether this replica leads: told by the leadership at each change (and its
        state at start: a replica that starts as a follower is not taken for a leader
        since start), and as of each group request (a leader that has not renewed its
        lease reads as a follower). Only the leader's Assigner answers (two replicas
        each answering part of a group's members gave every member every unit). A
        replica that becomes the leader starts as a restarted one does: what it knew
        before is stale, so it forgets it and rebuilds each group from its members'
        claims after a recovery window. Requests alone did not tell a follower: they
        are forwarded to the leader before they reach the Assigner, so a promoted
        follower skipped the window and moved units off live members at once."""
        with self._lock:
            if leader and not self._leading:
                self._groups.clear()
                self._recover_until = self._clock() + self._recovery_s
            self._leading = leader

    def _check_pause(self, now: float) -> None:
        """If this process did not run for more than a lease while members held leases
        (it was stopped, starved, its host frozen), rebuild every group from its
        members' claims, as after a restart. Its leases all read expired: the first
        heartbeat after a 15 s SIGSTOP was given every unit, the others admitted
        afresh, and 188 records were handled twice; the members kept their units
        meanwhile (fail-static). Told by the ticker, not by the heartbeats: a gap
        between heartbeats is also every member stopping at once (a group redeployed),
        and a new member then waited out a recovery window for nothing. Called with
        the lock held."""
        last = self._last_tick
        if last is None or now - last <= self.config.lease_ttl_s:
            return
        if any(
            group.state is not None
            and any(m.lease_expiry > last for m in group.state.members.values())
            for group in self._groups.values()
        ):
            self._groups.clear()
            self._recover_until = now + self._recovery_s

    def _units(self, group: _Group) -> frozenset[WorkUnit]:
        table = self._routing(group.stream)
        group.epoch = table.epoch
        return frozenset(
            WorkUnit(seg.topic, p, seg.cluster)
            for seg in table.readable(group.lanes)
            for p in range(seg.partitions)
        )

    def heartbeat(
        self,
        group_id: str,
        stream: str,
        lanes: Sequence[str],
        member_id: str,
        load: MemberLoad,
        released: Iterable[WorkUnit] = (),
        claims: Iterable[WorkUnit] = (),
    ) -> HeartbeatAnswer:
        now = self._clock()
        with self._lock:
            # (the ticker may run after this request on resuming: checked here too)
            self._check_pause(now)
            group = self._groups.get(group_id)
            if group is not None and (group.stream, group.lanes) != (stream, tuple(lanes)):
                if not _has_live_members(group, now):
                    # Every member left or its lease ran out: the name is free again
                    # (for example after its stream was deleted).
                    group = None
                elif not self._follows_added_lanes(group, stream, tuple(lanes), now):
                    raise ConfigError(
                        f"group {group_id!r} consumes stream {group.stream!r} lanes "
                        f"{list(group.lanes)} (members still live); a member asked for "
                        f"{stream!r} {list(lanes)}"
                    )
            if group is None:
                group = self._groups[group_id] = _Group(stream, tuple(lanes))
            if group.state is None and now < self._recover_until:
                claimed = frozenset(claims)
                group.claims[member_id] = _Claim(load, claimed, now)
                return HeartbeatAnswer(claimed, frozenset(), self.config.lease_ttl_s, 0)
            units = self._units(group)
            if group.state is None:
                claimed_by = {m: (c.load, c.units) for m, c in group.claims.items()}
                group.state = core.restore(self.config, units, claimed_by, now)
                group.claims.clear()
            else:
                group.state = core.set_work_units(group.state, units)
            group.state, answer = core.heartbeat(group.state, member_id, load, now, released)
            return HeartbeatAnswer(
                answer.work_units,
                answer.release,
                max(0.0, answer.lease_expiry - now),
                answer.generation,
                answer.joined,
            )

    def _follows_added_lanes(
        self, group: _Group, stream: str, lanes: tuple[str, ...], now: float
    ) -> bool:
        """Whether a member of ``group`` naming ``lanes`` (not the group's) reads all of
        the stream's lanes, as the group's members do, and only a lane added to the
        stream since tells them apart (``core.routing.is_lanes_as_of_an_epoch``). If it
        names more, the group takes them on (its units grow by theirs); if fewer, it has
        not heard of the lanes added yet, and is admitted for ``LANE_CATCH_UP_S`` after
        the group took them on. Called with the lock held."""
        if group.stream != stream:
            return False
        try:
            table = self._routing(stream)
        except NotFound:
            return False
        if not (
            is_lanes_as_of_an_epoch(table, group.lanes) and is_lanes_as_of_an_epoch(table, lanes)
        ):
            return False
        if len(lanes) > len(group.lanes):
            for lane in set(lanes) - set(group.lanes):
                group.catch_up_until[lane] = now + LANE_CATCH_UP_S
            group.lanes = lanes
            return True
        return all(
            now < group.catch_up_until.get(lane, now) for lane in set(group.lanes) - set(lanes)
        )

    def leave(self, group_id: str, member_id: str) -> None:
        with self._lock:
            group = self._groups.get(group_id)
            if group is not None:
                group.claims.pop(member_id, None)
                if group.state is not None:
                    group.state = core.leave(group.state, member_id)

    def describe(self, group_id: str) -> dict[str, object]:
        """Members (their units, those they must release, lease seconds left, CPU and
        records/s), the units pending release with their next holder, the units no
        member holds, the generation; in the recovery window, the members heard so far
        with the units they claim, the units nobody claims and the seconds until the
        window ends. KeyError for a group no member heartbeated to."""
        now = self._clock()
        with self._lock:
            group = self._groups.get(group_id)
            if group is None:
                raise KeyError(group_id)
            return self._describe(group_id, group, now)

    def describe_all(self) -> list[dict[str, object]]:
        """``describe`` of every group, by name."""
        now = self._clock()
        with self._lock:
            return [self._describe(g, self._groups[g], now) for g in sorted(self._groups)]

    def _describe(self, group_id: str, group: _Group, now: float) -> dict[str, object]:
        if group.state is None:
            return self._describe_recovering(group_id, group, now)
        state = group.state = core.expire(group.state, now)
        members = [
            _member_json(m.member_id, m.load, m.active, m.releasing, m.lease_expiry - now)
            for m in state.members.values()
        ]
        pending = [
            {
                "unit": _unit_json(unit),
                "holder": release.holder,
                "target": release.target,
                "deadline_s": round(max(0.0, release.deadline - now), 3),
            }
            for unit, release in state.pending.items()
        ]
        pending.sort(key=lambda p: str(p["unit"]))
        return {
            **_group_json(group_id, group, state.generation, state.work_units),
            "recovering": False,
            "recovery_ends_s": None,
            "members": members,
            "pending_release": pending,
            "unowned": sorted(_unit_json(u) for u in state.work_units if u not in state.owners),
        }

    def _describe_recovering(self, group_id: str, group: _Group, now: float) -> dict[str, object]:
        """A group in the recovery window: what the Assigner knows so far, from the
        claims of the members it heard (each answered with what it claims, a lease
        from then). Once the window is over, the next heartbeat rebuilds the group from
        these claims (``core.assignment.restore``). Called with the lock held."""
        try:
            units = self._units(group)
        except NotFound:
            units = frozenset()  # the stream is gone: so are its units
        claimed = {u for c in group.claims.values() for u in c.units}
        ttl = self.config.lease_ttl_s
        return {
            **_group_json(group_id, group, 0, units),
            "recovering": True,
            "recovery_ends_s": round(max(0.0, self._recover_until - now), 3),
            "members": [
                _member_json(m, c.load, c.units, frozenset(), c.heard_at + ttl - now)
                for m, c in sorted(group.claims.items())
            ],
            "pending_release": [],
            "unowned": sorted(_unit_json(u) for u in units if u not in claimed),
        }

    def groups(self) -> list[str]:
        with self._lock:
            return sorted(self._groups)


def _unit_json(u: WorkUnit) -> str:
    return f"{u.cluster}/{u.topic}/{u.partition}"


def _group_json(
    group_id: str, group: _Group, generation: int, units: frozenset[WorkUnit]
) -> dict[str, object]:
    return {
        "group": group_id,
        "stream": group.stream,
        "lanes": list(group.lanes),
        "generation": generation,
        "units": len(units),
    }


def _member_json(
    member_id: str,
    load: MemberLoad,
    units: frozenset[WorkUnit],
    releasing: frozenset[WorkUnit],
    lease_s: float,
) -> dict[str, object]:
    return {
        "member_id": member_id,
        "units": sorted(_unit_json(u) for u in units),
        "releasing": sorted(_unit_json(u) for u in releasing),
        "lease_s": round(max(0.0, lease_s), 3),
        "cpu": load.cpu,
        "records_per_s": load.records_per_s,
    }


def _has_live_members(group: _Group, now: float) -> bool:
    """Members claimed units during recovery, or hold a lease the core has not expired."""
    if group.claims:
        return True
    return group.state is not None and bool(core.expire(group.state, now).members)
