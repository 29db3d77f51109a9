"""Autothrottle: replication throttles while reassignments run, and never left behind.

Each ``step()``:

1. lists the reassignments in progress (ListPartitionReassignments);
2. measures traffic from DescribeLogDirs deltas between two steps (no JMX needed):
   - ``replication_in`` of a broker: growth of the replicas it is *adding*;
   - ``replication_out`` of a broker: that same growth, counted on the current leader
     of each moving partition (the leader serves the copy);
   - ``bytes_in``: growth of everything the broker stores (client writes, normal
     follower replication and the copies), i.e. its disk write rate ~ network in;
   - ``bytes_out``: ``replication_out`` plus, for partitions it leads, their growth
     times the number of followers (what followers fetch). Consumer fetches are not
     visible in storage: leave room for them in ``capacity``.
   Sizes shrink when retention deletes segments; negative deltas count as 0. The first
   step has no previous sample, so it uses kafka-kit's fallback (the throttle in force,
   or the minimum);
3. computes rates with ``core.throttle.compute_throttles`` (kafka-kit's headroom
   formula) and the ``*.throttled.replicas`` topic lists with
   ``core.throttle.throttled_replicas``;
4. records what it is about to set in the **state file** (atomically), then writes
   the broker and topic configs (IncrementalAlterConfigs).

When no reassignment is left, every throttle recorded in the state file is removed
and the file is deleted. ``recover()`` does the same for a state file left by a run
that crashed or was killed, and runs first on every start; ``run()`` removes every
throttle on a normal exit, on an exception and on SIGTERM/SIGINT (``terminate_on``
turns SIGTERM into ``Terminated``). A value that was already set before we touched it
is recorded and restored instead of deleted.

A step of ``run()`` that fails (a ``KafkaError``: a broker restarting, a timeout) does
not end it: the throttles in force stay, the error is logged once per kind (its code,
else its text) while it lasts, and the step is retried at the next interval. Only when
steps have failed without a break for ``give_up_after`` seconds does ``run()`` give up
(``ThrottleStepsFailing``), clearing the throttles on the way out as always.

Only live brokers (those in the cluster metadata) are read or written. A dead broker
sends nothing, so there is nothing to throttle, and Kafka cannot take a config of a
broker it does not know (kafka-python sends broker configs to the broker itself:
``UnknownBrokerIdError``); replacing a dead broker is exactly when reassignments run
with one in their replica sets. A throttle set on a broker that died afterwards cannot
be removed until it is back: it stays recorded in the state file (which then survives
the cleanup) for the next start or ``ops throttle --clear``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from streamplane.core.mapper.models import TopicPartition
from streamplane.core.throttle import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    BrokerTraffic,
    ReassignmentRoles,
    ReplicaChange,
    ThrottleLimits,
    ThrottleRates,
    compute_throttles,
    reassignment_roles,
    throttled_replicas,
)
from streamplane.exceptions import ConfigError, KafkaError, StreamplaneError
from streamplane.ops.kafka_ops import ConfigChange, ConfigKind, OpsAdmin, Reassignment

BROKER_KEYS = (LEADER_RATE, FOLLOWER_RATE)
TOPIC_KEYS = (LEADER_REPLICAS, FOLLOWER_REPLICAS)
STATE_VERSION = 1


GIVE_UP_AFTER_S = 300.0
"""Default of ``AutothrottleParams.give_up_after``: five minutes of failing steps (a
broker restart, a controller election and a client's metadata refresh fit in it)."""


class Terminated(StreamplaneError):
    """SIGTERM arrived (raised in the main thread by ``terminate_on``)."""


class ThrottleStepsFailing(KafkaError):
    """Every step failed for ``give_up_after`` seconds: ``run()`` gave up (and cleared)."""


@contextlib.contextmanager
def terminate_on(*signals: signal.Signals) -> Iterator[None]:
    """Raise ``Terminated`` in the main thread when one of ``signals`` arrives."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise Terminated(f"received {signal.Signals(signum).name}")

    previous = {s: signal.signal(s, handler) for s in signals}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@dataclass
class ThrottleState:
    """What this tool changed: per resource, the value each key had before (None: unset),
    and the value it set last."""

    bootstrap: str
    previous: dict[str, dict[str, str | None]] = field(default_factory=dict)
    current: dict[str, dict[str, str]] = field(default_factory=dict)

    @staticmethod
    def resource(kind: ConfigKind, name: str) -> str:
        return f"{kind}:{name}"

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": STATE_VERSION,
                "bootstrap": self.bootstrap,
                "previous": self.previous,
                "current": self.current,
                "pid": os.getpid(),
                "updated_at": time.time(),
            },
            indent=2,
            sort_keys=True,
        )

    @classmethod
    def load(cls, path: Path) -> ThrottleState | None:
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"autothrottle state file {path} is unreadable: {exc}") from exc
        if not isinstance(doc, dict) or doc.get("version") != STATE_VERSION:
            raise ConfigError(f"autothrottle state file {path} has an unknown format")
        return cls(str(doc["bootstrap"]), dict(doc["previous"]), dict(doc["current"]))

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w") as fh:
            fh.write(self.to_json())
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)


@dataclass(frozen=True)
class AutothrottleParams:
    capacity: float | Mapping[int, float]
    """Network capacity per broker, bytes/s (one figure or per broker)."""
    limits: ThrottleLimits
    state_file: Path
    interval: float = 5.0
    give_up_after: float = GIVE_UP_AFTER_S
    """Seconds of steps failing without a break before ``run()`` gives up."""

    def validate(self) -> None:
        self.limits.validate()
        if self.interval <= 0:
            raise ConfigError("interval must be positive")
        if self.give_up_after <= 0:
            raise ConfigError("give_up_after must be positive")


@dataclass(frozen=True)
class StepResult:
    reassignments: int
    broker_configs: Mapping[int, Mapping[str, str]]
    topic_configs: Mapping[str, Mapping[str, str]]
    cleared: bool
    warnings: tuple[str, ...] = ()
    """Warnings not given at an earlier step: each is said once, not at every step."""


@dataclass(frozen=True)
class Cleanup:
    """How a removal of the recorded throttles ended: the resources (``broker:3``,
    ``topic:t``) whose throttles are gone, and those left, still recorded in the state
    file, with the reason each stays."""

    removed: tuple[str, ...] = ()
    left: Mapping[str, str] = field(default_factory=dict)
    running: bool = False
    """Nothing was removed: reassignments are still running (``finish()``)."""

    def left_text(self) -> str:
        """``broker 3 (not alive), topic t (...)``: what stays, and why."""
        return ", ".join(f"{_resource_text(r)} ({why})" for r, why in sorted(self.left.items()))


class Autothrottle:
    """Throttles for the reassignments of one cluster (see the module docstring)."""

    def __init__(
        self,
        admin: OpsAdmin,
        params: AutothrottleParams,
        *,
        bootstrap: str = "",
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        log: Callable[[str], None] = lambda _: None,
        clear_command: str = "streamplane ops throttle --clear",
    ) -> None:
        """``clear_command``: the command that removes what a cleanup could not (named
        in the messages, with the options that find this cluster and state file)."""
        params.validate()
        self.admin = admin
        self.params = params
        self.bootstrap = bootstrap
        self._clock = clock
        self._sleep = sleep
        self._log = log
        self._clear_command = clear_command
        self._state = ThrottleState(bootstrap)
        self._last: tuple[float, dict[tuple[int, TopicPartition], int]] | None = None
        self._rates: dict[int, ThrottleRates] = {}
        self._told_left: Mapping[str, str] = {}
        self._told_warnings: set[str] = set()
        self._rewrite = False

    # ------------------------------------------------------------------ recovery
    def recover(self) -> Cleanup:
        """Remove throttles recorded by an earlier run (crashed or killed)."""
        state = ThrottleState.load(self.params.state_file)
        if state is None:
            return Cleanup()
        self._state = state
        cleanup = self._restore_all()
        # Also the path of `ops apply --cancel`, while the apply that set them may still run.
        self._log(
            f"removed the throttles of {len(cleanup.removed)} resource(s) recorded in "
            f"{self.params.state_file}"
        )
        return cleanup

    def take_over(self) -> list[str]:
        """Start: adopt the throttles an earlier run left (``ops apply --no-wait`` or
        ``--timeout``, a killed run) while their reassignments are still running, or
        remove them (``recover()``) when none is; returns the resources recorded.

        Adopting keeps every recorded throttle in force: nothing is removed before the
        next ``step()`` writes its values (set first, over the old ones), so a copy in
        flight is never unthrottled, not even for a moment. The rates in force become
        kafka-kit's fallback for that first step (no traffic sample yet), and the
        first write sets every wanted value again (a run killed between recording and
        writing may have recorded values the cluster never got)."""
        state = ThrottleState.load(self.params.state_file)
        if state is None:
            return []
        if not self.admin.list_reassignments():
            return list(self.recover().removed)
        self._state = state
        self._rates = {
            int(resource.partition(":")[2]): ThrottleRates(
                _int_or_none(values.get(LEADER_RATE)), _int_or_none(values.get(FOLLOWER_RATE))
            )
            for resource, values in state.current.items()
            if resource.startswith("broker:")
        }
        self._rewrite = True
        names = sorted(state.previous)
        self._log(
            f"took over {len(names)} throttled resource(s) left by an earlier run: "
            "reassignments are still running, their throttles stay until replaced"
        )
        return names

    def clear(self) -> Cleanup:
        """Remove every throttle this tool set (restoring earlier values); delete the state."""
        return self._restore_all()

    def _restore_all(self) -> Cleanup:
        """Restore every recorded resource, one at a time, so that one failure (a broker
        that is not alive, or not reachable) leaves the others removed.

        What could not be removed stays recorded in the state file (deleted only once
        nothing is left in it) for a later start or ``ops throttle --clear``, and is
        said once."""
        left: dict[str, str] = {}
        try:
            live = self._live_brokers()
        except KafkaError as exc:
            live, left = set(), dict.fromkeys(self._state.previous, str(exc))
        for resource, keys in sorted(self._state.previous.items()):
            if resource in left:
                continue
            if not _reachable(resource, live):
                left[resource] = "not alive"
                continue
            kind, _, name = resource.partition(":")
            try:
                self._apply([_restore_change(kind, name, keys)], "remove throttles")
            except KafkaError as exc:
                left[resource] = str(exc)
        removed = tuple(sorted(set(self._state.previous) - set(left)))
        self._state = ThrottleState(
            self.bootstrap,
            previous={r: self._state.previous[r] for r in sorted(left)},
            current={r: self._state.current[r] for r in sorted(left) if r in self._state.current},
        )
        self._rates = {}
        cleanup = Cleanup(removed, left)
        if left:
            self._state.save(self.params.state_file)
            self._tell_left(cleanup)
        else:
            with contextlib.suppress(FileNotFoundError):
                self.params.state_file.unlink()
        return cleanup

    def recorded(self) -> tuple[str, ...]:
        """The resources whose throttles are recorded (set, or left by a cleanup)."""
        return tuple(sorted(self._state.previous))

    def _live_brokers(self) -> set[int]:
        return set(self.admin.brokers())

    def _tell_left(self, cleanup: Cleanup) -> None:
        """Say once (not at every step of ``--forever``) which throttles stay, and why."""
        if cleanup.left == self._told_left:
            return
        self._told_left = dict(cleanup.left)
        self._log(
            f"throttles stay on {cleanup.left_text()}, recorded in {self.params.state_file}: "
            f"`{self._clear_command}` removes them (a broker's once it is back)"
        )

    # ------------------------------------------------------------------ one step
    def step(self) -> StepResult:
        running = self.admin.list_reassignments()
        if not running:
            cleared = bool(self._state.previous) and bool(self._restore_all().removed)
            self._last = None
            return StepResult(0, {}, {}, cleared)
        changes = [_change(r) for r in running.values()]
        return self._set(changes, self._measure(running))

    def prepare(self, changes: Sequence[ReplicaChange]) -> StepResult:
        """Throttle reassignments about to be submitted (as ``kafka-reassign-partitions``
        does), so not a byte is copied unthrottled. No traffic is known yet: kafka-kit's
        fallback applies (the throttle in force, or the minimum). Reassignments already
        running (an earlier ``--no-wait`` run taken over) stay throttled too."""
        given = {(c.topic, c.partition) for c in changes}
        running = [_change(r) for k, r in self.admin.list_reassignments().items() if k not in given]
        return self._set([*changes, *running], {})

    def finish(self) -> Cleanup:
        """Remove every throttle unless reassignments are still running (an earlier
        run's, or copies an apply leaves running): then they stay, recorded, for ``ops
        throttle``, as they do when it cannot be told whether any is running (a copy is
        never left unthrottled)."""
        try:
            running = bool(self.admin.list_reassignments())
        except KafkaError as exc:
            left = dict.fromkeys(
                self._state.previous, f"could not tell whether reassignments run: {exc}"
            )
            return Cleanup(left=left)
        if running:
            return Cleanup(left=dict.fromkeys(self._state.previous, "copying"), running=True)
        return self.clear()

    def _set(
        self, changes: list[ReplicaChange], traffic: Mapping[int, BrokerTraffic]
    ) -> StepResult:
        live = self._live_brokers()
        roles = _live_roles(reassignment_roles(changes), live)
        topic_values = throttled_replicas(changes)
        plan = compute_throttles(
            traffic, self.params.capacity, roles, self.params.limits, self._rates
        )
        broker_values: dict[int, dict[str, str]] = {}
        for b in plan.brokers:
            values: dict[str, str] = {}
            if b.leader_rate is not None:
                values[LEADER_RATE] = str(b.leader_rate)
            if b.follower_rate is not None:
                values[FOLLOWER_RATE] = str(b.follower_rate)
            broker_values[b.broker_id] = values
            self._rates[b.broker_id] = ThrottleRates(b.leader_rate, b.follower_rate)
        for bid in plan.removals:
            self._rates.pop(bid, None)
        self._write(broker_values, topic_values, live)
        fresh = tuple(w for w in dict.fromkeys(plan.warnings) if w not in self._told_warnings)
        self._told_warnings.update(fresh)
        return StepResult(len(changes), broker_values, topic_values, False, fresh)

    def _measure(self, running: Mapping[TopicPartition, Reassignment]) -> dict[int, BrokerTraffic]:
        now = self._clock()
        sizes: dict[tuple[int, TopicPartition], int] = {}
        answered: set[int] = set()  # a broker holding nothing yet has traffic 0, not none
        for bid, dirs in self.admin.log_dirs().items():
            if isinstance(dirs, KafkaError):
                continue
            answered.add(bid)
            for d in dirs:
                for key, size in d.sizes.items():
                    sizes[(bid, key)] = max(sizes.get((bid, key), 0), size)
        last, self._last = self._last, (now, sizes)
        if last is None or now <= last[0]:
            return {}
        dt = now - last[0]
        before = last[1]

        def growth(bid: int, key: TopicPartition) -> float:
            if (bid, key) not in sizes:
                return 0.0
            return max(sizes[(bid, key)] - before.get((bid, key), 0), 0) / dt

        states = self.admin.partitions()
        rep_in: dict[int, float] = {}
        rep_out: dict[int, float] = {}
        for key, r in running.items():
            leader = states[key].leader if key in states else -1
            for b in r.adding:
                g = growth(b, key)
                rep_in[b] = rep_in.get(b, 0.0) + g
                if leader >= 0:
                    rep_out[leader] = rep_out.get(leader, 0.0) + g
        bytes_in: dict[int, float] = {}
        for bid, key in sizes:
            bytes_in[bid] = bytes_in.get(bid, 0.0) + growth(bid, key)
        bytes_out = dict(rep_out)
        for key, s in states.items():
            if key in running or s.leader < 0:
                continue
            followers = len([b for b in s.replicas if b != s.leader])
            bytes_out[s.leader] = bytes_out.get(s.leader, 0.0) + growth(s.leader, key) * followers
        return {
            b: BrokerTraffic(
                b,
                bytes_in.get(b, 0.0),
                bytes_out.get(b, 0.0),
                replication_in=rep_in.get(b, 0.0),
                replication_out=rep_out.get(b, 0.0),
            )
            for b in sorted(answered)
        }

    def _write(
        self,
        broker_values: Mapping[int, Mapping[str, str]],
        topic_values: Mapping[str, Mapping[str, str]],
        live: set[int],
    ) -> None:
        """Set ``*_values`` (live brokers only), restore what is no longer wanted; a
        broker that died after we throttled it keeps its record, untouched, until it is
        back."""
        unreachable = {r: v for r, v in self._state.current.items() if not _reachable(r, live)}
        wanted: dict[str, dict[str, str]] = {}
        for bid, values in broker_values.items():
            wanted[ThrottleState.resource("broker", str(bid))] = dict(values)
        for topic, values in topic_values.items():
            wanted[ThrottleState.resource("topic", topic)] = dict(values)
        new_resources = [r for r in wanted if r not in self._state.previous]
        if new_resources:
            self._record_previous(new_resources)
        changes: list[ConfigChange] = []
        for resource in sorted((set(wanted) | set(self._state.current)) - set(unreachable)):
            kind, _, name = resource.partition(":")
            target = wanted.get(resource, {})
            had = self._state.current.get(resource, {})
            keys = BROKER_KEYS if kind == "broker" else TOPIC_KEYS
            set_now = {k: v for k, v in target.items() if self._rewrite or had.get(k) != v}
            gone = [k for k in keys if k in had and k not in target]
            if not set_now and not gone:
                continue
            if gone:
                restore = _restore_change(
                    kind, name, {k: self._state.previous[resource].get(k) for k in gone}
                )
                set_now = {**restore.set, **set_now}
                changes.append(ConfigChange(_kind(kind), name, set_now, restore.delete))
            else:
                changes.append(ConfigChange(_kind(kind), name, set_now))
        self._state.current = {r: v for r, v in wanted.items() if v} | unreachable
        self._state.save(self.params.state_file)
        if changes:
            self._apply(changes, "set throttles")
        self._rewrite = False

    def _record_previous(self, resources: list[str]) -> None:
        by_kind: dict[str, list[str]] = {}
        for r in resources:
            kind, _, name = r.partition(":")
            by_kind.setdefault(kind, []).append(name)
        for kind, names in by_kind.items():
            found = self.admin.describe_configs(_kind(kind), names)
            keys = BROKER_KEYS if kind == "broker" else TOPIC_KEYS
            for name in names:
                values = found.get(name, {})
                self._state.previous[ThrottleState.resource(_kind(kind), name)] = {
                    k: values.get(k) for k in keys
                }
        # Recorded before anything is set: a crash after this point is recoverable.
        self._state.save(self.params.state_file)

    def _apply(self, changes: list[ConfigChange], what: str) -> None:
        results = self.admin.alter_configs(changes)
        failed = {k: e for k, e in results.items() if e is not None}
        if failed:
            (kind, name), err = sorted(failed.items())[0]
            raise KafkaError(
                f"{what}: {kind} {name}: {err}", code=err.code, retriable=err.retriable
            )

    # ------------------------------------------------------------------ loop
    def run(self, *, until_idle: bool = True, max_steps: int | None = None) -> int:
        """Recover, then step every ``interval`` seconds; always clear on the way out.

        ``until_idle``: return once no reassignment has been running for a step (after
        at least one step). Returns the number of steps taken (failed ones included).
        Throttles an earlier run left are taken over while their reassignments run
        (``take_over()``). A step that fails is retried at the next interval, the
        throttles in force kept, until steps have failed for ``give_up_after`` seconds
        (``ThrottleStepsFailing``); see the module docstring.
        """
        self.take_over()
        steps = 0
        failing = _Failing(self.params, self._log)
        try:
            while max_steps is None or steps < max_steps:
                try:
                    result = self.step()
                except KafkaError as exc:
                    steps += 1
                    failing.failed(exc, self._clock())
                    self._sleep(self.params.interval)
                    continue
                steps += 1
                failing.worked(self._clock())
                if result.reassignments:
                    self._log(
                        f"{result.reassignments} reassignment(s); throttles: "
                        + ", ".join(
                            f"broker {b} {_rates_text(v)}"
                            for b, v in sorted(result.broker_configs.items())
                        )
                    )
                    for w in result.warnings:
                        self._log(f"warning: {w}")
                elif until_idle:
                    return steps
                self._sleep(self.params.interval)
            return steps
        finally:
            self.clear()


class _Failing:
    """The failing steps of a ``run()``: each kind of error said once while steps fail
    (not at every interval), the recovery said once, and the end once they have failed
    for ``give_up_after`` seconds without a break."""

    def __init__(self, params: AutothrottleParams, log: Callable[[str], None]) -> None:
        self._params = params
        self._log = log
        self._since: float | None = None
        self._count = 0
        self._told: set[str] = set()

    def failed(self, exc: KafkaError, now: float) -> None:
        if self._since is None:
            self._since = now
        self._count += 1
        failing_for = now - self._since
        if failing_for >= self._params.give_up_after:
            raise ThrottleStepsFailing(
                f"throttle steps failed for {failing_for:.0f}s without a break "
                f"({self._count} attempt(s); the limit is {self._params.give_up_after:g}s), "
                f"the last one: {exc}",
                code=exc.code,
                retriable=exc.retriable,
            ) from exc
        kind = exc.code or str(exc)
        if kind not in self._told:
            self._told.add(kind)
            self._log(
                f"warning: throttle step failed; the throttles in force stay and the step is "
                f"retried every {self._params.interval:g}s, for up to "
                f"{self._params.give_up_after:g}s of failures: {exc}"
            )

    def worked(self, now: float) -> None:
        if self._since is None:
            return
        self._log(
            f"throttle steps work again, after {self._count} failed step(s) over "
            f"{now - self._since:.0f}s"
        )
        self._since, self._count, self._told = None, 0, set()


def _rates_text(values: Mapping[str, str]) -> str:
    parts = []
    if LEADER_RATE in values:
        parts.append(f"leader {int(values[LEADER_RATE]) / 1e6:.2f} MB/s")
    if FOLLOWER_RATE in values:
        parts.append(f"follower {int(values[FOLLOWER_RATE]) / 1e6:.2f} MB/s")
    return "/".join(parts) or "-"


def _int_or_none(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def _live_roles(roles: ReassignmentRoles, live: set[int]) -> ReassignmentRoles:
    """The roles of live brokers only: a dead one sends nothing and cannot be configured
    (and, with no traffic figures, would only add a warning at every step)."""
    return ReassignmentRoles(roles.sources & live, roles.destinations & live)


def _reachable(resource: str, live: set[int]) -> bool:
    """Whether a state-file resource can be configured now: a topic, or a live broker."""
    kind, _, name = resource.partition(":")
    return kind != "broker" or int(name) in live


def _resource_text(resource: str) -> str:
    """``broker:3`` -> ``broker 3``."""
    kind, _, name = resource.partition(":")
    return f"{kind} {name}"


def _kind(kind: str) -> ConfigKind:
    if kind == "broker":
        return "broker"
    if kind == "topic":
        return "topic"
    raise ConfigError(f"unknown resource kind {kind!r} in the autothrottle state")


def _restore_change(kind: str, name: str, previous: Mapping[str, str | None]) -> ConfigChange:
    restore = {k: v for k, v in previous.items() if v is not None}
    delete = tuple(sorted(k for k, v in previous.items() if v is None))
    return ConfigChange(_kind(kind), name, restore, delete)


def _change(r: Reassignment) -> ReplicaChange:
    current = tuple(b for b in r.replicas if b not in r.adding)
    target = tuple(b for b in r.replicas if b not in r.removing)
    return ReplicaChange(r.topic, r.partition, current, target)


def default_state_file(bootstrap: str, directory: Path = Path(".streamplane") / "ops") -> Path:
    """One state file per cluster (named after its bootstrap servers)."""
    import hashlib

    digest = hashlib.sha256(",".join(sorted(bootstrap.split(","))).encode()).hexdigest()[:12]
    return directory / f"autothrottle-{digest}.json"


def describe_throttles(
    admin: OpsAdmin, topics: list[str] | None = None
) -> dict[str, dict[str, Any]]:
    """Throttle configs in force on every live broker and on ``topics`` (for checks)."""
    out: dict[str, dict[str, Any]] = {}
    brokers = [str(b) for b in admin.brokers()]
    for name, values in admin.describe_configs("broker", brokers).items():
        found = {k: v for k, v in values.items() if k in BROKER_KEYS}
        if found:
            out[f"broker:{name}"] = found
    if topics:
        for name, values in admin.describe_configs("topic", topics).items():
            found = {k: v for k, v in values.items() if k in TOPIC_KEYS}
            if found:
                out[f"topic:{name}"] = found
    return out
