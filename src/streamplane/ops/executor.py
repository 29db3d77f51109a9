"""Apply a partition plan through the Admin API (AlterPartitionReassignments), a few
brokers at a time, with progress, completion checks and cancel.

Nothing is applied until the whole plan has been checked against the live cluster:
``check_plan`` parses Kafka's reassignment JSON with the mapper's parser (every
problem at once) against the live brokers and the cluster's current partitions, and
refuses partitions already being reassigned elsewhere and, unless
``allow_mixed_replication``, a plan that would leave a topic with different replica counts
(counting the topic's partitions the plan does not list). A refused plan raises
``PlanRejected`` (a ``ConfigError`` listing the problems) and no request has been sent.
A partition already being reassigned to the plan's own replicas (an earlier apply of the
same plan that stopped waiting: ``timeout``, ``wait=False``, a kill) is *resumed*: it is
not submitted again, only waited for, in a first batch of its own.

Batches: partitions that copy data are grouped so that at most ``concurrency``
destination brokers (brokers receiving new replicas) are busy at once, as kafka-kit
operators do by hand with ``--brokers`` subsets; reorders and shrinks copy nothing and
ride along in the first batch. A batch is done when Kafka no longer lists its
reassignments and every partition shows exactly the target replicas, all in sync.

Only an interrupt (Ctrl-C, SIGTERM: ``KeyboardInterrupt``, ``Terminated``) cancels the
batch in flight. Anything else that ends an apply leaves it running (Kafka finishes it
on its own, ``cancel()`` stops it): a batch that outlives ``timeout``
(``ReassignmentTimeout``: the apply stops waiting, nothing is cancelled), an error (a
Kafka call that failed after its retries), and partitions that are neither being
reassigned nor at their target any more (``ReassignmentCancelled``: cancelled by
someone else, e.g. another ``ops apply --cancel``, or reverted). ``standing()`` then
says where each partition of the plan is.

A batch that makes no progress for ``stall_window`` seconds (no partition finished, no
new replica joined the ISR, no new replica grew on its broker: sizes are read with
DescribeLogDirs at most every tenth of the window) is reported to ``on_stall`` with the
stuck partitions, again every window while it lasts, and once more when it moves again;
the apply keeps waiting (cancelling a copy on a timer is the operator's call).

A watch pass (``on_poll``, then the reads of where the batch stands) is bounded: inside
the admin's ``bounded(seconds)``, its calls give up after
``read_bound`` seconds together instead of retrying for the adapter's usual 20 s (a
broker that just died, still in the metadata until it is fenced, held the progress for
13-25 s). A pass whose reads failed that way decides nothing: the progress is reported
with what could not be read (``Progress.unread``) and the reads are tried again at the
next poll; only reads failing without a break for ``read_give_up`` seconds end the apply
(the last error, as a call failing after its retries did before). Errors that are not
retriable end it at once, as before.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from streamplane.core.mapper.exceptions import ReassignmentJsonError
from streamplane.core.mapper.models import Partition, PartitionMap, TopicPartition
from streamplane.core.mapper.reassignment_json import parse_reassignment_json
from streamplane.core.throttle import ReplicaChange
from streamplane.exceptions import ConfigError, KafkaError
from streamplane.ops.autothrottle import Terminated
from streamplane.ops.kafka_ops import LogDir, OpsAdmin, PartitionState

INTERRUPTS = (KeyboardInterrupt, Terminated)
"""What cancels the batch in flight (Ctrl-C, SIGTERM)."""

STALL_WINDOW_S = 600.0
"""Default of ``ExecutorParams.stall_window``: 10 minutes without progress is a stall."""

READ_BOUND_S = 5.0
"""Default of ``ExecutorParams.read_bound``: how long one watch pass may spend on the
cluster's answers before its reads are given up (and tried again at the next poll)."""

READ_GIVE_UP_S = 20.0
"""Default of ``ExecutorParams.read_give_up``: reads failing without a break for this
long end the apply (the adapter's own retry window for one call)."""

T = TypeVar("T")

REVERT_GRACE_S = 3.0
"""How long a submitted partition must be seen neither reassigned nor at its target
before it counts as cancelled elsewhere (not a metadata answer a moment behind)."""


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


