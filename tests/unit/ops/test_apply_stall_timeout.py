"""A copy that stops moving is reported (`stall_window`), and `--timeout` stops waiting
without cancelling, saying where the plan stands and how to watch again or cancel; the
same plan applied again watches the reassignments still running (not submitted again)
and submits the rest. The old apply waited silently, and refused to apply the plan again
while its reassignments ran."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from streamplane.core.mapper.models import TopicPartition
from streamplane.ops.executor import (
    Executor,
    ExecutorParams,
    ReassignmentTimeout,
    Stall,
    StallWatch,
    check_plan,
)
from streamplane.ops.stub import StubOpsAdmin
from tests.unit.ops import test_apply_cli
from tests.unit.ops.test_apply_cli import FAST, THROTTLED, Run, _plan
from tests.unit.ops.test_executor_endings import Clock

cli = test_apply_cli.cli  # fixture

MB = 1_000_000
T0: TopicPartition = ("t", 0)
T1: TopicPartition = ("t", 1)


# ---------------------------------------------------------------------- the pure watch
def test_the_watch_says_stalled_after_the_window_again_each_window_and_moving_after() -> None:
    watch = StallWatch(600, now=0)
    assert watch.observe(0, {T0: (0, 100)}) is None
    assert watch.observe(599, {T0: (0, 100)}) is None
    assert watch.observe(600, {T0: (0, 100)}) == "stalled"
    assert watch.idle(600) == 600
    assert watch.observe(900, {T0: (0, 100)}) is None  # said once per window
    assert watch.observe(1200, {T0: (0, 100)}) == "stalled"
    assert watch.observe(1210, {T0: (0, 101)}) == "moving"  # a byte copied
    assert watch.observe(1800, {T0: (0, 101)}) is None
    assert watch.observe(1810, {T0: (0, 101)}) == "stalled"


def test_only_what_grows_past_its_best_is_progress() -> None:
    watch = StallWatch(10, now=0)
    watch.observe(0, {T0: (1, 500), T1: (0, 0)})
    watch.observe(3, {T0: (0, 500), T1: (0, 0)})  # a new replica left the ISR
    watch.observe(6, {T0: (1, 400), T1: (0, 0)})  # ... came back; retention shrank the log
    assert watch.observe(10, {T0: (1, 500), T1: (0, 0)}) == "stalled"
    assert watch.observe(11, {T0: (2, 500), T1: (0, 0)}) == "moving"  # one more in the ISR
    assert watch.observe(21, {T0: (2, 500), T1: (0, 0)}) == "stalled"
    assert watch.observe(22, {T1: (0, 0)}) == "moving"  # t-0 finished


# ---------------------------------------------------------------------- the executor
def _admin() -> StubOpsAdmin:
    return StubOpsAdmin.cluster(
        {1: "a", 2: "b", 3: "c", 4: "a"},
        {T0: (1, 2), T1: (2, 3)},
        sizes={T0: 5 * MB, T1: 5 * MB},
        reassignment_steps=10**6,  # never finishes
    )


def _doc(*entries: tuple[str, int, list[int]]) -> str:
    return json.dumps(
        {
            "version": 1,
            "partitions": [{"topic": t, "partition": p, "replicas": r} for t, p, r in entries],
        }
    )


def test_a_stuck_copy_is_reported_each_window_and_the_apply_keeps_waiting() -> None:
    admin, clock = _admin(), Clock()
    stalls: list[Stall] = []
    admin.dead.add(4)  # the destination died after the plan was checked
    plan = check_plan(_doc(("t", 0, [4, 2])), _alive(admin))
    ex = Executor(
        admin,
        ExecutorParams(poll_interval=1, timeout=25, stall_window=10),
        on_stall=stalls.append,
        sleep=clock.sleep,
        clock=clock,
    )
    with pytest.raises(ReassignmentTimeout, match="stopped waiting, nothing cancelled"):
        ex.apply(plan)
    assert [s.seconds for s in stalls] == [10, 20]
    first = stalls[0]
    assert not first.moving and first.keys() == [T0] and first.topics() == ["t"]
    assert first.stuck[0].down == (4,)
    assert first.text() == (
        "no progress for 10s in batch 1/1 (no partition finished, no new replica joined the "
        "ISR or grew): 1 partition(s) stuck: t-0 (adding broker(s) 4: broker(s) 4 not alive)"
    )
    assert list(admin.running) == [T0]  # neither the stall nor the timeout cancelled it


def _alive(admin: StubOpsAdmin) -> StubOpsAdmin:
    """The same cluster as the plan's check saw it, every broker alive."""
    return StubOpsAdmin(
        brokers_=admin.brokers_, replicas=dict(admin.replicas), running=dict(admin.running)
    )


