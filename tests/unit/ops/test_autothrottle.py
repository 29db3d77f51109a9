"""Autothrottle: throttles follow reassignments, are recorded first, and never stay behind."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from streamplane.core.throttle import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    ReplicaChange,
    ThrottleLimits,
)
from streamplane.exceptions import KafkaError
from streamplane.ops.autothrottle import (
    Autothrottle,
    AutothrottleParams,
    Terminated,
    ThrottleState,
    default_state_file,
    terminate_on,
)
from streamplane.ops.kafka_ops import ConfigChange, ConfigKind
from streamplane.ops.stub import StubOpsAdmin

MB = 1_000_000


def _setup(tmp_path: Path, steps: int = 3) -> tuple[StubOpsAdmin, Autothrottle, list[float]]:
    admin = StubOpsAdmin.cluster(
        {1: "a", 2: "b", 3: "c"},
        {("t", 0): (1, 2), ("t", 1): (2, 3), ("u", 0): (3, 1)},
        sizes={("t", 0): 10 * MB},
        reassignment_steps=steps,
    )
    now = [0.0]
    params = AutothrottleParams(
        capacity=100 * MB,
        limits=ThrottleLimits(minimum=1 * MB),
        state_file=tmp_path / "state.json",
        interval=1,
    )
    at = Autothrottle(admin, params, bootstrap="stub", clock=lambda: now[0], sleep=lambda s: None)
    return admin, at, now


def test_throttles_follow_the_reassignment_and_are_removed_after(tmp_path: Path) -> None:
    admin, at, now = _setup(tmp_path, steps=100)
    admin.alter_reassignments({("t", 0): (3, 2)})
    first = at.step()
    # No previous sample: kafka-kit's fallback, the minimum.
    assert first.broker_configs == {
        1: {LEADER_RATE: str(MB)},
        2: {LEADER_RATE: str(MB)},
        3: {FOLLOWER_RATE: str(MB)},
    }
    assert admin.throttle_configs()[("topic", "t")] == {
        LEADER_REPLICAS: "0:1,0:2",
        FOLLOWER_REPLICAS: "0:3",
    }
    assert ("topic", "u") not in admin.throttle_configs()
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["previous"]["broker:3"] == {LEADER_RATE: None, FOLLOWER_RATE: None}
    # 2 MB copied to broker 3 in one second: measured replication 2 MB/s.
    admin.sizes[("t", 0)] = 12 * MB
    now[0] = 1.0
    second = at.step()
    follower = int(second.broker_configs[3][FOLLOWER_RATE])
    assert follower == int(100 * MB * 0.9) or follower > 50 * MB
    admin.running.clear()
    assert at.step().cleared
    assert admin.throttle_configs() == {}
    assert not (tmp_path / "state.json").exists()


def test_earlier_values_are_restored_not_deleted(tmp_path: Path) -> None:
    admin, at, _ = _setup(tmp_path, steps=100)
    admin.configs[("broker", "3")] = {FOLLOWER_RATE: "777", "other": "x"}
    admin.alter_reassignments({("t", 0): (3, 2)})
    at.step()
    assert admin.configs[("broker", "3")][FOLLOWER_RATE] == str(MB)
    at.clear()
    assert admin.configs[("broker", "3")] == {FOLLOWER_RATE: "777", "other": "x"}


def test_a_state_file_left_by_a_killed_run_is_cleaned_up_first(tmp_path: Path) -> None:
    admin, at, _ = _setup(tmp_path, steps=100)
    admin.alter_reassignments({("t", 0): (3, 2)})
    at.step()
    assert admin.throttle_configs()
    # The process dies here: nothing cleared. A new one starts with the same state file.
    admin.running.clear()
    _, again, _ = _setup(tmp_path)
    again.admin = admin
    cleared = again.recover()
    assert cleared.removed == ("broker:1", "broker:2", "broker:3", "topic:t")
    assert admin.throttle_configs() == {}
    assert not (tmp_path / "state.json").exists()
    assert again.recover().removed == ()


def test_state_is_recorded_before_configs_are_written(tmp_path: Path) -> None:
    admin, at, _ = _setup(tmp_path, steps=100)
    admin.alter_reassignments({("t", 0): (3, 2)})
    admin.fail["alter_configs"] = KafkaError("broker down")
    with pytest.raises(KafkaError, match="broker down"):
        at.step()
    assert ThrottleState.load(tmp_path / "state.json") is not None


def test_partitions_that_finish_lose_their_throttles(tmp_path: Path) -> None:
    admin, at, _ = _setup(tmp_path, steps=100)
    admin.alter_reassignments({("t", 0): (3, 2), ("u", 0): (3, 2)})
    at.step()
    assert ("topic", "u") in admin.throttle_configs()
    del admin.running[("u", 0)]
    at.step()
    assert ("topic", "u") not in admin.throttle_configs()
    assert ("topic", "t") in admin.throttle_configs()


def test_run_clears_on_exit_and_on_errors(tmp_path: Path) -> None:
    admin, at, _ = _setup(tmp_path, steps=3)
    admin.alter_reassignments({("t", 0): (3, 2)})
    steps = at.run(until_idle=True)
    assert steps >= 2 and admin.throttle_configs() == {}
    admin.alter_reassignments({("t", 1): (1, 3)})
    admin.reassignment_steps = 100

    def boom(_: float) -> None:
        raise Terminated("received SIGTERM")

    at._sleep = boom
    with pytest.raises(Terminated):
        at.run()
    assert admin.throttle_configs() == {}


def test_terminate_on_turns_sigterm_into_an_exception() -> None:
    with pytest.raises(Terminated, match="SIGTERM"), terminate_on(signal.SIGTERM):
        signal.raise_signal(signal.SIGTERM)


def test_default_state_file_is_per_cluster() -> None:
    assert default_state_file("a:1,b:2") == default_state_file("b:2,a:1")
    assert default_state_file("a:1") != default_state_file("a:2")


def _dead_broker_setup(tmp_path: Path) -> tuple[StubOpsAdmin, Autothrottle, list[str]]:
    """Broker 1 dead, its replicas moving to broker 4 (a dead-broker rebuild)."""
    admin = StubOpsAdmin.cluster(
        {1: "a", 2: "b", 3: "c", 4: "a"},
        {("t", 0): (1, 2, 3), ("t", 1): (2, 3, 1)},
        sizes={("t", 0): 10 * MB, ("t", 1): 10 * MB},
        reassignment_steps=100,
    )
    admin.dead.add(1)
    logged: list[str] = []
    params = AutothrottleParams(
        capacity=100 * MB, limits=ThrottleLimits(minimum=1 * MB), state_file=tmp_path / "s.json"
    )
    return admin, Autothrottle(admin, params, bootstrap="stub", log=logged.append), logged


def test_dead_brokers_are_left_out_and_the_live_ones_throttled(tmp_path: Path) -> None:
    admin, at, _ = _dead_broker_setup(tmp_path)
    changes = [
        ReplicaChange("t", 0, (1, 2, 3), (4, 2, 3)),
        ReplicaChange("t", 1, (2, 3, 1), (2, 3, 4)),
    ]
    # Broker 1 is a source of both copies, but Kafka cannot take (or describe) its configs.
    first = at.prepare(changes)
    assert sorted(first.broker_configs) == [2, 3, 4]
    assert first.broker_configs[4] == {FOLLOWER_RATE: str(MB)}
    assert not any("broker 1" in w for w in first.warnings)
    assert ("broker", "1") not in admin.throttle_configs()
    assert admin.throttle_configs()[("topic", "t")][FOLLOWER_REPLICAS] == "0:4,1:4"
    admin.alter_reassignments({(c.topic, c.partition): c.target for c in changes})
    assert sorted(at.step().broker_configs) == [2, 3, 4]
    assert "broker:1" not in json.loads((tmp_path / "s.json").read_text())["previous"]
    assert at.clear().removed == ("broker:2", "broker:3", "broker:4", "topic:t")
    assert admin.throttle_configs() == {}
    assert not (tmp_path / "s.json").exists()


def test_a_broker_that_died_throttled_stays_recorded_until_it_is_back(tmp_path: Path) -> None:
    admin, at, logged = _dead_broker_setup(tmp_path)
    admin.dead.clear()
    admin.alter_reassignments({("t", 0): (4, 2, 3)})
    at.step()
    assert ("broker", "1") in admin.throttle_configs()
    admin.dead.add(1)  # dies with its throttle set
    at.step()  # a step with broker 1 gone does not fail either
    assert at.clear().removed == ("broker:2", "broker:3", "broker:4", "topic:t")
    assert sorted(admin.throttle_configs()) == [("broker", "1")]
    assert any("throttles stay on broker 1 (not alive)" in line for line in logged), logged
    assert list(json.loads((tmp_path / "s.json").read_text())["previous"]) == ["broker:1"]
    admin.dead.clear()  # back: the next start removes what is left
    _, again, _ = _dead_broker_setup(tmp_path)
    again.admin = admin
    assert again.recover().removed == ("broker:1",)
    assert admin.throttle_configs() == {}
    assert not (tmp_path / "s.json").exists()


def test_taking_over_a_running_copy_never_leaves_it_unthrottled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ops apply --no-wait --autothrottle` leaves a throttled copy running; `ops throttle`
    takes it over. After every config write, while the copy runs, its brokers and its
    topic are still throttled: the new values are set over the old ones, nothing is
    removed first. The rate in force is kept while there is no traffic sample yet."""
    admin, first, _ = _setup(tmp_path, steps=100)
    admin.alter_reassignments({("t", 0): (3, 2)})
    first.prepare([ReplicaChange("t", 0, (1, 2), (3, 2))])
    admin.configs[("broker", "3")][FOLLOWER_RATE] = "200000"  # the rate the earlier run set
    first._state.current["broker:3"][FOLLOWER_RATE] = "200000"
    first._state.save(tmp_path / "state.json")
    # The earlier run exits here, leaving the copy, its throttles and the state file.
    writes: list[tuple[bool, dict[tuple[ConfigKind, str], dict[str, str]]]] = []
    real = admin.alter_configs

    def recording(changes: list[ConfigChange]) -> dict[tuple[ConfigKind, str], KafkaError | None]:
        out = real(changes)
        writes.append((bool(admin.running), admin.throttle_configs()))
        return out

    monkeypatch.setattr(admin, "alter_configs", recording)
    admin.running[("t", 0)].steps_left = 8
    _, takeover, _ = _setup(tmp_path)
    takeover.admin = admin
    assert takeover.run(until_idle=True) >= 2
    assert writes, "the takeover wrote nothing"
    while_running = [configs for running, configs in writes if running]
    assert while_running, writes
    for configs in while_running:
        assert configs.get(("broker", "3"), {}).get(FOLLOWER_RATE), configs
        assert configs.get(("broker", "1"), {}).get(LEADER_RATE), configs
        assert configs.get(("topic", "t"), {}).get(FOLLOWER_REPLICAS) == "0:3", configs
    # No traffic sample at the first step: kafka-kit's fallback, the rate in force.
    assert while_running[0][("broker", "3")][FOLLOWER_RATE] == "200000"
    # Once the copy ended, everything was removed.
    assert admin.throttle_configs() == {}
    assert not (tmp_path / "state.json").exists()


