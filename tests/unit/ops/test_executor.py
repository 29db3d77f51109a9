"""Executor: plan checks (nothing applied on refusal), batching, completion, cancel."""

from __future__ import annotations

import json

import pytest

from streamplane.core.mapper import Partition
from streamplane.exceptions import KafkaError
from streamplane.ops.executor import (
    ExecutionReport,
    Executor,
    ExecutorParams,
    PlanRejected,
    Progress,
    ReassignmentTimeout,
    batches,
    check_plan,
)
from streamplane.ops.stub import StubOpsAdmin


def _admin(steps: int = 2) -> StubOpsAdmin:
    return StubOpsAdmin.cluster(
        {1: "a", 2: "b", 3: "c", 4: "a"},
        {("t", 0): (1, 2), ("t", 1): (2, 3), ("t", 2): (3, 1), ("u", 0): (1, 2)},
        reassignment_steps=steps,
    )


def _doc(*entries: tuple[str, int, list[int]]) -> str:
    return json.dumps(
        {
            "version": 1,
            "partitions": [{"topic": t, "partition": p, "replicas": r} for t, p, r in entries],
        }
    )


def _run(admin: StubOpsAdmin, text: str) -> tuple[ExecutionReport, list[Progress]]:
    seen: list[Progress] = []
    ex = Executor(
        admin,
        ExecutorParams(poll_interval=0.01),
        on_progress=seen.append,
        sleep=lambda _: None,
    )
    return ex.apply(check_plan(text, admin)), seen


def test_applies_a_plan_and_waits_for_completion() -> None:
    admin = _admin()
    report, seen = _run(admin, _doc(("t", 0, [4, 2]), ("t", 1, [3, 2])))
    assert sorted(report.completed) == [("t", 0), ("t", 1)]
    assert admin.replicas[("t", 0)] == (4, 2) and admin.replicas[("t", 1)] == (3, 2)
    assert seen[-1].done == 2 and "2/2 partitions" in seen[-1].line()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (_doc(("t", 0, [9, 2])), "unknown broker(s) [9]"),
        (_doc(("nope", 0, [1, 2])), "nope-0: not a partition of the current map"),
        (_doc(("t", 7, [1, 2])), "t-7: not a partition"),
        (_doc(("t", 0, [1, 2]), ("t", 1, [1, 2, 3])), "inconsistent replication factor"),
        (_doc(("t", 0, [1, 1])), "duplicate broker"),
        ('{"version": 2, "partitions": []}', "version must be 1"),
        ("{not json", "not JSON"),
        (_doc(), "lists no partitions"),
    ],
)
def test_bad_plans_are_refused_and_nothing_is_applied(text: str, expected: str) -> None:
    admin = _admin()
    with pytest.raises(PlanRejected) as info:
        check_plan(text, admin)
    assert any(expected in p for p in info.value.problems), info.value.problems
    assert "nothing applied" in str(info.value)
    assert admin.calls == []


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(PlanRejected) as info:
        check_plan(_doc(("t", 0, [9, 2]), ("nope", 0, [1, 2])), _admin())
    assert len(info.value.problems) == 2


def test_dead_brokers_are_unknown_destinations_and_running_partitions_are_refused() -> None:
    admin = _admin(steps=100)
    admin.dead.add(4)
    with pytest.raises(PlanRejected, match=r"unknown broker\(s\) \[4\]"):
        check_plan(_doc(("t", 0, [4, 2])), admin)
    admin.dead.clear()
    admin.alter_reassignments({("t", 0): (4, 2)})
    calls = len(admin.calls)
    with pytest.raises(PlanRejected, match="already in progress"):
        check_plan(_doc(("t", 0, [3, 2])), admin)
    assert len(admin.calls) == calls


def test_batches_busy_at_most_concurrency_destinations() -> None:
    changes = [
        (Partition("t", 0, (1, 2)), Partition("t", 0, (3, 2))),
        (Partition("t", 1, (1, 2)), Partition("t", 1, (4, 2))),
        (Partition("t", 2, (1, 2)), Partition("t", 2, (3, 2))),
        (Partition("t", 3, (1, 2)), Partition("t", 3, (2, 1))),  # reorder: no copy
        (Partition("t", 4, (1, 2)), Partition("t", 4, (5, 6))),  # needs two at once
    ]
    groups = batches(changes, 1)
    assert [[p.partition for p in g] for g in groups] == [[3, 0, 2], [1], [4]]
    assert [[p.partition for p in g] for g in batches(changes, 2)] == [[3, 0, 1, 2], [4]]


def test_broker_refusal_is_reported_per_partition() -> None:
    admin = _admin()
    text = _doc(("t", 0, [4, 2]), ("t", 1, [3, 2]))
    plan = check_plan(text, admin)
    del admin.replicas[("t", 1)]  # vanished between the check and the apply
    report = Executor(admin, ExecutorParams(poll_interval=0.01), sleep=lambda _: None).apply(plan)
    assert report.completed == [("t", 0)]
    assert "UNKNOWN" in report.failed[("t", 1)] or "unknown" in report.failed[("t", 1)]


