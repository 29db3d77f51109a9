"""Dead letters written to a stream's dlq lane a batch at a time, each batch settled
as a whole.

A record out of attempts settles only once its dead letter is acknowledged. Having
librdkafka report each successful write back (a Python message and a call per record,
served on the consuming thread) cost about as much as the rest of the pill: measured
with 1% poison over 1,000,000 records, ~21 us of consuming-thread CPU per pill against
~12 us with failures reported only, most of the difference in slower fetching while
the reports were being made. So the dlq's producer reports failures only, and its
writes go out in batches:

- a batch is produced in one burst, to the dlq lane's active segment: one cluster,
  through that cluster's Kafka producer;
- once that Kafka producer has nothing queued, every write of the batch was
  acknowledged or reported failed (a failure counts as queued until its report is
  served), so the batch settles together, less its failures;
- the next batch for a cluster goes out once that cluster's batch in flight is in,
  and at most every ``interval_s``: each batch is one produce request per dlq
  partition, which is what bounds the broker's CPU per dead letter.

Each cluster has a batch in flight of its own. After a failover of the dlq lane off a
cluster that is down, the batch queued for it waits for that cluster (up to
librdkafka's ``message.timeout.ms``, 5 minutes by default, then it fails and its
records are handed out again); the dead letters written since go to the new active
segment and settle as soon as its cluster acknowledges them. (With one batch in
flight for the whole writer, and its end told by the producer's queue over every
cluster, they waited behind the stuck batch, their records parked and holding their
partitions' low watermarks and time lag.) ``send_batch`` says where a batch went
(``SentBatch``), so a routing change while it is queued changes nothing here.

A failed write's report names no record (librdkafka hands its key and value back, not
its headers), so every record of its batch with that key and value counts as failed
(the report names its topic, which tells the batch: one topic per segment, so per
cluster). A failed dead letter is written again, not handed back to its owner: its
record is out of attempts, so it stays unsettled (parked, holding its partition's low
watermark) until its letter is written, while the partition's other records flow.
Writes to a topic that failed wait 1 s, then twice as long after each failure in a
row, up to 8 s (``RewriteBackoff``); letters bound for another topic (the dlq lane
failed over) do not wait. The first failure is logged at once, naming the topic and
saying when it is missing; a failure that lasts is logged again every minute, and the
end of it once. The dlq lane is at-least-once (a letter of a batch that partly failed
may be written twice), as it already is across a crash between a dead letter's write
and the next commit. (Before, a failed write handed its record out again a second
later, to the application's handler, which gave up on it again: with the dlq topic
deleted, its attempts rose past ``max_attempts`` every ~31 s for good, and the
failure was first logged 25 s after the deletion.) A write to a topic that librdkafka
knows to be missing fails as it is queued (``ProduceError``): its letters wait the same.

What is dead-lettered is logged as a summary, never a line per record: a WARNING
``stream 'orders': 12 records dead-lettered in the last 30 s, last reason: max attempts
(5) reached: KeyError: 'id'`` when the first letters are written after a quiet spell,
then at most every 30 s (``DeadLetterSummary``). The summary is checked as the writer
works (``advance``: while letters are pending), so letters written after one summary
are told with the next letters' (its "last N s" then spans the quiet time), or when the
writer closes. (An exploratory run dead-lettered 27-187 records and logged nothing of
it.)

A dead letter too large to write whole (a record another producer wrote to the lane,
over the stream's bound, or within its provenance headers of the topic's limit) is
written with its provenance alone (``provenance.provenance_only``: no key, no value,
``sp-dlq-dropped`` giving the bytes left out), so that its record settles: kept
unsettled, it was handed out again every second forever and held its partition's low
watermark (and time lag) where it was. The record stays on its origin topic, which the
provenance names, until retention.
"""

from __future__ import annotations

import logging
import math
import textwrap
import time
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from confluent_kafka import KafkaError as _RawKafkaError
from confluent_kafka import Message, Producer

from streamplane.client.producer import Record, SentBatch, StreamProducer
from streamplane.client.provenance import provenance_only
from streamplane.core.text import counted
from streamplane.exceptions import ProduceError

log = logging.getLogger(__name__)

