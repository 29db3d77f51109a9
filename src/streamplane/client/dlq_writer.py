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
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, TypeVar

from streamplane.client.producer import Record, StreamProducer
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

    def _send(self, now: float) -> None:
        batch, self._waiting = self._waiting, []
        write_of = self.write_of
        try:
            # One write at a time (a generator): each one's headers are freed once
            # librdkafka has copied them. Built as a list, a batch's ~6 tracked objects
            # per letter lived through the collections their own allocation started,
            # and went on to the older generations.
            too_large = self.producer.send_batch(write_of(*letter) for letter in batch)
        except BaseException:
            # Every letter waits for the next batch. Usually nothing was queued (the
            # producer is closed, or has no dlq lane); if produce itself raised part way,
            # the letters queued before it are written twice (at-least-once, as above).
            self._waiting = batch + self._waiting
            raise
        if too_large:
            refused = set(too_large)
            log.error(
                "%d dead letters exceed the stream's record bound and were not written: "
                "their records stay unsettled and are handed out again",
                len(refused),
            )
            self._refused += [batch[i][0] for i in too_large]
            batch = [letter for i, letter in enumerate(batch) if i not in refused]
        self._in_flight = batch
        self._next_batch_at = now + self.interval_s

    def _batch_done(self) -> tuple[list[R], list[R]]:
        batch, self._in_flight = self._in_flight, []
        failures = self.producer.take_failures()
        if not failures:
            return [letter[0] for letter in batch], []
        lost = {(msg.value(), msg.key()) for _err, msg in failures}
        written: list[R] = []
        failed: list[R] = []
        for letter in batch:
            value, key, _headers = self.write_of(*letter)
            (failed if (value, key) in lost else written).append(letter[0])
        log.warning(
            "%d dlq writes failed (first: %s): %d records will be handed out again",
            len(failures),
            failures[0][0],
            len(failed),
        )
        return written, failed
