"""Apply a partition plan through the Admin API (AlterPartitionReassignments), a few
brokers at a time, with progress, completion checks and cancel.

Nothing is applied until the whole plan has been checked against the live cluster:
``check_plan`` parses Kafka's reassignment JSON with the mapper's parser (every
problem at once) against the live brokers and the cluster's current partitions, and
refuses partitions already being reassigned and, unless ``allow_mixed_replication``, a
plan that would leave a topic with different replica counts (counting the topic's
partitions the plan does not list). A refused plan raises ``PlanRejected``
(a ``ConfigError`` listing the problems) and no request has been sent.

Batches: partitions that copy data are grouped so that at most ``concurrency``
destination brokers (brokers receiving new replicas) are busy at once, as kafka-kit
operators do by hand with ``--brokers`` subsets; reorders and shrinks copy nothing and
ride along in the first batch. A batch is done when Kafka no longer lists its
reassignments and every partition shows exactly the target replicas, all in sync.

Giving up is not cancelling: a batch that outlives ``timeout`` raises
``ReassignmentTimeout`` and keeps running (Kafka finishes it on its own, ``cancel()``
stops it), while an interrupt (Ctrl-C, SIGTERM, an error) cancels the batch in flight.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from streamplane.core.mapper.exceptions import ReassignmentJsonError
from streamplane.core.mapper.models import Partition, PartitionMap, TopicPartition
from streamplane.core.mapper.reassignment_json import parse_reassignment_json
from streamplane.core.throttle import ReplicaChange
from streamplane.exceptions import ConfigError, KafkaError
from streamplane.ops.kafka_ops import OpsAdmin, PartitionState


class PlanRejected(ConfigError):
    """A plan that cannot be applied; ``problems`` lists every reason. Nothing was applied."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        shown = "; ".join(self.problems[:10])
        more = f" (and {len(self.problems) - 10} more)" if len(self.problems) > 10 else ""
        super().__init__(f"plan refused, nothing applied: {shown}{more}")


class ReassignmentTimeout(KafkaError):
    """Reassignments did not finish in time (they keep running unless cancelled)."""

    def __init__(self, message: str, pending: Collection[TopicPartition] = ()) -> None:
        super().__init__(message)
        self.pending = sorted(pending)


@dataclass(frozen=True)
class CheckedPlan:
    """A plan that passed every check: the target of each changing partition."""

    current: PartitionMap
    target: PartitionMap

    def changes(self) -> list[tuple[Partition, Partition]]:
        return [
            (self.current[p.key], p)
            for p in self.target
            if self.current[p.key].replicas != p.replicas
        ]


def check_plan(
    text: str | bytes, admin: OpsAdmin, *, allow_mixed_replication: bool = False
) -> CheckedPlan:
    """Validate a reassignment document against the live cluster (see the module doc)."""
    live = admin.brokers()
    states = admin.partitions()
    current = PartitionMap(Partition(s.topic, s.partition, s.replicas) for s in states.values())
    try:
        parsed = parse_reassignment_json(
            text,
            known_brokers=set(live),
            current=current,
            allow_mixed_replication=allow_mixed_replication,
        )
    except ReassignmentJsonError as exc:
        raise PlanRejected([_with_override(p) for p in exc.problems]) from exc
    problems: list[str] = []
    if not allow_mixed_replication:
        problems += _mixed_replication(parsed.partition_map, current)
    running = admin.list_reassignments()
    for p in parsed.partition_map:
        if p.key in running:
            problems.append(
                f"{p.topic}-{p.partition}: a reassignment is already in progress "
                "(wait for it or cancel it first)"
            )
    if not len(parsed.partition_map):
        problems.append("the plan lists no partitions")
    if problems:
        raise PlanRejected(problems)
    subset = PartitionMap(current[p.key] for p in parsed.partition_map)
    return CheckedPlan(subset, parsed.partition_map)


MIXED_OVERRIDE = "allow_mixed_replication accepts it"


def _with_override(problem: str) -> str:
    """The parser's mixed-replication problem, naming the override."""
    if "different replica counts" in problem:
        return f"{problem}, {MIXED_OVERRIDE}"
    return problem


