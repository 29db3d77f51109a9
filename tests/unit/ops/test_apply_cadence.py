"""An apply's progress keeps its cadence when a broker dies mid-apply, and says what it
could not read. The adapter is the real ``KafkaOpsAdmin`` over a fake kafka-python client
whose calls to a broker that just died fail with connection errors (as a killed broker
refuses connections), on a fake clock: the old adapter retried each such call for 20 s,
and the apply's progress went silent for that long (13-25 s measured on the local fleet
after `local kill-broker`)."""

from __future__ import annotations

import itertools
import re
import time
from typing import Any, ClassVar

import kafka.errors as kerr
import pytest
from kafka import TopicPartition as KTopicPartition

from streamplane.cli.ops import ProgressLine
from streamplane.core.mapper.models import Partition, PartitionMap
from streamplane.exceptions import KafkaError
from streamplane.ops.executor import CheckedPlan, Executor, ExecutorParams, Progress
from streamplane.ops.kafka_ops import KafkaOpsAdmin


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


CLOCK = Clock()


class FakeAdminClient:
    """Brokers 1-3; ``orders-0`` moves from [1, 2] to [3, 2] and is done at ``DONE_AT``.
    Broker 1 dies at ``DIES_AT``: it stays in the metadata until it is fenced
    (``FENCED_AT``), its log dirs do not answer, and until ``CONTROLLER_BACK_AT`` the
    reassignments cannot be listed (kafka-python's "controller" was broker 1). Every
    call takes 10 ms."""

    DIES_AT: ClassVar[float] = 10.0
    FENCED_AT: ClassVar[float] = 19.0
    CONTROLLER_BACK_AT: ClassVar[float] = 22.0
    DONE_AT: ClassVar[float] = 60.0

    def __init__(self, **_conf: Any) -> None:
        pass

    def _tick(self) -> float:
        CLOCK.now += 0.01
        return CLOCK.now

    def describe_cluster(self) -> dict[str, Any]:
        now = self._tick()
        ids = [1, 2, 3] if now < self.FENCED_AT else [2, 3]
        return {"brokers": [{"broker_id": b, "host": "h", "port": 9000 + b} for b in ids]}

    def describe_topics(self, names: list[str] | None) -> list[dict[str, Any]]:
        now = self._tick()
        done = now >= self.DONE_AT
        replicas = [3, 2] if done else [3, 2, 1]
        isr = [3, 2] if done else [2] if now >= self.DIES_AT else [2, 1]
        partition = {"partition_index": 0, "replica_nodes": replicas, "isr_nodes": isr,
                     "leader_id": 2}  # fmt: skip
        return [{"name": "orders", "error_code": 0, "partitions": [partition]}]

    def list_partition_reassignments(self) -> dict[Any, Any]:
        now = self._tick()
        if self.DIES_AT <= now < self.CONTROLLER_BACK_AT:
            raise kerr.KafkaConnectionError("Connection to node 1 refused")
        if now >= self.DONE_AT:
            return {}
        return {KTopicPartition("orders", 0): {"replicas": [3, 2, 1], "adding_replicas": [3],
                                               "removing_replicas": [1]}}  # fmt: skip

    def describe_log_dirs(self, _partitions: Any, brokers: list[int]) -> list[dict[str, Any]]:
        now = self._tick()
        if brokers == [1] and now >= self.DIES_AT:
            raise kerr.KafkaConnectionError("Connection to node 1 refused")
        return [{"log_dirs": [{"log_dir": "/d", "error_code": 0, "total_bytes": 10**9,
                               "usable_bytes": 10**9, "topics": []}]}]  # fmt: skip

    def alter_partition_reassignments(self, request: Any, _timeout_ms: int) -> dict[Any, Any]:
        self._tick()
        return {}

    def close(self) -> None:
        pass


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> KafkaOpsAdmin:
    CLOCK.now = 0.0
    monkeypatch.setattr("kafka.admin.KafkaAdminClient", FakeAdminClient)
    monkeypatch.setattr("streamplane.ops.kafka_ops.time", CLOCK)
    return KafkaOpsAdmin("h:9001")


