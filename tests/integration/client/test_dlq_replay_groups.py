"""`dlq replay`'s group on a real fleet: one per stream (sp-dlq-replay.<stream>), taking
over the progress of the group every stream's replays shared before (sp-dlq-replay).

An exploratory run (/tmp/explore-client/t08_two_replays.py) replayed two streams at the
same time: one failed with "group 'sp-dlq-replay' consumes stream 'rpb' lanes ['dlq']
(members still live); a member asked for 'rpa'" (a group reads one stream at a time),
and a replay of one stream right after a replay of another was killed failed the same
way until the killed member's lease ran out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from streamplane.client.consumer import StreamConsumer
from streamplane.client.dlq import replay_dead_letters
from streamplane.local.control_plane_process import ControlPlaneProcess
from streamplane.local.fleet import FleetDescriptor
from tests.integration.client.test_dlq_replay import (
    Committed,
    dead_letters,
    replay_group,
    replayed_from,
    run_killed_replay,
    topics,
)

SHARED = "sp-dlq-replay"  # every stream's replay group, before


def test_replays_of_two_streams_run_at_the_same_time(
    control_plane: ControlPlaneProcess,
    fleet: FleetDescriptor,
    stream_factory: Callable[..., str],
) -> None:
    """Each replay waits after its first batch until the other has sent one too: both
    are members of their group at once, and each replays its stream's 1,000 letters.
    (Before, the second to join failed: both were the group sp-dlq-replay.)"""
    bootstrap = fleet.bootstrap("local-a")
    streams = [stream_factory("local-a", lanes=("realtime",), partitions=1) for _ in range(2)]
    lane_topics: dict[str, str] = {}
    with control_plane.client() as client:
        for stream in streams:
            dlq_topic, lane_topics[stream] = topics(client, stream)
            dead_letters(bootstrap, dlq_topic, 0, 1000)
    started = {stream: threading.Event() for stream in streams}
    outcome: dict[str, object] = {}

    def replay(stream: str, other: str) -> None:
        def both_replaying(k: int) -> None:
            started[stream].set()
            started[other].wait(30)

        try:
            with control_plane.client() as client:
                outcome[stream] = replay_dead_letters(
                    client, stream, progress=both_replaying
                ).replayed
        except BaseException as exc:
            outcome[stream] = exc

    threads = [
        threading.Thread(target=replay, args=pair, daemon=True)
        for pair in ((streams[0], streams[1]), (streams[1], streams[0]))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert outcome == {streams[0]: 1000, streams[1]: 1000}
    for stream in streams:
        assert sorted(replayed_from(bootstrap, lane_topics[stream])) == list(range(1000))


def test_a_killed_replay_does_not_hold_up_another_streams(
    control_plane: ControlPlaneProcess,
    fleet: FleetDescriptor,
    stream_factory: Callable[..., str],
) -> None:
    """kill -9 of a replay of one stream, and at once a replay of another: it replays
    its 300 letters while the killed member's lease still runs. (Before, it failed
    until the lease ran out.) The killed one's stream is replayed once the lease is out."""
    bootstrap = fleet.bootstrap("local-a")
    killed = stream_factory("local-a", lanes=("realtime",), partitions=1)
    other = stream_factory("local-a", lanes=("realtime",), partitions=1)
    client = control_plane.client()
    killed_dlq, killed_lane = topics(client, killed)
    other_dlq, other_lane = topics(client, other)
    dead_letters(bootstrap, killed_dlq, 0, 1200)
    dead_letters(bootstrap, other_dlq, 0, 300)
    run_killed_replay(control_plane, killed)
    assert replay_dead_letters(client, other).replayed == 300
    assert sorted(replayed_from(bootstrap, other_lane)) == list(range(300))
    time.sleep(3.0)  # the killed member's lease (1.5 s) runs out: its units move on
    assert replay_dead_letters(client, killed).replayed == 200
    assert sorted(replayed_from(bootstrap, killed_lane)) == list(range(1200))


def test_a_replay_takes_over_the_progress_of_the_shared_group(
    control_plane: ControlPlaneProcess,
    fleet: FleetDescriptor,
    stream_factory: Callable[..., str],
) -> None:
    """A replay of an earlier version (the group sp-dlq-replay) settled letters 0-699 and
    800-899 of 1,200: the first replay of the stream's own group starts from that
    (offset and commit-log state) and replays exactly the other 400, not all 1,200
    again; the shared group's commit is only read."""
    bootstrap = fleet.bootstrap("local-a")
    stream = stream_factory("local-a", lanes=("realtime",), partitions=1)
    client = control_plane.client()
    dlq_topic, lane_topic = topics(client, stream)
    dead_letters(bootstrap, dlq_topic, 0, 1200)
    with StreamConsumer(stream, SHARED, client, lanes=["dlq"]) as earlier:
        seen = 0
        deadline = time.monotonic() + 60
        while seen < 900 and time.monotonic() < deadline:
            for msg in earlier.poll_batch(500, 0.2):
                seen = max(seen, msg.offset + 1)
                if msg.offset < 700 or 800 <= msg.offset < 900:
                    msg.ack()
        earlier.commit()
    shared = Committed(bootstrap, dlq_topic, SHARED)
    own = Committed(bootstrap, dlq_topic, replay_group(stream))
    try:
        assert shared() == 700
        assert own() < 0  # nothing committed yet

        assert replay_dead_letters(client, stream).replayed == 400
        assert replayed_from(bootstrap, lane_topic) == [*range(700, 800), *range(900, 1200)]
        assert own() == 1200
        assert shared() == 700
        assert replay_dead_letters(client, stream).replayed == 0  # its own progress now
    finally:
        shared.close()
        own.close()
