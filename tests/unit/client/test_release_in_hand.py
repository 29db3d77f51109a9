"""A unit the Assigner asks back (a member joined, say) is handed back only once the
records of it in the application's hands are acked, nacked or rejected, their acks
committed first, or at its release deadline (``StreamConsumer`` over ``harness``, with
a ``GroupMembership`` whose control plane is a stand-in).

Found by an exploratory run: 3 replicas of a service, each ``run(handler,
concurrency=8)``, a handler calling a flaky downstream (0.2-1 s now and then), replicas
scaled 3 -> 1 -> 4: 29 records handled twice, all within ~0.5 s of a member joining,
some by two members at once. The unit was handed back at the next poll after it was
asked for: the records of it in ``run``'s threads (and those queued for them) were
still being handled, their acks lost, and the next holder read them again from the
commit made before."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from confluent_kafka import Message

from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.membership import LEASE_MARGIN_S, GroupMembership, unit_json
from streamplane.client.partition_state import PartitionKey
from streamplane.core.assignment import RELEASE_TIMEOUT_S
from streamplane.core.commitlog import PartitionProgress
from streamplane.core.routing import new_routing_table
from tests.unit.client.harness import KEY, Clock, DlqBroker, NoKafka, stand_in_consumer
from tests.waiting import wait_for

P0 = PartitionKey(KEY.cluster, KEY.topic, 0)
P1 = PartitionKey(KEY.cluster, KEY.topic, 1)


class Fetcher(NoKafka):
    def incremental_unassign(self, partitions: object) -> None: ...


class Commits:
    """The cluster's commit store: what was committed, by partition."""

    def __init__(self) -> None:
        self.committed: list[tuple[str, int, PartitionProgress]] = []

    def commit(self, items: list[tuple[str, int, PartitionProgress]]) -> None:
        self.committed += items

    def last(self, partition: int) -> PartitionProgress | None:
        mine = [progress for _, p, progress in self.committed if p == partition]
        return mine[-1] if mine else None


class Assigner:
    """The control plane's answers: ``units`` to process and ``release`` to hand back,
    with a long lease (the tests beat by hand, when they choose); what the member
    handed back, as the heartbeats said."""

    def __init__(self, units: list[PartitionKey]) -> None:
        self.units = units
        self.release: list[PartitionKey] = []
        self.handed_back: list[dict[str, Any]] = []
        self.claims: list[dict[str, Any]] = []  # the last heartbeat's

    def group_heartbeat(self, *args: object, **kwargs: Any) -> dict[str, Any]:
        self.handed_back += kwargs["released"]
        self.claims = kwargs["claims"]
        return {
            "work_units": [unit_json(k) for k in self.units],
            "release": [unit_json(k) for k in self.release],
            "lease_s": 60.0,
            "generation": 1,
            "joined": False,
        }

    def ask_back(self, key: PartitionKey) -> None:
        """The Assigner moves ``key`` to a member that joined."""
        self.units = [k for k in self.units if k != key]
        self.release = [key]


def record(partition: int, offset: int) -> Message:
    return Message(
        topic=KEY.topic, partition=partition, offset=offset, value=b"v", timestamp=(1, offset)
    )


def member_of(cp: Assigner, records: int = 10) -> tuple[StreamConsumer, GroupMembership, Commits]:
    """A two-partition consumer (``records`` records fetched on each, partition 0's
    first) whose membership's first heartbeat has been answered (its heartbeat thread
    is not started: the tests call ``_beat``)."""
    c = stand_in_consumer(DlqBroker(), partitions=2)
    c._consumers = {("local-a", 0): Fetcher()}  # type: ignore[dict-item]
    commits = Commits()
    c._commit_stores["local-a"] = commits  # type: ignore[assignment]
    c._watcher._table = new_routing_table("s", ["default"], "local-a", 2)
    member = GroupMembership(cp, "g", "s", ["default"], load=lambda: (0.0, 0.0, []))  # type: ignore[arg-type]
    member._beat()
    member.changed.clear()
    c._membership = member
    c._accept(KEY.cluster, [record(p, o) for p in (0, 1) for o in range(records)])
    return c, member, commits


def test_a_unit_asked_back_is_handed_back_once_its_records_in_hand_are_acked(
    member_clock: Clock,
) -> None:
    """Its acks are committed before it is handed back, so the next holder handles none
    of them again; its buffered records are not handed out meanwhile. Before, it was
    handed back at once, committed with 5 of its 10 records in hand unacked: those 5
    were handled again by the next holder (at the same time, with a slow handler)."""
    cp = Assigner([P0, P1])
    c, member, commits = member_of(cp)
    in_hand = c.poll_batch(100, 0)
    assert len(in_hand) == 20
    c._accept(KEY.cluster, [record(1, o) for o in range(10, 15)])  # buffered, not handed out
    for msg in in_hand[:15]:  # partition 0's ten, and partition 1's first five
        msg.ack()
    cp.ask_back(P1)
    member._beat()
    member_clock.now += 0.1  # the next housekeeping sees it
    assert c.poll_batch(100, 0) == []  # not partition 1's buffered records
    assert member._released == set()  # five of its records are still being handled
    assert c.assignment() == [P0]
    for msg in in_hand[15:]:
        msg.ack()
    assert c.poll_batch(100, 0) == []
    assert member._released == {P1}
    last = commits.last(1)
    assert last is not None and last.low_watermark == 10  # every ack, none of the buffered
    member._beat()
    assert cp.handed_back == [unit_json(P1)]


