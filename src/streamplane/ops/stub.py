"""An in-memory ``OpsAdmin`` for unit tests (kafka-kit keeps ``kafkaadmin/stub`` the same way).

It behaves like a small cluster: brokers with racks and log dirs, partitions with
replicas and ISR, configs, and reassignments that finish after a set number of
observations (``reassignment_steps``: every ``list_reassignments`` or ``partitions``
call is one step), so tests are deterministic and need no clock. Failures can be
injected; every mutating call is recorded in ``calls``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from streamplane.core.mapper.models import TopicPartition
from streamplane.exceptions import KafkaError
from streamplane.ops.kafka_ops import (
    BrokerNode,
    ConfigChange,
    ConfigKind,
    LogDir,
    PartitionState,
    Reassignment,
)


@dataclass
class _Running:
    target: tuple[int, ...]
    original: tuple[int, ...]
    steps_left: int


@dataclass
class StubOpsAdmin:
    """A fake cluster. ``total_bytes`` per broker; free = total - bytes it holds."""

    brokers_: dict[int, BrokerNode] = field(default_factory=dict)
    replicas: dict[TopicPartition, tuple[int, ...]] = field(default_factory=dict)
    sizes: dict[TopicPartition, int] = field(default_factory=dict)
    total_bytes: dict[int, int] = field(default_factory=dict)
    configs: dict[tuple[ConfigKind, str], dict[str, str]] = field(default_factory=dict)
    dead: set[int] = field(default_factory=set)
    reassignment_steps: int = 1
    running: dict[TopicPartition, _Running] = field(default_factory=dict)
    calls: list[tuple[str, Any]] = field(default_factory=list)
    fail: dict[str, KafkaError] = field(default_factory=dict)
    """Operation name -> error raised by that call (``alter_reassignments``, ...)."""
    # Every broker's log dir on one filesystem (the local fleet): each reports the same
    # free storage, the total less what all of them hold.
    shared_filesystem: bool = False
    closed: bool = False

    @classmethod
    def cluster(
        cls,
        racks: Mapping[int, str | None],
        partitions: Mapping[TopicPartition, Sequence[int]],
        *,
        sizes: Mapping[TopicPartition, int] | None = None,
        total_bytes: int = 1 << 30,
        reassignment_steps: int = 1,
    ) -> StubOpsAdmin:
        return cls(
            brokers_={
                b: BrokerNode(b, "127.0.0.1", 9000 + b, rack) for b, rack in sorted(racks.items())
            },
            replicas={k: tuple(v) for k, v in partitions.items()},
            sizes=dict(sizes or {}),
            total_bytes=dict.fromkeys(racks, total_bytes),
            reassignment_steps=reassignment_steps,
        )

    def _check(self, op: str) -> None:
        if op in self.fail:
            raise self.fail[op]

    def _check_alive(self, op: str, kind: ConfigKind, names: Collection[str]) -> None:
        """Broker configs go to the broker itself: for a dead one (not in the metadata)
        kafka-python fails the whole call with ``UnknownBrokerIdError``, as here."""
        if kind != "broker":
            return
        for name in sorted(names):
            if int(name) in self.dead:
                raise KafkaError(
                    f"{op} of broker {name}: UnknownBrokerIdError: {name}",
                    code="UnknownBrokerIdError",
                )

    def _step(self) -> None:
        for key, run in list(self.running.items()):
            run.steps_left -= 1
            if run.steps_left <= 0:
                self.replicas[key] = run.target
                del self.running[key]

    # ------------------------------------------------------------------ OpsAdmin
    def bounded(self, seconds: float) -> contextlib.AbstractContextManager[None]:
        """In memory, every call answers at once: nothing to bound."""
        return contextlib.nullcontext()

    def brokers(self) -> dict[int, BrokerNode]:
        self._check("brokers")
        return {b: n for b, n in self.brokers_.items() if b not in self.dead}

    def partitions(
        self, topics: Collection[str] | None = None
    ) -> dict[TopicPartition, PartitionState]:
        self._check("partitions")
        self._step()
        if topics is not None:
            unknown = sorted(set(topics) - {t for t, _ in self.replicas})
            if unknown:
                raise KafkaError(
                    f"describe topic {unknown[0]}: unknown topic", code="UNKNOWN_TOPIC_OR_PARTITION"
                )
        out = {}
        for key, reps in sorted(self.replicas.items()):
            if topics is not None and key[0] not in topics:
                continue
            run = self.running.get(key)
            shown = reps if run is None else _union(run.target, run.original)
            isr = tuple(b for b in reps if b not in self.dead)
            leader = isr[0] if isr else -1
            out[key] = PartitionState(key[0], key[1], shown, isr, leader)
        return out

    def log_dirs(
        self, brokers: Collection[int] | None = None
    ) -> dict[int, list[LogDir] | KafkaError]:
        self._check("log_dirs")
        ids = sorted(self.brokers()) if brokers is None else sorted(brokers)
        out: dict[int, list[LogDir] | KafkaError] = {}
        for bid in ids:
            if bid in self.dead or bid not in self.brokers_:
                out[bid] = KafkaError(f"broker {bid} is not available", retriable=True)
                continue
            held = {
                k: self.sizes.get(k, 0)
                for k, reps in self.replicas.items()
                if bid in reps or (k in self.running and bid in self.running[k].target)
            }
            total = self.total_bytes.get(bid)
            used = self._all_held() if self.shared_filesystem else sum(held.values())
            usable = None if total is None else max(total - used, 0)
            out[bid] = [LogDir(bid, f"/data/{bid}", total, usable, held)]
        return out

    def alter_reassignments(
        self, targets: Mapping[TopicPartition, Sequence[int] | None]
    ) -> dict[TopicPartition, KafkaError | None]:
        self._check("alter_reassignments")
        self.calls.append(("alter_reassignments", dict(targets)))
        out: dict[TopicPartition, KafkaError | None] = {}
        for key, target in targets.items():
            if key not in self.replicas:
                out[key] = KafkaError(f"{key}: unknown", code="UNKNOWN_TOPIC_OR_PARTITION")
            elif target is None:
                if self.running.pop(key, None) is None:
                    out[key] = KafkaError(f"{key}: none", code="NO_REASSIGNMENT_IN_PROGRESS")
                else:
                    out[key] = None
            elif any(b not in self.brokers_ for b in target):
                out[key] = KafkaError(f"{key}: bad replicas", code="INVALID_REPLICA_ASSIGNMENT")
            else:
                self.running[key] = _Running(
                    tuple(target), self.replicas[key], self.reassignment_steps
                )
                out[key] = None
        return out

    def list_reassignments(self) -> dict[TopicPartition, Reassignment]:
        self._check("list_reassignments")
        self._step()
        return {
            key: Reassignment(
                key[0],
                key[1],
                _union(run.target, run.original),
                tuple(b for b in run.target if b not in run.original),
                tuple(b for b in run.original if b not in run.target),
            )
            for key, run in sorted(self.running.items())
        }

    def alter_configs(
        self, changes: Sequence[ConfigChange]
    ) -> dict[tuple[ConfigKind, str], KafkaError | None]:
        self._check("alter_configs")
        for c in changes:
            self._check_alive("alter configs", c.kind, [c.name])
        self.calls.append(("alter_configs", list(changes)))
        out: dict[tuple[ConfigKind, str], KafkaError | None] = {}
        for c in changes:
            known = (
                int(c.name) in self.brokers_
                if c.kind == "broker"
                else any(t == c.name for t, _ in self.replicas)
            )
            if not known:
                out[(c.kind, c.name)] = KafkaError(f"unknown {c.kind} {c.name}")
                continue
            values = self.configs.setdefault((c.kind, c.name), {})
            values.update(c.set)
            for k in c.delete:
                values.pop(k, None)
            out[(c.kind, c.name)] = None
        return out

    def describe_configs(
        self, kind: ConfigKind, names: Collection[str]
    ) -> dict[str, dict[str, str]]:
        self._check("describe_configs")
        self._check_alive("describe configs", kind, names)
        return {str(n): dict(self.configs.get((kind, str(n)), {})) for n in sorted(names)}

    def create_topic(
        self,
        name: str,
        assignment: Mapping[int, Sequence[int]],
        configs: Mapping[str, str] | None = None,
    ) -> None:
        self._check("create_topic")
        self.calls.append(("create_topic", (name, dict(assignment), dict(configs or {}))))
        if any(t == name for t, _ in self.replicas):
            raise KafkaError(f"topic {name} already exists", code="TOPIC_ALREADY_EXISTS")
        for p, reps in assignment.items():
            self.replicas[(name, p)] = tuple(reps)
        if configs:
            self.configs[("topic", name)] = dict(configs)

    def close(self) -> None:
        self.closed = True

    # ------------------------------------------------------------------ helpers
    def _all_held(self) -> int:
        return sum(self.sizes.get(k, 0) * len(reps) for k, reps in self.replicas.items())

    def throttle_configs(self) -> dict[tuple[ConfigKind, str], dict[str, str]]:
        """Every non-empty config set whose keys mention replication throttles."""
        return {
            k: {n: v for n, v in vals.items() if "throttled" in n}
            for k, vals in self.configs.items()
            if any("throttled" in n for n in vals)
        }


def _union(first: Sequence[int], second: Sequence[int]) -> tuple[int, ...]:
    return tuple(dict.fromkeys([*first, *second]))