class ReassignmentCancelled(KafkaError):
    """Submitted partitions that are no longer being reassigned and are not at their
    target: cancelled by someone else (``ops apply --cancel`` in another shell), or
    reverted. Nothing more is submitted; the rest of the batch is left running."""

    def __init__(self, keys: Collection[TopicPartition]) -> None:
        self.keys = sorted(keys)
        super().__init__(
            f"{_names(self.keys, limit=10)}: no longer being reassigned and not at the "
            "target replicas: cancelled by someone else (`streamplane ops apply --cancel`?) "
            "or reverted; later batches not submitted"
        )


@dataclass(frozen=True)
class CheckedPlan:
    """A plan that passed every check: the target of each changing partition."""

    current: PartitionMap
    target: PartitionMap
    resumed: frozenset[TopicPartition] = frozenset()
    """Partitions already being reassigned to their target (an earlier apply of the same
    plan): waited for, not submitted again. Their ``current`` is the replicas they had."""
    capacity: int | None = None
    """The storage per broker the plan was made with (``ops map --capacity``, carried in
    the plan's ``"streamplane"`` object); None: the brokers' own disk figures."""

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
    resumed: dict[TopicPartition, Partition] = {}
    for p in parsed.partition_map:
        r = running.get(p.key)
        if r is None:
            continue
        if set(r.target) == set(p.replicas):
            had = r.original or current[p.key].replicas
            resumed[p.key] = Partition(p.topic, p.partition, had, current[p.key].size)
        else:
            problems.append(
                f"{p.topic}-{p.partition}: a reassignment to {list(r.target)} is already in "
                "progress (wait for it or cancel it first)"
            )
    if not len(parsed.partition_map):
        problems.append("the plan lists no partitions")
    capacity = parsed.meta.get("capacity")
    if capacity is not None and (
        not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1
    ):
        problems.append(f"streamplane.capacity must be a size in bytes (>= 1), got {capacity!r}")
        capacity = None
    if problems:
        raise PlanRejected(problems)
    subset = PartitionMap(resumed.get(p.key, current[p.key]) for p in parsed.partition_map)
    return CheckedPlan(subset, parsed.partition_map, frozenset(resumed), capacity)


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
    down: tuple[int, ...] = ()
    """Target brokers of partitions still pending that are not alive: they wait for them."""
    unread: tuple[str, ...] = ()
    """What this pass could not read (out of time, or a retriable error): the figures
    shown are the last ones read, and the reads are tried again at the next poll."""

    def status(self, width: int = 24) -> str:
        """The line without the elapsed time: it changes only when something happens."""
        filled = int(width * self.done / self.total) if self.total else width
        bar = "#" * filled + "-" * (width - filled)
        dest = ",".join(map(str, self.destinations)) or "-"
        status = (
            f"[{bar}] {self.done}/{self.total} partitions  batch {self.batch}/{self.batches}  "
            f"to brokers {dest}"
        )
        if self.down:
            status += f"  waiting for broker(s) {','.join(map(str, self.down))}: not alive"
        if self.unread:
            status += f"  could not read {', '.join(self.unread)} (read again at the next poll)"
        return status

    def line(self, width: int = 24) -> str:
        return f"{self.status(width)}  {self.elapsed:.0f}s"


