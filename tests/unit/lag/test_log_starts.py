"""The poller keeps the log start of every tracked partition (not only of expected
partitions without a commit): a group that starts reading while the cluster is down
counts from the last known log start instead of showing an unknown lag."""

from __future__ import annotations

import pytest

from streamplane.exceptions import KafkaError
from streamplane.lag.monitor import ClusterWorker, MonitorSettings
from streamplane.lag.reader import CommitEvent, CommitState

NOW_S = 1_700_000_100.0
TOPIC = "sp.orders.realtime.e1"


class _Ends:
    def __init__(self) -> None:
        self.down = False
        self.asked_starts: list[set[tuple[str, int]]] = []

        self.failures: dict[tuple[str, int], str] = {}

    def fetch_pass(
        self, ends: object, starts: object = (), timeout: float = 2.0
    ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
        if self.down:
            raise KafkaError("cluster down")
        from_start = set(starts)  # type: ignore[call-overload]
        if from_start:
            self.asked_starts.append(from_start)
        return {tp: 2038 for tp in ends}, {tp: 38 for tp in from_start}  # type: ignore[attr-defined]


class _NoLookup:
    def lookup(self, wanted: object, timeout: float = 1.0) -> dict[tuple[str, int, int], int]:
        return {}


def test_a_group_starting_while_the_cluster_is_down_counts_from_the_last_log_start() -> None:
    route = ("orders", "realtime")
    w = ClusterWorker("local-b", "h:1", MonitorSettings(), lambda: NOW_S, lambda c, t: route)
    w._apply([CommitEvent(("old", TOPIC, 0), CommitState(2038, 1, 1, True))])
    ends = _Ends()
    w._poll_once(ends, _NoLookup())  # type: ignore[arg-type]
    assert ends.asked_starts == [{(TOPIC, 0)}]  # committed only: asked all the same
    w._poll_once(ends, _NoLookup())  # type: ignore[arg-type]
    assert len(ends.asked_starts) == 1  # not at every poll
    ends.down = True
    w.set_expected({("new", TOPIC, 0): route})
    with pytest.raises(KafkaError):
        w._poll_once(ends, _NoLookup())  # type: ignore[arg-type]
    (lag,) = [p for p in w.partitions(int(NOW_S * 1000)) if p.group == "new"]
    assert (lag.committed_offset, lag.end_offset, lag.offset_lag) == (None, 2038, 2000)
