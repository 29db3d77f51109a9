"""Fleet operations against the real rack cluster: broker replacement, storage
rebalance, scale, autothrottle (killed and restarted), and bad input."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from streamplane.local.fleet import ClusterInfo, LocalFleet
from streamplane.ops.autothrottle import describe_throttles
from streamplane.ops.kafka_ops import KafkaOpsAdmin
from streamplane.ops.metrics_fetcher import LogDirsSource
from tests.integration.ops.conftest import cli, cli_popen, produce
from tests.waiting import wait_for

CAPACITY = "64MB"


def _re(topic: str) -> str:
    return topic.replace(".", r"\.")


def _all_in_sync(admin: KafkaOpsAdmin, topic: str) -> bool:
    return all(s.in_sync for s in admin.partitions({topic}).values())


def test_replacing_a_dead_broker_moves_only_its_replicas_to_its_rack(
    racked4: ClusterInfo,
    rack_local_fleet: LocalFleet,
    ops_admin: KafkaOpsAdmin,
    placed_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    topic = placed_topic({p: [(p + i) % 3 + 1 for i in range(3)] for p in range(6)})
    produce(racked4.bootstrap, topic, 0, 1)
    before = {k: s.replicas for k, s in ops_admin.partitions({topic}).items()}
    rack_local_fleet.kill_broker("racked", 1)
    try:
        alive = ",".join(b.address for b in racked4.brokers if b.node_id != 1)
        out = tmp_path / "plan.json"
        started = time.monotonic()
        result = cli(
            "ops", "map", "rebuild", "--bootstrap", alive, "--topics", _re(topic),
            "--dead", "1", "--new", "4", "--substitution-affinity", "--out", str(out),
            "--apply", "--yes", "--poll-interval", "0.5", "--timeout", "120",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        elapsed = time.monotonic() - started
        assert "dead" in result.stdout and "6 partitions change" in result.stdout
        plan = {
            (p["topic"], p["partition"]): tuple(p["replicas"])
            for p in json.loads(out.read_text())["partitions"]
        }
        # Only broker 1's replicas move, each to broker 4 (rack a) in the same position.
        assert plan == {k: tuple(4 if b == 1 else b for b in r) for k, r in before.items()}
        admin = KafkaOpsAdmin(alive)
        try:
            after = admin.partitions({topic})
            assert {k: s.replicas for k, s in after.items()} == plan
            assert all(set(s.isr) == set(s.replicas) for s in after.values())
            assert admin.list_reassignments() == {}
        finally:
            admin.close()
        print(f"\nreplace dead broker: 6 partitions (RF 3), plan+apply {elapsed:.1f}s")
    finally:
        rack_local_fleet.start_broker("racked", 1)


def test_autothrottle_applies_a_dead_broker_rebuild_on_the_live_brokers(
    racked4: ClusterInfo,
    rack_local_fleet: LocalFleet,
    ops_admin: KafkaOpsAdmin,
    placed_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    """The documented workflow: plan the replacement of a dead broker, then apply it
    throttled. Broker 1 cannot be configured (it is not in the metadata); the live
    brokers are throttled, and every throttle is gone afterwards."""
    topic = placed_topic({p: [(p + i) % 3 + 1 for i in range(3)] for p in range(3)})
    produce(racked4.bootstrap, topic, 0, 1)
    rack_local_fleet.kill_broker("racked", 1)
    try:
        alive = ",".join(b.address for b in racked4.brokers if b.node_id != 1)
        plan, state = tmp_path / "plan.json", tmp_path / "state.json"
        planned = cli(
            "ops", "map", "rebuild", "--bootstrap", alive, "--topics", _re(topic),
            "--dead", "1", "--new", "4", "--substitution-affinity", "--out", str(plan),
        )  # fmt: skip
        assert planned.returncode == 0, planned.stderr
        applied = cli(
            "ops", "apply", str(plan), "--bootstrap", alive, "--autothrottle", "2MB",
            "--min-rate", "1MB", "--max-rate", "2MB", "--state-file", str(state),
            "--poll-interval", "0.5", "--timeout", "120", "--yes",
        )  # fmt: skip
        assert applied.returncode == 0, applied.stderr
        assert "3 partition(s) reassigned" in applied.stdout
        admin = KafkaOpsAdmin(alive)
        try:
            after = admin.partitions({topic})
            assert all(4 in s.replicas and 1 not in s.replicas for s in after.values())
            assert all(s.in_sync for s in after.values())
            assert describe_throttles(admin, [topic]) == {}
        finally:
            admin.close()
        assert not state.exists()
    finally:
        rack_local_fleet.start_broker("racked", 1)


def test_a_timeout_leaves_the_copy_running_throttled_until_cancel(
    racked4: ClusterInfo, ops_admin: KafkaOpsAdmin, placed_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = placed_topic({0: [2]})
    produce(racked4.bootstrap, topic, 0, 4)
    plan, state = tmp_path / "plan.json", tmp_path / "state.json"
    doc = {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [3]}]}
    plan.write_text(json.dumps(doc))
    gave_up = cli(
        "ops", "apply", str(plan), "--bootstrap", racked4.bootstrap, "--autothrottle", "1MB",
        "--min-rate", "300KB", "--max-rate", "300KB", "--state-file", str(state),
        "--poll-interval", "0.5", "--timeout", "2", "--yes",
    )  # fmt: skip
    assert gave_up.returncode == 1
    assert "not reassigned after 2s" in gave_up.stderr and "keep running" in gave_up.stderr
    # Still copying (4 MB at 300 KB/s), still throttled, still recorded.
    assert (topic, 0) in ops_admin.list_reassignments()
    assert "broker:3" in describe_throttles(ops_admin, [topic])
    assert state.exists()
    cancelled = cli("ops", "apply", "--cancel", "--bootstrap", racked4.bootstrap,
                    "--state-file", str(state), "--yes")  # fmt: skip
    assert cancelled.returncode == 0, cancelled.stderr
    assert "cancelled 1 reassignment(s)" in cancelled.stdout
    assert "removed throttles from 3 resource(s)" in cancelled.stdout
    assert ops_admin.list_reassignments() == {}
    assert describe_throttles(ops_admin, [topic]) == {}
    assert not state.exists()
    assert ops_admin.partitions({topic})[(topic, 0)].replicas == (2,)


def _free_range(bootstrap: str) -> int:
    admin = KafkaOpsAdmin(bootstrap)
    try:
        free = LogDirsSource(admin, capacity=64_000_000).read().free
    finally:
        admin.close()
    return max(free.values()) - min(free.values())


def test_storage_rebalance_narrows_the_free_storage_range(
    racked4: ClusterInfo, ops_admin: KafkaOpsAdmin, placed_topic: Callable[..., str]
) -> None:
    topic = placed_topic({0: [2], 1: [2], 2: [2], 3: [2], 4: [3], 5: [1]})
    for p in range(4):
        produce(racked4.bootstrap, topic, p, 3)
    wait_for(
        f"every replica of {topic} in sync", lambda: _all_in_sync(ops_admin, topic), 30, every=0.25
    )
    range_before = _free_range(racked4.bootstrap)
    result = cli(
        "ops", "map", "rebalance", "--bootstrap", racked4.bootstrap,
        "--topics", _re(topic), "--capacity", CAPACITY,
        "--storage-threshold", "0.05", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["storage_range"]["after"] < doc["storage_range"]["before"]
    assert doc["partitions"], "the rebalance planned no move"
    applied = cli(
        "ops", "map", "rebalance", "--bootstrap", racked4.bootstrap,
        "--topics", _re(topic), "--capacity", CAPACITY,
        "--storage-threshold", "0.05", "--apply", "--yes", "--poll-interval", "0.5",
    )  # fmt: skip
    assert applied.returncode == 0, applied.stderr
    assert "free storage range" in applied.stdout
    range_after = _free_range(racked4.bootstrap)
    assert range_after < range_before
    moved = [p for p in ops_admin.partitions({topic}).values() if p.replicas != (2,)]
    assert len(moved) > 2
    print(f"\nrebalance: free range {range_before / 1e6:.1f} MB -> {range_after / 1e6:.1f} MB")


def test_scale_spreads_replicas_onto_the_new_broker(
    racked4: ClusterInfo, ops_admin: KafkaOpsAdmin, placed_topic: Callable[..., str]
) -> None:
    topic = placed_topic({p: [p % 3 + 1, (p + 1) % 3 + 1] for p in range(8)})
    result = cli(
        "ops", "map", "scale", "--bootstrap", racked4.bootstrap, "--topics", _re(topic),
        "--new", "4", "--strategy", "count", "--apply", "--yes", "--poll-interval", "0.5",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    after = ops_admin.partitions({topic})
    on_new = [s for s in after.values() if 4 in s.replicas]
    assert len(on_new) >= 3
    assert all(s.in_sync for s in after.values())
    for s in after.values():  # rack rule: brokers 1 and 4 share rack a
        assert not {1, 4} <= set(s.replicas)


def test_autothrottle_cleans_up_after_being_killed_and_restarted(
    racked4: ClusterInfo,
    ops_admin: KafkaOpsAdmin,
    placed_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    topic = placed_topic({0: [2]})
    produce(racked4.bootstrap, topic, 0, 12)
    state = tmp_path / "autothrottle.json"
    rates = ("--min-rate", "1MB", "--max-rate", "2MB", "--state-file", str(state))
    plan = tmp_path / "plan.json"

    def move_to(broker: int) -> None:
        doc = {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [broker]}]}
        plan.write_text(json.dumps(doc))

    def apply_throttled(log: str) -> subprocess.Popen[bytes]:
        return cli_popen(
            "ops", "apply", str(plan), "--bootstrap", racked4.bootstrap, "--yes",
            "--poll-interval", "0.5", "--autothrottle", "2MB", *rates, log=tmp_path / log,
        )  # fmt: skip

    def throttled() -> dict[str, dict[str, object]]:
        return describe_throttles(ops_admin, [topic])

    # The applying tool throttles before it submits, then dies with SIGKILL mid-copy.
    move_to(3)
    started = time.monotonic()
    first = apply_throttled("first.log")
    wait_for(
        "the reassignment submitted",
        lambda: ops_admin.list_reassignments() != {},
        30,
        every=0.25,
    )
    assert f"topic:{topic}" in throttled() and "broker:3" in throttled()
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    left = throttled()
    assert left[f"topic:{topic}"]["follower.replication.throttled.replicas"] == "0:3"
    assert ops_admin.list_reassignments() != {}, "the copy should still be running"
    assert state.exists(), "the killed run left no state file"

    # Restarted (as the autothrottle daemon): takes the throttles over (the copy is still
    # running: they are not removed first), throttles until done, clears.
    second = cli_popen(
        "ops", "throttle", "--bootstrap", racked4.bootstrap, "--capacity", "2MB",
        "--interval", "0.5", *rates, log=tmp_path / "second.log",
    )  # fmt: skip
    assert second.wait(120) == 0, (tmp_path / "second.log").read_text()
    elapsed = time.monotonic() - started
    log = (tmp_path / "second.log").read_text()
    assert "took over 3 throttled resource(s)" in log, log
    assert ops_admin.list_reassignments() == {}
    assert throttled() == {}
    assert not state.exists()
    assert ops_admin.partitions({topic})[(topic, 0)].replicas == (3,)

    # SIGTERM: the batch in flight is cancelled and every throttle removed before exit 143.
    move_to(1)
    third = apply_throttled("third.log")
    wait_for("the throttle on broker 1", lambda: "broker:1" in throttled(), 30, every=0.25)
    third.send_signal(signal.SIGTERM)
    assert third.wait(30) == 143, (tmp_path / "third.log").read_text()
    assert "received SIGTERM" in (tmp_path / "third.log").read_text()
    assert throttled() == {} and not state.exists()
    assert ops_admin.list_reassignments() == {}
    assert ops_admin.partitions({topic})[(topic, 0)].replicas == (3,)
    print(f"\nautothrottle: 12 MB copied at <= 2 MB/s in {elapsed:.1f}s (killed and restarted)")


def test_apply_with_autothrottle_and_without(
    racked4: ClusterInfo, ops_admin: KafkaOpsAdmin, placed_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = placed_topic({0: [2]})
    # 16 MB: the broker's replication quota lets a burst through before it throttles
    # (samples over 1 s windows); with 8 MB the throttled copy once took 3.1 s against
    # the unthrottled one's 3.3 s on a loaded host.
    produce(racked4.bootstrap, topic, 0, 16)
    timings = {}
    for label, target, extra in (
        ("unthrottled", 3, ()),
        ("autothrottle 2 MB/s", 1, ("--autothrottle", "2MB", "--max-rate", "2MB",
                                    "--state-file", str(tmp_path / "s.json"))),
    ):  # fmt: skip
        plan = tmp_path / f"{target}.json"
        doc = {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [target]}]}
        plan.write_text(json.dumps(doc))
        started = time.monotonic()
        result = cli(
            "ops", "apply", str(plan), "--bootstrap", racked4.bootstrap, "--yes",
            "--poll-interval", "0.5", *extra,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        timings[label] = time.monotonic() - started
        assert "1 partition(s) reassigned" in result.stdout
        assert describe_throttles(ops_admin, [topic]) == {}
    assert timings["autothrottle 2 MB/s"] > timings["unthrottled"]
    print("\nreassign 16 MB: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()))


def test_bad_input_is_refused_with_clear_errors_and_nothing_applied(
    racked4: ClusterInfo, ops_admin: KafkaOpsAdmin, placed_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = placed_topic({0: [1, 2], 1: [2, 3]})
    before = {k: s.replicas for k, s in ops_admin.partitions({topic}).items()}
    cases = {
        "unknown broker": (
            {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 99]}]},
            "unknown broker(s) [99]",
        ),
        "unknown topic": (
            {"version": 1, "partitions": [{"topic": "no.such", "partition": 0, "replicas": [1]}]},
            "no.such-0: not a partition of the current map",
        ),
        "inconsistent": (
            {"version": 1, "partitions": [
                {"topic": topic, "partition": 0, "replicas": [2, 3]},
                {"topic": topic, "partition": 1, "replicas": [1, 2, 3]},
                {"topic": topic, "partition": 1, "replicas": [1, 3]},
            ]},
            "duplicate partition",
        ),
    }  # fmt: skip
    for name, (doc, expected) in cases.items():
        plan = tmp_path / f"{name}.json"
        plan.write_text(json.dumps(doc))
        result = cli("ops", "apply", str(plan), "--bootstrap", racked4.bootstrap, "--yes")
        assert result.returncode == 1, name
        assert result.stderr.startswith("error: plan refused, nothing applied"), result.stderr
        assert expected in result.stderr, (name, result.stderr)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"version": 1, "partitions": [')
    result = cli("ops", "apply", str(bad_json), "--bootstrap", racked4.bootstrap, "--yes")
    assert result.returncode == 1 and "not JSON" in result.stderr

    # Four brokers in three racks: RF 4 cannot keep replicas in distinct racks.
    result = cli(
        "ops", "map", "rebuild", "--bootstrap", racked4.bootstrap, "--topics", _re(topic),
        "--replication-factor", "4", "--force", "--apply", "--yes",
    )  # fmt: skip
    assert result.returncode == 1
    assert "needs 4 distinct racks" in result.stderr
    assert "pass --min-rack-ids 3" in result.stderr, result.stderr
    relaxed = cli(
        "ops", "map", "rebuild", "--bootstrap", racked4.bootstrap, "--topics", _re(topic),
        "--replication-factor", "4", "--force", "--min-rack-ids", "3",
    )  # fmt: skip
    assert relaxed.returncode == 0, relaxed.stderr

    assert ops_admin.list_reassignments() == {}
    assert {k: s.replicas for k, s in ops_admin.partitions({topic}).items()} == before
