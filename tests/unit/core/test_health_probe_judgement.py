"""What one health probe says (``judge_probe``) and how stalled probes count
(``observe_probe``): a cluster on which no partition can take an ``acks=all`` write is
failed (two brokers of three dead), one that may recover by itself (one broker of three
lost, not fenced yet) stalls, and only a long stall makes it down.

Before, the probe wrote with ``acks=1`` and any acknowledged write kept the cluster
``degraded`` for good: with two brokers of three killed, streams (``acks=all``,
``min.insync.replicas`` 2) took no write for 60 s+ and the cluster was never down.
"""

from __future__ import annotations

import pytest

from streamplane.core.failover import (
    STALL_THRESHOLD_S,
    ClusterHealth,
    HealthState,
    PartitionProbe,
    ProbeVerdict,
    judge_probe,
    observe_probe,
)

REPLICAS = {0: (1, 2, 3), 1: (2, 3, 1), 2: (3, 1, 2)}  # a health partition led by each broker
BROKERS = (1, 2, 3)


def probes(
    committed: set[int],
    answering: set[int],
    leaders: dict[int, int | None] | None = None,
) -> dict[int, PartitionProbe]:
    """The health partitions after a probe: ``committed`` took the acks=all write, the
    brokers in ``answering`` acknowledged the acks=1 writes of the partitions they lead."""
    leaders = leaders if leaders is not None else {p: r[0] for p, r in REPLICAS.items()}
    return {
        p: PartitionProbe(
            leaders[p],
            REPLICAS[p],
            committed=p in committed,
            leader_answered=leaders[p] in answering,
            error=None if p in committed else "Local: Message timed out",
        )
        for p in REPLICAS
    }


def verdict(
    partitions: dict[int, PartitionProbe],
    brokers: tuple[int, ...] = BROKERS,
    min_insync: int = 2,
    metadata_answered: bool = True,
) -> ProbeVerdict:
    return judge_probe(
        partitions,
        brokers,
        min_insync,
        topic="__h",
        timeout_s=1,
        metadata_answered=metadata_answered,
    ).verdict


@pytest.mark.parametrize(
    ("partitions", "expected"),
    [
        (probes({0, 1, 2}, {1, 2, 3}), ProbeVerdict.OK),
        # one broker's partition takes no write: the cluster still does
        (probes({0, 1}, {1, 2}), ProbeVerdict.PARTIAL),
        # one broker of three lost, still in every ISR until fenced: nothing commits, the
        # other two leaders answer, two brokers are left for min.insync.replicas 2
        (probes(set(), {1, 2}), ProbeVerdict.STALLED),
        # the same broker leading every health partition: no leader answers, but the
        # metadata read did and two brokers are left
        (probes(set(), set(), leaders={0: 3, 1: 3, 2: 3}), ProbeVerdict.STALLED),
        # two brokers of three dead (the quorum too): the survivor answers, no partition
        # can have 2 in-sync replicas again until one returns
        (probes(set(), {3}), ProbeVerdict.FAILED),
        (probes(set(), set(), leaders={0: 1, 1: 2, 2: 2}), ProbeVerdict.FAILED),
        # every leader answers and nothing commits: which followers are gone is unknown
        (probes(set(), {1, 2, 3}), ProbeVerdict.STALLED),
    ],
)
def test_a_probe_is_judged_by_its_acks_all_writes(
    partitions: dict[int, PartitionProbe], expected: ProbeVerdict
) -> None:
    assert verdict(partitions) is expected


def test_nothing_answering_fails_and_partitions_without_leader_name_no_broker() -> None:
    none_answered = probes(set(), set())
    assert verdict(none_answered, metadata_answered=False) is ProbeVerdict.FAILED
    leaderless = probes(set(), {3}, leaders={0: None, 1: None, 2: 3})
    assert verdict(leaderless) is ProbeVerdict.STALLED  # brokers 1 and 2 not known silent


def test_a_one_broker_cluster_whose_broker_does_not_answer_failed() -> None:
    alone = {0: PartitionProbe(1, (1,), committed=False, leader_answered=False)}
    assert verdict(alone, brokers=(1,), min_insync=1) is ProbeVerdict.FAILED


def test_the_judgement_says_what_failed() -> None:
    partial = judge_probe(probes({0, 2}, {1, 3}), BROKERS, 2, topic="__h", timeout_s=1)
    assert partial.detail == (
        "1 of 3 __h partitions took no acks=all write in 1s (partition 1: Local: Message timed out)"
    )
    failed = judge_probe(probes(set(), {3}), BROKERS, 2, topic="__h", timeout_s=1)
    assert failed.detail is not None and "brokers 1, 2 do not answer" in failed.detail
    stalled = judge_probe(probes(set(), {1, 2}), BROKERS, 2, topic="__h", timeout_s=1)
    assert stalled.detail is not None and "2 of 3 leaders answered (brokers 3 do not)" in (
        stalled.detail
    )


def run(probes_seen: list[tuple[float, float, str]], threshold: float = 3.0) -> list[ClusterHealth]:
    """Health after each (started, ended, "ok" | "partial" | "stalled" | "failed") probe."""
    state = HealthState()
    out = []
    for started, now, kind in probes_seen:
        state = observe_probe(
            state,
            ok=kind in ("ok", "partial"),
            started=started,
            now=now,
            threshold_s=threshold,
            error=None if kind in ("ok", "partial") else kind,
            partial="1 of 3" if kind == "partial" else None,
            stalled=kind == "stalled",
        )
        out.append(state.health)
    return out


def test_stalled_probes_make_a_cluster_down_only_after_the_stall_threshold() -> None:
    t = STALL_THRESHOLD_S
    seen = run(
        [(0, 1, "stalled"), (1, 4, "stalled"), (4, t - 0.5, "stalled"), (t - 0.5, t, "stalled")]
    )
    assert seen == [ClusterHealth.DEGRADED] * 3 + [ClusterHealth.DOWN]
    # the fencing came: the cluster takes writes again
    assert run([(0, 1, "stalled"), (1, 12, "stalled"), (12, 12.5, "ok")])[-1] is ClusterHealth.OK


def test_a_failed_probe_after_stalled_ones_counts_the_whole_streak() -> None:
    # stalled for 5 s, then two brokers found dead: down at once (past the 3 s threshold)
    seen = run([(0, 1, "stalled"), (1, 5, "stalled"), (5, 6, "failed")])
    assert seen == [ClusterHealth.DEGRADED, ClusterHealth.DEGRADED, ClusterHealth.DOWN]
    assert run([(0, 1, "failed"), (1, 2, "failed"), (2, 3, "failed")])[-1] is ClusterHealth.DOWN
