"""How an apply ends besides success: only an interrupt cancels; an error leaves the
batch running; partitions cancelled by someone else end the wait; a destination that is
down is shown; ``standing()`` says where every partition of the plan is."""

from __future__ import annotations

import json

import pytest

from streamplane.core.mapper.models import TopicPartition
from streamplane.exceptions import KafkaError
from streamplane.ops.executor import (
    REVERT_GRACE_S,
    Executor,
    ExecutorParams,
    Progress,
    ReassignmentCancelled,
    check_plan,
)
from streamplane.ops.kafka_ops import Reassignment
from streamplane.ops.stub import StubOpsAdmin


def _doc(*entries: tuple[str, int, list[int]]) -> str:
    return json.dumps(
        {
            "version": 1,
            "partitions": [{"topic": t, "partition": p, "replicas": r} for t, p, r in entries],
        }
    )


def _admin(cls: type[StubOpsAdmin] = StubOpsAdmin) -> StubOpsAdmin:
    return cls.cluster(
        {1: "a", 2: "b", 3: "c", 4: "a"},
        {("t", 0): (1, 2), ("t", 1): (2, 3), ("t", 2): (3, 1)},
        reassignment_steps=10**6,
    )


class Clock:
    """A virtual clock: ``sleep`` moves it on."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_an_error_while_waiting_leaves_the_batch_running() -> None:
    """Not an interrupt: the copies are not cancelled (only Ctrl-C and SIGTERM cancel)."""
    admin = _admin()
    plan = check_plan(_doc(("t", 0, [4, 2])), admin)

    def failing_poll() -> None:
        if admin.running:
            raise KafkaError("alter configs: UnknownBrokerIdError: 3")

    ex = Executor(admin, ExecutorParams(), on_poll=failing_poll, sleep=lambda _: None)
    with pytest.raises(KafkaError, match="UnknownBrokerIdError"):
        ex.apply(plan)
    assert list(admin.running) == [("t", 0)]
    assert ex.report.cancelled == []
    assert ex.standing(plan).running == (("t", 0),)
    assert ex.standing(plan).text() == "reassignments: 1 still running (t-0)"


def test_partitions_cancelled_by_someone_else_end_the_wait_naming_them() -> None:
    """`ops apply --cancel` from another shell: the partitions are neither being
    reassigned nor at their target; after a grace period the apply gives up on them."""

    class CancelledElsewhere(StubOpsAdmin):
        polls = 0

        def list_reassignments(self) -> dict[TopicPartition, Reassignment]:
            self.polls += 1
            if self.polls == 3:
                self.running.clear()  # the other shell's cancel: replicas revert
            return super().list_reassignments()

    admin = _admin(CancelledElsewhere)
    clock = Clock()
    plan = check_plan(_doc(("t", 0, [4, 2]), ("t", 1, [2, 4])), admin)
    ex = Executor(admin, ExecutorParams(), sleep=clock.sleep, clock=clock)
    with pytest.raises(ReassignmentCancelled, match="t-0, t-1: no longer being reassigned"):
        ex.apply(plan)
    assert REVERT_GRACE_S <= clock.now <= REVERT_GRACE_S + 3
    standing = ex.standing(plan)
    assert standing.cancelled_elsewhere == (("t", 0), ("t", 1))
    assert "2 cancelled elsewhere (t-0, t-1)" in standing.text()


def test_a_moment_of_stale_metadata_is_not_a_cancel() -> None:
    """Kafka stopped listing the reassignment a moment before the partition's metadata
    shows the target: the apply waits, and completes."""

    class MetadataBehind(StubOpsAdmin):
        behind = 0

        def partitions(self, topics=None):  # type: ignore[no-untyped-def]
            states = super().partitions(topics)
            if not self.running and self.behind < 2:
                self.behind += 1
                return {k: s.__class__(s.topic, s.partition, (1, 2), (1, 2), 1)
                        for k, s in states.items()}  # fmt: skip
            return states

    admin = _admin(MetadataBehind)
    admin.reassignment_steps = 2
    clock = Clock()
    plan = check_plan(_doc(("t", 0, [4, 2])), admin)
    report = Executor(admin, ExecutorParams(), sleep=clock.sleep, clock=clock).apply(plan)
    assert report.completed == [("t", 0)]


def test_a_destination_that_is_down_is_shown_in_the_progress() -> None:
    admin = _admin()
    clock = Clock()
    seen: list[Progress] = []
    plan = check_plan(_doc(("t", 0, [4, 2])), admin)

    def broker_4_dies(seconds: float) -> None:
        admin.dead.add(4)
        clock.sleep(seconds)

    ex = Executor(
        admin,
        ExecutorParams(timeout=3),
        on_progress=seen.append,
        sleep=broker_4_dies,
        clock=clock,
    )
    with pytest.raises(KafkaError, match="not reassigned after 3s"):
        ex.apply(plan)
    assert seen[0].down == () and seen[-1].down == (4,)
    assert "waiting for broker(s) 4: not alive" in seen[-1].line()


def test_an_interrupt_cancels_and_the_standing_says_so() -> None:
    admin = _admin()
    plan = check_plan(_doc(("t", 0, [4, 2])), admin)

    clock = Clock()

    def interrupt_once(seconds: float) -> None:
        if clock.now == 0:
            clock.sleep(seconds)
            raise KeyboardInterrupt
        clock.sleep(seconds)

    ex = Executor(admin, ExecutorParams(), sleep=interrupt_once, clock=clock)
    with pytest.raises(KeyboardInterrupt):
        ex.apply(plan)
    assert ex.standing(plan).text() == "reassignments: 1 cancelled (t-0)"


def test_the_standing_when_the_cluster_cannot_be_read() -> None:
    admin = _admin()
    admin.reassignment_steps = 1
    plan = check_plan(_doc(("t", 0, [4, 2]), ("t", 1, [1, 3])), admin)
    ex = Executor(admin, ExecutorParams(concurrency=1), sleep=lambda _: None)
    admin.fail["partitions"] = KafkaError("cluster unreachable")
    with pytest.raises(KafkaError):
        ex.apply(plan)
    text = ex.standing(plan).text()
    assert text == (
        "reassignments: 1 not submitted (t-1), 1 unknown (t-0) "
        "(the cluster could not be read: cluster unreachable)"
    )
