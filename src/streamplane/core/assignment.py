"""The Assigner: leases, sticky load-aware balancing and safe hand-over of work units. Pure.

The members of a group heartbeat to the control plane with their load; the Assigner
answers each heartbeat with the work units the member owns and a lease on them. This
module is the whole decision: a ``GroupState`` and a heartbeat go in, a new
``GroupState`` and the member's ``MemberAssignment`` come out. No clock (``now`` is an
argument, in seconds on the control plane's clock), no I/O, no threads; states are
immutable values, so a caller may keep the old one, persist the new one, or replay.

Vocabulary
----------
work unit        one partition of one segment: ``WorkUnit(topic, partition, cluster)``.
holder           the member that holds a unit (``GroupState.owners``). A holder may be
                 *releasing* the unit.
pending release  a unit the Assigner has taken away from its holder: the holder's
                 responses no longer list it in ``work_units`` and list it in ``release``
                 instead; it goes to its *target* (``PendingRelease.target``) when the
                 holder hands it back (``released=`` of a heartbeat, or ``leave``), when
                 the holder's lease runs out (it stopped heartbeating), or at the release
                 deadline (``PendingRelease.deadline``): ``release_timeout_s`` after it
                 was asked back (or the holder's lease then, if later). Until it hands
                 the unit back, a live holder finishes the records of it that it has
                 handed out and commits them: moved at the holder's lease (1.5 s), a unit
                 went on to its next holder while records of it were still being handled,
                 and those records (and those acked after the holder's last commit) were
                 handled a second time, some by both members at once.
                 A unit removed from the routing stays pending (target None) until its
                 holder has let go, so that re-adding it cannot give it a second owner.
lease            a response lets the member process the units it lists until its
                 ``lease_expiry``; a later response that omits a unit ends that unit's
                 lease at once. ``lease_expiry = max(previous expiry, now + lease_ttl_s)``:
                 a lease never shrinks, even if ``now`` goes backwards.
generation       a counter a member can compare to notice that assignments changed.

Invariants (``invariant_violations`` checks the state-level ones; the tests check all
of them over random histories)
-----------------------------------------------------------------------------------
1. Single owner. At any instant at most one member holds a live lease on a unit: a unit
   is listed only in its holder's responses, and only while it is not pending release.
2. Release before move. A held unit reaches another member only after the holder
   released it (heartbeat ``released=``, or ``leave``: the caller promises the member has
   stopped), after the holder's whole lease expired (``expire``), or at the pending
   deadline: ``release_timeout_s`` after it was asked back, and never before the last
   lease that listed the unit.
3. Expiry bound. A member that stops heartbeating loses its units at its
   ``lease_expiry`` (``lease_ttl_s`` after its last heartbeat): the first operation with
   ``now >= lease_expiry`` removes it and hands its units to the others at once. A unit
   asked back is handed over no later than ``release_timeout_s`` after it was asked back
   (or the holder's lease expiry then, if later), acknowledged or not, and at the
   holder's lease expiry if that comes first. Members should stop a little *before*
   these, on their own clock, to cover network delay and clock skew.
4. Generation monotonic. ``generation`` never decreases, and increases exactly when the
   set of units some member may process (``work_units`` of its next response) changes.
5. Settled. After every operation, if the group has members, every work unit has a
   holder; ``owners``, ``pending`` and each ``MemberState`` agree.

Balancing
---------
Runs when membership or the set of units changes, when units become free, and on a
heartbeat at most every ``rebalance_interval_s`` (load-driven; load figures are noisy and
acting on every heartbeat would make units flap).

- Weights. A unit weighs its measured throughput (records/s: what is fetched of it, its
  offered load, whatever becomes of the records), as reported by its holder, else by any
  member that reports it, else as remembered from the last balancing pass
  (``GroupState.unit_weights``: a unit keeps its weight while it changes hands). A
  reading within ``imbalance_tolerance`` of the remembered figure keeps the figure (the
  consumer's smoothed rates wander by about that much with its fetch batches). A unit
  that changed hands weighs what it weighed then for ``handover_settle_s``
  (``GroupState.settling``): its new holder's reading starts from nothing and catches up
  over the consumer's smoothing; passes that acted on it saw the new holder idle, gave it
  more, and took units back once the readings caught up (units moved 20-30 s after a
  join or a leave). Units never measured weigh the median of the measured ones, or 1
  when nothing is measured. Every weight is at least 1% of the median busy unit (the
  median of the positive weights). Backlog does not weigh (a unit with a backlog weighs
  what its holder reads of it); it tells saturated members, below.
- Idle units, those weighing at most 5% of the median busy unit, are not balanced by
  weight but by count: each costs a fetch session, and it is where a burst of its lane
  lands. Weighed as fillers (1% of a busy unit each) they all went to whichever member
  was lightest and moved there as a block at the next pass, and a burst waited on that
  one member. Loads and targets below count busy units only; idle units are shared
  out evenly (below, *spread*).
- Capacity, in records/s (the unit of the weights). A member's capacity is the
  throughput it could sustain at full CPU. Its records/s ``R`` are the records it
  handled successfully (the consumer counts acks, not records handed out: those count
  every failed attempt). When it
  reports CPU ``c`` and reads at least the median busy unit, its speed is
  ``R / max(c, min_capacity)``
  and its capacity ``speed * (c + max(min_capacity, 1 - c))`` (``= R / c`` in the normal
  range); otherwise ``reference speed * max(min_capacity, 1 - c)``, the reference being
  the median speed of the members that have one (when none do, the group's whole
  load: a member with room could carry all of it; a dimensionless 1 there, against a
  saturated member's records/s, gave a member handling 20 records/s every unit of a
  group reading 200). A member reading less than a busy unit has no speed: its CPU is
  mostly its baseline, ``R / c`` came out near 0 and it was never given more. When no
  member uses ``min_measured_cpu`` (10%) or more, no speed is estimated (all take the
  reference): there ``R / c`` says little (baseline CPU and handlers waiting on I/O
  dominate: members at 2-3% CPU each came out with a capacity in proportion to their
  current load, so a member holding 90% of it kept it), and lightly loaded members are
  taken as alike. (Speeds are noisy: smoothed records/s over smoothed CPU wander
  ±10% from pass to pass, and the targets with them; the relative ``_worthwhile``,
  below, keeps passes from acting on that.) So a member at 90% CPU gets fewer units
  than members at 20%; and, unlike a rule on headroom alone, moving load does not
  change the estimate (CPU falls with the load that leaves), so the assignment does not
  swing back and forth. (CPU that does not scale with load, a
  process's baseline, makes busier members look a little faster; that bias shrinks at
  each pass and the tolerance absorbs it: the bench converges in a few passes.)
  A *saturated* member (the backlog on its units is at least ``saturation_backlog_s``
  of its records/s) runs as fast as it can: its capacity is the load it carries (the
  smaller of its records/s and what it reads of the units it holds), and that rate
  bounds its capacity for ``saturation_memory_s`` after it was last seen saturated
  (``GroupState.saturated_rates``: having shed its units it looks idle, and was given
  them back at the next pass). Its
  CPU is no measure there: members reading a backlog on a shared host each get the
  scheduler's share, ``R / c`` made the member with the larger share look overloaded
  (its ratio was its CPU over the mean CPU), and every pass moved units between
  members that were all flat out (a generation every pass). So saturated members are
  at their targets with one another, and shed load only to members with room.
- Failing members. A member that reads more than an idle unit's worth of its settled
  units (not those still in ``handover_settle_s``: its handled records lag them) and
  handles successfully less than a quarter of the share that the best member handles,
  while that member handles at least half of what it reads, is failing (its handler
  raises, its database is down): its capacity is multiplied by ``min_capacity``, so it
  sheds its load to healthy members, for ``failure_memory_s`` after it was last seen so
  (``GroupState.failing``: having shed its units it reads nothing and looks healthy).
  Reporting records handed out, such a member looked the fastest of its group and kept
  its units, dead-lettering its share of good records. Relative, so that failures that
  every member sees (poison records on every unit, a database they all share) single
  nobody out: when no member is healthy, nobody is failing. A member reading nothing
  is never failing; unit weights still measure what is offered, not what succeeds.
- Target. Member ``m`` should carry ``W * capacity_m / sum(capacity)`` of the total
  weight ``W`` of the busy units. Its ratio is load / target.
- Free units are placed heaviest first on the member with the lowest ratio after the
  placement (longest-processing-time first, uniform machines); free idle units each on
  the member furthest below its share of them.
- Moves happen only when some member is outside ``1 +- imbalance_tolerance``
  (stickiness: otherwise nothing moves). Then, first, *repair*: while some member is
  outside the band, move one unit from the most loaded member to the least loaded one,
  best fit: the heaviest unit that takes neither past its target, or, when one of them
  is already past it, out of the band; failing that the lightest, if it still helps.
  Units that are already moving go first (retargeting a pending release costs nothing).
  Then *finish*: move a unit from a member above its target to one below while both are
  off by more than half of it, neither leaves the band, and one of them was out of the
  band when the pass began (rounding to the nearest unit), so the members that made the
  pass necessary end at their targets (a second member gets half, not 45%) and nobody
  else's small drift moves. Repeat both until neither moves. Every move of either
  phase strictly lowers ``sum(load_m ** 2 / target_m)``, so balancing always ends, and
  a second pass with unchanged loads moves nothing. A pass's moves are kept only if
  they lower the largest deviation from target, among the members whose load they
  change, by more than the tolerance times ``1 +`` the deviation left (``_worthwhile``;
  relative, as the noise of the measures is): an imbalance whole units cannot undo (4
  equal units on 3 members) moved a unit every 10 s on the noise of the measured loads.
- Then *spread* the idle units: each member's share of them is ``n / members``, but a
  failing member's, which is 0 (a burst there would fail; capacity is no measure here:
  an idle unit costs the same fetch session on a fast member as on a slow one); while
  the member furthest above its share and the one furthest below it differ by more
  than ``1 + max(0.5, tolerance * n / members)`` units, one idle unit (one already
  moving first) goes from the first to the second. Each move lowers
  ``sum((count_m - share_m) ** 2)``, so it ends, and a second pass moves nothing.
- Deterministic: same state and input, same result. Ties between members are broken by
  a hash of ``(seed, member_id)``, ties between units by their sort order; nothing
  depends on set or dict iteration order.
"""