def _mixed_replication(target: PartitionMap, current: PartitionMap) -> list[str]:
    """Topics the plan would leave with different replica counts, counting the topic's
    partitions the plan does not list (the parser sees only the plan's)."""
    counts: dict[str, dict[int, int]] = {}
    planned = set(target.topics())
    for p in current:
        if p.topic in planned:
            counts.setdefault(p.topic, {})[p.partition] = len(p.replicas)
    for p in target:
        counts.setdefault(p.topic, {})[p.partition] = len(p.replicas)
    problems = []
    for topic, by_partition in sorted(counts.items()):
        found = sorted(set(by_partition.values()))
        if len(found) > 1:
            problems.append(
                f"{topic}: the plan would leave its partitions with different replica "
                f"counts {found} (with the partitions it does not list), {MIXED_OVERRIDE}"
            )
    return problems


def batches(
    changes: Iterable[tuple[Partition, Partition]], concurrency: int
) -> list[list[Partition]]:
    """Group target partitions so each batch busies at most ``concurrency`` destinations."""
    if concurrency < 1:
        raise ConfigError("concurrency must be at least 1")
    free_rides: list[Partition] = []
    pending: list[tuple[Partition, frozenset[int]]] = []
    for old, new in changes:
        added = frozenset(new.replicas) - frozenset(old.replicas)
        if added:
            pending.append((new, added))
        else:
            free_rides.append(new)
    out: list[list[Partition]] = []
    while pending:
        busy: set[int] = set()
        batch: list[Partition] = []
        rest: list[tuple[Partition, frozenset[int]]] = []
        for p, added in pending:
            if not batch or len(busy | added) <= concurrency:
                batch.append(p)
                busy |= added
            else:
                rest.append((p, added))
        out.append(batch)
        pending = rest
    if free_rides:
        if out:
            out[0] = free_rides + out[0]
        else:
            out.append(free_rides)
    return out


@dataclass(frozen=True)
class Progress:
    """Where an execution stands (given to the ``on_progress`` callback)."""

    done: int
    total: int
    batch: int
    batches: int
    running: tuple[TopicPartition, ...]
    destinations: tuple[int, ...]
    elapsed: float

    def line(self, width: int = 24) -> str:
        filled = int(width * self.done / self.total) if self.total else width
        bar = "#" * filled + "-" * (width - filled)
        dest = ",".join(map(str, self.destinations)) or "-"
        return (
            f"[{bar}] {self.done}/{self.total} partitions  batch {self.batch}/{self.batches}  "
            f"to brokers {dest}  {self.elapsed:.0f}s"
        )


@dataclass
class ExecutionReport:
    completed: list[TopicPartition] = field(default_factory=list)
    failed: dict[TopicPartition, str] = field(default_factory=dict)
    cancelled: list[TopicPartition] = field(default_factory=list)
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failed and not self.cancelled


@dataclass(frozen=True)
class ExecutorParams:
    concurrency: int = 2
    poll_interval: float = 1.0
    timeout: float | None = None
    """Seconds per batch; None waits for as long as it takes. A batch that times out is
    left running (``ReassignmentTimeout``)."""
    wait: bool = True
    """False: submit every partition at once and return without waiting."""

    def validate(self) -> None:
        if self.concurrency < 1:
            raise ConfigError("concurrency must be at least 1")
        if self.poll_interval <= 0:
            raise ConfigError("poll_interval must be positive")
        if self.timeout is not None and self.timeout <= 0:
            raise ConfigError("timeout must be positive")