@dataclass
class ExecutionReport:
    submitted: list[TopicPartition] = field(default_factory=list)
    """Accepted by the cluster."""
    resumed: list[TopicPartition] = field(default_factory=list)
    """Already being reassigned to their target when the apply started (not submitted)."""
    completed: list[TopicPartition] = field(default_factory=list)
    failed: dict[TopicPartition, str] = field(default_factory=dict)
    """Refused by the cluster."""
    cancelled: list[TopicPartition] = field(default_factory=list)
    cancel_error: str | None = None
    """Why cancelling the batch in flight failed (on an interrupt)."""
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
    stall_window: float | None = STALL_WINDOW_S
    """Seconds without progress before ``on_stall`` is told (None: never). The apply
    keeps waiting either way."""
    read_bound: float | None = READ_BOUND_S
    """Seconds one watch pass may spend on the cluster's answers (the admin's
    ``bounded``; None: the adapter's own retries)."""
    read_give_up: float = READ_GIVE_UP_S
    """Reads failing without a break for this long end the apply."""

    def validate(self) -> None:
        if self.concurrency < 1:
            raise ConfigError("concurrency must be at least 1")
        if self.poll_interval <= 0:
            raise ConfigError("poll_interval must be positive")
        if self.timeout is not None and self.timeout <= 0:
            raise ConfigError("timeout must be positive")
        if self.stall_window is not None and self.stall_window <= 0:
            raise ConfigError("stall_window must be positive")
        if self.read_bound is not None and self.read_bound <= 0:
            raise ConfigError("read_bound must be positive")


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
        on_stall: Callable[[Stall], None] = lambda _: None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.admin = admin
        self.params = params or ExecutorParams()
        self.params.validate()
        self._on_progress = on_progress
        self._on_poll = on_poll
        self._before_submit = before_submit
        self._on_stall = on_stall
        self._sleep = sleep
        self._clock = clock
        self.report = ExecutionReport()
        """The report of the latest apply, filled in as it goes (also when it raised)."""
        self._added: dict[TopicPartition, set[int]] = {}

    def apply(self, plan: CheckedPlan) -> ExecutionReport:
        """Run every batch to completion; an interrupt cancels the batch in flight and
        is raised again. Any other exception leaves the batch in flight running and the
        later batches unsubmitted (``standing()`` says where each partition is)."""
        start = self._clock()
        self.report = report = ExecutionReport()
        changes = plan.changes()
        if not changes:
            return report
        self._added = {new.key: set(new.replicas) - set(old.replicas) for old, new in changes}
        resumed = [new for _, new in changes if new.key in plan.resumed]
        report.resumed = [p.key for p in resumed]
        fresh = [(old, new) for old, new in changes if new.key not in plan.resumed]
        if not self.params.wait:
            if fresh:
                self._submit([new for _, new in fresh], report, plan.current)
            report.elapsed = self._clock() - start
            return report
        # Resumed partitions are copying already: a first batch of their own, waited for.
        groups = ([resumed] if resumed else []) + batches(fresh, self.params.concurrency)
        total = sum(len(g) for g in groups)
        for n, group in enumerate(groups, 1):
            try:
                if n == 1 and resumed:
                    submitted = {p.key: p for p in group}
                else:
                    submitted = self._submit(group, report, plan.current)
                if submitted:
                    self._wait(submitted, report, n, len(groups), total, start)
            except INTERRUPTS:
                # A request cut off mid-flight may still reach the controller: cancel
                # every key of the batch and look again for a moment.
                try:
                    report.cancelled.extend(self.cancel([p.key for p in group], confirm_s=2.0))
                except KafkaError as exc:
                    report.cancel_error = str(exc)
                raise
        report.elapsed = self._clock() - start
        return report

    def standing(self, plan: CheckedPlan) -> Standing:
        """Where each partition of the plan stands, as the cluster says (after an apply
        ended early); from the report alone if the cluster cannot be read."""
        try:
            running = self.admin.list_reassignments()
            states = self.admin.partitions(set(plan.target.topics()))
        except KafkaError as exc:
            return standing_of(plan, self.report, None, {}, error=str(exc))
        return standing_of(plan, self.report, set(running), states)

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
                report.submitted.append(p.key)
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
        destinations = tuple(sorted({b for k in submitted for b in self._added.get(k, ())}))
        stray_since: dict[TopicPartition, float] = {}
        window = self.params.stall_window
        watch = None if window is None else StallWatch(window, started)
        copied = CopiedBytes(self.admin, every=max(self.params.poll_interval, (window or 0) / 10))
        down: list[int] = []
        unread_since: float | None = None
        while True:
            failure: list[KafkaError] = []
            with self._bounded():
                self._on_poll()
                running = self._read(self.admin.list_reassignments, failure)
                states = self._read(lambda: self.admin.partitions({t for t, _ in pending}), failure)
                live = self._read(self.admin.brokers, failure)
                now = self._clock()
                if running is None or states is None or live is None:
                    # Decide nothing on part of the picture: the last one stands.
                    unread = [
                        label
                        for label, value in (
                            ("the reassignments in progress", running),
                            ("the partitions' replicas", states),
                            ("the live brokers", live),
                        )
                        if value is None
                    ]
                    unread_since = now if unread_since is None else unread_since
                    self._on_progress(
                        self._progress(report, pending, total, batch, batches_total,
                                       destinations, now - start, down, unread)
                    )  # fmt: skip
                    if now - unread_since >= self.params.read_give_up:
                        raise failure[-1]
                    self._check_timeout(pending, started, now)
                    self._sleep(self.params.poll_interval)
                    continue
                unread_since = None
                for key, target in list(pending.items()):
                    state = states.get(key)
                    if key in running or _at_target(state, target):
                        stray_since.pop(key, None)
                        if key not in running and _complete(state, target):
                            report.completed.append(key)
                            del pending[key]
                    else:
                        stray_since.setdefault(key, now)
                down = sorted({b for t in pending.values() for b in t.replicas} - set(live))
                self._on_progress(
                    self._progress(report, pending, total, batch, batches_total,
                                   destinations, now - start, down, [])
                )  # fmt: skip
                if watch is not None and pending:
                    adding = {k: self._added.get(k, set()) for k in pending}
                    sizes = copied.sample(now, adding, set(live))
                    news = watch.observe(now, _achieved(adding, states, sizes))
                    if news is not None:
                        self._on_stall(
                            Stall(
                                seconds=watch.idle(now) if news == "stalled" else 0.0,
                                batch=batch,
                                batches=batches_total,
                                stuck=tuple(
                                    _stuck(k, adding[k], states.get(k), set(live))
                                    for k in sorted(adding)
                                ),
                                moving=news == "moving",
                            )
                        )
            reverted = [k for k, since in stray_since.items() if now - since >= REVERT_GRACE_S]
            if reverted:
                raise ReassignmentCancelled(reverted)
            if not pending:
                return
            self._check_timeout(pending, started, now)
            self._sleep(self.params.poll_interval)

    def _bounded(self) -> contextlib.AbstractContextManager[Any]:
        """A watch pass's bound on the admin's calls (see the module docstring)."""
        if self.params.read_bound is None:
            return contextlib.nullcontext()
        return self.admin.bounded(self.params.read_bound)

    @staticmethod
    def _read(fn: Callable[[], T], failure: list[KafkaError]) -> T | None:
        """``fn()``, or None when it failed in a way the next poll may cure (a retriable
        error: a broker that just died, a call out of time); other errors are raised."""
        try:
            return fn()
        except KafkaError as exc:
            if not exc.retriable:
                raise
            failure.append(exc)
            return None

    def _progress(
        self,
        report: ExecutionReport,
        pending: Mapping[TopicPartition, Partition],
        total: int,
        batch: int,
        batches_total: int,
        destinations: tuple[int, ...],
        elapsed: float,
        down: Sequence[int],
        unread: Sequence[str],
    ) -> Progress:
        return Progress(
            done=len(report.completed),
            total=total,
            batch=batch,
            batches=batches_total,
            running=tuple(sorted(pending)),
            destinations=destinations,
            elapsed=elapsed,
            down=tuple(down),
            unread=tuple(unread),
        )

    def _check_timeout(
        self, pending: Mapping[TopicPartition, Partition], started: float, now: float
    ) -> None:
        if self.params.timeout is not None and now - started > self.params.timeout:
            raise ReassignmentTimeout(
                f"{len(pending)} partition(s) not reassigned after {self.params.timeout:g}s "
                f"(e.g. {_name(next(iter(pending)))}): stopped waiting, nothing cancelled, "
                "they keep running in the cluster",
                pending,
            )

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