# The wait before writing again to a topic whose writes failed: doubled after each
# failure in a row, up to the cap.
REWRITE_FIRST_S = 1.0
REWRITE_MAX_S = 8.0
# A failure that lasts is logged again this often.
_FAILURE_REPEAT_LOG_S = 60.0

# Dead letters written are logged as a summary at most this often.
DEAD_LETTER_LOG_EVERY_S = 30.0
# A summary quotes the last letter's reason up to this many characters.
_REASON_CHARS = 200

_TOO_LARGE = _RawKafkaError.MSG_SIZE_TOO_LARGE
# Errors that mean the topic written to does not exist.
_TOPIC_MISSING_CODES = frozenset(
    {_RawKafkaError.UNKNOWN_TOPIC_OR_PART, _RawKafkaError._UNKNOWN_TOPIC}
)


class RewriteBackoff:
    """When letters bound for a topic whose writes failed are written again: 1 s after
    the first failure, doubling with each failure in a row up to 8 s; a write that
    succeeds ends the run. Pure: the caller gives the time."""

    __slots__ = ("failures", "first_failed_at", "logged_at", "retry_at", "topic")

    def __init__(self) -> None:
        self.topic: str | None = None  # the topic whose writes fail, None when none does
        self.failures = 0  # failed writes (batches) in a row
        self.retry_at = 0.0
        self.first_failed_at = 0.0
        self.logged_at = 0.0

    def failed(self, topic: str, now: float) -> float:
        """A write to ``topic`` failed at ``now``: how long until the next one."""
        if topic != self.topic:
            self.topic, self.failures, self.first_failed_at = topic, 0, now
        self.failures += 1
        delay = min(REWRITE_MAX_S, REWRITE_FIRST_S * 2.0 ** (self.failures - 1))
        self.retry_at = now + delay
        return delay

    def succeeded(self, topic: str) -> bool:
        """A write to ``topic`` succeeded: was it failing until now?"""
        if topic != self.topic:
            return False
        self.topic, self.failures = None, 0
        return True

    def waits(self, topic: str, now: float) -> bool:
        """Must a write to ``topic`` wait at ``now``?"""
        return topic == self.topic and now < self.retry_at

    def should_log(self, now: float) -> bool:
        """Is a failure at ``now`` to be logged: the first of a run, then once a minute."""
        if self.failures == 1 or now - self.logged_at >= _FAILURE_REPEAT_LOG_S:
            self.logged_at = now
            return True
        return False


def failure_warning(stream: str, topic: str, error: object, letters: int, delay: float) -> str:
    """What a failed write of ``letters`` dead letters to ``topic`` is logged as."""
    code = error.code() if isinstance(error, _RawKafkaError) else None
    what = (
        f"the dlq topic {topic} of stream {stream!r} is missing (deleted?)"
        if code in _TOPIC_MISSING_CODES or "Unknown topic" in str(error)
        else f"the dlq topic {topic} of stream {stream!r} cannot be written"
    )
    return (
        f"{what} ({error}): {counted(letters, 'dead letter')} not written; their records "
        f"wait unsettled, holding their partitions' low watermarks (the partitions' other "
        f"records go on), and are written again in {delay:.0f} s (backing off up to "
        f"{REWRITE_MAX_S:.0f} s)"
    )


R = TypeVar("R")
# A dead letter: its record (what settles), the reason and the attempts it took.
Letter = tuple[R, str, int]
# What is written for a dead letter: (value, key, headers).
Write = Record
Failure = tuple[_RawKafkaError, Message]


class DeadLetterSummary:
    """The dead letters written since the last summary, told at most every
    ``DEAD_LETTER_LOG_EVERY_S``: the first ones after a quiet spell at once, the next
    once that long has passed since. Pure: the caller gives the time."""

    __slots__ = ("count", "last_reason", "logged_at", "since")

    def __init__(self) -> None:
        self.count = 0  # letters written, not told yet
        self.last_reason = ""
        self.since = 0.0  # when the first of them was written
        self.logged_at = -math.inf

    def written(self, letters: list[Letter[R]], now: float) -> None:
        if not letters:
            return
        if not self.count:
            self.since = now
        self.count += len(letters)
        self.last_reason = letters[-1][1]

    def due(self, stream: str, now: float, *, last: bool = False) -> str | None:
        """The summary to log at ``now``, if one is due (``last``: the writer closes,
        whatever is left is told)."""
        if not self.count or (not last and now - self.logged_at < DEAD_LETTER_LOG_EVERY_S):
            return None
        seconds = max(1, math.ceil(now - self.since))
        reason = textwrap.shorten(self.last_reason, _REASON_CHARS, placeholder=" ...")
        self.count, told, self.logged_at = 0, self.count, now
        return (
            f"stream {stream!r}: {counted(told, 'record')} dead-lettered in the last "
            f"{seconds} s, last reason: {reason}"
        )