def test_a_copy_that_grows_is_not_a_stall() -> None:
    admin, clock = _admin(), Clock()
    stalls: list[Stall] = []

    def copy_a_little() -> None:  # what the new replica on broker 4 holds grows
        admin.sizes[T0] += 1000

    plan = check_plan(_doc(("t", 0, [4, 2])), admin)
    ex = Executor(
        admin,
        ExecutorParams(poll_interval=1, timeout=40, stall_window=10),
        on_poll=copy_a_little,
        on_stall=stalls.append,
        sleep=clock.sleep,
        clock=clock,
    )
    with pytest.raises(ReassignmentTimeout):
        ex.apply(plan)
    assert stalls == []


def test_a_stall_then_progress_says_moving_again() -> None:
    admin, clock = _admin(), Clock()
    stalls: list[Stall] = []

    def copy_after_a_while() -> None:
        if clock.now >= 15:
            admin.sizes[T0] += 1000

    plan = check_plan(_doc(("t", 0, [4, 2])), admin)
    ex = Executor(
        admin,
        ExecutorParams(poll_interval=1, timeout=20, stall_window=10),
        on_poll=copy_after_a_while,
        on_stall=stalls.append,
        sleep=clock.sleep,
        clock=clock,
    )
    with pytest.raises(ReassignmentTimeout):
        ex.apply(plan)
    assert [s.moving for s in stalls] == [False, True]
    assert stalls[0].stuck[0].not_in_isr == (4,) and stalls[0].stuck[0].down == ()
    assert "t-0 (adding broker(s) 4: 4 not in the ISR yet)" in stalls[0].text()
    moving = "the reassignments of batch 1/1 are moving again (1 partition(s) to go)"
    assert stalls[1].text() == moving


# ---------------------------------------------------------------------- the command
@pytest.fixture
def stuck(monkeypatch: pytest.MonkeyPatch) -> StubOpsAdmin:
    admin = StubOpsAdmin.cluster(
        {1: "a", 2: "b", 3: "c", 4: "a", 5: "b"},
        {("orders", 0): (1, 2, 3), ("orders", 1): (2, 3, 1)},
        sizes={("orders", 0): 2 * MB, ("orders", 1): 2 * MB},
        reassignment_steps=10**6,
    )
    monkeypatch.setattr("streamplane.cli.ops.KafkaOpsAdmin", lambda _bootstrap: admin)
    return admin


def _two_batches(tmp_path: Path) -> Path:
    """orders-0 to broker 4, orders-1 to broker 5: two batches at --concurrency 1."""
    return _plan(tmp_path / "plan.json", ("orders", 0, [4, 2, 3]), ("orders", 1, [2, 3, 5]))


def test_apply_warns_of_a_stall_naming_the_partitions_and_the_commands(
    stuck: StubOpsAdmin, cli: Callable[..., Run], tmp_path: Path
) -> None:
    plan = _two_batches(tmp_path)
    result = cli(
        "ops", "apply", str(plan), *FAST, "--concurrency", "1", "--stall-window", "0.1",
        "--timeout", "0.5", "--yes",
    )  # fmt: skip
    err = " ".join(result.err.split())
    assert re.search(r"warning: no progress for [0-9.]+s in batch 1/2 \(", err), err
    assert "1 partition(s) stuck: orders-0 (adding broker(s) 4: 4 not in the ISR yet)" in err
    assert "The apply keeps waiting (nothing is cancelled" in err
    assert "`kafka-reassign-partitions.sh --bootstrap-server stub:9092 --list`" in err
    assert "`kafka-topics.sh --bootstrap-server stub:9092 --describe --topic orders`" in err
    assert "`streamplane ops apply --cancel --bootstrap stub:9092`" in err
    assert result.code == 1  # then --timeout: without autothrottle, it names the cancel
    error = result.err.strip().splitlines()[-1]
    assert f"`streamplane ops apply {plan} --bootstrap stub:9092` (with the same" in error
    assert error.endswith("`streamplane ops apply --cancel --bootstrap stub:9092` cancels them")
    assert list(stuck.running) == [("orders", 0)]


def _time_out(cli: Callable[..., Run], plan: Path, state: Path) -> Run:
    """Apply the two-batch plan with autothrottle; give up on the first batch."""
    return cli(
        "ops", "apply", str(plan), *FAST, *THROTTLED, "--state-file", str(state),
        "--concurrency", "1", "--timeout", "0.2", "--yes",
    )  # fmt: skip


