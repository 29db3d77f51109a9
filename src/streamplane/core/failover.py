"""The rules of live failover, pure: cluster health, standby choice, sealing, retiring.

The control plane's background tasks (``controlplane.failover_runtime``) gather the facts
(probe results, producer heartbeats, end offsets, committed offsets) and ask these
functions what to do; nothing here does I/O or reads a clock.

- **Probe**: a probe writes to every partition of the health topic twice, once as the
  streams do (``acks=all``, bound by ``min.insync.replicas``) and once to the leader
  only (``acks=1``); ``judge_probe`` reads the outcome: ``ok`` when every partition
  took the ``acks=all`` write, ``partial`` when some did (the cluster takes writes),
  ``failed`` when none did and no partition has ``min.insync.replicas`` of its replicas
  on brokers that answer (two brokers of three dead: nothing can take a stream's write
  until they return), else ``stalled`` (the leaders answer but nothing is fully
  acknowledged: a dead broker is still in the in-sync replicas until Kafka fences it,
  its broker session timeout, 9 s by default).
- **Health** of a cluster is ``ok`` after a successful probe, ``degraded`` while probes
  fail for less than the threshold or succeed only in part (some partitions take no
  writes: the cluster still does, so it never becomes ``down`` that way), ``down``
  once probes have failed for at least the threshold (seconds since the first failed
  probe of the streak; ``STALL_THRESHOLD_S`` at least while the latest probe stalled),
  ``unknown`` before the first probe.
- **Trust**: the streams of a down cluster are failed over only when the fault is
  plainly that cluster's (``failover_hold``). A target must have been ``ok`` without a
  break for at least the threshold (``trusted_clusters``: a cluster that has just come
  back is not trusted yet). And when no other cluster has answered without a break
  since the down cluster began failing (every cluster failed at once: the control plane
  cut off from the fleet, the whole fleet restarting, or a control plane that has just
  started), the fleet gets a recovery window from the first cluster's answer to come
  back: the first cluster back does not take every stream of the others.
- **Standby**: where the streams of a down cluster go, in this order: the failed
  cluster's tag ``standby.<stream>``, then its tag ``standby`` (comma-separated, in order
  of preference), then a cluster with the same ``region`` tag, then any cluster; only
  the trusted clusters qualify, and ties go to the name (deterministic).
- **Sealing**: a draining segment is sealed once every live producer of the stream
  reports an epoch at or above the segment's successor (the epoch of the failover that
  drained it) and the segment has drained for at least ``settle_s`` (in-flight batches
  land), or after ``grace_s`` whatever the producers say.
- **Retiring**: a sealed segment is retired once every group that reads the stream has
  settled it: the group reported it drained, or its committed offset reaches the end
  offset of every non-empty partition. A stream no group has read is never retired
  automatically (an operator does it). The groups come from Kafka's ListGroups, which
  lists a group only on its coordinator (the leader of its ``__consumer_offsets``
  partition): a listing that missed a coordinator is not concluded on
  (``group_listing_gap``), or a group that only commits (never heartbeats) and had not
  finished a segment would see it retired unread.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from streamplane.core.routing import RoutingTable, Segment, SegmentState

STANDBY_TAG = "standby"
REGION_TAG = "region"
# How long probes may stall (leaders answer, no write fully acknowledged) before the
# cluster is down: past Kafka's broker session timeout (9 s), after which the controller
# fences a dead broker and takes it out of the in-sync replicas, and a new controller's
# election (a broker of three killed is also a controller voter). Measured on the local
# fleet: 7-12 s from a broker's SIGKILL or SIGSTOP to acks=all writes going through.
STALL_THRESHOLD_S = 20.0


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


class ProbeVerdict(StrEnum):
    OK = "ok"  # every health partition took an acks=all write
    PARTIAL = "partial"  # some did: the cluster takes writes (degraded)
    STALLED = "stalled"  # none did, but the leaders answer and may recover the ISRs
    FAILED = "failed"  # none did, and no partition can until brokers return


@dataclass(frozen=True)
class PartitionProbe:
    """One health partition in one probe: where it lives (per the latest metadata) and
    which of its writes were acknowledged within the probe's timeout (a report that
    comes later counts for no probe)."""

    leader: int | None  # None: no leader
    replicas: tuple[int, ...]
    committed: bool  # its acks=all write was acknowledged
    leader_answered: bool  # its acks=1 write was acknowledged
    error: str | None = None  # why the acks=all write was not


@dataclass(frozen=True)
class ProbeJudgement:
    verdict: ProbeVerdict
    detail: str | None = None  # what failed; None when ok


def judge_probe(
    partitions: Mapping[int, PartitionProbe],
    live_brokers: Collection[int],
    min_insync: int,
    *,
    topic: str,
    timeout_s: float,
    metadata_answered: bool = True,
) -> ProbeJudgement:
    """What one probe of the health ``topic`` says about its cluster.

    ``live_brokers`` are the brokers the cluster's metadata lists; ``min_insync`` is the
    topic's ``min.insync.replicas``. A broker that leads a partition whose ``acks=1``
    write was not acknowledged counts as not answering; a partition can take an
    ``acks=all`` write again only if ``min_insync`` of its replicas are on brokers not
    known to be silent. ``metadata_answered`` False: the probe's metadata read failed
    (``live_brokers`` are an earlier read's); with no leader answering either, nothing
    in the cluster answered: failed.
    """
    if not partitions:
        return ProbeJudgement(ProbeVerdict.FAILED, f"{topic} has no partition")
    missed = {p: probe for p, probe in sorted(partitions.items()) if not probe.committed}
    if not missed:
        return ProbeJudgement(ProbeVerdict.OK)
    first, first_probe = next(iter(missed.items()))
    why = first_probe.error or "no acknowledgement"
    if len(missed) < len(partitions):
        return ProbeJudgement(
            ProbeVerdict.PARTIAL,
            f"{len(missed)} of {len(partitions)} {topic} partitions took no acks=all "
            f"write in {timeout_s:g}s (partition {first}: {why})",
        )
    silent = {
        probe.leader
        for probe in partitions.values()
        if probe.leader is not None and not probe.leader_answered
    }
    live = set(live_brokers) - silent
    recoverable = [
        p
        for p, probe in partitions.items()
        if sum(1 for r in probe.replicas if r in live) >= min_insync
    ]
    answered = sum(1 for probe in partitions.values() if probe.leader_answered)
    nothing_answered = answered == 0 and not metadata_answered
    if nothing_answered or not recoverable:
        cause = (
            "no broker answered (metadata, leaders)"
            if nothing_answered
            else f"brokers {_ids(silent)} do not answer: no partition has "
            f"min.insync.replicas ({min_insync}) of its replicas left"
        )
        return ProbeJudgement(
            ProbeVerdict.FAILED,
            f"no {topic} partition took an acks=all write in {timeout_s:g}s, and {cause} "
            f"(partition {first}: {why})",
        )
    silent_part = f" (brokers {_ids(silent)} do not)" if silent else ""
    return ProbeJudgement(
        ProbeVerdict.STALLED,
        f"no {topic} partition took an acks=all write in {timeout_s:g}s; {answered} of "
        f"{len(partitions)} leaders answered{silent_part}, enough brokers are left for "
        f"min.insync.replicas ({min_insync}): a lost broker not fenced yet? "
        f"(partition {first}: {why})",
    )


class ProbeStall(str):
    """What a probe that stalled (``ProbeVerdict.STALLED``) returns: what failed, as a
    partial probe says it, marked as a stall (the cluster fails for now, but is down only
    after ``STALL_THRESHOLD_S``)."""

    __slots__ = ()


def _ids(brokers: Collection[int]) -> str:
    return ", ".join(str(b) for b in sorted(brokers))


def observe_probe(
    state: HealthState,
    *,
    ok: bool,
    started: float,
    now: float,
    threshold_s: float,
    error: str | None = None,
    partial: str | None = None,
    stalled: bool = False,
    stall_threshold_s: float = STALL_THRESHOLD_S,
) -> HealthState:
    """The state after one probe that began at ``started`` and ended at ``now``; with
    ``ok``, ``partial`` says what part of it failed (the cluster is degraded, and its
    failing streak, if any, ends: it takes writes). A failed probe that ``stalled``
    (``ProbeVerdict.STALLED``) makes the cluster down only once the streak has lasted
    ``stall_threshold_s`` too (Kafka may still recover the in-sync replicas)."""
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
    down_after = max(threshold_s, stall_threshold_s) if stalled else threshold_s
    health = ClusterHealth.DOWN if now - failing_since >= down_after else ClusterHealth.DEGRADED
    since = state.since if health is state.health else now
    return replace(
        state,
        health=health,
        since=since,
        failing_since=failing_since,
        last_error=error or "probe failed",
        consecutive_failures=state.consecutive_failures + 1,
    )


def answering_since(state: HealthState) -> float | None:
    """Since when the cluster has answered its probes (``ok``, or ``degraded`` by a
    probe that succeeded in part), None while its probes fail or before the first."""
    answering = state.health is ClusterHealth.OK or (
        state.health is ClusterHealth.DEGRADED and state.failing_since is None
    )
    return state.since if answering else None


def trusted_clusters(
    states: Mapping[str, HealthState], now: float, threshold_s: float
) -> frozenset[str]:
    """The clusters that may take a down cluster's streams: ``ok`` without a break for
    at least ``threshold_s`` (as long as a cluster must fail to be down)."""
    return frozenset(
        name
        for name, state in states.items()
        if state.health is ClusterHealth.OK
        and state.since is not None
        and now - state.since >= threshold_s
    )


class HoldReason(StrEnum):
    """Why a down cluster's streams stay where they are for now (``failover_hold``)."""

    NOT_DOWN = "not down"
    NO_TRUSTED_TARGET = "no trusted target"
    FLEET_OUTAGE = "every cluster failed at once"


@dataclass(frozen=True)
class FailoverHold:
    reason: HoldReason
    detail: str  # one line for the log


def failover_hold(
    failed: str,
    states: Mapping[str, HealthState],
    now: float,
    threshold_s: float,
    recovery_s: float,
) -> FailoverHold | None:
    """Why the streams of ``failed`` are not to be failed over now, or None when they
    are. ``states`` holds every probed cluster's health, ``failed``'s included.

    ``failed`` must be ``down`` and some other cluster trusted (``trusted_clusters``).
    That is all when another cluster has answered without a break since ``failed``
    began failing: the control plane reached the fleet, and the fault is ``failed``'s.
    Otherwise every cluster may have failed at once (the control plane cut off from the
    fleet, the whole fleet restarting, a control plane just started): the failures of
    that time say nothing about ``failed``, and the fleet gets ``recovery_s`` from the
    first cluster's answer to come back; ``failed`` is failed over only if it still
    fails then.
    """
    state = states.get(failed, HealthState())
    if state.health is not ClusterHealth.DOWN or state.failing_since is None:
        return FailoverHold(HoldReason.NOT_DOWN, f"{failed} is {state.health.value}")
    others = {name: s for name, s in states.items() if name != failed}
    if not trusted_clusters(others, now, threshold_s):
        detail = f"no other cluster has been ok for {threshold_s:g}s"
        return FailoverHold(HoldReason.NO_TRUSTED_TARGET, detail)
    failing_since = state.failing_since
    # Not empty: the trusted clusters answer.
    first_back = min(t for t in map(answering_since, others.values()) if t is not None)
    if first_back <= failing_since:
        return None  # the control plane reached the fleet all along: the fault is failed's
    back_for = now - first_back
    if back_for >= recovery_s:
        return None
    detail = (
        f"no other cluster has answered without a break since {failed} began failing "
        f"{now - failing_since:.1f}s ago (every cluster failed at once: the control plane "
        f"cut off, or the fleet restarting); the first came back {back_for:.1f}s ago, and "
        f"{failed} is failed over if it still fails {recovery_s - back_for:.1f}s from now"
    )
    return FailoverHold(HoldReason.FLEET_OUTAGE, detail)


def choose_standby(
    failed: str,
    stream: str,
    tags: Mapping[str, Mapping[str, str]],
    candidates: Collection[str],
) -> str | None:
    """The cluster a stream of the down cluster ``failed`` moves to, or None if none fits.

    ``tags`` maps every registered cluster to its tags; ``candidates`` are the clusters
    that may take it (``trusted_clusters``).
    """

    def qualifies(name: str) -> bool:
        return name != failed and name in tags and name in candidates

    own = tags.get(failed, {})
    for key in (f"{STANDBY_TAG}.{stream}", STANDBY_TAG):
        for name in (n.strip() for n in own.get(key, "").split(",")):
            if name and qualifies(name):
                return name
    region = own.get(REGION_TAG)
    ordered = sorted(n for n in tags if qualifies(n))
    if region is not None:
        same = [n for n in ordered if tags[n].get(REGION_TAG) == region]
        if same:
            return same[0]
    return ordered[0] if ordered else None


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
    behind = {
        g: unsettled
        for g in groups
        if g not in reported and (unsettled := _unsettled(end_offsets, committed.get(g, {})))
    }
    if behind:
        detail = "; ".join(f"{g}: {what}" for g, what in behind.items())
        return RetireCheck(False, groups, tuple(behind), f"not settled by {detail}")
    return RetireCheck(True, groups, (), f"settled by every group ({', '.join(groups)})")


def _unsettled(end_offsets: Mapping[int, int], offsets: Mapping[int, int]) -> str | None:
    """How far a group with committed ``offsets`` is from a segment's ``end_offsets``
    (one line), None when it settled every non-empty partition."""
    behind = [(p, end) for p, end in sorted(end_offsets.items()) if end > offsets.get(p, 0)]
    if not behind:
        return None
    if not offsets:
        return "committed nothing on it"
    partition, end = behind[0]
    at = offsets.get(partition)
    first = f"partition {partition} at {'nothing' if at is None else at} of {end}"
    return first if len(behind) == 1 else f"{first} (and {len(behind) - 1} more partitions)"


def group_listing_gap(asked: Collection[int], coordinators: Mapping[int, int]) -> str | None:
    """Why listing the consumer groups on the brokers ``asked`` may leave some out,
    None when it cannot. ``coordinators`` maps each partition of ``__consumer_offsets``
    to its leader (-1: none): the broker that coordinates, and alone lists, the groups
    stored there. A partition without a leader, or led by a broker not asked (a
    client whose cached metadata predates that broker's return), hides its groups."""
    leaderless = sorted(p for p, leader in coordinators.items() if leader < 0)
    if leaderless:
        return (
            f"__consumer_offsets partitions {_ids(leaderless)} have no leader: the groups "
            "stored there cannot be listed"
        )
    missed = set(coordinators.values()) - set(asked)
    if missed:
        return (
            f"brokers {_ids(missed)} coordinate consumer groups and were not asked (only "
            f"{_ids(asked) or 'none'})"
        )
    return None
