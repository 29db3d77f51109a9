"""Autothrottle maths: replication throttle rates for running reassignments. Pure.

The baseline is kafka-kit's autothrottle headroom formula. For a broker in a role
(leader = source of replicas, measured on network out; follower = destination,
measured on network in)::

    non_replication = max(utilisation - replication, 0)
    over_capacity   = max(utilisation - capacity, 0)
    headroom        = (capacity - non_replication - over_capacity) * fraction
    rate            = clamp(headroom, minimum, maximum)

``replication`` is the broker's measured replication throughput in that direction
when the caller has it (Kafka's ``ReplicationBytesOutPerSec`` /
``ReplicationBytesInPerSec``); otherwise it is estimated, as kafka-kit does, by the
throttle currently in force (replication is assumed to run at its throttle). Client
traffic therefore always comes first and replication gets a share of what is left,
never less than ``minimum``.

A new rate replaces the one in force only when it differs by more than
``change_threshold`` (relative), so brokers are not reconfigured on every small
wobble of the metrics.

The topic side: Kafka applies the broker rates only to replicas listed in each
topic's ``leader.replication.throttled.replicas`` /
``follower.replication.throttled.replicas`` (``"partition:broker,..."``). As
``kafka-reassign-partitions`` does, the leader list holds every current replica of a
moving partition (any of them may be the one serving the copy) and the follower list
holds the replicas being added.

Rates are bytes per second, as integers, the unit Kafka's configs take.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from streamplane.core.mapper.models import PartitionMap
from streamplane.exceptions import ConfigError

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"


class ThrottleError(ConfigError):
    """Invalid throttle input: limits, capacities or traffic figures."""


def _check_rate(name: str, value: float | None, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if (
        value is None
        or isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ThrottleError(f"{name} must be a finite number >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class BrokerTraffic:
    """Measured network throughput of one broker, bytes/s."""

    broker_id: int
    bytes_in: float
    bytes_out: float
    replication_in: float | None = None
    """Measured follower (fetch) replication traffic in; None: estimate it."""
    replication_out: float | None = None
    """Measured leader replication traffic out; None: estimate it."""

    def __post_init__(self) -> None:
        _check_rate("bytes_in", self.bytes_in)
        _check_rate("bytes_out", self.bytes_out)
        _check_rate("replication_in", self.replication_in, allow_none=True)
        _check_rate("replication_out", self.replication_out, allow_none=True)


@dataclass(frozen=True, slots=True)
class ThrottleRates:
    """The throttles currently in force on a broker (None: not set)."""

    leader: int | None = None
    follower: int | None = None


@dataclass(frozen=True, slots=True)
class ThrottleLimits:
    """Bounds of the computation.

    ``source_fraction`` / ``destination_fraction`` are the share of free capacity a
    source / destination may spend on replication (kafka-kit's ``srcMax`` and
    ``dstMax``, as fractions instead of percentages).
    """

    minimum: float
    maximum: float | None = None
    source_fraction: float = 0.9
    destination_fraction: float = 0.9
    change_threshold: float = 0.1

    def validate(self) -> None:
        _check_rate("minimum", self.minimum)
        if self.minimum <= 0:
            raise ThrottleError("minimum must be greater than 0")
        _check_rate("maximum", self.maximum, allow_none=True)
        if self.maximum is not None and self.maximum < self.minimum:
            raise ThrottleError(f"maximum {self.maximum} is below minimum {self.minimum}")
        for name in ("source_fraction", "destination_fraction"):
            value = getattr(self, name)
            _check_rate(name, value)
            if not 0 < value <= 1:
                raise ThrottleError(f"{name} must satisfy 0 < x <= 1, got {value!r}")
        _check_rate("change_threshold", self.change_threshold)


@dataclass(frozen=True, slots=True)
class ReassignmentRoles:
    """Brokers sending (sources) and receiving (destinations) replica data."""

    sources: frozenset[int]
    destinations: frozenset[int]

    @property
    def brokers(self) -> tuple[int, ...]:
        return tuple(sorted(self.sources | self.destinations))


@dataclass(frozen=True, slots=True)
class BrokerThrottle:
    """The throttle decision for one broker.

    ``*_rate`` is the rate that should be in force (None when the broker does not
    have that role); ``*_changed`` says whether it differs from the one in force,
    i.e. whether the broker config must be written.
    """

    broker_id: int
    leader_rate: int | None
    follower_rate: int | None
    leader_changed: bool
    follower_changed: bool

    def configs(self) -> dict[str, str]:
        """Broker configs to write (changed rates only)."""
        out: dict[str, str] = {}
        if self.leader_changed and self.leader_rate is not None:
            out[LEADER_RATE] = str(self.leader_rate)
        if self.follower_changed and self.follower_rate is not None:
            out[FOLLOWER_RATE] = str(self.follower_rate)
        return out


@dataclass(frozen=True, slots=True)
class ThrottlePlan:
    """Per-broker decisions (ascending id), brokers to unthrottle, and warnings."""

    brokers: tuple[BrokerThrottle, ...]
    removals: tuple[int, ...]
    warnings: tuple[str, ...]

    def broker_configs(self) -> dict[int, dict[str, str]]:
        """Broker id -> configs to write, for brokers with a change."""
        return {b.broker_id: c for b in self.brokers if (c := b.configs())}


def replication_headroom(
    capacity: float,
    utilisation: float,
    replication: float,
    *,
    fraction: float,
    minimum: float,
    maximum: float | None = None,
) -> float:
    """kafka-kit's headroom formula, clamped to ``[minimum, maximum]``."""
    non_replication = max(utilisation - replication, 0.0)
    over_capacity = max(utilisation - capacity, 0.0)
    headroom = (capacity - non_replication - over_capacity) * fraction
    rate = max(headroom, minimum)
    return rate if maximum is None else min(rate, maximum)