from __future__ import annotations

import hashlib
import heapq
import math
from bisect import bisect_right, insort
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from statistics import median
from types import MappingProxyType

from streamplane.exceptions import ConfigError

__all__ = [
    "RELEASE_TIMEOUT_S",
    "AssignerConfig",
    "GroupState",
    "MemberAssignment",
    "MemberLoad",
    "MemberState",
    "PendingRelease",
    "UnitLoad",
    "WorkUnit",
    "assignment_of",
    "expire",
    "heartbeat",
    "initial_state",
    "invariant_violations",
    "leave",
    "rebalance",
    "restore",
    "set_work_units",
]

# Every unit weighs at least this fraction of the median busy unit (see "Weights").
_WEIGHT_FLOOR = 0.01
# A unit weighing at most this fraction of the median busy unit is idle: idle units are
# spread by count, not by weight (see "Idle units").
_IDLE_SHARE = 0.05
# A member handling successfully less than this fraction of what it reads is failing,
# when another member handles at least _HEALTHY_SHARE of its own (see "Failing members").
_FAILING_SHARE = 0.25
_HEALTHY_SHARE = 0.5
# Relative slack for float comparisons, so rounding can never make two moves undo each other.
_EPS = 1e-9
# How long a holder has to hand back a unit asked back from it (``release_timeout_s``):
# it finishes the records of the unit its application holds and commits them first. The
# consumer gives up on those records a little before it (``client.membership``).
RELEASE_TIMEOUT_S = 10.0


def _finite(value: float, what: str) -> float:
    if not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{what} must be a finite number, got {value!r}")
    return float(value)


