"""Corner cases of handing back a unit the Assigner asked for (``StreamConsumer`` over
``harness``, with a ``GroupMembership`` whose control plane is a stand-in; the setting of
``test_release_in_hand``).

Found by a review of the hand-over: a unit was handed back although its last commit
had failed (its acks lost), or while the dead letter of a record of it was still being
written (the record handled again by the next holder); a failed commit of a unit being
handed back was never tried again; a unit handed back while the answer keeping it here
was on its way was read again here and given to another member too; and a unit kept,
then asked back again, was handed back at the first ask's deadline."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from streamplane.client.consumer import StreamConsumer
from streamplane.client.membership import GroupMembership, unit_json
from streamplane.core.commitlog import PartitionProgress
from streamplane.exceptions import KafkaError
from tests.unit.client.harness import Clock, DlqBroker
from tests.unit.client.test_release_in_hand import (
    P0,
    P1,
    Assigner,
    Commits,
    Fetcher,
    member_of,
    record,
)


class FailingCommits(Commits):
    """Commits of partition 1 fail while ``failing`` is set (its coordinator moving)."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False
        self.failures = 0

    def commit(self, items: list[tuple[str, int, PartitionProgress]]) -> None:
        if self.failing and any(p == 1 for _, p, _ in items):
            self.failures += 1
            raise KafkaError("NOT_COORDINATOR")
        super().commit(items)

    def load(self, tps: list[tuple[str, int]], timeout_s: float = 30.0) -> dict[Any, Any]:
        """Where each partition starts: its last commit (a unit read afresh)."""
        out: dict[Any, Any] = {}
        for topic, p in tps:
            last = self.last(p)
            out[(topic, p)] = (last, last.low_watermark if last else None)
        return out


class Refetcher(Fetcher):
    """A fetching client that can be given a partition again."""

    def incremental_assign(self, partitions: object) -> None: ...


def rereading_member_of(
    cp: Assigner,
) -> tuple[StreamConsumer, GroupMembership, FailingCommits]:
    """``member_of`` whose commits can fail, and which can read a unit afresh."""
    c, member, _ = member_of(cp)
    commits = FailingCommits()
    c._commit_stores["local-a"] = commits  # type: ignore[assignment]
    c._consumers = {("local-a", 0): Refetcher()}  # type: ignore[dict-item]
    return c, member, commits


def test_a_unit_whose_commit_fails_is_handed_back_once_it_is_committed(
    member_clock: Clock,
) -> None:
    """Its acks go to Kafka before the next holder reads it: the unit is kept (not read)
    and committed again at each housekeeping. Before, it was handed back with the
    failure only recorded: the next holder handled its 10 acked records again."""
    cp = Assigner([P0, P1])
    c, member, commits = rereading_member_of(cp)
    in_hand = c.poll_batch(100, 0)
    cp.ask_back(P1)
    member._beat()
    member_clock.now += 0.1
    c.poll_batch(100, 0)  # P1 being handed back, its 10 records in hand
    commits.failing = True
    for msg in in_hand[10:]:
        msg.ack()
    for _ in range(2):
        member_clock.now += 0.1
        assert c.poll_batch(100, 0) == []
    assert commits.failures == 2  # tried again at the next housekeeping
    assert member._released == set() and commits.last(1) is None
    assert P1 in c._releasing
    commits.failing = False  # the coordinator is back
    member_clock.now += 0.1
    c.poll_batch(100, 0)
    assert member._released == {P1}
    last = commits.last(1)
    assert last is not None and last.low_watermark == 10


