"""Plans: the result of every planner, with warnings and a per-broker diff.

A plan holds the map it started from and the map it proposes, so everything the CLI
shows before applying — replica moves, bytes moved, storage before and after — is
derived here, from data, without asking the cluster again.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any

from streamplane.core.mapper.exceptions import MapperError
from streamplane.core.mapper.models import (
    BrokerMap,
    BrokerState,
    Partition,
    PartitionMap,
    StorageStats,
    storage_stats,
)
from streamplane.core.mapper.reassignment_json import to_reassignment_json
from streamplane.core.text import human_bytes


@dataclass(frozen=True, slots=True)
class ReplicaMove:
    """One replica leaving ``source`` for ``destination``.

    ``source`` is None when the replica is new (replication factor raised) and
    ``destination`` is None when it is dropped (replication factor lowered).
    """

    topic: str
    partition: int
    source: int | None
    destination: int | None
    size: int


@dataclass(frozen=True, slots=True)
class SweepResult:
    """One tolerance tried by a rebalance or scale sweep."""

    tolerance: float
    storage_range: int
    storage_stdev: float
    moves: int


@dataclass(frozen=True, slots=True)
class BrokerDiff:
    """What a plan does to one broker."""

    broker_id: int
    rack: str | None
    state: BrokerState | None
    replicas_before: int
    replicas_after: int
    leaders_before: int
    leaders_after: int
    moves_in: int
    moves_out: int
    bytes_in: int
    bytes_out: int
    storage_free_before: int | None
    storage_free_after: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "broker": self.broker_id,
            "rack": self.rack,
            "state": None if self.state is None else self.state.value,
            "replicas_before": self.replicas_before,
            "replicas_after": self.replicas_after,
            "leaders_before": self.leaders_before,
            "leaders_after": self.leaders_after,
            "moves_in": self.moves_in,
            "moves_out": self.moves_out,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "storage_free_before": self.storage_free_before,
            "storage_free_after": self.storage_free_after,
        }


@dataclass(frozen=True, slots=True)
class PlanDiff:
    """Per-broker effects of a plan plus totals; brokers in ascending id order."""

    brokers: tuple[BrokerDiff, ...]
    partitions_changed: int
    replicas_moved: int
    bytes_moved: int
    leadership_changes: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "partitions_changed": self.partitions_changed,
            "replicas_moved": self.replicas_moved,
            "bytes_moved": self.bytes_moved,
            "leadership_changes": self.leadership_changes,
            "brokers": [b.to_dict() for b in self.brokers],
        }

    def render(self) -> str:
        """A plain-text table for a terminal."""
        header = (
            f"{'broker':>7} {'rack':<10} {'state':<8} {'replicas':>15} {'leaders':>13} "
            f"{'in':>6} {'out':>6} {'free before':>12} {'free after':>12}"
        )
        lines = [header]
        for b in self.brokers:
            lines.append(
                f"{b.broker_id:>7} {b.rack or '-':<10} {b.state or '?':<8} "
                f"{f'{b.replicas_before} -> {b.replicas_after}':>15} "
                f"{f'{b.leaders_before} -> {b.leaders_after}':>13} "
                f"{b.moves_in:>6} {b.moves_out:>6} "
                f"{human_bytes(b.storage_free_before):>12} {human_bytes(b.storage_free_after):>12}"
            )
        lines.append(
            f"{self.partitions_changed} partitions change, {self.replicas_moved} replicas "
            f"move ({human_bytes(self.bytes_moved)}), {self.leadership_changes} preferred "
            "leaders change"
        )
        return "\n".join(lines)


@dataclass(frozen=True)
class Plan:
    """A proposed partition map and how it was reached.

    ``warnings`` are advisories that did not stop planning (kafka-kit prints them as
    WARN); anything that would make the plan wrong raises instead.
    """

    kind: str
    before: PartitionMap
    after: PartitionMap
    brokers: BrokerMap
    warnings: tuple[str, ...] = ()
    tolerance: float | None = None
    sweep: tuple[SweepResult, ...] = field(default=())

    def __post_init__(self) -> None:
        if [p.key for p in self.before] != [p.key for p in self.after]:
            raise MapperError("a plan must keep the same partitions before and after")

    def changed(self) -> Iterator[tuple[Partition, Partition]]:
        """``(before, after)`` for every partition whose replica list changes."""
        for old, new in zip(self.before, self.after, strict=True):
            if old.replicas != new.replicas:
                yield old, new

    def changed_partitions(self) -> tuple[Partition, ...]:
        return tuple(new for _, new in self.changed())

    def moves(self) -> tuple[ReplicaMove, ...]:
        """Replica moves, paired in replica-list order (reorders are not moves)."""
        out: list[ReplicaMove] = []
        for old, new in self.changed():
            new_set, old_set = set(new.replicas), set(old.replicas)
            gone = [b for b in old.replicas if b not in new_set]
            came = [b for b in new.replicas if b not in old_set]
            for src, dst in zip_longest(gone, came):
                out.append(ReplicaMove(old.topic, old.partition, src, dst, old.size))
        return tuple(out)

    def storage_free_after(self) -> dict[int, int]:
        """Projected free storage of every broker whose storage is known (not dead)."""
        delta: dict[int, int] = {}
        for move in self.moves():
            if move.source is not None:
                delta[move.source] = delta.get(move.source, 0) + move.size
            if move.destination is not None:
                delta[move.destination] = delta.get(move.destination, 0) - move.size
        return {
            bid: b.storage_free + delta.get(bid, 0)
            for bid, b in self.brokers.items()
            if b.state is not BrokerState.DEAD
        }

    def storage_stats(self) -> tuple[StorageStats, StorageStats]:
        """Free-storage statistics of the eligible brokers, before and after."""
        eligible = self.brokers.eligible()
        after = self.storage_free_after()
        return (
            storage_stats(self.brokers[b].storage_free for b in eligible),
            storage_stats(after[b] for b in eligible),
        )

    def diff(self) -> PlanDiff:
        moves_in: dict[int, int] = {}
        moves_out: dict[int, int] = {}
        bytes_in: dict[int, int] = {}
        bytes_out: dict[int, int] = {}
        moves = self.moves()
        for m in moves:
            if m.source is not None:
                moves_out[m.source] = moves_out.get(m.source, 0) + 1
                bytes_out[m.source] = bytes_out.get(m.source, 0) + m.size
            if m.destination is not None:
                moves_in[m.destination] = moves_in.get(m.destination, 0) + 1
                bytes_in[m.destination] = bytes_in.get(m.destination, 0) + m.size
        rep_before, rep_after = self.before.replica_counts(), self.after.replica_counts()
        lead_before, lead_after = self.before.leader_counts(), self.after.leader_counts()
        free_after = self.storage_free_after()
        ids = sorted(set(self.brokers) | set(rep_before) | set(rep_after))
        rows = []
        for bid in ids:
            broker = self.brokers.get(bid)
            known = broker is not None and broker.state is not BrokerState.DEAD
            rows.append(
                BrokerDiff(
                    broker_id=bid,
                    rack=None if broker is None else broker.rack,
                    state=None if broker is None else broker.state,
                    replicas_before=rep_before.get(bid, 0),
                    replicas_after=rep_after.get(bid, 0),
                    leaders_before=lead_before.get(bid, 0),
                    leaders_after=lead_after.get(bid, 0),
                    moves_in=moves_in.get(bid, 0),
                    moves_out=moves_out.get(bid, 0),
                    bytes_in=bytes_in.get(bid, 0),
                    bytes_out=bytes_out.get(bid, 0),
                    storage_free_before=broker.storage_free if known and broker else None,
                    storage_free_after=free_after.get(bid) if known else None,
                )
            )
        changed = list(self.changed())
        return PlanDiff(
            brokers=tuple(rows),
            partitions_changed=len(changed),
            replicas_moved=sum(1 for m in moves if m.destination is not None),
            bytes_moved=sum(m.size for m in moves if m.destination is not None),
            leadership_changes=sum(1 for old, new in changed if old.leader != new.leader),
        )

    def to_reassignment_json(
        self,
        *,
        only_changed: bool = True,
        log_dirs: bool = False,
        indent: int | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> str:
        """Kafka's reassignment JSON for this plan (no-op partitions left out by default);
        ``meta``: what the planner assumed, under ``"streamplane"`` (see
        ``reassignment_json``)."""
        partitions = self.changed_partitions() if only_changed else self.after.partitions
        return to_reassignment_json(partitions, log_dirs=log_dirs, indent=indent, meta=meta)

    def to_dict(self) -> dict[str, Any]:
        """Everything the plan decided, as JSON-ready data (used by golden files)."""
        before, after = self.storage_stats()
        return {
            "kind": self.kind,
            "tolerance": self.tolerance,
            "warnings": list(self.warnings),
            "partitions": [
                {"topic": p.topic, "partition": p.partition, "replicas": list(p.replicas)}
                for p in self.changed_partitions()
            ],
            "storage_range": {"before": before.range, "after": after.range},
            "sweep": [
                {
                    "tolerance": s.tolerance,
                    "storage_range": s.storage_range,
                    "moves": s.moves,
                }
                for s in self.sweep
            ],
            "diff": self.diff().to_dict(),
        }
