"""The autothrottle daemon (`Autothrottle.run`, `ops throttle`) survives a failing step:
the error is logged once per kind, the throttles in force stay, the step is retried at
the next interval, and only errors lasting `give_up_after` seconds end it (throttles
cleared, a clear error, exit 1). An interrupt still clears and exits as before. The old
daemon cleared the throttles and exited at the first failing step."""

from __future__ import annotations

import signal
from collections.abc import Callable, Collection
from pathlib import Path

import pytest

from streamplane.core.throttle import FOLLOWER_RATE, ThrottleLimits
from streamplane.exceptions import KafkaError
from streamplane.ops.autothrottle import (
    Autothrottle,
    AutothrottleParams,
    Terminated,
    ThrottleStepsFailing,
)
from streamplane.ops.kafka_ops import LogDir
from streamplane.ops.stub import StubOpsAdmin
from tests.unit.ops import test_apply_cli
from tests.unit.ops.test_apply_cli import Run

cli = test_apply_cli.cli  # fixture

MB = 1_000_000


class FlakyLogDirs(StubOpsAdmin):
    """DescribeLogDirs fails at the steps listed in ``failing`` (1-based), each with
    the error given."""

    calls_: int = 0
    failing: dict[int, KafkaError]

    def log_dirs(
        self, brokers: Collection[int] | None = None
    ) -> dict[int, list[LogDir] | KafkaError]:
        self.calls_ += 1
        if self.calls_ in self.failing:
            raise self.failing[self.calls_]
        return super().log_dirs(brokers)


def _admin(
    failing: dict[int, KafkaError], steps: int = 10**6, cls: type[FlakyLogDirs] = FlakyLogDirs
) -> FlakyLogDirs:
    admin = cls(
        **vars(
            StubOpsAdmin.cluster(
                {1: "a", 2: "b", 3: "c"},
                {("t", 0): (1, 2), ("u", 0): (2, 1)},
                sizes={("t", 0): 10 * MB},
                reassignment_steps=steps,
            )
        )
    )
    admin.failing = failing
    admin.alter_reassignments({("t", 0): (3, 2)})
    return admin


class Clock:
    """The daemon's clock and sleep: every interval slept advances it; ``during_sleep``
    sees the cluster between two steps."""

    def __init__(self, during_sleep: Callable[[], None] = lambda: None) -> None:
        self.now = 0.0
        self.during_sleep = during_sleep

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.during_sleep()
        self.now += seconds


def _daemon(
    admin: StubOpsAdmin, tmp_path: Path, clock: Clock, give_up_after: float | None = None
) -> tuple[Autothrottle, list[str]]:
    """``give_up_after`` None: the default (300 s, longer than these tests' failures)."""
    logged: list[str] = []
    params = AutothrottleParams(
        capacity=100 * MB,
        limits=ThrottleLimits(minimum=MB),
        state_file=tmp_path / "state.json",
        interval=5,
        **({} if give_up_after is None else {"give_up_after": give_up_after}),
    )
    at = Autothrottle(
        admin, params, bootstrap="stub", clock=clock, sleep=clock.sleep, log=logged.append
    )
    return at, logged


def test_a_transient_error_keeps_the_throttles_and_is_logged_once(tmp_path: Path) -> None:
    timeout = KafkaError("describe log dirs: request timed out", code="RequestTimedOutError")
    admin = _admin({n: timeout for n in (2, 3, 4, 5)})  # t=5..20 fail, t=25 works
    between: list[dict[str, str]] = []
    clock = Clock(lambda: between.append(dict(admin.configs.get(("broker", "3"), {}))))
    at, logged = _daemon(admin, tmp_path, clock)
    assert at.run(until_idle=True, max_steps=8) == 8  # it did not stop at the failure
    # Between every two steps, failing or not, broker 3 kept its throttle.
    assert all(b.get(FOLLOWER_RATE) for b in between), between
    failures = [m for m in logged if "throttle step failed" in m]
    assert len(failures) == 1, logged
    assert "request timed out" in failures[0] and "the throttles in force stay" in failures[0]
    assert "retried every 5s, for up to 300s of failures" in failures[0]
    assert any("throttle steps work again, after 4 failed step(s) over 20s" in m for m in logged)
    # run() ends (max_steps here) clearing as always.
    assert admin.throttle_configs() == {} and not (tmp_path / "state.json").exists()


def test_each_kind_of_error_is_logged_once_while_steps_fail(tmp_path: Path) -> None:
    a = KafkaError("describe log dirs of broker 3: UnknownBrokerIdError: 3", code="UnknownBrokerId")
    b = KafkaError("describe log dirs: request timed out")
    admin = _admin({2: a, 3: b, 4: a, 5: b, 6: a})
    at, logged = _daemon(admin, tmp_path, Clock())
    at.run(until_idle=True, max_steps=7)
    failures = [m for m in logged if "throttle step failed" in m]
    assert len(failures) == 2, logged
    assert "UnknownBrokerIdError: 3" in failures[0] and "request timed out" in failures[1]


