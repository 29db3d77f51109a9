"""``run(handler, concurrency=N, key_ordered=True)`` (``StreamConsumer`` over
``harness``).

Found by an exploratory run (an application following docs/client.md): a record
waiting behind its key held one of run's 2 * concurrency slots, so one slow key's
queued records took them all and every other key crawled (~400 -> ~25 records/s, 7
of 8 threads idle); records without a key were handled one at a time across all
partitions; and after ``stop``, run went on with every queued record of a key (15.5 s
after stop, against 1.0 s unordered)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from confluent_kafka import Message

from streamplane.client.consumer import StreamConsumer, StreamMessage
from tests.unit.client.harness import KEY, DlqBroker, stand_in_consumer

HOT = b"hot"


def keyed(offset: int, key: bytes | None) -> Message:
    return Message(
        topic=KEY.topic, partition=0, offset=offset, key=key, value=b"v", timestamp=(1, offset)
    )


def consumer_with_keys(key_of: Callable[[int], bytes | None], records: int) -> StreamConsumer:
    """A one-partition consumer that has fetched ``records`` records, keyed by ``key_of``."""
    c = stand_in_consumer(DlqBroker(ack_at_poll=True))
    c._accept(KEY.cluster, [keyed(o, key_of(o)) for o in range(records)])
    return c


def run_in_thread(
    c: StreamConsumer, handler: Callable[[StreamMessage], None], **kw: object
) -> None:
    """``c.run(handler, key_ordered=True, **kw)`` with a hang guard."""
    errors: list[BaseException] = []

    def go() -> None:
        try:
            c.run(handler, key_ordered=True, **kw)  # type: ignore[arg-type]
        except BaseException as exc:
            errors.append(exc)

    runner = threading.Thread(target=go, daemon=True)
    runner.start()
    runner.join(60)
    assert not runner.is_alive(), "run did not return"
    assert not errors, errors


def test_a_slow_key_does_not_hold_up_the_other_keys() -> None:
    """Every 5th record is of one hot key, whose first record waits until the others'
    records are handled (up to 3 s, a guard): they are, while the hot key's 19 other
    records wait behind it. Before, those 19 held all 4 slots (concurrency 2): nothing
    else was handed out until the hot record gave up waiting."""
    total = 100
    c = consumer_with_keys(lambda o: HOT if o % 5 == 0 else b"k%d" % (o % 3), total)
    cold_total = total - total // 5
    cold_done = threading.Event()
    order: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()
    gave_up: list[int] = []

    def handler(msg: StreamMessage) -> None:
        if msg.key == HOT and msg.offset == 0 and not cold_done.wait(3.0):
            gave_up.append(msg.offset)
        with lock:
            order.append("hot" if msg.key == HOT else "cold")
            if order.count("cold") == cold_total:
                cold_done.set()
            if len(order) == total:
                stop.set()

    run_in_thread(c, handler, concurrency=2, stop=stop)
    assert not gave_up, "the other keys were held up behind the slow key"
    assert order.count("cold") == cold_total and order.count("hot") == total // 5
    assert order.index("hot") == cold_total  # every other record before the first hot one


def test_a_stuck_key_is_bounded_by_the_partitions_in_flight_window() -> None:
    """Records waiting behind their key take no slot, so memory is bounded by the
    in-flight window instead: a key stuck on its first record has its records taken
    until the partition holds ``max_in_flight`` unsettled ones, then the partition is
    paused and no more are taken. (Before, run stopped taking records at 4, with
    concurrency 2, whatever their keys.)"""
    c = stand_in_consumer(DlqBroker(ack_at_poll=True))
    c.max_in_flight = 200
    state = c._states[KEY]
    fed = [0]

    def fetch(timeout: float) -> None:  # ten records at a time, until paused
        if not state.paused and fed[0] < 5000:
            first = fed[0]
            fed[0] += 10
            c._accept(KEY.cluster, [keyed(o, HOT) for o in range(first, first + 10)])

    c._fetch = fetch  # type: ignore[method-assign]
    release = threading.Event()
    paused_at: list[int] = []
    stop = threading.Event()

    def handler(msg: StreamMessage) -> None:
        if msg.offset == 0:
            for _ in range(1000):  # a guard: 10 s
                if state.paused:
                    paused_at.append(fed[0])
                    break
                release.wait(0.01)
        if msg.offset == fed[0] - 1 and len(paused_at) == 1:
            paused_at.append(fed[0])
            stop.set()

    run_in_thread(c, handler, concurrency=2, stop=stop)
    assert paused_at, "the partition was never paused: run stopped taking records first"
    # Housekeeping checks the window every 1,000 records or 50 ms: a little past it.
    assert 200 <= paused_at[0] <= 200 + 1000


def test_records_without_a_key_are_not_ordered() -> None:
    """Key None is no key: such records (Kafka spreads them over the partitions) run
    in parallel, while keyed records next to them stay one at a time, in offset order.
    Record 0 waits for record 2, both without a key (up to 3 s, a guard); before, they
    were handled one at a time, as records of one key, and record 0 gave up."""
    total = 60
    c = consumer_with_keys(lambda o: None if o % 2 == 0 else b"k%d" % (o % 3), total)
    two_done = threading.Event()
    gave_up: list[int] = []
    handled: list[tuple[bytes | None, int]] = []
    running: dict[bytes, int] = {}
    overlap: list[int] = []
    lock = threading.Lock()
    stop = threading.Event()

    def handler(msg: StreamMessage) -> None:
        key = msg.key
        if msg.offset == 0 and not two_done.wait(3.0):
            gave_up.append(0)
        if msg.offset == 2:
            two_done.set()
        if key is not None:
            with lock:
                running[key] = running.get(key, 0) + 1
                if running[key] > 1:
                    overlap.append(msg.offset)
            threading.Event().wait(0.001)
            with lock:
                running[key] -= 1
        with lock:
            handled.append((key, msg.offset))
            if len(handled) == total:
                stop.set()

    run_in_thread(c, handler, concurrency=4, stop=stop)
    assert not gave_up, "records without a key were handled one at a time"
    assert sorted(o for _, o in handled) == list(range(total))
    assert not overlap, "records of one key ran at the same time"
    for key in (b"k0", b"k1", b"k2"):
        offsets = [o for k, o in handled if k == key]
        assert offsets and offsets == sorted(offsets)


def test_after_stop_a_key_starts_no_more_of_its_queued_records() -> None:
    """Once ``stop`` is set, a key's queued records are not started: run returns, and
    they are unsettled, put back in order for the next poll (read again after a
    restart otherwise). Before, run handled every one of them first."""
    c = consumer_with_keys(lambda o: HOT, 5)
    state = c._states[KEY]
    stop = threading.Event()
    handled: list[int] = []

    def handler(msg: StreamMessage) -> None:
        if msg.offset == 0:
            for _ in range(1000):  # until the others are handed out (a guard: 10 s)
                if c.stats["delivered"] == 5:
                    break
                threading.Event().wait(0.01)
            stop.set()
        handled.append(msg.offset)

    run_in_thread(c, handler, concurrency=2, stop=stop)
    assert handled == [0]
    c._apply_acks()
    assert state.unsettled() == 4
    assert [m.offset for m in c.poll_batch(100, 0)] == [1, 2, 3, 4]
