"""`dlq list` after the dlq lane moved: the dead letters of the segment it left behind
are listed once that segment is retired, with the cluster and topic they are on.

Dead letters rejected on local-a; the dlq lane is moved to local-b (a failover), then
`dlq replay` sends them back (it reads the draining segment: it has not the listing's
gap) and the sealer retires the old segment, the stream's replay group having settled
it. The listing read only readable segments: the old letters, still in Kafka, left it,
while replayed letters of an active segment stay listed. An operator's retirement by
hand (giving the letters up) leaves them listed too, and not replayed.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Callable

from streamplane.client.consumer import StreamConsumer
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.dlq import list_dead_letters, replay_dead_letters
from streamplane.core.routing import DLQ_LANE, SegmentState
from streamplane.exceptions import StreamplaneError
from streamplane.local.control_plane_process import ControlPlaneProcess
from tests.integration.failover.conftest import producer_for, segment_states
from tests.waiting import wait_for

REJECTED = 4


def _reject_all(client: ControlPlaneClient, stream: str, group: str) -> None:
    """Write ``REJECTED`` records to the realtime lane and reject each one (its dead
    letter goes to the active dlq segment)."""
    producer = producer_for(client, stream)
    try:
        for i in range(REJECTED):
            producer.send(b"bad-%d" % i, lane="realtime")
        producer.flush(30)
    finally:
        producer.close(5)
    rejected = 0
    with StreamConsumer(stream, group, client, lanes=["realtime"]) as consumer:

        def reject_one() -> bool:
            nonlocal rejected
            msg = consumer.poll(0.2)
            if msg is not None:
                msg.reject("poison")
                rejected += 1
            return rejected == REJECTED

        wait_for("every record rejected", reject_one, 60)
        consumer.commit()


def _move_dlq_lane(client: ControlPlaneClient, stream: str) -> str:
    """Move the dlq lane to local-b; the topic of the segment it leaves on local-a."""
    old = client.routing(stream).active(DLQ_LANE)
    assert old.cluster == "local-a"
    client.failover(stream, "local-b", [DLQ_LANE], reason="move the dlq lane")
    return old.topic


def test_dead_letters_of_a_retired_dlq_segment_are_listed(
    fo_control_plane: ControlPlaneProcess,
    fo_client: ControlPlaneClient,
    fo_stream: Callable[..., str],
) -> None:
    stream = fo_stream("local-a", partitions=1, lanes=["realtime"])
    _reject_all(fo_client, stream, "rejecting")
    old = _move_dlq_lane(fo_client, stream)
    before = list_dead_letters(fo_client, stream)
    assert [(d.cluster, d.topic) for d in before.letters] == [("local-a", old)] * REJECTED

    replayed = replay_dead_letters(fo_client, stream)
    assert replayed.replayed == REJECTED  # the draining (or sealed) segment is replayed
    wait_for(
        f"{old} retired (settled by the replay group)",
        lambda: segment_states(fo_client, stream)[old] == SegmentState.RETIRED.value,
        90,
        every=0.5,
    )

    listing = list_dead_letters(fo_client, stream)
    assert (listing.unread, listing.more) == ([], False)
    assert [(d.cluster, d.topic, d.offset, d.retired) for d in listing.letters] == [
        ("local-a", old, offset, True) for offset in range(REJECTED)
    ]
    assert [d.provenance["error"] for d in listing.letters] == ["poison"] * REJECTED
    assert replay_dead_letters(fo_client, stream).replayed == 0  # settled: not sent again

    # What a user runs: the JSON names each letter's cluster and topic.
    listed = subprocess.run(
        [sys.executable, "-m", "streamplane.cli", "dlq", "list", stream, "--json",
         "--url", fo_control_plane.url, "--token", fo_control_plane.token],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert [(r["cluster"], r["topic"], r["retired"]) for r in json.loads(listed.stdout)] == [
        ("local-a", old, True)
    ] * REJECTED


def test_dead_letters_given_up_by_hand_stay_listed_and_are_not_replayed(
    fo_client: ControlPlaneClient, fo_stream: Callable[..., str]
) -> None:
    """An operator retires the old dlq segment by hand: its letters are given up (no
    replay sends them), and still listed, marked retired, until Kafka's retention
    removes them. Letters of the new segment follow them."""
    stream = fo_stream("local-a", partitions=1, lanes=["realtime"])
    _reject_all(fo_client, stream, "rejecting")
    old = _move_dlq_lane(fo_client, stream)
    if segment_states(fo_client, stream)[old] == SegmentState.DRAINING.value:
        with contextlib.suppress(StreamplaneError):  # the sealer may seal it first
            fo_client.transition_segment(stream, "local-a", old, "sealed")
    fo_client.transition_segment(stream, "local-a", old, "retired")
    _reject_all(fo_client, stream, "rejecting")  # to local-b's segment

    listing = list_dead_letters(fo_client, stream)
    assert (listing.unread, listing.more) == ([], False)
    new = fo_client.routing(stream).active(DLQ_LANE).topic
    assert [(d.cluster, d.topic) for d in listing.letters] == [("local-a", old)] * REJECTED + [
        ("local-b", new)
    ] * REJECTED
    assert [d.retired for d in listing.letters] == [True] * REJECTED + [False] * REJECTED
    limited = list_dead_letters(fo_client, stream, limit=REJECTED)
    assert (len(limited.letters), limited.more) == (REJECTED, True)
    assert {d.topic for d in limited.letters} == {old}  # the oldest first
    assert replay_dead_letters(fo_client, stream).replayed == REJECTED  # local-b's only
