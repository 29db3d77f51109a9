"""The rules of live failover, pure: cluster health, standby choice, sealing, retiring.

The control plane's background tasks (``controlplane.failover_runtime``) gather the facts
(probe results, producer heartbeats, end offsets, committed offsets) and ask these
functions what to do; nothing here does I/O or reads a clock.

- **Health** of a cluster is ``ok`` after a successful probe, ``degraded`` while probes
  fail for less than the threshold or succeed only in part (some brokers take no
  writes: the cluster still does, so it never becomes ``down`` that way), ``down``
  once probes have failed for at least the threshold (seconds since the first failed
  probe of the streak), ``unknown`` before the first probe.
- **Standby**: where the streams of a down cluster go, in this order: the failed
  cluster's tag ``standby.<stream>``, then its tag ``standby`` (comma-separated, in order
  of preference), then a cluster with the same ``region`` tag, then any cluster; only
  clusters whose health is ``ok`` qualify, and ties go to the name (deterministic).
- **Sealing**: a draining segment is sealed once every live producer of the stream
  reports an epoch at or above the segment's successor (the epoch of the failover that
  drained it) and the segment has drained for at least ``settle_s`` (in-flight batches
  land), or after ``grace_s`` whatever the producers say.
- **Retiring**: a sealed segment is retired once every group that reads the stream has
  settled it: the group reported it drained, or its committed offset reaches the end
  offset of every non-empty partition. A stream no group has read is never retired
  automatically (an operator does it).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from streamplane.core.routing import RoutingTable, Segment, SegmentState

STANDBY_TAG = "standby"
REGION_TAG = "region"


class ClusterHealth(StrEnum):
    UNKNOWN = "unknown"
    OK = "ok"
    DEGRADED = "degraded"
    DOWN = "down"


@dataclass(frozen=True)
class HealthState:
    """What the probes of one cluster have shown (times in monotonic seconds)."""

    health: ClusterHealth = ClusterHealth.UNKNOWN
    since: float | None = None  # when ``health`` began
    failing_since: float | None = None  # start of the first failed probe of the streak
    last_error: str | None = None  # the failing streak's latest error; None when ok
    consecutive_failures: int = 0


def observe_probe(
    state: HealthState,
    *,
    ok: bool,
    started: float,
    now: float,
    threshold_s: float,
    error: str | None = None,
    partial: str | None = None,
) -> HealthState:
    """The state after one probe that began at ``started`` and ended at ``now``; with
    ``ok``, ``partial`` says what part of it failed (the cluster is degraded, and its
    failing streak, if any, ends: it takes writes)."""
    if ok and partial is not None:
        since = state.since if state.health is ClusterHealth.DEGRADED else now
        return HealthState(ClusterHealth.DEGRADED, since=since, last_error=partial)
    if ok:
        if state.health is ClusterHealth.OK:
            return state
        # Back to ok: the error is no longer the cluster's state (it stays in the audit
        # log's cluster.degraded/down entries).
        return HealthState(ClusterHealth.OK, since=now)
    failing_since = state.failing_since if state.failing_since is not None else started
    health = ClusterHealth.DOWN if now - failing_since >= threshold_s else ClusterHealth.DEGRADED
    since = state.since if health is state.health else now
    return replace(
        state,
        health=health,
        since=since,
        failing_since=failing_since,
        last_error=error or "probe failed",
        consecutive_failures=state.consecutive_failures + 1,
    )


def choose_standby(
    failed: str,
    stream: str,
    tags: Mapping[str, Mapping[str, str]],
    health: Mapping[str, ClusterHealth],
) -> str | None:
    """The cluster a stream of the down cluster ``failed`` moves to, or None if none fits.

    ``tags`` maps every registered cluster to its tags; ``health`` to its health.
    """

    def healthy(name: str) -> bool:
        return name != failed and name in tags and health.get(name) is ClusterHealth.OK

    own = tags.get(failed, {})
    for key in (f"{STANDBY_TAG}.{stream}", STANDBY_TAG):
        for name in (n.strip() for n in own.get(key, "").split(",")):
            if name and healthy(name):
                return name
    region = own.get(REGION_TAG)
    candidates = sorted(n for n in tags if healthy(n))
    if region is not None:
        same = [n for n in candidates if tags[n].get(REGION_TAG) == region]
        if same:
            return same[0]
    return candidates[0] if candidates else None


def successor_epoch(table: RoutingTable, segment: Segment) -> int | None:
    """The epoch of the segment that took over ``segment``'s lane (the failover's epoch)."""
    later = [s.epoch for s in table.segments if s.lane == segment.lane and s.epoch > segment.epoch]
    return min(later) if later else None


def seal_reason(
    table: RoutingTable,
    segment: Segment,
    producer_epochs: Mapping[str, int],
    draining_for_s: float,
    *,
    settle_s: float,
    grace_s: float,
) -> str | None:
    """Why ``segment`` (draining) may be sealed now, or None to keep it draining.

    ``producer_epochs`` are the epochs reported by the stream's live producers.
    """
    if segment.state is not SegmentState.DRAINING:
        return None
    successor = successor_epoch(table, segment)
    if successor is None:
        return None
    if draining_for_s >= grace_s:
        return f"grace period of {grace_s:g}s passed"
    if draining_for_s < settle_s:
        return None
    behind = sorted(p for p, e in producer_epochs.items() if e < successor)
    if behind:
        return None
    if not producer_epochs:
        return f"no live producer; drained for {draining_for_s:.1f}s"
    return f"all {len(producer_epochs)} live producers at epoch >= {successor}"


@dataclass(frozen=True)
class RetireCheck:
    retire: bool
    groups: tuple[str, ...]  # the groups that read the stream
    pending: tuple[str, ...]  # those that have not settled the segment yet
    reason: str


def retire_check(
    end_offsets: Mapping[int, int],
    committed: Mapping[str, Mapping[int, int]],
    reported: Collection[str],
) -> RetireCheck:
    """May a sealed segment with ``end_offsets`` be retired?

    ``committed`` is, for every group that reads the stream (committed on any of its
    segments), its committed offsets on this segment's partitions (missing: none);
    ``reported`` the groups that reported the segment drained.
    """
    groups = tuple(sorted(set(committed) | set(reported)))
    if not groups:
        return RetireCheck(False, (), (), "no group has read the stream: retire it by hand")
    pending = tuple(
        g
        for g in groups
        if g not in reported
        and any(end > 0 and committed.get(g, {}).get(p, -1) < end for p, end in end_offsets.items())
    )
    if pending:
        return RetireCheck(False, groups, pending, f"not settled by {', '.join(pending)}")
    return RetireCheck(True, groups, (), f"settled by every group ({', '.join(groups)})")