@dataclass(frozen=True, order=True, slots=True)
class WorkUnit:
    """One partition of one segment: the unit of work the Assigner hands out."""

    topic: str
    partition: int
    cluster: str
    # Units are dict keys everywhere here: hashing them once, not at every lookup,
    # halves the cost of a 10,000-unit rebalance.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.topic or not self.cluster:
            raise ConfigError(f"a work unit needs a topic and a cluster: {self!r}")
        if self.partition < 0:
            raise ConfigError(f"a work unit's partition must be >= 0: {self!r}")
        object.__setattr__(self, "_hash", hash((self.topic, self.partition, self.cluster)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[WorkUnit], tuple[str, int, str]]:
        # Rebuilt through __init__: a string's hash differs from one process to the next.
        return (WorkUnit, (self.topic, self.partition, self.cluster))


def _unit_key(unit: WorkUnit) -> tuple[str, int, str]:
    # Same order as WorkUnit's own, but compared in C: sorting 10,000 units stays cheap.
    return (unit.topic, unit.partition, unit.cluster)


@dataclass(frozen=True, slots=True)
class UnitLoad:
    """What a member measured on one work unit."""

    throughput: float = 0.0  # records/s
    backlog: int = 0  # records behind the end of the partition

    def __post_init__(self) -> None:
        if _finite(self.throughput, "throughput") < 0:
            raise ConfigError(f"throughput must be >= 0, got {self.throughput}")
        if self.backlog < 0:
            raise ConfigError(f"backlog must be >= 0, got {self.backlog}")


def _no_units() -> Mapping[WorkUnit, UnitLoad]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class MemberLoad:
    """The load a member reports with each heartbeat."""

    cpu: float = 0.0  # 0..1, share of the member's CPU in use
    records_per_s: float = 0.0  # over all its units
    units: Mapping[WorkUnit, UnitLoad] = field(default_factory=_no_units)

    def __post_init__(self) -> None:
        if not 0.0 <= _finite(self.cpu, "cpu") <= 1.0:
            raise ConfigError(f"cpu must be within 0..1, got {self.cpu}")
        if _finite(self.records_per_s, "records_per_s") < 0:
            raise ConfigError(f"records_per_s must be >= 0, got {self.records_per_s}")
        # A private read-only copy: a caller reusing its dict cannot change a stored state.
        object.__setattr__(self, "units", MappingProxyType(dict(self.units)))


@dataclass(frozen=True, slots=True)
class AssignerConfig:
    """Tuning of one group's Assigner."""

    lease_ttl_s: float = 2.0
    # A member is imbalanced when its load is outside target * (1 +- tolerance).
    imbalance_tolerance: float = 0.10
    # Floor of a member's CPU headroom (and of the CPU used to estimate its speed).
    min_capacity: float = 0.05
    # Speeds (records/s per CPU) are estimated only when some member uses at least this
    # much CPU: when every member is below it, CPU that does not scale with load (a
    # process's baseline, handlers waiting on I/O) dominates, each member's estimate
    # comes out as its current share and no skew would ever be corrected.
    min_measured_cpu: float = 0.1
    # A member is saturated when the backlog on its units would take it at least this
    # long at its current rate: it runs as fast as it can, so its throughput is its
    # capacity (CPU says nothing more: on a shared host it is the scheduler's share).
    saturation_backlog_s: float = 2.0
    # What a member read while saturated bounds its capacity for this long after it was
    # last seen saturated (it sheds its units and, holding nothing, looks idle; without
    # this it was given units again at the next pass and shed them again).
    saturation_memory_s: float = 300.0
    # Load-driven balancing runs at most this often (structural changes act at once);
    # math.inf turns it off.
    rebalance_interval_s: float = 10.0
    # A unit that changed hands weighs what it weighed then for this long: its new
    # holder's reading starts from nothing (the consumer smooths over 5 s; after 15 s it
    # reads within ~5% of the unit's rate), and passes acting on it moved units again.
    handover_settle_s: float = 15.0
    # A member seen failing (handling successfully a small share of what it reads)
    # carries no more than a member with min_capacity headroom for this long after it
    # was last seen so: having shed its units it reads nothing, and looks healthy.
    failure_memory_s: float = 60.0
    # A unit asked back from a live holder moves at most this long after it was asked
    # (or at the holder's lease then, if later) if the holder has not handed it back by
    # then: a hung handler does not keep a unit for ever ("pending release").
    release_timeout_s: float = RELEASE_TIMEOUT_S
    seed: int = 0  # tie-breaks between members

    def __post_init__(self) -> None:
        if _finite(self.lease_ttl_s, "lease_ttl_s") <= 0:
            raise ConfigError(f"lease_ttl_s must be > 0, got {self.lease_ttl_s}")
        if not 0.0 <= _finite(self.imbalance_tolerance, "imbalance_tolerance") < 1.0:
            raise ConfigError(
                f"imbalance_tolerance must be within [0, 1), got {self.imbalance_tolerance}"
            )
        if not 0.0 < _finite(self.min_capacity, "min_capacity") <= 1.0:
            raise ConfigError(f"min_capacity must be within (0, 1], got {self.min_capacity}")
        if not 0.0 <= _finite(self.min_measured_cpu, "min_measured_cpu") <= 1.0:
            raise ConfigError(
                f"min_measured_cpu must be within [0, 1], got {self.min_measured_cpu}"
            )
        if _finite(self.saturation_backlog_s, "saturation_backlog_s") <= 0:
            raise ConfigError(f"saturation_backlog_s must be > 0, got {self.saturation_backlog_s}")
        if _finite(self.saturation_memory_s, "saturation_memory_s") < 0:
            raise ConfigError(f"saturation_memory_s must be >= 0, got {self.saturation_memory_s}")
        if math.isnan(self.rebalance_interval_s) or self.rebalance_interval_s <= 0:
            raise ConfigError(f"rebalance_interval_s must be > 0, got {self.rebalance_interval_s}")
        if _finite(self.handover_settle_s, "handover_settle_s") < 0:
            raise ConfigError(f"handover_settle_s must be >= 0, got {self.handover_settle_s}")
        if _finite(self.failure_memory_s, "failure_memory_s") < 0:
            raise ConfigError(f"failure_memory_s must be >= 0, got {self.failure_memory_s}")
        if _finite(self.release_timeout_s, "release_timeout_s") < 0:
            raise ConfigError(f"release_timeout_s must be >= 0, got {self.release_timeout_s}")


@dataclass(frozen=True, slots=True)
class MemberState:
    """A live member as the Assigner knows it."""

    member_id: str
    load: MemberLoad
    last_heartbeat: float
    lease_expiry: float  # the latest expiry granted; the member is gone once now >= it
    units: frozenset[WorkUnit]  # the units it holds, including those it must release
    releasing: frozenset[WorkUnit]  # subset of ``units``: pending release

    @property
    def active(self) -> frozenset[WorkUnit]:
        """The units the member may process: held and not being released."""
        return self.units - self.releasing if self.releasing else self.units


@dataclass(frozen=True, slots=True)
class PendingRelease:
    """A unit taken from its holder, waiting for the holder to let go."""

    holder: str
    target: str | None  # the next holder; None: none yet (or the unit left the routing)
    # The unit moves on here if its holder has not handed it back: release_timeout_s
    # after it was asked back, or the holder's last lease listing it, if later.
    deadline: float


@dataclass(frozen=True, slots=True)
class GroupState:
    """The Assigner's state for one group. Immutable: operations return a new one.

    The mappings are read-only views; build a first state with ``initial_state``.
    """

    config: AssignerConfig
    work_units: frozenset[WorkUnit]
    members: Mapping[str, MemberState]
    owners: Mapping[WorkUnit, str]  # unit -> holder; a unit leaving the routing may linger
    pending: Mapping[WorkUnit, PendingRelease]
    generation: int = 0
    # A lower bound on the earliest lease expiry and pending deadline: before it, no
    # operation has anything to expire (keeps the steady-state heartbeat O(1)).
    next_deadline: float = math.inf
    next_balance_at: float = -math.inf  # when a heartbeat may next balance on load
    # Throughput (records/s) of each measured unit as of the last balancing pass.
    unit_weights: Mapping[WorkUnit, float] = field(default_factory=lambda: MappingProxyType({}))
    # Per member seen saturated: (records/s it read then, when it was last seen so).
    saturated_rates: Mapping[str, tuple[float, float]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    # Units that changed hands lately: (the weight they had then, until when it holds).
    settling: Mapping[WorkUnit, tuple[float, float]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    # Per member seen failing: when it was last seen so.
    failing: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    """The answer to a heartbeat."""

    work_units: frozenset[WorkUnit]  # process these until lease_expiry
    release: frozenset[WorkUnit]  # stop these, then hand them back in ``released=``
    lease_expiry: float
    generation: int
    # This heartbeat admitted the member: it was unknown, or its lease had expired (it
    # lost its units then, and any unit in work_units may have had another holder since).
    joined: bool = False


def initial_state(
    config: AssignerConfig | None = None, work_units: Iterable[WorkUnit] = ()
) -> GroupState:
    """A group with no members yet."""
    return GroupState(
        config=config if config is not None else AssignerConfig(),
        work_units=frozenset(work_units),
        members=MappingProxyType({}),
        owners=MappingProxyType({}),
        pending=MappingProxyType({}),
    )


def assignment_of(state: GroupState, member_id: str) -> MemberAssignment:
    """What ``member_id`` was last told, as of ``state`` (its lease is not renewed)."""
    member = state.members.get(member_id)
    if member is None:
        raise ConfigError(f"unknown member {member_id!r}")
    return MemberAssignment(member.active, member.releasing, member.lease_expiry, state.generation)


def heartbeat(
    state: GroupState,
    member_id: str,
    load: MemberLoad,
    now: float,
    released: Iterable[WorkUnit] = (),
) -> tuple[GroupState, MemberAssignment]:
    """Record a heartbeat of ``member_id`` at ``now`` and answer it.

    An unknown member joins (so does a member whose lease had expired: it lost its units);
    the answer says so (``joined``).
    ``released`` hands units back: ones the member was asked to release (they move on to
    their target), or any other it holds (they are freed and placed again, possibly on the
    same member). Only units the member has stopped processing may be listed. Members
    whose lease ran out by ``now`` are expired first, so a heartbeat at a dead member's
    expiry already gets that member's units.

    >>> unit = WorkUnit("sp.logs.realtime.e1", 0, "local-a")
    >>> state = initial_state(AssignerConfig(lease_ttl_s=2.0), [unit])
    >>> state, answer = heartbeat(state, "worker-1", MemberLoad(cpu=0.2), now=100.0)
    >>> sorted(answer.work_units) == [unit], answer.lease_expiry, answer.generation
    (True, 102.0, 1)
    """
    if not isinstance(member_id, str) or not member_id:
        raise ConfigError(f"member_id must be a non-empty string, got {member_id!r}")
    now = _finite(now, "now")
    config = state.config
    gone = frozenset(released)
    member = state.members.get(member_id)
    next_deadline = state.next_deadline
    if (
        member is not None
        and now < state.next_balance_at
        and (not gone or gone.isdisjoint(member.units))
        and (now < next_deadline or now < (next_deadline := _earliest_deadline(state)))
    ):
        # Steady state: nothing expires, nothing is handed back, no balancing is due.
        member = MemberState(
            member_id,
            load,
            max(member.last_heartbeat, now),
            max(member.lease_expiry, now + config.lease_ttl_s),
            member.units,
            member.releasing,
        )
        members = dict(state.members)
        members[member_id] = member
        new_state = GroupState(
            config,
            state.work_units,
            MappingProxyType(members),
            state.owners,
            state.pending,
            state.generation,
            next_deadline,  # still a lower bound: this member's lease only grew
            state.next_balance_at,
            state.unit_weights,
            state.saturated_rates,
            state.settling,
            state.failing,
        )
        return new_state, MemberAssignment(
            member.active, member.releasing, member.lease_expiry, state.generation
        )

    draft = _Draft(state, now)
    draft.advance(now)
    member = draft.members.get(member_id)
    joined = member is None
    if member is None:
        # Nothing has been granted yet: the lease starts at the end of this heartbeat.
        draft.members[member_id] = MemberState(member_id, load, now, now, frozenset(), frozenset())
        draft.replan = True
    else:
        draft.members[member_id] = MemberState(
            member_id,
            load,
            max(member.last_heartbeat, now),
            member.lease_expiry,  # revocations in this call end at the lease granted before
            member.units,
            member.releasing,
        )
        if gone:
            held = draft.held(member_id)
            for unit in sorted(gone & held, key=_unit_key):
                draft.release(member_id, unit)
    draft.settle(now, balance=now >= state.next_balance_at)
    draft.grant(member_id, now + config.lease_ttl_s)
    new_state = draft.freeze()
    answer = assignment_of(new_state, member_id)
    return new_state, replace(answer, joined=True) if joined else answer


def restore(
    config: AssignerConfig,
    work_units: Iterable[WorkUnit],
    claims: Mapping[str, tuple[MemberLoad, Iterable[WorkUnit]]],
    now: float,
) -> GroupState:
    """Rebuild a group's state from what its live members say they hold.

    Used when the Assigner's state was lost (a control plane restarted): every member
    that heartbeated during the recovery window claims the units it still processes.
    A unit claimed by several members goes to the first in member-id order (the others
    are not told to keep it, which ends their lease on it at once); claimed units that
    left the routing are dropped; unclaimed units are placed as usual.
    """
    now = _finite(now, "now")
    units = frozenset(work_units)
    owners: dict[WorkUnit, str] = {}
    members: dict[str, MemberState] = {}
    for member_id in sorted(claims):
        load, claimed = claims[member_id]
        mine = frozenset(u for u in claimed if u in units and u not in owners)
        for unit in mine:
            owners[unit] = member_id
        members[member_id] = MemberState(
            member_id, load, now, now + config.lease_ttl_s, mine, frozenset()
        )
    state = GroupState(
        config=config,
        work_units=units,
        members=MappingProxyType(members),
        owners=MappingProxyType(owners),
        pending=MappingProxyType({}),
        generation=1,
    )
    draft = _Draft(state, now)
    draft.replan = True  # place the unclaimed units
    draft.settle(now, balance=False)
    return draft.freeze()


def _earliest_deadline(state: GroupState) -> float:
    """The earliest lease expiry or pending deadline, exactly (``next_deadline`` is a
    lower bound that heartbeats leave stale: renewing a lease only pushes it back)."""
    return min(
        min((m.lease_expiry for m in state.members.values()), default=math.inf),
        min((p.deadline for p in state.pending.values()), default=math.inf),
    )


def expire(state: GroupState, now: float) -> GroupState:
    """Remove the members whose lease expired by ``now`` and hand their units on.

    Also hands over pending units whose holder's lease on them ran out.
    """
    now = _finite(now, "now")
    if now < state.next_deadline:
        return state
    earliest = _earliest_deadline(state)
    if now < earliest:
        return replace(state, next_deadline=earliest)
    draft = _Draft(state, now)
    draft.advance(now)
    draft.settle(now, balance=False)
    return draft.freeze()


def leave(state: GroupState, member_id: str) -> GroupState:
    """Graceful departure: the member has stopped processing; its units move on now.

    Unknown members are ignored (leaving twice is harmless).
    """
    if member_id not in state.members:
        return state
    draft = _Draft(state)
    draft.remove_member(member_id)
    draft.settle(None, balance=False)
    return draft.freeze()


def set_work_units(state: GroupState, units: Iterable[WorkUnit]) -> GroupState:
    """Replace the set of work units (the routing changed).

    New units are placed at once; a removed unit is asked back from its holder and
    forgotten once released (or once the holder's lease on it ran out).
    """
    new_units = frozenset(units)
    if new_units == state.work_units:
        return state
    draft = _Draft(state)
    draft.set_units(new_units)
    draft.settle(None, balance=False)
    return draft.freeze()


def rebalance(state: GroupState) -> GroupState:
    """Balance on the last reported loads now, whatever ``rebalance_interval_s`` says."""
    draft = _Draft(state)
    draft.settle(None, balance=True)
    return draft.freeze()


def invariant_violations(state: GroupState) -> list[str]:
    """The state-level invariants that ``state`` breaks (empty when it is sound)."""
    problems: list[str] = []
    members = state.members
    held: dict[str, set[WorkUnit]] = {m: set() for m in members}
    for unit, holder in state.owners.items():
        if holder not in members:
            problems.append(f"{unit} is held by unknown member {holder!r}")
            continue
        held[holder].add(unit)
        if unit not in state.work_units and unit not in state.pending:
            problems.append(f"{unit} left the routing but is not being released")
    for unit, pending in state.pending.items():
        if state.owners.get(unit) != pending.holder:
            problems.append(f"{unit} is pending release from {pending.holder!r}, not its holder")
        if pending.target is not None:
            if pending.target not in members:
                problems.append(f"{unit} is pending release to unknown {pending.target!r}")
            if pending.target == pending.holder:
                problems.append(f"{unit} is pending release to its own holder")
            if unit not in state.work_units:
                problems.append(f"{unit} left the routing but has a target")
    for member_id, member in members.items():
        if member.member_id != member_id:
            problems.append(f"member {member_id!r} is filed as {member.member_id!r}")
        if member.units != held[member_id]:
            problems.append(f"member {member_id!r}: units disagree with owners")
        releasing = {u for u in member.units if u in state.pending}
        if member.releasing != releasing:
            problems.append(f"member {member_id!r}: releasing disagrees with pending")
        if member.lease_expiry < state.next_deadline:
            problems.append(f"member {member_id!r} expires before next_deadline")
    if any(p.deadline < state.next_deadline for p in state.pending.values()):
        problems.append("a pending deadline precedes next_deadline")
    if members:
        free = [u for u in state.work_units if u not in state.owners]
        if free:
            problems.append(f"{len(free)} units have no holder, e.g. {min(free)}")
    if state.generation < 0:
        problems.append("negative generation")
    return problems


class _Draft:
    """A mutable working copy of a GroupState for the length of one operation."""

    def __init__(self, state: GroupState, now: float | None = None) -> None:
        self.config = state.config
        self.now = now  # the operation's time, when it has one
        self._clock: float | None = None
        self.work_units = state.work_units
        self.members: dict[str, MemberState] = dict(state.members)
        self.owners: dict[WorkUnit, str] = dict(state.owners)
        self.pending: dict[WorkUnit, PendingRelease] = dict(state.pending)
        self.generation = state.generation
        self.next_deadline = state.next_deadline
        self.next_balance_at = state.next_balance_at
        self.unit_weights = state.unit_weights
        self.saturated_rates = state.saturated_rates
        self.settling = state.settling
        self.failing = state.failing
        self._before = state.members
        # Mutable copies of the unit sets of the members this operation touches.
        self._held: dict[str, set[WorkUnit]] = {}
        self._releasing: dict[str, set[WorkUnit]] = {}
        self._touched: set[str] = set()  # members whose units may have changed
        self.replan = False  # membership or routing changed, or units became free

    def held(self, member_id: str) -> set[WorkUnit]:
        units = self._held.get(member_id)
        if units is None:
            units = self._held[member_id] = set(self.members[member_id].units)
            self._touched.add(member_id)
        return units

    def releasing(self, member_id: str) -> set[WorkUnit]:
        units = self._releasing.get(member_id)
        if units is None:
            units = self._releasing[member_id] = set(self.members[member_id].releasing)
            self._touched.add(member_id)
        return units

    # -- elementary transitions ------------------------------------------------------

    def clock(self) -> float:
        """The group's time: the operation's, or the latest heartbeat when it has none
        (read once an operation)."""
        if self._clock is None:
            latest = max((m.last_heartbeat for m in self.members.values()), default=-math.inf)
            self._clock = latest if self.now is None else max(self.now, latest)
        return self._clock

    def assign(self, unit: WorkUnit, member_id: str) -> None:
        """A free unit gets a holder (nobody else can be processing it). A unit that was
        measured keeps the weight it had for ``handover_settle_s`` ("Weights")."""
        self.owners[unit] = member_id
        self.held(member_id).add(unit)
        # (While a unit settles, the last pass remembered its settled weight.)
        weight = self.unit_weights.get(unit)
        if weight is not None and self.config.handover_settle_s > 0:
            if not isinstance(self.settling, dict):
                self.settling = dict(self.settling)
            self.settling[unit] = (weight, self.clock() + self.config.handover_settle_s)

    def revoke(self, unit: WorkUnit, target: str | None) -> None:
        holder = self.owners[unit]
        # The holder's last response listing the unit granted at most its lease; it
        # gets release_timeout_s to finish the unit's records in hand and hand it back
        # (if it stops heartbeating, its units move on at its lease expiry anyway).
        deadline = max(
            self.members[holder].lease_expiry, self.clock() + self.config.release_timeout_s
        )
        self.pending[unit] = PendingRelease(holder, target, deadline)
        self.releasing(holder).add(unit)

    def retarget(self, unit: WorkUnit, target: str | None) -> None:
        pending = self.pending[unit]
        self.pending[unit] = PendingRelease(pending.holder, target, pending.deadline)

    def cancel(self, unit: WorkUnit) -> None:
        """The holder keeps a unit it was asked to release."""
        pending = self.pending.pop(unit)
        self.releasing(pending.holder).discard(unit)

    def hand_over(self, unit: WorkUnit) -> None:
        """The holder of a pending unit has let go: the unit goes to its target."""
        pending = self.pending.pop(unit)
        self.held(pending.holder).discard(unit)
        self.releasing(pending.holder).discard(unit)
        del self.owners[unit]
        if unit not in self.work_units:
            return
        if pending.target is not None and pending.target in self.members:
            self.assign(unit, pending.target)
        else:
            self.replan = True

    def release(self, member_id: str, unit: WorkUnit) -> None:
        """``member_id`` handed back ``unit``, which it holds."""
        if unit in self.pending:
            self.hand_over(unit)
            return
        del self.owners[unit]
        self.held(member_id).discard(unit)
        self.replan = True

    def remove_member(self, member_id: str) -> None:
        """The member is gone (left, or its lease expired): its units move on."""
        held = self.held(member_id)
        for unit in sorted(held, key=_unit_key):
            if unit in self.pending:
                self.hand_over(unit)
            else:
                del self.owners[unit]
        for unit, pending in list(self.pending.items()):
            if pending.target == member_id:
                self.retarget(unit, None)
        del self.members[member_id]
        del self._held[member_id]
        self._releasing.pop(member_id, None)
        self.replan = True

    # -- operations ---------------------------------------------------------------

    def advance(self, now: float) -> None:
        """Expire the members and pending releases whose time is up."""
        if now < self.next_deadline:
            return
        expired = sorted(m for m, s in self.members.items() if s.lease_expiry <= now)
        for member_id in expired:
            self.remove_member(member_id)
        due = [u for u, p in self.pending.items() if p.deadline <= now]
        for unit in sorted(due, key=_unit_key):
            self.hand_over(unit)

    def set_units(self, units: frozenset[WorkUnit]) -> None:
        removed = self.work_units - units
        self.work_units = units
        for unit in removed:
            if unit in self.pending:
                self.retarget(unit, None)
            elif unit in self.owners:
                self.revoke(unit, None)
        self.replan = True

    def grant(self, member_id: str, expiry: float) -> None:
        m = self.members[member_id]
        self.members[member_id] = MemberState(
            m.member_id,
            m.load,
            m.last_heartbeat,
            max(m.lease_expiry, expiry),
            m.units,
            m.releasing,
        )

    def settle(self, now: float | None, *, balance: bool) -> None:
        """Place free units and, if asked or needed, balance; then apply the moves."""
        if not self.members or not (self.replan or balance):
            return
        self.replan = False
        if now is not None:
            self.next_balance_at = now + self.config.rebalance_interval_s
        planner = _Planner(self)
        moves = planner.run()
        self.unit_weights = MappingProxyType(planner.measured)
        self.saturated_rates = MappingProxyType(planner.saturated_rates)
        self.settling = planner.settling
        self.failing = MappingProxyType(planner.failing)
        for unit, target in moves.items():
            pending = self.pending.get(unit)
            if pending is not None:
                if target == pending.holder:
                    self.cancel(unit)
                else:
                    self.retarget(unit, target)
            elif unit in self.owners:
                self.revoke(unit, target)
            else:
                self.assign(unit, target)
        # A unit whose target vanished was planned at its holder; if it stays, it stays.
        stay = [
            u
            for u, p in self.pending.items()
            if p.target is None and u in self.work_units and u not in moves
        ]
        for unit in stay:
            self.cancel(unit)

    def _active_changed(self) -> bool:
        """Whether the units some member may process changed (after the rebuild)."""
        nothing: frozenset[WorkUnit] = frozenset()
        for member_id in self._touched:
            before = self._before.get(member_id)
            after = self.members.get(member_id)
            if (before.active if before else nothing) != (after.active if after else nothing):
                return True
        return False

    def freeze(self) -> GroupState:
        members = self.members
        for member_id in self._held.keys() | self._releasing.keys():
            m = members.get(member_id)
            if m is None:
                continue
            held = self._held.get(member_id)
            releasing = self._releasing.get(member_id)
            members[member_id] = MemberState(
                m.member_id,
                m.load,
                m.last_heartbeat,
                m.lease_expiry,
                frozenset(held) if held is not None else m.units,
                frozenset(releasing) if releasing is not None else m.releasing,
            )
        next_deadline = min(
            min((m.lease_expiry for m in members.values()), default=math.inf),
            min((p.deadline for p in self.pending.values()), default=math.inf),
        )
        return GroupState(
            self.config,
            self.work_units,
            MappingProxyType(members),
            MappingProxyType(self.owners),
            MappingProxyType(self.pending),
            self.generation + (1 if self._active_changed() else 0),
            next_deadline,
            self.next_balance_at,
            self.unit_weights,
            MappingProxyType({m: r for m, r in self.saturated_rates.items() if m in members}),
            self.settling
            if isinstance(self.settling, MappingProxyType)
            else MappingProxyType(self.settling),
            MappingProxyType({m: t for m, t in self.failing.items() if m in members}),
        )


def _saturated(load: MemberLoad, config: AssignerConfig) -> bool:
    """Whether the member has more waiting on its units than it reads in a few seconds."""
    backlog = sum(u.backlog for u in load.units.values())
    return backlog > 0 and backlog >= load.records_per_s * config.saturation_backlog_s


def _tiebreak(seed: int, member_id: str) -> bytes:
    return hashlib.blake2b(f"{seed}\x00{member_id}".encode(), digest_size=8).digest()


class _Planner:
    """One balancing pass over a draft: where each unit should be. Indices, not names.

    Members are numbered in their seeded tie-break order and units in their sort order,
    so every "first" and every tie below is deterministic.
    """

    def __init__(self, draft: _Draft) -> None:
        config = draft.config
        self.ids = sorted(draft.members, key=lambda m: (_tiebreak(config.seed, m), m))
        index = {m: i for i, m in enumerate(self.ids)}
        self.units = sorted(draft.work_units, key=_unit_key)
        self.tolerance = config.imbalance_tolerance
        n = len(self.units)
        self.clock = draft.clock()
        self.weights = self._weights(draft)
        # Where each unit stands now (-1: free), who holds it, and whether it is pending.
        self.start = [-1] * n
        self.holder = [-1] * n
        self.was_pending = [False] * n
        for k, unit in enumerate(self.units):
            pending = draft.pending.get(unit)
            holder = draft.owners.get(unit)
            if holder is not None:
                self.holder[k] = index[holder]
            if pending is not None:
                self.was_pending[k] = True
                where = pending.target if pending.target is not None else pending.holder
                self.start[k] = index[where]
            elif holder is not None:
                self.start[k] = self.holder[k]
        self.where = list(self.start)
        # Loads and targets count busy units only: idle ones are spread by count.
        self.load = [0.0] * len(self.ids)
        for k in range(n):
            if self.where[k] >= 0 and not self.idle[k]:
                self.load[self.where[k]] += self.weights[k]
        capacity = self._capacities(draft)
        total_weight = math.fsum(
            w for w, idle in zip(self.weights, self.idle, strict=True) if not idle
        )
        total_capacity = math.fsum(capacity)
        self.target = [total_weight * c / total_capacity for c in capacity]
        idle_units = sum(self.idle)
        # Idle units cost a fetch session each, whatever the member's speed: an even
        # share for every member but the failing ones (a burst there would fail).
        able = [m not in self.failing for m in self.ids]
        share = idle_units / max(1, sum(able))
        self.idle_quota = [share if ok else 0.0 for ok in able]
        # Filled by _balance: per member, its units as (weight, unit index) ascending;
        # the "cheap" ones are already moving (or new), the others would start a release.
        self.cheap: list[list[tuple[float, int]]] = [[] for _ in self.ids]
        self.rest: list[list[tuple[float, int]]] = [[] for _ in self.ids]
        self.involved: set[int] = set()

    def _weights(self, draft: _Draft) -> list[float]:
        """Each unit's weight; also records the measurements in ``self.measured``, the
        units still settling in ``self.settling`` and which units are idle in
        ``self.idle`` (below ``self.idle_weight``)."""
        rank = {u: k for k, u in enumerate(self.units)}
        # The last pass's figures, then any member's report, then the holder's report.
        measured = {rank[u]: t for u, t in draft.unit_weights.items() if u in rank}
        fresh: set[int] = set()
        by_holder: set[int] = set()
        for member_id in sorted(draft.members):
            for unit, unit_load in draft.members[member_id].load.units.items():
                k = rank.get(unit)
                if k is None or k in by_holder:
                    continue
                if draft.owners.get(unit) == member_id:
                    by_holder.add(k)
                elif k in fresh:
                    continue
                reading = unit_load.throughput
                # Within the tolerance of the last pass's figure, it is noise.
                kept = draft.unit_weights.get(unit)
                if kept is not None and abs(reading - kept) <= self.tolerance * kept:
                    reading = kept
                measured[k] = reading
                fresh.add(k)
        # A unit that changed hands lately weighs what it weighed then.
        self.settling: dict[WorkUnit, tuple[float, float]] = {}
        for unit, (weight, until) in draft.settling.items():
            k = rank.get(unit)
            if k is not None and until > self.clock:
                self.settling[unit] = (weight, until)
                measured[k] = weight
        self.measured = {self.units[k]: t for k, t in measured.items()}
        positive = [t for t in measured.values() if t > 0]
        # Zero-throughput units weigh a small fraction of a typical busy one.
        busy = self.busy_weight = median(positive) if positive else 1.0
        floor = busy * _WEIGHT_FLOOR
        default = max(median(measured.values()) if measured else 1.0, floor)
        weights = [max(measured.get(k, default), floor) for k in range(len(self.units))]
        self.idle_weight = busy * _IDLE_SHARE
        self.idle = [w <= self.idle_weight for w in weights]
        return weights

    def _failing(self, draft: _Draft) -> set[str]:
        """The members to take as failing now; also records ``self.failing``, when each
        member was last seen failing (see "Failing members")."""
        config = draft.config
        # Each member's share of what it reads (its settled units) that it handles
        # successfully, if it reads more than an idle unit's worth.
        success: dict[str, float] = {}
        for member_id in self.ids:
            load = draft.members[member_id].load
            offered = math.fsum(
                unit_load.throughput
                for unit, unit_load in load.units.items()
                if draft.owners.get(unit) == member_id and unit not in self.settling
            )
            if offered > self.idle_weight:
                success[member_id] = min(1.0, load.records_per_s / offered)
        self.failing = {
            m: seen
            for m, seen in draft.failing.items()
            if m in draft.members and self.clock < seen + config.failure_memory_s
        }
        best = max(success.values(), default=0.0)
        if best >= _HEALTHY_SHARE:  # when nobody is healthy, nobody is singled out
            for member_id, share in success.items():
                if share < _FAILING_SHARE * best:
                    self.failing[member_id] = self.clock
                else:
                    self.failing.pop(member_id, None)
        return set(self.failing)

    def _capacities(self, draft: _Draft) -> list[float]:
        """Each member's capacity, in records/s (the unit of the weights)."""
        config = draft.config
        floor = config.min_capacity
        loads = [draft.members[m].load for m in self.ids]
        failing = self._failing(draft)
        speeds: dict[str, float] = {}
        # No member at min_measured_cpu: no signal, lightly loaded members are alike.
        if any(load.cpu >= config.min_measured_cpu for load in loads):
            for member_id, load in zip(self.ids, loads, strict=True):
                # Reading less than a typical busy unit, its CPU is mostly its baseline:
                # R / c said ~0 and it was given nothing more, ever.
                reading = load.records_per_s >= self.busy_weight
                if reading and load.cpu > 0 and member_id not in failing:
                    speeds[member_id] = load.records_per_s / max(load.cpu, floor)
        # Records/s at full CPU of a member whose speed is not measured: the median speed;
        # with none measured, nothing bounds a member with room: it could take everything.
        reference = (
            median(speeds[m] for m in self.ids if m in speeds)
            if speeds
            else max(math.fsum(self.weights), _EPS)
        )
        # What each member reads of the units it holds (releasing ones included).
        held = [0.0] * len(self.ids)
        for k, m in enumerate(self.holder):
            if m >= 0:
                held[m] += self.weights[k]
        clock = self.clock
        self.saturated_rates: dict[str, tuple[float, float]] = {}
        capacity = []
        for m, member_id in enumerate(self.ids):
            member = draft.members[member_id]
            cpu = member.load.cpu
            speed = speeds.get(member_id)
            if speed is None:
                base = reference * max(floor, 1.0 - cpu)
            else:
                base = speed * (cpu + max(floor, 1.0 - cpu))
            saturated = _saturated(member.load, config)
            if saturated and held[m] > 0:
                # It runs flat out: what it reads is all it can do.
                self.saturated_rates[member_id] = (held[m], member.last_heartbeat)
                capacity.append(min(self.load[m], held[m]) if self.load[m] > 0 else held[m])
                continue
            remembered = draft.saturated_rates.get(member_id)
            if (
                remembered is not None
                and clock < remembered[1] + config.saturation_memory_s
                and (saturated or member.load.records_per_s <= remembered[0])
            ):
                # Lately saturated at this rate (and not reading more since, with room):
                # having shed its units it looks idle, but it can take no more than that.
                self.saturated_rates[member_id] = remembered
                capacity.append(min(base, remembered[0]))
            else:
                capacity.append(base)
        # A failing member carries no more than one with no headroom (min_capacity).
        return [
            c * floor if member_id in failing else c
            for c, member_id in zip(capacity, self.ids, strict=True)
        ]

    def run(self) -> dict[WorkUnit, str]:
        if not all(self.idle):
            self._place_free()
            placed, loads = list(self.where), list(self.load)
            self._balance()
            if not self._worthwhile(loads):
                # An imbalance whole units cannot undo (or noise on one): stay put.
                self.where, self.load = placed, loads
        if any(self.idle):
            self._spread_idle()
        return {
            self.units[k]: self.ids[self.where[k]]
            for k in range(len(self.units))
            if self.where[k] != self.start[k]
        }

    def _place_free(self) -> None:
        """Busy units: heaviest first, each on the member with the lowest ratio after
        placing it."""
        free = [k for k in range(len(self.units)) if self.where[k] < 0 and not self.idle[k]]
        if not free:
            return
        free.sort(key=lambda k: (-self.weights[k], k))
        load, target = self.load, self.target
        # The heap key is (load + w) / target for a reference weight w >= the unit's; it
        # is rebuilt whenever the weights fall below half of it, so the choice is exact
        # for equal weights and near-exact otherwise, at O(log members) a unit.
        reference = -1.0
        heap: list[tuple[float, int]] = []
        for k in free:
            w = self.weights[k]
            if w < reference / 2 or reference < 0:
                reference = w
                heap = [((load[m] + reference) / target[m], m) for m in range(len(load))]
                heapq.heapify(heap)
            _, m = heapq.heappop(heap)
            self.where[k] = m
            load[m] += w
            heapq.heappush(heap, ((load[m] + reference) / target[m], m))

    def _worthwhile(self, before: list[float]) -> bool:
        """Whether balancing, which went from loads ``before`` to ``self.load``, lowered
        the largest deviation from target (``|load / target - 1|``) among the members
        whose load changed by more than the tolerance (times ``1 +`` the deviation
        left). Hysteresis: with units that do
        not divide evenly, the member holding one unit more is out of the band at every
        pass, and a move that only hands that extra unit on (or that noise on the
        measured weights makes look better by a hair) flapped the unit around."""
        changed = [m for m in range(len(self.ids)) if before[m] != self.load[m]]
        if not changed:
            return True
        target = self.target

        def deviation(loads: list[float]) -> float:
            return max(abs(loads[m] / target[m] - 1.0) for m in changed)

        # Relative: loads and targets are measured to within about the tolerance, so
        # a member at twice its target is known to within twice as much (a member
        # holding two units where others held one was handed on at 1.71 -> 1.57).
        after = deviation(self.load)
        return deviation(before) - after > self.tolerance * (1.0 + after) + _EPS

    def _balance(self) -> None:
        load, target = self.load, self.target
        low = 1.0 - self.tolerance - _EPS
        high = 1.0 + self.tolerance + _EPS
        outside = {m for m in range(len(self.ids)) if not low <= load[m] / target[m] <= high}
        if not outside:
            return
        # The members this pass is about: those outside the band. Finishing rounds off
        # only these, so that one member out of line does not make everyone else's
        # small drifts (or the dents repair left, within the band) move.
        self.involved = outside
        for k, m in enumerate(self.where):
            if not self.idle[k]:
                self._bucket(k, m).append((self.weights[k], k))
        for lists in (self.cheap, self.rest):
            for units in lists:
                units.sort()
        # Until neither phase moves, so that a second pass over the result moves nothing.
        for _ in range(len(self.units) + 1):  # a safety net; every move lowers the cost
            self._repair(low, high)
            if not self._finish(low, high):
                return

    def _repair(self, low: float, high: float) -> None:
        """Move units while some member is outside the tolerance band."""
        members = range(len(self.ids))
        load, target = self.load, self.target

        def ratio(m: int) -> float:
            return load[m] / target[m]

        budget = 4 * (len(self.units) + len(self.ids))  # a safety net; never reached
        stuck_donors: set[int] = set()
        stuck_receivers: set[int] = set()
        while budget > 0:
            donors = [m for m in members if m not in stuck_donors]
            receivers = [m for m in members if m not in stuck_receivers]
            if not donors or not receivers:
                return
            top = max(donors, key=lambda m: (ratio(m), -m))
            bottom = min(receivers, key=lambda m: (ratio(m), m))
            if ratio(top) > high:
                # Shed from the most loaded member, to the least loaded that can take.
                for m in sorted(receivers, key=lambda m: (ratio(m), m)):
                    if m != top and self._move(top, m, low, high):
                        break
                else:
                    stuck_donors.add(top)
                    continue
            elif ratio(bottom) < low:
                # Feed the least loaded member, from the most loaded that can give.
                for m in sorted(donors, key=lambda m: (-ratio(m), m)):
                    if m != bottom and self._move(m, bottom, low, high):
                        break
                else:
                    stuck_receivers.add(bottom)
                    continue
            else:
                return
            budget -= 1
            stuck_donors.clear()
            stuck_receivers.clear()

    def _finish(self, low: float, high: float) -> bool:
        """Bring members nearer their targets, rounding to the nearest unit.

        A unit moves from a member above its target to one below when both are off by
        more than half of it, neither leaves the band, and one of them was outside the
        band when the pass began; each such move also lowers the repair cost. Returns
        whether anything moved.
        """
        members = range(len(self.ids))
        load, target = self.load, self.target
        moved = False
        for _ in range(len(self.units) + len(self.ids)):  # a safety net
            # Only a member off by more than half of some unit can take part.
            lightest = [self._lightest_weight(m) for m in members]
            donors = [m for m in members if 2.0 * (load[m] - target[m]) > lightest[m]]
            if not donors:
                break
            smallest = min(lightest[m] for m in donors)
            receivers = [m for m in members if 2.0 * (target[m] - load[m]) > smallest]
            donors.sort(key=lambda m: (target[m] - load[m], m))  # largest excess first
            receivers.sort(key=lambda m: (load[m] - target[m], m))  # largest deficit first
            if not any(self._finish_one(r, donors, low, high) for r in receivers):
                break
            moved = True
        return moved

    def _finish_one(self, receiver: int, donors: list[int], low: float, high: float) -> bool:
        load, target = self.load, self.target
        deficit = target[receiver] - load[receiver]
        for donor in donors:
            if receiver not in self.involved and donor not in self.involved:
                continue
            fit = min(load[donor] - target[donor], deficit)
            limit = min(
                2.0 * fit * (1.0 - _EPS),
                high * target[receiver] - load[receiver],
                load[donor] - low * target[donor],
            )
            if self._shift(donor, receiver, min(fit * (1.0 + _EPS), limit)):
                return True
            if self._lightest(donor, receiver, limit):
                return True
        return False

    def _spread_idle(self) -> None:
        """Idle units by count, an even share each (none for a failing member): free
        ones each to the member furthest below its share; then, while the member
        furthest above its share and the one furthest below it differ by more than
        ``1 + slack`` units, one unit from the first to the second (one already moving
        first). Each move lowers
        ``sum((count_m - quota_m) ** 2)``; a second pass moves nothing."""
        members = range(len(self.ids))
        quota = self.idle_quota
        excess = [-q for q in quota]
        # Per member, its idle units: already moving (or new) ones, then the others.
        cheap: list[list[int]] = [[] for _ in members]
        rest: list[list[int]] = [[] for _ in members]
        free = []
        for k, m in enumerate(self.where):
            if not self.idle[k]:
                continue
            if m < 0:
                free.append(k)
                continue
            excess[m] += 1.0
            at_rest = self.holder[k] == m and not self.was_pending[k]
            (rest if at_rest else cheap)[m].append(k)
        if free:
            heap = [(excess[m], m) for m in members]
            heapq.heapify(heap)
            for k in free:
                _, m = heapq.heappop(heap)
                self.where[k] = m
                cheap[m].append(k)
                excess[m] += 1.0
                heapq.heappush(heap, (excess[m], m))
        idle_units = sum(self.idle)
        # Hysteresis, as the tolerance band for weights: with a few idle units, counts
        # within one and a half of their shares stay; with many, within the tolerance.
        slack = max(0.5, self.tolerance * idle_units / len(self.ids))
        for _ in range(idle_units + 1):  # a safety net; every move lowers the cost
            donor = max(members, key=lambda m: (excess[m], -m))
            receiver = min(members, key=lambda m: (excess[m], m))
            if excess[donor] - excess[receiver] <= 1.0 + slack + _EPS:
                return
            k = (cheap[donor] or rest[donor]).pop()
            self.where[k] = receiver
            excess[donor] -= 1.0
            excess[receiver] += 1.0
            if self.holder[k] == receiver and not self.was_pending[k]:
                rest[receiver].append(k)  # back where it is at rest
            else:
                cheap[receiver].append(k)

    def _lightest_weight(self, m: int) -> float:
        heads = [units[0][0] for units in (self.cheap[m], self.rest[m]) if units]
        return min(heads) if heads else math.inf

    def _bucket(self, k: int, m: int) -> list[tuple[float, int]]:
        at_rest = self.holder[k] == m and not self.was_pending[k]
        return self.rest[m] if at_rest else self.cheap[m]

    def _move(self, src: int, dst: int, low: float, high: float) -> bool:
        """Move the best-fitting unit from ``src`` to ``dst`` if that lowers the cost."""
        load, target = self.load, self.target
        # Moving x from src to dst equalises their ratios; any w < 2x lowers
        # sum(load^2 / target), the quantity every repair move must decrease.
        gap = load[src] / target[src] - load[dst] / target[dst]
        equalising = gap / (1.0 / target[src] + 1.0 / target[dst])
        if equalising <= _EPS * (1.0 + target[src]):
            return False
        limit = 2.0 * equalising * (1.0 - _EPS)
        # What src can give: its excess over target, else its room above the band's
        # floor; what dst can take, likewise. The heaviest unit within both moves.
        excess = load[src] - target[src]
        give = excess if excess > 0 else load[src] - low * target[src]
        deficit = target[dst] - load[dst]
        take = deficit if deficit > 0 else high * target[dst] - load[dst]
        ideal = min(give, take) if give > 0 and take > 0 else equalising
        if self._shift(src, dst, min(ideal * (1.0 + _EPS), limit)):
            return True
        # Every unit is heavier than the ideal: the lightest one, if it still helps.
        return self._lightest(src, dst, limit)

    def _shift(self, src: int, dst: int, amount: float) -> bool:
        """Move the heaviest unit of ``src`` weighing at most ``amount`` (moving ones first)."""
        for units in (self.cheap[src], self.rest[src]):
            position = bisect_right(units, (amount, len(self.units))) - 1
            if position >= 0:
                self._transfer(units, position, dst)
                return True
        return False

    def _lightest(self, src: int, dst: int, limit: float) -> bool:
        """Move the lightest unit of ``src`` if it weighs less than ``limit``."""
        candidates = [units for units in (self.cheap[src], self.rest[src]) if units]
        if not candidates:
            return False
        lightest = min(candidates, key=lambda units: units[0][0])
        if lightest[0][0] >= limit:
            return False
        self._transfer(lightest, 0, dst)
        return True

    def _transfer(self, units: list[tuple[float, int]], position: int, dst: int) -> None:
        w, k = units.pop(position)
        self.load[self.where[k]] -= w
        self.where[k] = dst
        self.load[dst] += w
        insort(self._bucket(k, dst), (w, k))
