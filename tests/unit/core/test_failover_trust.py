"""Whom a down cluster's streams may go to, and when: trusted targets, fleet-wide outages.

A small fake fleet (``FleetRun``) probes every cluster each ``INTERVAL`` on a fake clock
with the real rules (``observe_probe``, ``failover_hold``, ``trusted_clusters``,
``choose_standby``) and records the failovers they decide, as the runtime's probers do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pytest

from streamplane.core.failover import (
    ClusterHealth,
    FailoverHold,
    HealthState,
    HoldReason,
    choose_standby,
    failover_hold,
    observe_probe,
    trusted_clusters,
)

THRESHOLD = 3.0
RECOVERY = 10.0
INTERVAL = 1.0
PROBE_TAKES = 0.25  # exact in binary: the times compare exactly

Up = Callable[[float], bool]  # is the cluster answering at this time?


def always(_t: float) -> bool:
    return True


def down_between(start: float, end: float = float("inf")) -> Up:
    return lambda t: not start <= t < end


@dataclass
class FleetRun:
    """Clusters probed in name order each ``INTERVAL`` from t=0; each down cluster's
    streams fail over (once) where the rules say, when they say."""

    up: Mapping[str, Up]
    tags: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    states: dict[str, HealthState] = field(default_factory=dict)
    down_at: dict[str, float] = field(default_factory=dict)  # when each first became down
    failovers: dict[str, tuple[float, str]] = field(default_factory=dict)  # (time, target)
    holds: list[tuple[float, str, FailoverHold]] = field(default_factory=list)

    def run(self, until: float) -> FleetRun:
        tags = {name: self.tags.get(name, {}) for name in self.up}
        t = 0.0
        while t <= until:
            for name, up in sorted(self.up.items()):
                now = t + PROBE_TAKES
                state = observe_probe(
                    self.states.get(name, HealthState()),
                    ok=up(t),
                    started=t,
                    now=now,
                    threshold_s=THRESHOLD,
                    error="refused",
                )
                self.states[name] = state
                if state.health is not ClusterHealth.DOWN or name in self.failovers:
                    continue
                self.down_at.setdefault(name, now)
                hold = failover_hold(name, self.states, now, THRESHOLD, RECOVERY)
                if hold is not None:
                    self.holds.append((now, name, hold))
                    continue
                trusted = trusted_clusters(self.states, now, THRESHOLD)
                target = choose_standby(name, "s", tags, trusted)
                assert target is not None  # no hold: a trusted target exists
                self.failovers[name] = (now, target)
            t += INTERVAL
        return self


def test_a_single_cluster_outage_fails_over_the_moment_the_cluster_is_down() -> None:
    """local-b answered all along: as fast as before (the moment local-a is down)."""
    fleet = FleetRun({"local-a": down_between(100), "local-b": always}).run(120)
    assert fleet.failovers == {"local-a": (fleet.down_at["local-a"], "local-b")}
    assert fleet.down_at["local-a"] == 103 + PROBE_TAKES  # threshold after the first failure
    assert not fleet.holds


def test_a_fleet_restart_moves_no_stream() -> None:
    """The report: every cluster down at once (``local down``), local-b back ~3 s
    before local-a (``local up``; here 4 s: past the threshold, so that local-b is a
    trusted target by then). local-b used to take local-a's streams at once; now the
    fleet has the recovery window to come back."""
    fleet = FleetRun(
        {"local-a": down_between(10, 24), "local-b": down_between(10, 20)},
        tags={"local-a": {"standby": "local-b"}, "local-b": {"standby": "local-a"}},
    ).run(60)
    assert fleet.down_at == {"local-a": 13 + PROBE_TAKES, "local-b": 13 + PROBE_TAKES}
    assert fleet.failovers == {}
    reasons = {(name, h.reason) for _, name, h in fleet.holds}
    assert ("local-a", HoldReason.FLEET_OUTAGE) in reasons  # local-b back, local-a not yet


def test_the_control_plane_cut_off_from_every_cluster_moves_no_stream() -> None:
    """Its own network outage: every cluster fails at once and answers again at once."""
    fleet = FleetRun(
        {name: down_between(10, 40) for name in ("local-a", "local-b", "local-c")}
    ).run(80)
    assert fleet.failovers == {}


@pytest.mark.parametrize("back_after", [0.0, 1.0, 3.0, 5.0, 9.0])
def test_after_a_fleet_outage_the_others_get_the_recovery_window_to_come_back(
    back_after: float,
) -> None:
    """local-a comes back ``back_after`` seconds after local-b (it answers at the next
    probe): within the recovery window, so nothing moves."""
    fleet = FleetRun(
        {"local-a": down_between(10, 20 + back_after), "local-b": down_between(10, 20)}
    ).run(60)
    assert fleet.failovers == {}


def test_a_cluster_that_does_not_come_back_after_a_fleet_outage_is_failed_over() -> None:
    fleet = FleetRun({"local-a": down_between(10), "local-b": down_between(10, 20)}).run(60)
    # local-b answers from 20.25: local-a is failed over at its first probe once the
    # recovery window has passed since then.
    assert fleet.failovers == {"local-a": (30 + PROBE_TAKES, "local-b")}
    holds = [h for t, name, h in fleet.holds if name == "local-a" and t > 20]
    assert holds and {h.reason for h in holds} == {
        HoldReason.NO_TRUSTED_TARGET,  # local-b back, not trusted yet
        HoldReason.FLEET_OUTAGE,
    }


def test_a_recovery_window_shorter_than_the_threshold_still_waits_for_a_trusted_target() -> None:
    states = {
        "local-a": HealthState(ClusterHealth.DOWN, since=13, failing_since=10),
        "local-b": HealthState(ClusterHealth.OK, since=20),
    }
    hold = failover_hold("local-a", states, 22, THRESHOLD, recovery_s=0)
    assert hold is not None and hold.reason is HoldReason.NO_TRUSTED_TARGET
    assert failover_hold("local-a", states, 23, THRESHOLD, recovery_s=0) is None


def test_a_cluster_that_has_just_come_back_is_not_a_target() -> None:
    """local-b (local-a's standby) came back a second before local-a went down, while
    local-c answered all along: local-a's streams go to local-c, on time."""
    fleet = FleetRun(
        {
            "local-a": down_between(100),
            "local-b": down_between(90, 101),
            "local-c": always,
        },
        tags={"local-a": {"standby": "local-b"}},
    ).run(120)
    assert fleet.failovers["local-a"] == (fleet.down_at["local-a"], "local-c")


def test_a_flapping_cluster_is_never_a_target() -> None:
    fleet = FleetRun(
        {"local-a": down_between(10), "local-b": lambda t: int(t) % 3 != 0}  # fails 1 in 3
    ).run(60)
    assert fleet.failovers == {}
    assert {h.reason for _, _, h in fleet.holds} == {HoldReason.NO_TRUSTED_TARGET}


def test_another_cluster_answering_all_along_is_enough_when_the_rest_failed_too() -> None:
    """local-c answered without a break (even in part: some brokers took no write), so
    the control plane was not cut off: local-a's failures count from their start."""
    fleet = FleetRun({"local-a": down_between(10), "local-b": always, "local-c": always}).run(30)
    assert fleet.failovers["local-a"] == (13 + PROBE_TAKES, "local-b")

    states = {
        "local-a": HealthState(ClusterHealth.DOWN, since=13, failing_since=10),
        "local-b": HealthState(ClusterHealth.OK, since=11),  # back after a blip: trusted
        "local-c": HealthState(ClusterHealth.DEGRADED, since=1, last_error="1 of 3"),
    }
    assert failover_hold("local-a", states, 14, THRESHOLD, RECOVERY) is None
    states["local-c"] = HealthState(ClusterHealth.DEGRADED, since=12, failing_since=12)
    hold = failover_hold("local-a", states, 14, THRESHOLD, RECOVERY)  # local-c failing too
    assert hold is not None and hold.reason is HoldReason.FLEET_OUTAGE


def test_trusted_clusters() -> None:
    states = {
        "new": HealthState(ClusterHealth.OK, since=8),
        "old": HealthState(ClusterHealth.OK, since=7),
        "part": HealthState(ClusterHealth.DEGRADED, since=0, last_error="1 of 3"),
        "down": HealthState(ClusterHealth.DOWN, since=0, failing_since=0),
        "unknown": HealthState(),
    }
    assert trusted_clusters(states, 10, THRESHOLD) == {"old"}
    assert trusted_clusters(states, 11, THRESHOLD) == {"old", "new"}


def test_hold_of_a_cluster_that_is_not_down() -> None:
    states = {"local-a": HealthState(ClusterHealth.DEGRADED, since=1, failing_since=1)}
    hold = failover_hold("local-a", states, 2, THRESHOLD, RECOVERY)
    assert hold == FailoverHold(HoldReason.NOT_DOWN, "local-a is degraded")
    assert failover_hold("local-x", {}, 2, THRESHOLD, RECOVERY) == FailoverHold(
        HoldReason.NOT_DOWN, "local-x is unknown"
    )


def test_the_fleet_outage_hold_says_when_it_ends() -> None:
    states = {
        "local-a": HealthState(ClusterHealth.DOWN, since=13, failing_since=10),
        "local-b": HealthState(ClusterHealth.OK, since=20),
    }
    hold = failover_hold("local-a", states, 24, THRESHOLD, RECOVERY)
    assert hold is not None and hold.reason is HoldReason.FLEET_OUTAGE
    assert "began failing 14.0s ago" in hold.detail
    assert "the first came back 4.0s ago" in hold.detail
    assert "if it still fails 6.0s from now" in hold.detail
    assert failover_hold("local-a", states, 29.9, THRESHOLD, RECOVERY) is not None
    assert failover_hold("local-a", states, 30, THRESHOLD, RECOVERY) is None
