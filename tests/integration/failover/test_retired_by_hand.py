"""A segment an operator retires (``streams transition ... --to retired``, the API's
``segments/transition``) is watched as the sealer's retirements are: an exploratory run
(a platform operator) had 10 records written there after a retirement by hand
acknowledged and never read, the segment left retired for good. The records it held
when retired are not late (an operator retires a dlq segment whose letters no one will
replay): only those landing after reopen it."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from streamplane.client.control_plane import ControlPlaneClient
from streamplane.kafka.clients import make_producer
from streamplane.local.control_plane_process import ControlPlaneProcess
from tests.integration.failover.conftest import segment_states
from tests.waiting import wait_for

pytestmark = pytest.mark.integration


def _write(bootstrap: str, topic: str, count: int) -> None:
    producer = make_producer(bootstrap)
    for n in range(count):
        producer.produce(topic, b"%d" % n, partition=0)
    assert producer.flush(30) == 0


def test_records_landing_after_a_retirement_by_hand_reopen_the_segment(
    fo_control_plane: ControlPlaneProcess,
    fo_client: ControlPlaneClient,
    fo_stream: Callable[..., str],
) -> None:
    stream = fo_stream("local-a", partitions=1, lanes=["realtime"])
    old = fo_client.routing(stream).active("realtime").topic
    bootstrap = fo_client.cluster_bootstrap("local-a")
    _write(bootstrap, old, 5)  # held when it is retired: not late
    fo_client.failover(stream, "local-b", ["realtime"])
    fo_client.transition_segment(stream, "local-a", old, "sealed")  # no end offsets given
    table = fo_client.transition_segment(stream, "local-a", old, "retired")
    retired = table.segment("local-a", old)
    assert retired is not None and retired.sealed_end_offsets == {0: 5}
    # A producer that did not see the failover writes to the retired segment.
    _write(bootstrap, old, 10)
    wait_for(
        f"{old} reopened",
        lambda: segment_states(fo_client, stream)[old] == "sealed",
        30,
        every=0.5,
    )
    reopening = [
        e
        for e in fo_client.audit(stream)
        if e["action"] == "segment.transition"
        and e["actor"] == "sealer"
        and e["detail"]["topic"] == old
        and e["detail"]["state"] == "sealed"
    ]
    assert len(reopening) == 1, reopening


def test_a_segment_retired_by_hand_with_nothing_late_stays_retired(
    fo_control_plane: ControlPlaneProcess,
    fo_client: ControlPlaneClient,
    fo_stream: Callable[..., str],
) -> None:
    """Its own records (read before the retirement, or given up on) reopen nothing."""
    stream = fo_stream("local-a", partitions=1, lanes=["realtime"])
    old = fo_client.routing(stream).active("realtime").topic
    _write(fo_client.cluster_bootstrap("local-a"), old, 5)
    fo_client.failover(stream, "local-b", ["realtime"])
    fo_client.transition_segment(stream, "local-a", old, "sealed")
    fo_client.transition_segment(stream, "local-a", old, "retired")
    # The watch looks every retire interval (5 s): through two looks, still retired.
    states = []
    for _ in range(11):
        states.append(segment_states(fo_client, stream)[old])
        time.sleep(1.0)
    assert set(states) == {"retired"}, states