class Executor:
    """Applies checked plans on one cluster (see the module docstring)."""

    def __init__(
        self,
        admin: OpsAdmin,
        params: ExecutorParams | None = None,
        *,
        on_progress: Callable[[Progress], None] = lambda _: None,
        on_poll: Callable[[], None] = lambda: None,
        before_submit: Callable[[list[ReplicaChange]], None] = lambda _: None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.admin = admin
        self.params = params or ExecutorParams()
        self.params.validate()
        self._on_progress = on_progress
        self._on_poll = on_poll
        self._before_submit = before_submit
        self._sleep = sleep
        self._clock = clock

    def apply(self, plan: CheckedPlan) -> ExecutionReport:
        """Run every batch to completion; Ctrl-C cancels the batch in flight and re-raises.

        A batch that times out is not cancelled: ``ReassignmentTimeout`` leaves it (and
        the batches not yet submitted) as they are.
        """
        start = self._clock()
        report = ExecutionReport()
        changes = plan.changes()
        if not changes:
            return report
        if not self.params.wait:
            self._submit([new for _, new in changes], report, plan.current)
            report.elapsed = self._clock() - start
            return report
        self._added = {new.key: set(new.replicas) - set(old.replicas) for old, new in changes}
        groups = batches(changes, self.params.concurrency)
        total = sum(len(g) for g in groups)
        for n, group in enumerate(groups, 1):
            try:
                submitted = self._submit(group, report, plan.current)
                if not submitted:
                    continue
                self._wait(submitted, report, n, len(groups), total, start)
            except ReassignmentTimeout:
                raise  # given up on, not interrupted: the batch keeps running
            except BaseException:
                # Interrupted (SIGTERM, Ctrl-C) while submitting or waiting: a request cut
                # off mid-flight may still reach the controller, so cancel every key of
                # the batch and look again for a moment.
                report.cancelled.extend(self.cancel([p.key for p in group], confirm_s=2.0))
                raise
        report.elapsed = self._clock() - start
        return report

    def _submit(
        self, group: Sequence[Partition], report: ExecutionReport, current: PartitionMap
    ) -> dict[TopicPartition, Partition]:
        self._before_submit(
            [
                ReplicaChange(p.topic, p.partition, current[p.key].replicas, p.replicas)
                for p in group
            ]
        )
        answers = self.admin.alter_reassignments({p.key: p.replicas for p in group})
        submitted: dict[TopicPartition, Partition] = {}
        for p in group:
            err = answers.get(p.key)
            if err is None:
                submitted[p.key] = p
            else:
                report.failed[p.key] = str(err)
        return submitted

    def _wait(
        self,
        submitted: Mapping[TopicPartition, Partition],
        report: ExecutionReport,
        batch: int,
        batches_total: int,
        total: int,
        start: float,
    ) -> None:
        started = self._clock()
        pending = dict(submitted)
        added = getattr(self, "_added", {})
        destinations = tuple(sorted({b for k in submitted for b in added.get(k, ())}))
        while True:
            self._on_poll()
            running = self.admin.list_reassignments()
            states = self.admin.partitions({t for t, _ in pending})
            for key, target in list(pending.items()):
                if key not in running and _complete(states.get(key), target):
                    report.completed.append(key)
                    del pending[key]
            self._on_progress(
                Progress(
                    done=len(report.completed),
                    total=total,
                    batch=batch,
                    batches=batches_total,
                    running=tuple(sorted(pending)),
                    destinations=destinations,
                    elapsed=self._clock() - start,
                )
            )
            if not pending:
                return
            if self.params.timeout is not None and self._clock() - started > self.params.timeout:
                raise ReassignmentTimeout(
                    f"{len(pending)} partition(s) not reassigned after {self.params.timeout:g}s "
                    f"(e.g. {_name(next(iter(pending)))}); they keep running: "
                    "`streamplane ops apply --cancel` stops them",
                    pending,
                )
            self._sleep(self.params.poll_interval)

    def cancel(
        self, keys: Collection[TopicPartition] | None = None, confirm_s: float = 0.0
    ) -> list[TopicPartition]:
        """Cancel reassignments in progress (all, or those of ``keys``); returns the
        cancelled. With ``confirm_s``, keep looking that long for reassignments of
        ``keys`` that show up late (a submission cut off mid-request), cancelling them
        too."""
        deadline = self._clock() + confirm_s
        cancelled: list[TopicPartition] = []
        while True:
            running = self.admin.list_reassignments()
            targets = sorted(k for k in running if keys is None or k in keys)
            if targets:
                answers = self.admin.alter_reassignments(dict.fromkeys(targets))
                cancelled += [k for k in targets if answers.get(k) is None]
            if self._clock() >= deadline:
                return sorted(set(cancelled))
            self._sleep(min(0.2, max(0.0, deadline - self._clock())))


def _complete(state: PartitionState | None, target: Partition) -> bool:
    return (
        state is not None
        and set(state.replicas) == set(target.replicas)
        and set(target.replicas) <= set(state.isr)
    )


def _name(key: TopicPartition) -> str:
    return f"{key[0]}-{key[1]}"
