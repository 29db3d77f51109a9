"""Streams, lanes, segments and the routing table: names and the state machine. Pure.

A stream has lanes; each lane lives in one or more *segments* (cluster, topic,
partitions, state, epoch). The routing table of a stream is all of its segments plus
the stream's epoch, which only grows. Invariants kept by every transition here:

- at most one ``active`` segment per lane (exactly one while the stream exists);
- the epoch of a routing table never decreases, and every change of segments bumps it;
- a segment only moves forward: active -> draining -> sealed -> retired
  (or draining/sealed -> lost, when an operator declares a dead cluster's data lost);
- physical topic names are derived, never chosen: ``sp.<stream>.<lane>.e<epoch>``;
- lanes are only ever added (``add_lane``), never removed or reordered, so a lane's
  first segment tells when it was added (``lane_added_epoch``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from streamplane.exceptions import ConfigError, Conflict

DLQ_LANE = "dlq"
# The group every stream's `dlq replay` read its dlq lane as before each stream had one
# of its own (``dlq_replay_group``): a group reads one stream at a time, so two replays
# of different streams could not run together. Only read now: a stream's replay group
# takes over its progress on the stream's dlq partitions (``streamplane.client.dlq``).
LEGACY_DLQ_REPLAY_GROUP = "sp-dlq-replay"
DEFAULT_LANES: tuple[str, ...] = ("realtime", "bulk")
MAX_LANES = 16  # lanes of a stream, the dlq lane not counted

_STREAM_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_LANE_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
_CLUSTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


class SegmentState(StrEnum):
    ACTIVE = "active"
    DRAINING = "draining"
    SEALED = "sealed"
    RETIRED = "retired"
    LOST = "lost"


_NEXT_STATES: Mapping[SegmentState, frozenset[SegmentState]] = {
    SegmentState.ACTIVE: frozenset({SegmentState.DRAINING}),
    SegmentState.DRAINING: frozenset({SegmentState.SEALED, SegmentState.LOST}),
    SegmentState.SEALED: frozenset({SegmentState.RETIRED, SegmentState.LOST}),
    # Reopened: records landed in it after it was retired (a producer that had not seen
    # the failover yet), and are read again.
    SegmentState.RETIRED: frozenset({SegmentState.SEALED}),
    SegmentState.LOST: frozenset(),
}

# States whose records consumers still read.
READABLE_STATES = frozenset({SegmentState.ACTIVE, SegmentState.DRAINING, SegmentState.SEALED})


def validate_stream_name(name: str) -> str:
    """``name`` if it is a valid stream name, else a ConfigError stating the rule: the one
    check of the control plane and of the client (which checks before any request)."""
    if not isinstance(name, str) or not _STREAM_NAME.fullmatch(name):
        raise ConfigError(
            f"invalid stream name {name!r}: use 1-63 lower-case letters, digits and '-', "
            "starting with a letter or digit"
        )
    return name


def validate_lane_name(name: str) -> str:
    if not _LANE_NAME.fullmatch(name):
        raise ConfigError(
            f"invalid lane name {name!r}: use 1-31 lower-case letters, digits and '-', "
            "starting with a letter"
        )
    return name


def validate_cluster_name(name: str) -> str:
    if not _CLUSTER_NAME.fullmatch(name):
        raise ConfigError(
            f"invalid cluster name {name!r}: use 1-63 letters, digits, '.', '_' and '-'"
        )
    return name


def validate_lanes(lanes: Sequence[str]) -> tuple[str, ...]:
    """Lanes in priority order (first = highest). The dlq lane is implicit and last."""
    if not lanes:
        raise ConfigError("a stream needs at least one lane")
    if len(lanes) > MAX_LANES:
        raise ConfigError(f"a stream has at most {MAX_LANES} lanes (the dlq lane not counted)")
    seen: set[str] = set()
    for lane in lanes:
        validate_lane_name(lane)
        if lane == DLQ_LANE:
            raise ConfigError("the dlq lane is implicit: do not list it")
        if lane in seen:
            raise ConfigError(f"lane {lane!r} listed twice")
        seen.add(lane)
    return tuple(lanes)


# Every topic of a stream is named ``sp.<stream>.<something>``: the stream's namespace.
TOPIC_NAMESPACE = "sp"


def dlq_replay_group(stream: str) -> str:
    """The group `dlq replay` reads ``stream``'s dlq lane as, ``sp-dlq-replay.<stream>``:
    one per stream, so replays of different streams run side by side. It holds every
    dlq segment of the stream with dead letters until it has replayed them (other
    groups may read the dlq lane too). (A stream name is at most 63 of ``[a-z0-9-]``:
    the group name is a valid Kafka group id, and within a consumer's 200 characters.)"""
    return f"{LEGACY_DLQ_REPLAY_GROUP}.{stream}"


def is_dlq_replay_group(group: str) -> bool:
    """Whether ``group`` is a `dlq replay` group (``dlq_replay_group``, or the one all
    streams' replays shared before): it reads on demand, not all the time."""
    return group == LEGACY_DLQ_REPLAY_GROUP or group.startswith(LEGACY_DLQ_REPLAY_GROUP + ".")


def physical_topic(stream: str, lane: str, epoch: int) -> str:
    return f"{TOPIC_NAMESPACE}.{stream}.{lane}.e{epoch}"


# A topic's max.message.bytes bounds a whole record batch (as sent: compressed, with
# its framing); every topic of a stream gets room for batch framing, keys and headers
# (dlq provenance) above the stream's bound on one record.
BATCH_HEADROOM_BYTES = 64 * 1024


def topic_max_message_bytes(max_record_bytes: int) -> int:
    """The ``max.message.bytes`` of every topic of a stream whose bound on one record
    (key + value) is ``max_record_bytes``, its dlq lane's included: what the control
    plane sets on them, and so the largest batch a producer may send them."""
    return max_record_bytes + BATCH_HEADROOM_BYTES


def commitlog_topic(stream: str) -> str:
    """The compacted side topic a consumer spills commit-log state to that does not fit
    the commit metadata (one per stream and cluster; deleted with the stream)."""
    return f"{TOPIC_NAMESPACE}.{stream}.__commitlog"


def stream_owning_topic(topic: str) -> str | None:
    """The stream whose namespace ``topic`` is in, or None: ``sp.<stream>.<anything>``,
    which holds its lanes' segments (``sp.<stream>.<lane>.e<N>``) and its side topics
    (``sp.<stream>.__commitlog``). Only streamplane names topics there."""
    namespace, _, rest = topic.partition(".")
    stream, dot, suffix = rest.partition(".")
    if namespace == TOPIC_NAMESPACE and dot and suffix and _STREAM_NAME.fullmatch(stream):
        return stream
    return None


@dataclass(frozen=True)
class Segment:
    """The physical home of one lane at one time."""

    lane: str
    cluster: str
    topic: str
    partitions: int
    state: SegmentState
    epoch: int
    # Per partition, the end offset once the segment is sealed (no more writes).
    sealed_end_offsets: Mapping[int, int] = field(default_factory=dict)

    @property
    def readable(self) -> bool:
        return self.state in READABLE_STATES


@dataclass(frozen=True)
class RoutingTable:
    """Every segment of a stream, with the stream's epoch."""

    stream: str
    epoch: int
    lanes: tuple[str, ...]  # priority order, without the dlq lane
    segments: tuple[Segment, ...]

    @property
    def all_lanes(self) -> tuple[str, ...]:
        return (*self.lanes, DLQ_LANE)

    def active(self, lane: str) -> Segment:
        for s in self.segments:
            if s.lane == lane and s.state is SegmentState.ACTIVE:
                return s
        if lane not in self.all_lanes:
            raise ConfigError(
                f"stream {self.stream!r} has no lane {lane!r} (lanes: {', '.join(self.all_lanes)})"
            )
        raise ConfigError(f"lane {lane!r} of stream {self.stream!r} has no active segment")

    def segment(self, cluster: str, topic: str) -> Segment | None:
        """The segment of ``topic`` on ``cluster`` (None: the stream has none)."""
        return next((s for s in self.segments if s.cluster == cluster and s.topic == topic), None)

    def readable(self, lanes: Iterable[str] | None = None) -> list[Segment]:
        """Segments consumers read, in lane priority order, oldest epoch first."""
        wanted = list(lanes) if lanes is not None else list(self.all_lanes)
        order = {lane: i for i, lane in enumerate(self.all_lanes)}
        return sorted(
            (s for s in self.segments if s.readable and s.lane in wanted),
            key=lambda s: (order.get(s.lane, len(order)), s.epoch, s.cluster),
        )

    def lane_priority(self, lane: str) -> int:
        """0 for the highest-priority lane; the dlq lane last."""
        return self.all_lanes.index(lane)


def new_routing_table(
    stream: str,
    lanes: Sequence[str],
    cluster: str,
    partitions: int,
    dlq_partitions: int = 1,
    epoch: int = 1,
) -> RoutingTable:
    """The routing table of a new stream: one active segment per lane and dlq, at
    ``epoch`` (1, or past the epochs of a deleted stream of the same name)."""
    validate_stream_name(stream)
    if epoch < 1:
        raise ConfigError("epoch must be at least 1")
    validate_cluster_name(cluster)
    lanes_t = validate_lanes(lanes)
    if partitions < 1 or dlq_partitions < 1:
        raise ConfigError("partitions must be at least 1")
    segments = tuple(
        Segment(
            lane=lane,
            cluster=cluster,
            topic=physical_topic(stream, lane, epoch),
            partitions=dlq_partitions if lane == DLQ_LANE else partitions,
            state=SegmentState.ACTIVE,
            epoch=epoch,
        )
        for lane in (*lanes_t, DLQ_LANE)
    )
    return RoutingTable(stream=stream, epoch=epoch, lanes=lanes_t, segments=segments)


def move_lanes(
    table: RoutingTable,
    lanes: Sequence[str],
    cluster: str,
    partitions: int | None = None,
) -> RoutingTable:
    """Failover/repartition: new active segments for ``lanes`` in a new epoch.

    The old active segments become draining; their records are still read. Without a
    partition count, a lane already active on ``cluster`` stays as it is (nothing to
    move); when that leaves no lane, it is an error rather than an empty new epoch.
    """
    validate_cluster_name(cluster)
    if not lanes:
        raise ConfigError("name at least one lane to move")
    for lane in lanes:
        table.active(lane)  # raises for unknown lanes
    if partitions is not None and partitions < 1:
        raise ConfigError("partitions must be at least 1")
    if partitions is None:
        there = [lane for lane in lanes if table.active(lane).cluster == cluster]
        if len(there) == len(lanes):
            raise ConfigError(
                f"stream {table.stream!r}: {', '.join(there)} already active on {cluster}; "
                "nothing to move (give a partition count to make new segments there)"
            )
        lanes = [lane for lane in lanes if lane not in there]
    epoch = table.epoch + 1
    segments: list[Segment] = []
    for s in table.segments:
        if s.lane in lanes and s.state is SegmentState.ACTIVE:
            segments.append(replace(s, state=SegmentState.DRAINING))
            segments.append(
                Segment(
                    lane=s.lane,
                    cluster=cluster,
                    topic=physical_topic(table.stream, s.lane, epoch),
                    partitions=partitions or s.partitions,
                    state=SegmentState.ACTIVE,
                    epoch=epoch,
                )
            )
        else:
            segments.append(s)
    return replace(table, epoch=epoch, segments=tuple(segments))


def add_lane(
    table: RoutingTable,
    lane: str,
    cluster: str,
    partitions: int,
    before: str | None = None,
) -> RoutingTable:
    """A new lane for a live stream, in a new epoch: one active segment on ``cluster``,
    placed in the priority order just above ``before`` (default: last, below every lane
    but the dlq). The other lanes' segments stay as they are.

    ConfigError for an invalid name, an unknown ``before``, or a stream already at
    ``MAX_LANES``; Conflict for a lane the stream has (the dlq lane included: every
    stream has it)."""
    validate_lane_name(lane)
    validate_cluster_name(cluster)
    if lane in table.all_lanes:
        reserved = (
            " (the dlq lane is every stream's: its name is reserved)" if lane == DLQ_LANE else ""
        )
        raise Conflict(f"stream {table.stream!r} already has lane {lane!r}{reserved}")
    if partitions < 1:
        raise ConfigError("partitions must be at least 1")
    if len(table.lanes) >= MAX_LANES:
        raise ConfigError(
            f"stream {table.stream!r} has {len(table.lanes)} lanes already: at most {MAX_LANES}"
        )
    if before is None:
        at = len(table.lanes)
    elif before in table.lanes:
        at = table.lanes.index(before)
    else:
        raise ConfigError(
            f"stream {table.stream!r} has no lane {before!r} to put lane {lane!r} before "
            f"(lanes: {', '.join(table.lanes)}; without one it goes last, above the dlq)"
        )
    epoch = table.epoch + 1
    segment = Segment(
        lane=lane,
        cluster=cluster,
        topic=physical_topic(table.stream, lane, epoch),
        partitions=partitions,
        state=SegmentState.ACTIVE,
        epoch=epoch,
    )
    return replace(
        table,
        epoch=epoch,
        lanes=(*table.lanes[:at], lane, *table.lanes[at:]),
        segments=(*table.segments, segment),
    )


def home_cluster(table: RoutingTable) -> str | None:
    """The cluster every lane but the dlq is active on (where a new lane goes by
    default); None when a failover of some of them has split the lanes."""
    clusters = {table.active(lane).cluster for lane in table.lanes}
    return clusters.pop() if len(clusters) == 1 else None


def lane_added_epoch(table: RoutingTable, lane: str) -> int:
    """The epoch ``lane`` was added at (its first segment's: segments are never dropped
    from a routing table), the stream's first epoch for the lanes it was created with."""
    return min(s.epoch for s in table.segments if s.lane == lane)


def is_lanes_as_of_an_epoch(table: RoutingTable, lanes: Sequence[str]) -> bool:
    """Whether ``lanes`` are, in priority order, every lane but the dlq the stream had at
    some epoch: what a consumer reading all lanes names, as of the routing it has seen
    (lanes added since are missing). Another set (some lanes only, or the dlq) is not."""
    known = [lane for lane in lanes if lane in table.lanes]
    if not lanes or len(known) != len(lanes):
        return False
    newest = max(lane_added_epoch(table, lane) for lane in lanes)
    then = tuple(lane for lane in table.lanes if lane_added_epoch(table, lane) <= newest)
    return tuple(lanes) == then


def transition(
    table: RoutingTable,
    topic: str,
    cluster: str,
    to: SegmentState,
    sealed_end_offsets: Mapping[int, int] | None = None,
) -> RoutingTable:
    """Move one segment forward in its life cycle (bumps the epoch)."""
    segments = []
    found = False
    for s in table.segments:
        if s.topic == topic and s.cluster == cluster:
            found = True
            if to not in _NEXT_STATES[s.state]:
                raise ConfigError(f"segment {topic} on {cluster} cannot go from {s.state} to {to}")
            s = replace(
                s,
                state=to,
                sealed_end_offsets=dict(sealed_end_offsets or s.sealed_end_offsets),
            )
        segments.append(s)
    if not found:
        raise ConfigError(f"stream {table.stream!r} has no segment {topic} on {cluster}")
    return replace(table, epoch=table.epoch + 1, segments=tuple(segments))


def routing_to_json(table: RoutingTable) -> dict[str, object]:
    """The wire form served by ``GET /v1/streams/{name}/routing``."""
    return {
        "stream": table.stream,
        "epoch": table.epoch,
        "lanes": list(table.lanes),
        "segments": [
            {
                "lane": s.lane,
                "cluster": s.cluster,
                "topic": s.topic,
                "partitions": s.partitions,
                "state": s.state.value,
                "epoch": s.epoch,
                "sealed_end_offsets": {str(p): o for p, o in s.sealed_end_offsets.items()},
            }
            for s in table.segments
        ],
    }


def routing_from_json(data: Mapping[str, object]) -> RoutingTable:
    """Inverse of ``routing_to_json``; raises ConfigError on a malformed document."""
    try:
        segments = tuple(
            Segment(
                lane=str(s["lane"]),
                cluster=str(s["cluster"]),
                topic=str(s["topic"]),
                partitions=int(s["partitions"]),
                state=SegmentState(s["state"]),
                epoch=int(s["epoch"]),
                sealed_end_offsets={
                    int(p): int(o) for p, o in dict(s.get("sealed_end_offsets") or {}).items()
                },
            )
            for s in data["segments"]  # type: ignore[attr-defined]
        )
        return RoutingTable(
            stream=str(data["stream"]),
            epoch=int(data["epoch"]),  # type: ignore[call-overload]
            lanes=tuple(str(x) for x in data["lanes"]),  # type: ignore[attr-defined]
            segments=segments,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"malformed routing table: {exc}") from exc