@dataclass(frozen=True)
class StuckPartition:
    """A partition of a stalled batch, and what can be told about why it does not move."""

    key: TopicPartition
    adding: tuple[int, ...]
    """The brokers receiving a new replica."""
    not_in_isr: tuple[int, ...]
    """Of ``adding``, those not (yet) in the ISR."""
    down: tuple[int, ...]
    """Of ``adding``, those not alive."""

    def text(self) -> str:
        if not self.adding:
            return _name(self.key)
        if self.down:
            why = f"broker(s) {_ids(self.down)} not alive"
        elif self.not_in_isr:
            why = f"{_ids(self.not_in_isr)} not in the ISR yet"
        else:
            why = "in the ISR, not yet complete"
        return f"{_name(self.key)} (adding broker(s) {_ids(self.adding)}: {why})"


@dataclass(frozen=True)
class Stall:
    """A batch that made no progress for ``seconds`` (or, ``moving``, that moves again)."""

    seconds: float
    batch: int
    batches: int
    stuck: tuple[StuckPartition, ...]
    moving: bool = False

    def keys(self) -> list[TopicPartition]:
        return [p.key for p in self.stuck]

    def topics(self) -> list[str]:
        return sorted({t for t, _ in self.keys()})

    def text(self, limit: int = 10) -> str:
        if self.moving:
            return (
                f"the reassignments of batch {self.batch}/{self.batches} are moving again "
                f"({len(self.stuck)} partition(s) to go)"
            )
        shown = ", ".join(p.text() for p in self.stuck[:limit])
        more = f" and {len(self.stuck) - limit} more" if len(self.stuck) > limit else ""
        return (
            f"no progress for {_duration(self.seconds)} in batch {self.batch}/{self.batches} "
            f"(no partition finished, no new replica joined the ISR or grew): "
            f"{len(self.stuck)} partition(s) stuck: {shown}{more}"
        )