def _decide(proposed: float, current: int | None, threshold: float) -> tuple[int, bool]:
    rate = int(proposed)
    if current is None or current <= 0:
        return rate, True
    if abs(rate - current) / current > threshold:
        return rate, True
    return current, False


def compute_throttles(
    traffic: Mapping[int, BrokerTraffic],
    capacity: float | Mapping[int, float],
    roles: ReassignmentRoles,
    limits: ThrottleLimits,
    previous: Mapping[int, ThrottleRates] | None = None,
) -> ThrottlePlan:
    """Throttle rates for every broker taking part in a reassignment.

    ``capacity`` is the network capacity in bytes/s, one figure for all brokers or
    one per broker. A broker without traffic figures or capacity keeps the throttle
    in force, or gets ``minimum`` when none is (kafka-kit's failure mode), with a
    warning. Brokers throttled before but no longer taking part are listed in
    ``removals``.
    """
    limits.validate()
    previous = previous or {}
    if not isinstance(capacity, Mapping):
        _check_rate("capacity", capacity)
    warnings: list[str] = []
    decisions: list[BrokerThrottle] = []
    for bid in roles.brokers:
        prev = previous.get(bid, ThrottleRates())
        cap = capacity.get(bid) if isinstance(capacity, Mapping) else capacity
        seen = traffic.get(bid)
        if cap is not None:
            _check_rate(f"capacity of broker {bid}", cap)
        rates: dict[str, tuple[int | None, bool]] = {}
        for role, is_in, fraction in (
            ("leader", bid in roles.sources, limits.source_fraction),
            ("follower", bid in roles.destinations, limits.destination_fraction),
        ):
            current = prev.leader if role == "leader" else prev.follower
            if not is_in:
                rates[role] = (None, False)
                continue
            if seen is None or cap is None:
                missing = "traffic figures" if seen is None else "capacity figure"
                fallback = current if current is not None else int(limits.minimum)
                warnings.append(
                    f"broker {bid} has no {missing}; {role} throttle "
                    f"{'kept at' if current is not None else 'set to the minimum'} {fallback}"
                )
                rates[role] = (fallback, current is None)
                continue
            if role == "leader":
                used, measured = seen.bytes_out, seen.replication_out
            else:
                used, measured = seen.bytes_in, seen.replication_in
            replication = measured if measured is not None else float(current or 0)
            proposed = replication_headroom(
                cap,
                used,
                replication,
                fraction=fraction,
                minimum=limits.minimum,
                maximum=limits.maximum,
            )
            rates[role] = _decide(proposed, current, limits.change_threshold)
        (leader, leader_changed), (follower, follower_changed) = rates["leader"], rates["follower"]
        decisions.append(BrokerThrottle(bid, leader, follower, leader_changed, follower_changed))
    taking_part = set(roles.brokers)
    removals = tuple(
        sorted(
            bid
            for bid, rates in previous.items()
            if bid not in taking_part and (rates.leader is not None or rates.follower is not None)
        )
    )
    return ThrottlePlan(tuple(decisions), removals, tuple(warnings))


@dataclass(frozen=True, slots=True)
class ReplicaChange:
    """One partition's replica list now and after the reassignment."""

    topic: str
    partition: int
    current: tuple[int, ...]
    target: tuple[int, ...]

    @property
    def added(self) -> tuple[int, ...]:
        """Replicas that must be copied (in target order)."""
        now = set(self.current)
        return tuple(b for b in self.target if b not in now)


def replica_changes(current: PartitionMap, target: PartitionMap) -> list[ReplicaChange]:
    """Partitions of ``target`` whose replica list differs from ``current``."""
    out = []
    for p in target:
        old = current.get(p.topic, p.partition)
        if old is None:
            raise ThrottleError(f"{p.topic}-{p.partition} is not in the current map")
        if old.replicas != p.replicas:
            out.append(ReplicaChange(p.topic, p.partition, old.replicas, p.replicas))
    return out


def reassignment_roles(changes: Iterable[ReplicaChange]) -> ReassignmentRoles:
    """Sources: current replicas of partitions that copy data; destinations: the copies."""
    sources: set[int] = set()
    destinations: set[int] = set()
    for change in changes:
        added = change.added
        if added:
            sources.update(change.current)
            destinations.update(added)
    return ReassignmentRoles(frozenset(sources), frozenset(destinations))


def throttled_replicas(changes: Iterable[ReplicaChange]) -> dict[str, dict[str, str]]:
    """Topic -> the two ``*.replication.throttled.replicas`` config values.

    Only partitions that copy data appear (a reorder or a shrink copies nothing);
    entries are ``partition:broker`` sorted by partition then broker.
    """
    leaders: dict[str, set[tuple[int, int]]] = {}
    followers: dict[str, set[tuple[int, int]]] = {}
    for change in changes:
        added = change.added
        if not added:
            continue
        leaders.setdefault(change.topic, set()).update(
            (change.partition, b) for b in change.current
        )
        followers.setdefault(change.topic, set()).update((change.partition, b) for b in added)
    return {
        topic: {
            LEADER_REPLICAS: ",".join(f"{p}:{b}" for p, b in sorted(leaders[topic])),
            FOLLOWER_REPLICAS: ",".join(f"{p}:{b}" for p, b in sorted(followers[topic])),
        }
        for topic in sorted(leaders)
    }