def test_timeout_and_cancel() -> None:
    admin = _admin(steps=10_000)
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    ex = Executor(
        admin, ExecutorParams(poll_interval=1, timeout=3), sleep=sleep, clock=lambda: now[0]
    )
    with pytest.raises(ReassignmentTimeout, match="keep running") as info:
        ex.apply(check_plan(_doc(("t", 0, [4, 2]), ("t", 1, [3, 4])), admin))
    # Given up on, not cancelled: the batch keeps running, as the message says.
    assert info.value.pending == [("t", 0), ("t", 1)]
    assert sorted(admin.running) == [("t", 0), ("t", 1)]
    assert [c for c, _ in admin.calls] == ["alter_reassignments"]
    admin.alter_reassignments({("t", 2): (4, 1)})
    assert ex.cancel({("t", 1)}) == [("t", 1)]
    assert ex.cancel() == [("t", 0), ("t", 2)]
    assert ex.cancel() == []


def test_a_timeout_leaves_later_batches_unsubmitted() -> None:
    admin = _admin(steps=10_000)
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    params = ExecutorParams(concurrency=1, poll_interval=1, timeout=3)
    ex = Executor(admin, params, sleep=sleep, clock=lambda: now[0])
    with pytest.raises(ReassignmentTimeout):
        ex.apply(check_plan(_doc(("t", 0, [4, 2]), ("t", 1, [2, 1])), admin))
    assert list(admin.running) == [("t", 0)]


def test_interrupt_cancels_the_batch_in_flight() -> None:
    admin = _admin(steps=10_000)

    def interrupt(_: float) -> None:
        raise KeyboardInterrupt

    ex = Executor(admin, ExecutorParams(), sleep=interrupt)
    with pytest.raises(KeyboardInterrupt):
        ex.apply(check_plan(_doc(("t", 0, [4, 2])), admin))
    assert admin.running == {} and admin.replicas[("t", 0)] == (1, 2)


def test_interrupt_while_submitting_cancels_what_reached_the_controller() -> None:
    class InterruptedAfterSending(StubOpsAdmin):
        def alter_reassignments(self, targets):  # type: ignore[no-untyped-def]
            answers = super().alter_reassignments(targets)
            if any(t is not None for t in targets.values()):
                raise KeyboardInterrupt  # a signal before the answer was read
            return answers

    admin = InterruptedAfterSending.cluster(
        {1: "a", 2: "b", 3: "c", 4: "a"}, {("t", 0): (1, 2)}, reassignment_steps=10_000
    )
    ticks = iter(range(1_000))
    ex = Executor(admin, ExecutorParams(), sleep=lambda _: None, clock=lambda: next(ticks))
    with pytest.raises(KeyboardInterrupt):
        ex.apply(check_plan(_doc(("t", 0, [4, 2])), admin))
    assert admin.running == {} and admin.replicas[("t", 0)] == (1, 2)


def test_no_wait_submits_everything() -> None:
    admin = _admin(steps=10_000)
    ex = Executor(admin, ExecutorParams(wait=False, concurrency=1))
    ex.apply(check_plan(_doc(("t", 0, [4, 2]), ("t", 1, [1, 3])), admin))
    assert sorted(admin.running) == [("t", 0), ("t", 1)]


def test_kafka_failure_of_the_whole_call_propagates() -> None:
    admin = _admin()
    plan = check_plan(_doc(("t", 0, [4, 2])), admin)
    admin.fail["alter_reassignments"] = KafkaError("controller gone", retriable=True)
    with pytest.raises(KafkaError, match="controller gone"):
        Executor(admin, ExecutorParams(), sleep=lambda _: None).apply(plan)


def test_a_plan_leaving_a_topic_with_mixed_replica_counts_is_refused() -> None:
    """The plan alone is consistent (one partition), but the topic's other partitions
    keep 2 replicas: refused, naming the override, unless it is given."""
    admin = _admin()
    with pytest.raises(PlanRejected) as info:
        check_plan(_doc(("t", 0, [1, 2, 3])), admin)
    assert info.value.problems == [
        "t: the plan would leave its partitions with different replica counts [2, 3] "
        "(with the partitions it does not list), allow_mixed_replication accepts it"
    ]
    assert admin.calls == []
    checked = check_plan(_doc(("t", 0, [1, 2, 3])), admin, allow_mixed_replication=True)
    assert checked.target[("t", 0)].replicas == (1, 2, 3)
    # Every partition of the topic raised at once: consistent, accepted.
    check_plan(_doc(("t", 0, [1, 2, 3]), ("t", 1, [2, 3, 1]), ("t", 2, [3, 1, 2])), admin)


def test_a_plan_for_an_already_mixed_topic_names_the_override() -> None:
    admin = _admin()
    admin.replicas[("t", 0)] = (1, 2, 3)
    with pytest.raises(PlanRejected) as info:
        check_plan(_doc(("t", 0, [4, 2, 3]), ("t", 1, [2, 4])), admin)
    assert all("allow_mixed_replication accepts it" in p for p in info.value.problems)
    assert "different replica counts [2, 3]" in str(info.value)