def test_errors_that_last_give_up_clearing_the_throttles(tmp_path: Path) -> None:
    down = KafkaError("describe log dirs: NodeNotReadyError", code="NodeNotReadyError")
    admin = _admin({n: down for n in range(2, 100)})
    at, logged = _daemon(admin, tmp_path, Clock(), give_up_after=30)
    with pytest.raises(ThrottleStepsFailing) as info:
        at.run(until_idle=True)
    message = str(info.value)
    assert message.startswith("throttle steps failed for 30s without a break"), message
    assert "(7 attempt(s); the limit is 30s)" in message and "NodeNotReadyError" in message
    assert len([m for m in logged if "throttle step failed" in m]) == 1
    assert admin.throttle_configs() == {} and not (tmp_path / "state.json").exists()
    assert list(admin.running) == [("t", 0)]  # the copy itself is left alone


def test_an_interrupt_while_steps_fail_still_clears(tmp_path: Path) -> None:
    down = KafkaError("describe log dirs: NodeNotReadyError", code="NodeNotReadyError")
    admin = _admin({n: down for n in range(2, 100)})
    clock = Clock()

    def sigterm_at_third_sleep() -> None:
        if clock.now >= 10:
            raise Terminated("received SIGTERM")

    clock.during_sleep = sigterm_at_third_sleep
    at, _ = _daemon(admin, tmp_path, clock)
    with pytest.raises(Terminated):
        at.run(until_idle=True)
    assert admin.throttle_configs() == {} and not (tmp_path / "state.json").exists()


# ---------------------------------------------------------------------- the command
def _use(monkeypatch: pytest.MonkeyPatch, admin: StubOpsAdmin) -> StubOpsAdmin:
    monkeypatch.setattr("streamplane.cli.ops.KafkaOpsAdmin", lambda _bootstrap: admin)
    return admin


THROTTLE = ("ops", "throttle", "--bootstrap", "stub:9092", "--capacity", "10MB")


def test_ops_throttle_rides_out_a_failing_step_and_ends_when_the_copy_does(
    monkeypatch: pytest.MonkeyPatch, cli: Callable[..., Run], tmp_path: Path
) -> None:
    error = KafkaError("describe log dirs of broker 3: UnknownBrokerIdError: 3")
    admin = _use(monkeypatch, _admin({2: error, 3: error, 4: error}, steps=20))
    state = tmp_path / "state.json"
    result = cli(*THROTTLE, "--interval", "0.01", "--state-file", str(state))
    assert result.code == 0, result.err
    assert result.err.count("throttle step failed") == 1, result.err
    assert "throttle steps work again" in result.err
    assert "no reassignment running; throttles removed after" in result.out
    assert admin.replicas[("t", 0)] == (3, 2)
    assert admin.throttle_configs() == {} and not state.exists()


def test_ops_throttle_gives_up_after_the_bound_with_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, cli: Callable[..., Run], tmp_path: Path
) -> None:
    error = KafkaError("describe log dirs: NodeNotReadyError", code="NodeNotReadyError")
    admin = _use(monkeypatch, _admin({n: error for n in range(2, 10**6)}))
    state = tmp_path / "state.json"
    result = cli(
        *THROTTLE, "--interval", "0.01", "--give-up-after", "0.2", "--state-file", str(state)
    )
    assert result.code == 1, result.err
    assert result.err.count("throttle step failed") == 1, result.err
    error_line = result.err.strip().splitlines()[-1]
    assert error_line.startswith("error: throttle steps failed for "), error_line
    assert "NodeNotReadyError" in error_line
    assert error_line.endswith("gave up (--give-up-after): throttles removed"), error_line
    assert admin.throttle_configs() == {} and not state.exists()


def test_ops_throttle_sigterm_while_steps_fail_clears_and_exits_143(
    monkeypatch: pytest.MonkeyPatch, cli: Callable[..., Run], tmp_path: Path
) -> None:
    class TerminatedWhileFailing(FlakyLogDirs):
        def log_dirs(
            self, brokers: Collection[int] | None = None
        ) -> dict[int, list[LogDir] | KafkaError]:
            if self.calls_ == 4:
                signal.raise_signal(signal.SIGTERM)
            return super().log_dirs(brokers)

    timeout = KafkaError("describe log dirs: request timed out")
    admin = _use(monkeypatch, _admin(dict.fromkeys((2, 3, 4), timeout), cls=TerminatedWhileFailing))
    state = tmp_path / "state.json"
    result = cli(*THROTTLE, "--interval", "0.01", "--state-file", str(state))
    assert result.code == 143, result.err
    assert "received SIGTERM: throttles removed" in result.err
    assert admin.throttle_configs() == {} and not state.exists()
