"""How poll_batch paces fetches and housekeeping (no Kafka: fetches are fed in)."""

from __future__ import annotations

from confluent_kafka import Message

from streamplane.client.consumer import _HOUSEKEEPING_EVERY, StreamConsumer
from tests.unit.client.harness import KEY, Clock, DlqBroker, stand_in_consumer

FETCH = 250


def fed_consumer(records: int) -> tuple[StreamConsumer, list[int]]:
    """A consumer whose client holds ``records`` records, fetched FETCH at a time; and
    the number of records buffered at each fetch that found any."""
    c = stand_in_consumer(DlqBroker(ack_at_poll=True), max_attempts=3, retry_backoff=0.0)
    messages = [
        Message(topic=KEY.topic, partition=0, offset=o, value=b"%d" % o, timestamp=(1, o))
        for o in range(records)
    ]
    buffered_at_fetch: list[int] = []

    def fetch(timeout: float) -> None:
        if not messages:
            return
        buffered_at_fetch.append(sum(buf.size for buf in c._buffers))
        batch = messages[:FETCH]
        del messages[:FETCH]
        c._accept(KEY.cluster, batch)

    c._fetch = fetch  # type: ignore[method-assign]
    return c, buffered_at_fetch


def test_housekeeping_runs_once_per_thousand_records_not_once_per_fetch(clock: Clock) -> None:
    c, _ = fed_consumer(8 * _HOUSEKEEPING_EVERY)
    runs = 0
    housekeeping = c._housekeeping

    def counted() -> None:
        nonlocal runs
        runs += 1
        housekeeping()

    c._housekeeping = counted  # type: ignore[method-assign]
    handed_out = 0
    while handed_out < 8 * _HOUSEKEEPING_EVERY:
        batch = c.poll_batch(500, 0)
        assert batch
        for m in batch:
            m.ack()
        handed_out += len(batch)
    # Fetches are a quarter of that: housekeeping after every fetch would run 32 times.
    assert runs <= 8 + 1


def test_a_fetch_is_handed_out_whole_when_retries_shift_the_batches(clock: Clock) -> None:
    """Retries joining the batches move housekeeping off fetch boundaries; still no
    fetch is left partly buffered when the next one comes (each record buffered or
    handed out is a tracked object: see ``_FETCH_BATCH``)."""
    c, buffered_at_fetch = fed_consumer(20_000)
    good = nacked = 0
    while good < 20_000 - 200:
        batch = c.poll_batch(500, 0)
        assert sum(buf.size for buf in c._buffers) == 0  # what was fetched went out
        for m in batch:
            if m.offset % 100 == 0:
                m.nack("poison")
                nacked += 1
            else:
                m.ack()
                good += 1
    assert nacked > 200  # retries did come back into the batches
    assert len(buffered_at_fetch) == 20_000 // FETCH
    assert max(buffered_at_fetch) < FETCH
