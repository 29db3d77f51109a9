"""Autothrottle: warnings said once, a cleanup that removes what it can and keeps the
rest recorded, and a finish that never unthrottles copies it cannot see."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from streamplane.core.throttle import ThrottleLimits
from streamplane.exceptions import KafkaError
from streamplane.ops.autothrottle import Autothrottle, AutothrottleParams
from streamplane.ops.kafka_ops import ConfigChange, ConfigKind
from streamplane.ops.stub import StubOpsAdmin

MB = 1_000_000


class Broker3Refuses(StubOpsAdmin):
    """Broker 3 takes no config change (a client that does not know it)."""

    def alter_configs(
        self, changes: Sequence[ConfigChange]
    ) -> dict[tuple[ConfigKind, str], KafkaError | None]:
        if any(c.kind == "broker" and c.name == "3" for c in changes):
            raise KafkaError("alter configs: UnknownBrokerIdError: 3")
        return super().alter_configs(changes)


def _setup(
    tmp_path: Path, admin: StubOpsAdmin, capacity: float | dict[int, float] = 100 * MB
) -> tuple[Autothrottle, list[str]]:
    logged: list[str] = []
    params = AutothrottleParams(
        capacity=capacity, limits=ThrottleLimits(minimum=MB), state_file=tmp_path / "s.json"
    )
    at = Autothrottle(
        admin, params, bootstrap="stub", log=logged.append, clear_command="CLEAR-COMMAND"
    )
    return at, logged


def _admin(cls: type[StubOpsAdmin] = StubOpsAdmin) -> StubOpsAdmin:
    return cls.cluster(
        {1: "a", 2: "b", 3: "c"},
        {("t", 0): (1, 2), ("u", 0): (2, 1)},
        sizes={("t", 0): 10 * MB},
        reassignment_steps=100,
    )


def test_a_warning_is_said_once_not_at_every_step(tmp_path: Path) -> None:
    admin = _admin()
    at, _ = _setup(tmp_path, admin, capacity={1: 100 * MB, 2: 100 * MB})  # none for 3
    admin.alter_reassignments({("t", 0): (3, 2)})
    said = [w for _ in range(6) for w in at.step().warnings]
    assert any("broker 3 has no capacity figure" in w for w in said), said
    assert len(said) == len(set(said)), said


def test_a_cleanup_removes_what_it_can_and_names_what_stays(tmp_path: Path) -> None:
    admin = _admin()
    at, logged = _setup(tmp_path, admin)
    admin.alter_reassignments({("t", 0): (3, 2)})
    at.step()
    admin.running.clear()
    refusing = Broker3Refuses(**{k: getattr(admin, k) for k in ("brokers_", "replicas", "configs")})
    at.admin = refusing
    cleanup = at.clear()
    assert cleanup.removed == ("broker:1", "broker:2", "topic:t")
    assert cleanup.left == {"broker:3": "alter configs: UnknownBrokerIdError: 3"}
    assert list(refusing.throttle_configs()) == [("broker", "3")]
    assert list(json.loads((tmp_path / "s.json").read_text())["previous"]) == ["broker:3"]
    assert at.recorded() == ("broker:3",)
    assert any("throttles stay on broker 3" in m and "CLEAR-COMMAND" in m for m in logged)
    at.admin = admin  # broker 3 reachable again: the next cleanup finishes the job
    assert at.clear().removed == ("broker:3",)
    assert admin.throttle_configs() == {} and not (tmp_path / "s.json").exists()


def test_finish_keeps_the_throttles_when_it_cannot_tell_whether_copies_run(
    tmp_path: Path,
) -> None:
    admin = _admin()
    at, _ = _setup(tmp_path, admin)
    admin.alter_reassignments({("t", 0): (3, 2)})
    at.step()
    admin.fail["list_reassignments"] = KafkaError("cluster unreachable")
    cleanup = at.finish()
    assert cleanup.removed == () and "cluster unreachable" in cleanup.left_text()
    assert ("broker", "3") in admin.throttle_configs()
    assert (tmp_path / "s.json").exists()