def test_a_unit_whose_records_stay_in_hand_is_handed_back_at_its_release_deadline(
    member_clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """A handler that hangs does not keep a unit for ever: the Assigner moves it
    ``RELEASE_TIMEOUT_S`` after it asked for it, which was after the previous heartbeat
    answered was sent; the member hands it back (committing what was acked) a little
    before that, by its own clock, and says so."""
    cp = Assigner([P0, P1])
    c, member, commits = member_of(cp)
    asked_after = member_clock.now  # the first heartbeat was sent now
    in_hand = c.poll_batch(100, 0)
    for msg in in_hand[10:13]:  # partition 1's first three; the rest hang
        msg.ack()
    member_clock.now += 0.3
    cp.ask_back(P1)
    member._beat()
    deadline = asked_after + RELEASE_TIMEOUT_S - LEASE_MARGIN_S
    member_clock.now = deadline - 0.01
    assert c.poll_batch(100, 0) == []
    assert member._released == set()
    assert member.release_deadline(P1) == deadline
    member_clock.now = deadline
    with caplog.at_level(logging.WARNING, logger="streamplane.client.consumer"):
        assert c.poll_batch(100, 0) == []
    assert member._released == {P1}
    last = commits.last(1)
    assert last is not None and last.low_watermark == 3
    assert "with 7 records still in the application's hands after" in caplog.text


def test_run_hands_a_unit_back_only_once_its_handlers_are_done() -> None:
    """``run(concurrency=2)``: a member joins while two records of the unit it is given
    are being handled (a slow downstream) and two more wait for a thread. Nothing of
    the unit is handled once it has been handed back, and the records waiting for a
    thread are not started (the next holder reads them); the two handled are committed
    before. Before, the unit was handed back while both were still being handled, and
    the two waiting ones were handled after it had gone."""
    cp = Assigner([P0, P1])
    c, member, commits = member_of(cp)
    c._fetch = lambda timeout: time.sleep(min(timeout, 0.01))  # type: ignore[method-assign]
    slow = threading.Event()  # the downstream answers
    lock = threading.Lock()
    running: set[int] = set()  # offsets of partition 1 being handled
    handled: list[tuple[int, int]] = []
    at_hand_back: list[tuple[set[int], PartitionProgress | None]] = []
    released = member.released

    def hand_back(keys: Any) -> None:
        keys = list(keys)
        if P1 in keys:
            with lock:
                at_hand_back.append((set(running), commits.last(1)))
        released(keys)

    member.released = hand_back  # type: ignore[method-assign]

    def handler(msg: StreamMessage) -> None:
        if msg.partition == 1:
            with lock:
                running.add(msg.offset)
            slow.wait(10)
        with lock:
            if msg.partition == 1:
                running.discard(msg.offset)
            handled.append((msg.partition, msg.offset))

    stop = threading.Event()
    runner = threading.Thread(
        target=c.run, args=(handler,), kwargs={"concurrency": 2, "stop": stop}
    )
    runner.start()
    try:
        wait_for("two records of partition 1 in the handlers", lambda: len(running) == 2, 10)
        cp.ask_back(P1)  # a member joined
        member._beat()
        wait_for("the consumer to see it", lambda: not member.changed.is_set(), 10)
        assert member._released == set() and at_hand_back == []
        slow.set()
        wait_for("partition 1 handed back", lambda: at_hand_back, 10)
    finally:
        slow.set()
        stop.set()
        runner.join(10)
    assert not runner.is_alive()
    [(running_then, committed_then)] = at_hand_back
    assert running_then == set()
    assert sorted(o for p, o in handled if p == 1) == [0, 1]  # not the two that waited
    assert committed_then is not None and committed_then.low_watermark == 2


def test_a_unit_being_handed_back_is_still_claimed(member_clock: Clock) -> None:
    """A restarted Assigner rebuilds the group from what its members claim: a unit whose
    records are still being handled here is claimed until it is handed back, so it is
    not given to another member meanwhile (it was claimed by nobody once asked back)."""
    cp = Assigner([P0, P1])
    c, member, _ = member_of(cp)
    in_hand = c.poll_batch(100, 0)
    cp.ask_back(P1)
    member._beat()
    member_clock.now += 0.1
    c.poll_batch(100, 0)
    member._beat()
    assert sorted(u["partition"] for u in cp.claims) == [0, 1]
    for msg in in_hand:
        msg.ack()
    c.poll_batch(100, 0)
    member._beat()  # hands it back
    assert [u["partition"] for u in cp.claims] == [0]