def test_a_unit_whose_commits_keep_failing_is_handed_back_at_its_release_deadline(
    member_clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """The Assigner moves it then anyway: handed back, and said so."""
    cp = Assigner([P0, P1])
    c, member, commits = rereading_member_of(cp)
    in_hand = c.poll_batch(100, 0)
    cp.ask_back(P1)
    member._beat()
    deadline = member.release_deadline(P1)
    assert deadline is not None
    member_clock.now += 0.1
    c.poll_batch(100, 0)
    commits.failing = True
    for msg in in_hand[10:]:
        msg.ack()
    member_clock.now = deadline - 0.01
    c.poll_batch(100, 0)
    assert member._released == set()
    member_clock.now = deadline
    with caplog.at_level(logging.WARNING, logger="streamplane.client.consumer"):
        c.poll_batch(100, 0)
    assert member._released == {P1} and P1 not in c._releasing
    assert commits.last(1) is None
    assert "although their last commit failed" in caplog.text


def test_a_failed_periodic_commit_of_a_unit_being_handed_back_is_sent_again(
    member_clock: Clock,
) -> None:
    """A periodic commit of a unit being handed back fails; nothing of the unit changes
    after it (its last record in hand was one ``run`` never started). Its acks are in
    the commit made before it is handed back. Before, the failure was dropped (looked
    for among the units read only) and the unit handed back with nothing committed."""
    cp = Assigner([P0, P1])
    c, member, commits = rereading_member_of(cp)
    in_hand = c.poll_batch(100, 0)
    cp.ask_back(P1)
    member._beat()
    member_clock.now += 0.1
    c.poll_batch(100, 0)
    p1 = in_hand[10:]
    for msg in p1[:9]:
        msg.ack()
    commits.failing = True
    c.commit()  # a periodic commit of P1's 9 acks fails
    commits.failing = False  # the coordinator is back
    c._not_started(p1[9])  # queued for run's threads, never started
    member_clock.now += 0.1
    c.poll_batch(100, 0)
    assert member._released == {P1}
    last = commits.last(1)
    assert last is not None and last.low_watermark == 9  # offset 9 is the next holder's


def test_a_unit_is_handed_back_once_the_dead_letter_of_its_rejected_record_is_in(
    member_clock: Clock,
) -> None:
    """The record's settlement is in the unit's last commit, so the next holder does not
    handle (and dead-letter) it again. Before, the unit was handed back as the letter
    went out; the letter was written after, and its record's settlement never
    committed."""
    cp = Assigner([P0, P1])
    c, member, commits = member_of(cp)
    broker: DlqBroker = c._dlq.producer._producers["local-a"]  # type: ignore[union-attr,assignment]
    in_hand = c.poll_batch(100, 0)
    cp.ask_back(P1)
    member._beat()
    member_clock.now += 0.1
    c.poll_batch(100, 0)
    for msg in in_hand[10:]:
        if msg.offset == 5:
            msg.reject("poison")  # to the dlq lane
        else:
            msg.ack()
    member_clock.now += 0.1
    c.poll_batch(100, 0)  # the dead letter goes out
    assert len(broker.pending) == 1
    assert member._released == set() and P1 in c._releasing
    broker.deliver()
    member_clock.now += 0.1
    c.poll_batch(100, 0)
    assert len(broker.written) == 1
    assert member._released == {P1}
    last = commits.last(1)
    assert last is not None and last.low_watermark == 10


class RacingAssigner(Assigner):
    """Runs ``during`` while a heartbeat is on its way (its answer not applied yet)."""

    during: Any = None

    def group_heartbeat(self, *args: object, **kwargs: Any) -> dict[str, Any]:
        answer = super().group_heartbeat(*args, **kwargs)
        if self.during is not None:
            during, self.during = self.during, None
            during()
        return answer


def test_a_unit_handed_back_is_read_again_only_once_an_answer_to_its_hand_back_says_so(
    member_clock: Clock,
) -> None:
    """The Assigner keeps a unit after all (the joiner left) while the consumer hands it
    back: the answer keeping it is on its way as the unit is handed back. That answer
    is out of date for the unit; the next heartbeat hands it back (the Assigner frees
    it, and may give it to another member). Only the answer to that heartbeat says
    whether it is ours. Before, the unit was read again at once from the out-of-date
    answer: read here while the Assigner placed it on another member."""
    cp = RacingAssigner([P0, P1])
    c, member, commits = rereading_member_of(cp)
    in_hand = c.poll_batch(100, 0)
    cp.ask_back(P1)
    member._beat()
    member_clock.now += 0.1
    c.poll_batch(100, 0)  # P1 being handed back
    for msg in in_hand:
        msg.ack()
    cp.units, cp.release = [P0, P1], []  # kept after all
    cp.during = lambda: c.poll_batch(100, 0)  # hands P1 back meanwhile
    member._beat()
    assert member._released == {P1}
    assert member.assignment() == (frozenset({P0}), frozenset())  # not said of P1 since
    member_clock.now += 0.1
    c.poll_batch(100, 0)
    c._accept(P1.cluster, [record(1, o) for o in range(10, 15)])
    assert c.poll_batch(100, 0) == []  # nothing of P1
    assert c.assignment() == [P0]
    member._beat()  # hands P1 back; the Assigner gives it to us again
    assert cp.handed_back == [unit_json(P1)]
    assert [u["partition"] for u in cp.claims] == [0]
    assert member.assignment() == (frozenset({P0, P1}), frozenset())
    member_clock.now += 0.1
    c.poll_batch(100, 0)  # read afresh from its commit
    c._accept(P1.cluster, [record(1, o) for o in range(10, 15)])
    again = c.poll_batch(100, 0)
    assert [(m.partition, m.offset) for m in again] == [(1, o) for o in range(10, 15)]
    last = commits.last(1)
    assert last is not None and last.low_watermark == 10


def test_a_unit_kept_after_all_is_read_again_once_its_records_in_hand_are_back(
    member_clock: Clock,
) -> None:
    """Asked back, then kept: nobody else reads it, so it waits for its record in hand
    however long that takes, then is read afresh. Before, at the first ask's deadline
    it was read afresh with that record still in hand (handed out again here)."""
    cp = Assigner([P0, P1])
    c, member, commits = rereading_member_of(cp)
    in_hand = c.poll_batch(100, 0)
    for msg in in_hand[:19]:
        msg.ack()  # P1's offset 9 stays in hand (a slow handler)
    cp.ask_back(P1)
    member._beat()
    deadline = member.release_deadline(P1)
    assert deadline is not None
    member_clock.now += 0.1
    c.poll_batch(100, 0)
    cp.units, cp.release = [P0, P1], []
    member._beat()  # kept
    member_clock.now = deadline + 1
    c.poll_batch(100, 0)
    assert P1 in c._releasing and P1 not in c._states and P1 not in c._loading
    assert member._released == set()
    in_hand[19].ack()
    member_clock.now += 0.1
    c.poll_batch(100, 0)  # committed
    assert P1 not in c._releasing and member._released == set()
    member_clock.now += 0.1
    c.poll_batch(100, 0)  # read afresh
    c._accept(P1.cluster, [record(1, o) for o in range(10, 12)])
    assert [(m.partition, m.offset) for m in c.poll_batch(100, 0)] == [(1, 10), (1, 11)]
    last = commits.last(1)
    assert last is not None and last.low_watermark == 10


def test_a_unit_kept_then_asked_back_again_is_handed_back_by_the_later_deadline(
    member_clock: Clock,
) -> None:
    """The Assigner's deadline runs from its last ask: at the first ask's deadline the
    unit is still being handed back (its record in hand), at the second's it goes.
    Before, it went at the first, ~3 s early, with a record in hand."""
    cp = Assigner([P0, P1])
    c, member, _ = member_of(cp)
    in_hand = c.poll_batch(100, 0)
    for msg in in_hand[:19]:
        msg.ack()  # P1's offset 9 stays in hand
    member_clock.now += 0.3
    cp.ask_back(P1)
    member._beat()  # first ask
    first = member.release_deadline(P1)
    member_clock.now += 0.1
    c.poll_batch(100, 0)
    member_clock.now += 3.0
    cp.units, cp.release = [P0, P1], []
    member._beat()  # kept
    member_clock.now += 0.1
    c.poll_batch(100, 0)
    member_clock.now += 2.9
    cp.ask_back(P1)
    member._beat()  # asked back again
    second = member.release_deadline(P1)
    assert first is not None and second is not None and second > first + 3
    member_clock.now = first + 0.01
    c.poll_batch(100, 0)
    assert member._released == set() and P1 in c._releasing
    member_clock.now = second
    c.poll_batch(100, 0)
    assert member._released == {P1} and P1 not in c._releasing
