"""Dead letters written to a stream's dlq lane a batch at a time, each batch settled
as a whole.

A record out of attempts settles only once its dead letter is acknowledged. Having
librdkafka report each successful write back (a Python message and a call per record,
served on the consuming thread) cost about as much as the rest of the pill: measured
with 1% poison over 1,000,000 records, ~21 us of consuming-thread CPU per pill against
~12 us with failures reported only, most of the difference in slower fetching while
the reports were being made. So the dlq's producer reports failures only, and its
writes go out in batches:

- a batch is produced in one burst;
- once the producer has nothing queued, every write of the batch was acknowledged or
  reported failed (a failure counts as queued until its report is served), so the
  batch settles together, less its failures;
- the next batch goes out once the previous one is in, and at most every
  ``interval_s``: each batch is one produce request per dlq partition, which is what
  bounds the broker's CPU per dead letter.

A failed write's report names no record (librdkafka hands its key and value back, not
its headers), so every record of the batch with that key and value is reported
failed: its owner (the consumer) hands it out again, and dead-letters it again when
the application gives up on it again. The dlq lane is at-least-once, as it already is
across a crash between a dead letter's write and the next commit.

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
from collections.abc import Callable
from typing import Generic, TypeVar

from confluent_kafka import KafkaError as _RawKafkaError

from streamplane.client.producer import Record, StreamProducer
from streamplane.client.provenance import provenance_only
from streamplane.exceptions import ProduceError

log = logging.getLogger(__name__)

R = TypeVar("R")
# A dead letter: its record (what settles), the reason and the attempts it took.
Letter = tuple[R, str, int]
# What is written for a dead letter: (value, key, headers).
Write = Record


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
        self._in_flight: list[Letter[R]] = []
        self._refused: list[R] = []  # records whose dead letter could not be queued
        # Records (by id) whose dead letter is written with its provenance alone: too
        # large to write whole. Kept until the letter is written or fails.
        self._whole_too_large: set[int] = set()
        self._next_batch_at = 0.0

    @property
    def pending(self) -> int:
        """Dead letters not in yet: waiting for a batch, in the one in flight, or
        refused (to be reported failed at the next ``advance``)."""
        return len(self._waiting) + len(self._in_flight) + len(self._refused)

    def add(self, letters: list[Letter[R]]) -> None:
        """Queue dead letters for the next batch."""
        self._waiting += letters

    def discard(self, unwanted: Callable[[R], bool]) -> None:
        """Drop waiting dead letters whose record is ``unwanted`` (written ones are out)."""
        self._waiting = [letter for letter in self._waiting if not unwanted(letter[0])]
        self._refused = [record for record in self._refused if not unwanted(record)]
        if self._whole_too_large:
            self._whole_too_large &= {id(letter[0]) for letter in self._waiting + self._in_flight}

    def advance(self, now: float, *, send_now: bool = False) -> tuple[list[R], list[R]]:
        """Records whose dead letter is in, as (written, failed), once the batch in
        flight is done; then the next batch goes out if it is due (at once with
        ``send_now``)."""
        written: list[R] = []
        failed: list[R] = []
        if self._refused:
            failed, self._refused = self._refused, []
        if self._in_flight:
            self.producer.poll(0)  # serves failure reports
            if self.producer.queued():
                return written, failed
            written, lost = self._batch_done()
            failed += lost
        if self._waiting and (send_now or now >= self._next_batch_at):
            self._send(now)
        return written, failed

    def drain(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for the batch in flight; how many of its
        writes are still queued (its records settle at the next ``advance``)."""
        return self.producer.drain(timeout) if self._in_flight else 0

    def close(self) -> None:
        """Let the producer go without waiting: its owner waited for the dead letters it
        wanted in (``drain``); a record whose dead letter is not in stays unsettled,
        handed out again after a restart (and dead-lettered again: at-least-once)."""
        try:
            self.producer.close(0.0)
        except ProduceError as exc:
            log.info("dlq producer closed with writes unfinished (%s)", exc)

    def _write(self, letter: Letter[R]) -> Write:
        """What is written for ``letter``: all of it, or its provenance alone."""
        write = self.write_of(*letter)
        return provenance_only(*write) if id(letter[0]) in self._whole_too_large else write

    def _send(self, now: float) -> None:
        batch, self._waiting = self._waiting, []
        try:
            # One write at a time (a generator): each one's headers are freed once
            # librdkafka has copied them. Built as a list, a batch's ~6 tracked objects
            # per letter lived through the collections their own allocation started,
            # and went on to the older generations.
            too_large = self.producer.send_batch(self._write(letter) for letter in batch)
            refused: list[Letter[R]] = []
            if too_large:
                stubs = [batch[i] for i in too_large]
                self._too_large(stubs, "over the stream's bound")
                refused = [  # not even its provenance fits: a failed write
                    stubs[i]
                    for i in self.producer.send_batch(self._write(letter) for letter in stubs)
                ]
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
        self._in_flight = [letter for letter in batch if id(letter[0]) not in gone]
        self._next_batch_at = now + self.interval_s

    def _too_large(self, letters: list[Letter[R]], why: str) -> None:
        """From now on, write ``letters`` with their provenance alone."""
        whole = [letter for letter in letters if id(letter[0]) not in self._whole_too_large]
        if whole:
            log.warning(
                "%d dead letters too large to write whole (%s): written with their "
                "provenance alone (header sp-dlq-dropped); their records stay on their "
                "origin topics until retention",
                len(whole),
                why,
            )
        self._whole_too_large.update(id(letter[0]) for letter in letters)

    def _batch_done(self) -> tuple[list[R], list[R]]:
        batch, self._in_flight = self._in_flight, []
        failures = self.producer.take_failures()
        if not failures:
            self._forget(batch)
            return [letter[0] for letter in batch], []
        lost = {(msg.value(), msg.key()) for _err, msg in failures}
        too_large = {
            (msg.value(), msg.key())
            for err, msg in failures
            if err.code() == _RawKafkaError.MSG_SIZE_TOO_LARGE
        }
        written: list[R] = []
        failed: list[R] = []
        again: list[Letter[R]] = []  # refused by the broker as too large: written stripped
        for letter in batch:
            value, key, _headers = self._write(letter)
            if (value, key) in too_large and id(letter[0]) not in self._whole_too_large:
                again.append(letter)
            else:
                (failed if (value, key) in lost else written).append(letter[0])
        if again:
            self._too_large(again, "refused by the broker")
            self._waiting = again + self._waiting
        if len(again) < len(failures):
            log.warning(
                "%d dlq writes failed (first: %s): %d records will be handed out again",
                len(failures),
                failures[0][0],
                len(failed),
            )
        retried = {id(letter[0]) for letter in again}
        self._forget([letter for letter in batch if id(letter[0]) not in retried])
        return written, failed

    def _forget(self, done: list[Letter[R]]) -> None:
        if self._whole_too_large:
            self._whole_too_large.difference_update(id(letter[0]) for letter in done)