class StallWatch:
    """Tells when nothing moved for ``window`` seconds. Pure: ``observe()`` is given, for
    each partition still pending, what it has achieved so far (numbers that only grow
    while it moves: new replicas in the ISR, bytes copied); progress is a partition that
    finished or a number above its best so far (so a replica leaving the ISR and coming
    back, or retention shrinking a log, is not progress)."""

    def __init__(self, window: float, now: float) -> None:
        if window <= 0:
            raise ConfigError("stall window must be positive")
        self.window = window
        self._since = now
        self._best: dict[TopicPartition, tuple[int, ...]] = {}
        self._told_at: float | None = None

    def idle(self, now: float) -> float:
        """Seconds since the last progress."""
        return now - self._since

    def observe(self, now: float, marks: Mapping[TopicPartition, tuple[int, ...]]) -> str | None:
        """``"stalled"`` when nothing moved for the window (again every window while it
        lasts), ``"moving"`` at the first progress after that, else None."""
        progressed = any(k not in marks for k in self._best)  # finished
        for key, mark in marks.items():
            best = self._best.get(key)
            if best is None:
                self._best[key] = mark
            elif any(m > b for m, b in zip(mark, best, strict=True)):
                progressed = True
                self._best[key] = tuple(max(m, b) for m, b in zip(mark, best, strict=True))
        for key in [k for k in self._best if k not in marks]:
            del self._best[key]
        if progressed:
            self._since = now
            if self._told_at is not None:
                self._told_at = None
                return "moving"
            return None
        if self.idle(now) >= self.window and (
            self._told_at is None or now - self._told_at >= self.window
        ):
            self._told_at = now
            return "stalled"
        return None


class CopiedBytes:
    """The size of each pending partition's new replicas on the brokers receiving them
    (DescribeLogDirs), read at most every ``every`` seconds and only from live brokers
    (asking a dead one would hold the apply for the client's retries); a broker (or a
    call) that does not answer keeps its last figures: these are only for noticing a
    stall, never a reason to end an apply."""

    def __init__(self, admin: OpsAdmin, every: float) -> None:
        self._admin = admin
        self._every = every
        self._read_at: float | None = None
        self._sizes: dict[tuple[int, TopicPartition], int] = {}

    def sample(
        self, now: float, adding: Mapping[TopicPartition, Collection[int]], live: Collection[int]
    ) -> dict[TopicPartition, int]:
        brokers = sorted({b for bs in adding.values() for b in bs} & set(live))
        if brokers and (self._read_at is None or now - self._read_at >= self._every):
            self._read_at = now
            try:
                answers = self._admin.log_dirs(brokers)
            except KafkaError:
                answers = {}
            for bid, dirs in answers.items():
                if isinstance(dirs, KafkaError):
                    continue
                self._sizes.update(_replica_sizes(bid, dirs, adding))
        return {key: sum(self._sizes.get((b, key), 0) for b in bs) for key, bs in adding.items()}


def _replica_sizes(
    bid: int, dirs: Sequence[LogDir], adding: Mapping[TopicPartition, Collection[int]]
) -> dict[tuple[int, TopicPartition], int]:
    out: dict[tuple[int, TopicPartition], int] = {}
    for d in dirs:
        for key, size in d.sizes.items():
            if bid in adding.get(key, ()):
                out[(bid, key)] = max(out.get((bid, key), 0), size)
    return out