def test_a_start_with_nothing_running_still_removes_what_a_run_left(tmp_path: Path) -> None:
    admin, first, _ = _setup(tmp_path, steps=100)
    admin.alter_reassignments({("t", 0): (3, 2)})
    first.step()
    admin.running.clear()
    _, again, _ = _setup(tmp_path)
    again.admin = admin
    assert again.take_over() == ["broker:1", "broker:2", "broker:3", "topic:t"]
    assert admin.throttle_configs() == {}
    assert not (tmp_path / "state.json").exists()


def test_an_apply_keeps_the_copies_of_an_earlier_run_throttled(tmp_path: Path) -> None:
    """`ops apply --autothrottle` while an earlier `--no-wait` copy runs: its batch is
    throttled and so is the earlier copy, and the throttles stay while it runs."""
    admin, at, _ = _setup(tmp_path, steps=100)
    admin.alter_reassignments({("u", 0): (3, 2)})  # the earlier run's copy, to broker 2
    at.prepare([ReplicaChange("t", 1, (2, 3), (2, 1))])  # this run's batch, to broker 1
    configs = admin.throttle_configs()
    assert configs[("topic", "u")][FOLLOWER_REPLICAS] == "0:2"
    assert configs[("topic", "t")][FOLLOWER_REPLICAS] == "1:1"
    assert FOLLOWER_RATE in configs[("broker", "2")]
    assert at.finish().running
    assert admin.throttle_configs() == configs
    admin.running.clear()
    assert at.finish().removed
    assert admin.throttle_configs() == {}