# ``drain`` waits on each stuck cluster's producer at most this long at a time, so a
# batch to another cluster that comes in meanwhile is seen within it.
_DRAIN_STEP_S = 0.05


class _Batch(Generic[R]):
    """Dead letters in flight: queued in ``producers`` (their cluster's Kafka producer;
    two if the routing changed between the batch's two ``send_batch`` calls) for
    ``topics``."""

    __slots__ = ("failures", "letters", "producers", "topics")

    def __init__(
        self,
        letters: list[Letter[R]],
        producers: tuple[Producer, ...],
        topics: tuple[str, ...],
    ) -> None:
        self.letters = letters
        self.producers = producers
        self.topics = topics
        self.failures: list[Failure] = []  # reported failed writes that may be this batch's

    def queued(self) -> int:
        """Writes of its producers not done (a failure counts until its report is
        served): 0 once each of its writes was acknowledged or reported failed."""
        n = 0
        for producer in self.producers:
            n += len(producer)
        return n


class DlqWriter(Generic[R]):
    """Writes dead letters through ``producer`` (built with ``delivery_reports="errors"``)
    and says which records' writes are in. ``write_of`` gives what is written for a
    letter; it is called as its batch goes out (a waiting letter holds no more than
    its record: the headers of ~100 ms of dead letters, kept alive, slowed the
    consuming thread's allocations). Not thread-safe: its owner serialises calls."""

    def __init__(
        self,
        producer: StreamProducer,
        interval_s: float,
        write_of: Callable[[R, str, int], Write],
    ) -> None:
        self.producer = producer
        self.interval_s = interval_s
        self.write_of = write_of
        self._waiting: list[Letter[R]] = []
        # Batches not done, at most one per Kafka producer (per cluster): a cluster that
        # does not answer holds up its own batch only.
        self._in_flight: list[_Batch[R]] = []
        self._in_flight_letters = 0
        self._refused: list[R] = []  # records whose dead letter could not be queued
        # Records (by id) whose dead letter is written with its provenance alone: too
        # large to write whole. Kept until the letter is written or fails.
        self._whole_too_large: set[int] = set()
        self._next_batch_at = 0.0
        self._backoff = RewriteBackoff()
        self._summary = DeadLetterSummary()

    @property
    def pending(self) -> int:
        """Dead letters not in yet: waiting for a batch, in a batch in flight, or
        refused (to be reported failed at the next ``advance``)."""
        return len(self._waiting) + self._in_flight_letters + len(self._refused)

    def records(self) -> Iterator[R]:
        """The records of the dead letters not in yet (``pending``: waiting, in flight
        or refused)."""
        for letter in self._waiting:
            yield letter[0]
        for batch in self._in_flight:
            for letter in batch.letters:
                yield letter[0]
        yield from self._refused

    def add(self, letters: list[Letter[R]]) -> None:
        """Queue dead letters for the next batch."""
        self._waiting += letters

    def discard(self, unwanted: Callable[[R], bool]) -> None:
        """Drop waiting dead letters whose record is ``unwanted`` (written ones are out)."""
        self._waiting = [letter for letter in self._waiting if not unwanted(letter[0])]
        self._refused = [record for record in self._refused if not unwanted(record)]
        if self._whole_too_large:
            kept = {id(letter[0]) for letter in self._waiting}
            for batch in self._in_flight:
                kept.update(id(letter[0]) for letter in batch.letters)
            self._whole_too_large &= kept

    def advance(self, now: float, *, send_now: bool = False) -> tuple[list[R], list[R]]:
        """Records whose dead letter is in, as (written, failed), from each batch in
        flight that is done (each cluster's on its own); then the next batch goes out
        if it is due (at once with ``send_now``, even to a topic whose writes failed)
        and its cluster has none in flight. A letter whose write failed waits to be
        written again: ``failed`` holds only the records whose letter could not be
        queued even with its provenance alone."""
        written: list[R] = []
        failed: list[R] = []
        if self._refused:
            failed, self._refused = self._refused, []
        if self._in_flight:
            self.producer.poll(0)  # serves failure reports (every cluster's)
            done = [batch for batch in self._in_flight if not batch.queued()]
            if done:
                self._take_failures()  # a done batch's failures are all served by now
                self._in_flight = [batch for batch in self._in_flight if batch not in done]
                for batch in done:
                    letters = self._batch_done(batch, now)
                    self._summary.written(letters, now)
                    written += [letter[0] for letter in letters]
        if self._waiting and (send_now or now >= self._next_batch_at):
            topic = self.producer.active_topic()  # the dlq lane's: where the batch goes
            due = send_now or not self._backoff.waits(topic, now)
            if due and not any(topic in batch.topics for batch in self._in_flight):
                self._send(now, topic)
        summary = self._summary.due(self.producer.stream, now)
        if summary:
            log.warning(summary)
        return written, failed

    @property
    def writing(self) -> bool:
        """Is a batch in flight (its writes not all in)?"""
        return bool(self._in_flight)

    def drain(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds until a batch in flight is done (whichever
        cluster's comes in first); how many writes are still queued then (a done
        batch's records settle at the next ``advance``)."""
        if not self._in_flight:
            return 0
        deadline = time.monotonic() + timeout
        while True:
            queued = [batch.queued() for batch in self._in_flight]
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not all(queued):
                return sum(queued)
            step = min(remaining, _DRAIN_STEP_S)
            for batch in self._in_flight:  # serves their failure reports too
                for producer in batch.producers:
                    producer.flush(step)  # returns once its queue is empty

    def close(self, now: float | None = None) -> None:
        """Let the producer go without waiting: its owner waited for the dead letters it
        wanted in (``drain``); a record whose dead letter is not in stays unsettled,
        handed out again after a restart (and dead-lettered again: at-least-once). The
        dead letters written since the last summary are told now (``now``: the time on
        the clock ``advance`` is given, ``time.monotonic()`` by default)."""
        now = time.monotonic() if now is None else now
        summary = self._summary.due(self.producer.stream, now, last=True)
        if summary:
            log.warning(summary)
        try:
            self.producer.close(0.0)
        except ProduceError as exc:
            log.info("dlq producer closed with writes unfinished (%s)", exc)

    def _write(self, letter: Letter[R]) -> Write:
        """What is written for ``letter``: all of it, or its provenance alone."""
        write = self.write_of(*letter)
        return provenance_only(*write) if id(letter[0]) in self._whole_too_large else write

    def _send(self, now: float, topic: str) -> None:
        """Queue the waiting letters as one batch, to ``topic``; if it cannot be queued
        (librdkafka knows the topic to be missing), they wait to be written again."""
        batch, self._waiting = self._waiting, []
        try:
            # One write at a time (a generator): each one's headers are freed once
            # librdkafka has copied them. Built as a list, a batch's ~6 tracked objects
            # per letter lived through the collections their own allocation started,
            # and went on to the older generations.
            sent: list[SentBatch] = [
                self.producer.send_batch(self._write(letter) for letter in batch)
            ]
            refused: list[Letter[R]] = []
            if sent[0].too_large:
                stubs = [batch[i] for i in sent[0].too_large]
                self._too_large(
                    stubs,
                    "too large to write whole (over the stream's bound, or over the "
                    "producer's message.max.bytes with their provenance headers)",
                )
                sent.append(self.producer.send_batch(self._write(letter) for letter in stubs))
                # not even its provenance fits: a failed write
                refused = [stubs[i] for i in sent[1].too_large]
        except ProduceError as exc:
            # Not queued (those before the one refused may be: written twice, then).
            self._waiting = batch + self._waiting
            self._failed(topic, exc, len(batch), now)
            self._next_batch_at = now + self.interval_s
            return
        except BaseException:
            # Every letter waits for the next batch. Usually nothing was queued (the
            # producer is closed, or has no dlq lane); if produce itself raised part way,
            # the letters queued before it are written twice (at-least-once, as above).
            self._waiting = batch + self._waiting
            raise
        if refused:
            log.error(
                "%d dead letters could not be queued even with their provenance alone: "
                "their records stay unsettled and are handed out again",
                len(refused),
            )
            self._forget(refused)
            self._refused += [letter[0] for letter in refused]
            gone = {id(letter[0]) for letter in refused}
            batch = [letter for letter in batch if id(letter[0]) not in gone]
        self._next_batch_at = now + self.interval_s
        if not batch:
            return
        producers = {id(one.producer): one.producer for one in sent}
        topics = tuple({one.topic for one in sent})
        self._in_flight.append(_Batch(batch, tuple(producers.values()), topics))
        self._in_flight_letters += len(batch)

    def _too_large(self, letters: list[Letter[R]], why: str) -> None:
        """From now on, write ``letters`` with their provenance alone."""
        whole = [letter for letter in letters if id(letter[0]) not in self._whole_too_large]
        if whole:
            log.warning(
                "%d dead letters %s: written with their provenance alone (header "
                "sp-dlq-dropped); their records stay on their origin topics until retention",
                len(whole),
                why,
            )
        self._whole_too_large.update(id(letter[0]) for letter in letters)

    def _take_failures(self) -> None:
        """Hand the failures reported so far to the batches in flight they may belong
        to: those of their topic; a failure of no batch's topic, to every batch
        (failing a record that was written only writes it twice; settling one that
        failed would lose it)."""
        failures = self.producer.take_failures()
        if not failures:
            return
        in_flight = self._in_flight
        for failure in failures:
            topic = failure[1].topic()
            owners = [b for b in in_flight if topic in b.topics]
            for batch in owners or in_flight:
                batch.failures.append(failure)

    def _batch_done(self, done: _Batch[R], now: float) -> list[Letter[R]]:
        """The letters of ``done`` that were written; the others wait to be written
        again (stripped first if the broker found them too large)."""
        batch, failures = done.letters, done.failures
        self._in_flight_letters -= len(batch)
        if not failures:
            self._forget(batch)
            for topic in done.topics:
                if self._backoff.succeeded(topic):
                    log.warning(
                        "the dlq topic %s of stream %r is written again: %s in",
                        topic,
                        self.producer.stream,
                        counted(len(batch), "dead letter"),
                    )
            return batch
        lost = {(msg.value(), msg.key()) for _err, msg in failures}
        too_large = {(msg.value(), msg.key()) for err, msg in failures if err.code() == _TOO_LARGE}
        written: list[Letter[R]] = []
        again: list[Letter[R]] = []  # refused by the broker as too large: written stripped
        unwritten: list[Letter[R]] = []  # failed otherwise: written again after a while
        for letter in batch:
            value, key, _headers = self._write(letter)
            if (value, key) in too_large and id(letter[0]) not in self._whole_too_large:
                again.append(letter)
            elif (value, key) in lost:
                unwritten.append(letter)
            else:
                written.append(letter)
        if again:
            self._too_large(
                again,
                "refused by the broker as too large (each one with its provenance headers, "
                "or the batch it was written in, over the dlq topic's max.message.bytes)",
            )
        self._waiting = again + unwritten + self._waiting
        if len(again) < len(failures):
            error, msg = next(
                ((err, msg) for err, msg in failures if err.code() != _TOO_LARGE), failures[0]
            )
            self._failed(msg.topic() or done.topics[0], error, len(unwritten), now)
        self._forget(written)
        return written

    def _failed(self, topic: str, error: object, letters: int, now: float) -> None:
        """Writes of ``letters`` dead letters to ``topic`` failed with ``error``: they
        wait (backing off) and the failure is logged, at once the first time."""
        delay = self._backoff.failed(topic, now)
        if self._backoff.should_log(now):
            log.error(failure_warning(self.producer.stream, topic, error, letters, delay))

    def _forget(self, done: list[Letter[R]]) -> None:
        if self._whole_too_large:
            self._whole_too_large.difference_update(id(letter[0]) for letter in done)