def _achieved(
    adding: Mapping[TopicPartition, Collection[int]],
    states: Mapping[TopicPartition, PartitionState],
    sizes: Mapping[TopicPartition, int],
) -> dict[TopicPartition, tuple[int, int]]:
    """What each pending partition has achieved: new replicas in the ISR, bytes copied."""
    out = {}
    for key, added in adding.items():
        state = states.get(key)
        in_isr = len(set(added) & set(state.isr)) if state is not None else 0
        out[key] = (in_isr, sizes.get(key, 0))
    return out


def _stuck(
    key: TopicPartition, adding: Collection[int], state: PartitionState | None, live: set[int]
) -> StuckPartition:
    added = tuple(sorted(adding))
    isr = set(state.isr) if state is not None else set()
    return StuckPartition(
        key,
        added,
        tuple(b for b in added if b not in isr),
        tuple(b for b in added if b not in live),
    )


def _ids(ids: Sequence[int]) -> str:
    return ",".join(map(str, ids))


def _duration(seconds: float) -> str:
    """``0.5s``, ``45s``, ``10m``, ``12m30s``, ``1h05m``."""
    if seconds < 10:
        return f"{seconds:.1f}".removesuffix(".0") + "s"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m" + (f"{s % 60:02d}s" if s % 60 else "")
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


@dataclass(frozen=True)
class Standing:
    """Where the partitions of a plan stand when an apply ended (for its message)."""

    done: tuple[TopicPartition, ...] = ()
    running: tuple[TopicPartition, ...] = ()
    cancelled: tuple[TopicPartition, ...] = ()
    """By this apply (an interrupt)."""
    cancelled_elsewhere: tuple[TopicPartition, ...] = ()
    """Submitted, then neither reassigned nor at the target: cancelled by someone else."""
    refused: tuple[TopicPartition, ...] = ()
    not_submitted: tuple[TopicPartition, ...] = ()
    unknown: tuple[TopicPartition, ...] = ()
    error: str | None = None
    """Why the cluster could not be read (then ``unknown`` lists what it would tell)."""

    def text(self) -> str:
        parts = [
            f"{len(keys)} {label} ({_names(keys)})"
            for label, keys in (
                ("done", self.done),
                ("still running", self.running),
                ("cancelled", self.cancelled),
                ("cancelled elsewhere", self.cancelled_elsewhere),
                ("refused", self.refused),
                ("not submitted", self.not_submitted),
                ("unknown", self.unknown),
            )
            if keys
        ]
        text = "reassignments: " + (", ".join(parts) or "none")
        if self.error:
            text += f" (the cluster could not be read: {self.error})"
        return text


def standing_of(
    plan: CheckedPlan,
    report: ExecutionReport,
    running: Collection[TopicPartition] | None,
    states: Mapping[TopicPartition, PartitionState],
    *,
    error: str | None = None,
) -> Standing:
    """Where each partition of ``plan`` stands, from the reassignments ``running`` and
    the partition ``states`` the cluster gives (``running`` None: it could not be read,
    and what only the cluster can tell is unknown)."""
    sorts: dict[str, list[TopicPartition]] = {}
    for key, target in sorted((new.key, new) for _, new in plan.changes()):
        if key in report.failed:
            kind = "refused"
        elif running is None:
            kind = (
                "done"
                if key in report.completed
                else "cancelled"
                if key in report.cancelled
                else "unknown"
                if key in report.submitted or key in report.resumed
                else "not_submitted"
            )
        elif key in running:
            kind = "running"
        elif _at_target(states.get(key), target):
            kind = "done"
        elif key in report.cancelled:
            kind = "cancelled"
        elif key in report.submitted or key in report.resumed:
            kind = "cancelled_elsewhere"
        else:
            kind = "not_submitted"
        sorts.setdefault(kind, []).append(key)
    return Standing(**{kind: tuple(keys) for kind, keys in sorts.items()}, error=error)


def _at_target(state: PartitionState | None, target: Partition) -> bool:
    return state is not None and set(state.replicas) == set(target.replicas)


def _complete(state: PartitionState | None, target: Partition) -> bool:
    return (
        state is not None and _at_target(state, target) and set(target.replicas) <= set(state.isr)
    )


def _name(key: TopicPartition) -> str:
    return f"{key[0]}-{key[1]}"


def _names(keys: Sequence[TopicPartition], limit: int = 3) -> str:
    shown = ", ".join(_name(k) for k in keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")
