"""A member whose lease may have run out hands nothing out until a heartbeat answers
(``StreamConsumer`` over ``harness``, with a ``GroupMembership`` whose control plane
is a stand-in and whose clock is the test's).

Found by an exploratory run: two members of a group, one stopped (SIGSTOP) for 6 s
and then continued, handed out 729 records of its prefetch buffer within 0.5 s that
the other member, given its units meanwhile, had already handled. Only its commits
were fenced; its records kept going to the application."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from confluent_kafka import Message

from streamplane.client.consumer import StreamConsumer
from streamplane.client.membership import GroupMembership, unit_json
from streamplane.client.partition_state import PartitionKey
from streamplane.core.commitlog import PartitionProgress
from streamplane.core.routing import new_routing_table
from streamplane.exceptions import ControlPlaneError, ControlPlaneUnavailable, Unauthorized
from tests.unit.client.harness import KEY, Clock, DlqBroker, NoKafka, stand_in_consumer

P0 = PartitionKey(KEY.cluster, KEY.topic, 0)
P1 = PartitionKey(KEY.cluster, KEY.topic, 1)
LEASE_S = 1.5


class Fetcher(NoKafka):
    def incremental_unassign(self, partitions: object) -> None: ...


class Commits:
    """The cluster's commit store: what was committed, by partition."""

    def __init__(self) -> None:
        self.committed: list[tuple[str, int, PartitionProgress]] = []

    def commit(self, items: list[tuple[str, int, PartitionProgress]]) -> None:
        self.committed += items


class ControlPlane:
    """The Assigner's answers: ``units`` with a lease of LEASE_S, or ``error`` raised.
    Each heartbeat sets ``stop`` (the membership's, once ``beat`` runs its loop)."""

    def __init__(self, units: list[PartitionKey]) -> None:
        self.units = units
        self.joined = False  # the answer says the member was admitted (again)
        self.error: Exception | None = None
        self.beats = 0
        self.stop = threading.Event()

    def group_heartbeat(self, *args: object, **kwargs: object) -> dict[str, Any]:
        self.beats += 1
        self.stop.set()
        if self.error is not None:
            raise self.error
        return {
            "work_units": [unit_json(k) for k in self.units],
            "release": [],
            "lease_s": LEASE_S,
            "generation": self.beats,
            "joined": self.joined,
        }


def record(partition: int, offset: int) -> Message:
    return Message(
        topic=KEY.topic, partition=partition, offset=offset, value=b"v", timestamp=(1, offset)
    )


def beat(member: GroupMembership) -> None:
    """One turn of the membership's heartbeat loop (its thread's code, woken at once;
    the control plane's answer stops it after the one heartbeat)."""
    member._stop.clear()
    member._wake.set()
    loop = threading.Thread(target=member._run)
    loop.start()
    loop.join(10)
    assert not loop.is_alive()


def member_of(cp: ControlPlane) -> tuple[StreamConsumer, GroupMembership, Commits]:
    """A two-partition consumer (10 records fetched on each) whose membership's first
    heartbeat has been answered now (its heartbeat thread is not started: the tests
    beat with ``beat``)."""
    c = stand_in_consumer(DlqBroker(), partitions=2)
    c._consumers = {("local-a", 0): Fetcher()}  # type: ignore[dict-item]
    commits = Commits()
    c._commit_stores["local-a"] = commits  # type: ignore[assignment]
    c._watcher._table = new_routing_table("s", ["default"], "local-a", 2)
    member = GroupMembership(cp, "g", "s", ["default"], load=lambda: (0.0, 0.0, []))  # type: ignore[arg-type]
    member._beat()
    member.changed.clear()
    cp.stop = member._stop
    c._membership = member
    c._accept(KEY.cluster, [record(p, o) for p in (0, 1) for o in range(10)])
    return c, member, commits


def test_a_member_whose_lease_lapsed_hands_out_nothing_until_a_heartbeat_answers(
    member_clock: Clock,
) -> None:
    """Then the records buffered for the units it lost meanwhile are dropped (their
    new holder reads them) and its stale state of them is not committed; the units it
    kept go on where they were."""
    cp = ControlPlane([P0, P1])
    c, member, commits = member_of(cp)
    first = c.poll_batch(4, 0)
    assert [(m.partition, m.offset) for m in first] == [(0, 0), (0, 1), (0, 2), (0, 3)]
    for m in first:
        m.ack()
    member_clock.now += 6.0  # stopped (SIGSTOP) for 6 s: the lease ran out meanwhile
    assert c.poll_batch(100, 0) == []  # not the 16 records still buffered
    assert member._wake.is_set()  # the heartbeat thread is woken to beat at once
    cp.units = [P0]  # P1 went to another member meanwhile
    beat(member)
    got = c.poll_batch(100, 0)
    assert [(m.partition, m.offset) for m in got] == [(0, o) for o in range(4, 10)]
    assert c.assignment() == [P0]
    c.commit()
    assert [(topic, p) for topic, p, _ in commits.committed] == [(KEY.topic, 0)]
    assert P1 not in member._released  # not ours to hand back