def test_a_timeout_stops_waiting_keeps_the_copy_and_says_how_to_go_on(
    stuck: StubOpsAdmin, cli: Callable[..., Run], tmp_path: Path
) -> None:
    plan = _two_batches(tmp_path)
    state = tmp_path / "state.json"
    gave_up = _time_out(cli, plan, state)
    assert gave_up.code == 1, gave_up.err
    error = gave_up.err.strip().splitlines()[-1]
    assert error.startswith(
        "error: 1 partition(s) not reassigned after 0.2s (e.g. orders-0): stopped waiting, "
        "nothing cancelled, they keep running in the cluster (--timeout); reassignments: "
        "1 still running (orders-0), 1 not submitted (orders-1); the copies go on in the "
        f"cluster: `streamplane ops apply {plan} --bootstrap stub:9092 --state-file {state}` "
        "(with the same options) watches them again, without submitting them again, and "
        "submits the rest of the plan; reassignments are still running: their throttles "
        f"stay, recorded in {state}"
    ), error
    assert error.endswith(
        f"`streamplane ops apply --cancel --bootstrap stub:9092 --state-file {state}` stops "
        "them and removes the throttles"
    ), error
    assert list(stuck.running) == [("orders", 0)]  # not cancelled
    assert ("broker", "4") in stuck.throttle_configs() and state.exists()  # still needed


def test_the_same_plan_applied_again_watches_what_runs_and_submits_the_rest(
    stuck: StubOpsAdmin, cli: Callable[..., Run], tmp_path: Path
) -> None:
    plan = _two_batches(tmp_path)
    state = tmp_path / "state.json"
    assert _time_out(cli, plan, state).code == 1
    assert list(stuck.running) == [("orders", 0)]
    # Watching again: orders-0 is not submitted again, orders-1 is, and both complete.
    stuck.running[("orders", 0)].steps_left = 6
    stuck.reassignment_steps = 4
    submitted_before = [t for c, t in stuck.calls if c == "alter_reassignments"]
    again = cli(
        "ops", "apply", str(plan), *FAST, *THROTTLED, "--state-file", str(state),
        "--concurrency", "1", "--yes",
    )  # fmt: skip
    assert again.code == 0, again.err
    assert "1 partition(s) already being reassigned to the plan's replicas" in again.err
    assert "2 partition(s) reassigned" in again.out
    submitted = [t for c, t in stuck.calls if c == "alter_reassignments"][len(submitted_before) :]
    assert submitted == [{("orders", 1): (2, 3, 5)}]
    assert stuck.replicas[("orders", 0)] == (4, 2, 3)
    assert stuck.replicas[("orders", 1)] == (2, 3, 5)
    assert stuck.throttle_configs() == {} and not state.exists()


def test_a_partition_moving_elsewhere_is_still_refused(
    stuck: StubOpsAdmin, cli: Callable[..., Run], tmp_path: Path
) -> None:
    stuck.alter_reassignments({("orders", 0): (5, 2, 3)})
    plan = _plan(tmp_path / "plan.json", ("orders", 0, [4, 2, 3]))
    result = cli("ops", "apply", str(plan), *FAST, "--yes")
    assert result.code == 1
    assert "orders-0: a reassignment to [5, 2, 3] is already in progress" in result.err
    assert stuck.running[("orders", 0)].target == (5, 2, 3)


@pytest.mark.parametrize("out", [False, True])
def test_map_apply_timing_out_names_the_plan_to_apply_again(
    out: bool, stuck: StubOpsAdmin, cli: Callable[..., Run], tmp_path: Path
) -> None:
    written = tmp_path / "scale.json"
    result = cli(
        "ops", "map", "scale", *FAST, "--new", "4", "--strategy", "count", "--apply", "--yes",
        "--timeout", "0.1", *(("--out", str(written)) if out else ()),
    )  # fmt: skip
    assert result.code == 1, result.err
    error = result.err.strip().splitlines()[-1]
    if out:
        assert f"`streamplane ops apply {written} --bootstrap stub:9092` (with the" in error
    else:
        assert "`streamplane ops apply PLAN_FILE --bootstrap stub:9092` (with the" in error
        assert "(the plan's JSON: `ops map ... --out PLAN_FILE` writes it)" in error
    assert "`streamplane ops apply --cancel --bootstrap stub:9092` cancels them" in error
    assert stuck.running  # nothing cancelled