PLAN = CheckedPlan(
    current=PartitionMap([Partition("orders", 0, (1, 2))]),
    target=PartitionMap([Partition("orders", 0, (3, 2))]),
)


def _apply(admin: KafkaOpsAdmin, on_poll: Any = None) -> list[tuple[float, Progress]]:
    seen: list[tuple[float, Progress]] = []
    executor = Executor(
        admin,
        ExecutorParams(poll_interval=1.0),
        on_progress=lambda p: seen.append((CLOCK.now, p)),
        on_poll=on_poll or (lambda: None),
        sleep=CLOCK.sleep,
        clock=CLOCK.monotonic,
    )
    report = executor.apply(PLAN)
    assert report.completed == [("orders", 0)]
    return seen


def test_a_broker_dying_mid_apply_does_not_hold_the_progress(admin: KafkaOpsAdmin) -> None:
    seen = _apply(admin)
    times = [t for t, _ in seen]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # A pass gives up its reads after the bound (5 s), then the next poll (1 s) comes.
    assert max(gaps) <= 6.5, f"progress silent for {max(gaps):.1f}s"  # old: 13.9 s
    blind = [p for _, p in seen if getattr(p, "unread", ())]
    assert blind, "no progress said what it could not read"
    assert blind[0].unread == ("the reassignments in progress",)
    assert "could not read the reassignments in progress (read again at the next poll)" in (
        blind[0].line()
    )
    assert not seen[-1][1].unread and seen[-1][1].done == 1


def test_a_dead_broker_in_the_throttle_step_does_not_hold_the_progress(
    admin: KafkaOpsAdmin,
) -> None:
    """The autothrottle step of every poll reads every listed broker's log dirs: broker 1,
    listed until it is fenced, held each step for the adapter's retries."""
    FakeAdminClient.CONTROLLER_BACK_AT = FakeAdminClient.DIES_AT  # only the log dirs fail
    try:
        seen = _apply(admin, on_poll=lambda: admin.log_dirs())
    finally:
        FakeAdminClient.CONTROLLER_BACK_AT = 22.0
    times = [t for t, _ in seen]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) <= 6.5, f"progress silent for {max(gaps):.1f}s"


def test_reads_failing_for_longer_than_the_give_up_end_the_apply(admin: KafkaOpsAdmin) -> None:
    FakeAdminClient.CONTROLLER_BACK_AT = 10**6
    try:
        with pytest.raises(KafkaError, match="list partition reassignments") as failed:
            _apply(admin)
    finally:
        FakeAdminClient.CONTROLLER_BACK_AT = 22.0
    assert "no answer within 5s" in str(failed.value)
    assert 30.0 <= CLOCK.now <= 40.0  # 20 s of failing reads after the death at 10 s


def test_progress_lines_are_never_more_than_the_heartbeat_apart(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The calls come up to a poll and a bounded pass (6 s) apart: the line is printed
    early enough that the next one is due before 15 s have passed."""
    now = [0.0]
    line = ProgressLine(tty=False, heartbeat_s=15, lookahead_s=6, clock=lambda: now[0])
    printed_at = []
    for step in [1.0] * 8 + [6.0] * 6 + [1.0] * 9 + [6.0] * 10:
        line(Progress(0, 3, 1, 1, (), (4,), now[0]))
        if capsys.readouterr().err:
            printed_at.append(now[0])
        now[0] += step
    gaps = [b - a for a, b in itertools.pairwise(printed_at)]
    assert len(printed_at) > 3 and max(gaps) <= 15, (printed_at, gaps)


STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} ")


def test_without_a_terminal_each_line_starts_with_the_time(
    capsys: pytest.CaptureFixture[str],
) -> None:
    wall = time.mktime((2026, 11, 27, 6, 1, 2, 0, 0, -1)) + 0.345  # local time, as `serve`
    line = ProgressLine(tty=False, clock=lambda: 0.0, wall=lambda: wall)
    line(Progress(0, 3, 1, 1, (), (4,), 12.0))
    line.note("warning: something")
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("2026-11-27 06:01:02.345 [------------------------] 0/3 partitions")
    assert err[1] == "2026-11-27 06:01:02.345 warning: something"