def test_a_single_member_keeps_its_buffered_records_once_the_heartbeat_answers(
    member_clock: Clock,
) -> None:
    """The Assigner gives a member that comes back alone its units again: nothing is
    dropped or handed out twice, only held back for the heartbeat's round trip."""
    cp = ControlPlane([P0, P1])
    c, member, _ = member_of(cp)
    member_clock.now += 6.0
    assert c.poll_batch(100, 0) == []
    beat(member)
    got = c.poll_batch(100, 0)
    assert sorted((m.partition, m.offset) for m in got) == [
        (p, o) for p in (0, 1) for o in range(10)
    ]
    assert not member.changed.is_set() and c.assignment() == [P0, P1]


def test_units_given_back_after_the_lease_expired_are_read_afresh(
    member_clock: Clock,
) -> None:
    """The control plane had expired the member (another one may have held its units and
    committed past its buffer) and admits it again with both units: the buffered records
    are dropped, not handed out, and the units are read afresh from their commits. They
    used to look kept: the answer listed the units the member already held."""
    cp = ControlPlane([P0, P1])
    c, member, commits = member_of(cp)
    first = c.poll_batch(4, 0)
    for m in first:
        m.ack()
    member_clock.now += 6.0
    assert c.poll_batch(100, 0) == []
    cp.joined = True
    beat(member)
    assert c.poll_batch(100, 0) == []  # not the 16 stale records
    assert c.assignment() == []  # both units are being loaded again
    assert set(c._loading) == {P0, P1}
    assert commits.committed == []  # the stale state is not committed
    assert not member._released  # both are still ours
    assert member.take_regranted() == frozenset()  # taken by the consumer


def test_the_first_answer_admits_a_member_without_regranting(member_clock: Clock) -> None:
    cp = ControlPlane([P0, P1])
    cp.joined = True
    member = GroupMembership(cp, "g", "s", ["default"], load=lambda: (0.0, 0.0, []))  # type: ignore[arg-type]
    member._beat()
    assert member.owned == {P0, P1} and member.take_regranted() == frozenset()


@pytest.mark.parametrize(
    ("error", "flowing"),
    [
        (ControlPlaneUnavailable("control plane at x is unreachable"), True),  # fail-static
        (ControlPlaneError("not the leader (leadership is moving)", status=503), True),
        (ControlPlaneError("invalid heartbeat", status=400), False),  # refused: no lease
    ],
)
def test_records_keep_flowing_past_the_lease_only_while_the_assigner_is_away(
    member_clock: Clock, error: Exception, flowing: bool
) -> None:
    """Fail-static: with the control plane unreachable (or answering that the Assigner
    cannot answer now, during a leadership move) the member keeps its units and hands
    their records out. Refused heartbeats renew nothing: it waits."""
    cp = ControlPlane([P0, P1])
    c, member, _ = member_of(cp)
    member_clock.now += 0.3
    cp.error = error
    beat(member)
    member_clock.now += 6.0
    beat(member)  # failing all along
    member._wake.clear()
    got = c.poll_batch(100, 0)
    assert len(got) == (20 if flowing else 0)
    # A heartbeat was just sent: polling does not ask for another one before its
    # answer could have renewed the lease (no storm of heartbeats while refused).
    assert not member._wake.is_set()
    if not flowing:
        member_clock.now += LEASE_S
        assert c.poll_batch(100, 0) == []
        assert member._wake.is_set()


def test_a_refused_token_ends_the_consumer_once_its_lease_has_run_out(
    member_clock: Clock,
) -> None:
    """The token was rotated on the control plane (403 to every heartbeat): waiting
    cures nothing, and the consumer handed out nothing for good, raising nothing, while
    its lag read OK (an operator's exploratory run). Once its lease has run out, a poll
    raises ``Unauthorized`` saying what happened and what to do."""
    cp = ControlPlane([P0, P1])
    c, member, _ = member_of(cp)
    member_clock.now += 0.3
    cp.error = Unauthorized("wrong API token", status=403)
    beat(member)
    assert len(c.poll_batch(100, 0)) == 20  # within the lease: its units are still its own
    member_clock.now += 6.0
    beat(member)
    with pytest.raises(Unauthorized, match="refuses this consumer's heartbeats") as raised:
        c.poll_batch(100, 0)
    assert raised.value.status == 403
    assert "--previous-token" in str(raised.value)
    cp.error = None  # the old token accepted again: the next answer clears the refusal
    beat(member)
    assert member.refused is None
