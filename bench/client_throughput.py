"""StreamProducer and StreamConsumer against raw confluent-kafka on the same cluster.

    .venv/bin/python bench/client_throughput.py [--records 200000] [--runs 3]
        [--poison-records 1000000] [--io-records 100000]
        [--only produce|consume|poison|poison-waiting]
        [--pills retried|rejected]

- produce: 1 KiB values, StreamProducer vs a raw confluent-kafka Producer with the same
  settings (idempotent, acks=all, zstd), target >= 0.9x;
- consume: StreamConsumer with per-record acks and the commit log vs a raw at-least-once
  loop (store_offsets per record, commit every second), target >= 0.8x; both from the
  first record on, the StreamConsumer's start-up is printed separately;
- poison: 1% of records fail in the handler (nacked, retried, then dead-lettered; with
  ``--pills rejected``, rejected at once to the dlq lane, as ``run(handler,
  non_retryable=...)`` does for an error no retry can cure);
  good-record throughput vs the clean run, with three handlers: a trivial one (the
  record is a number), a JSON log event to decode, and an indexer's (decode the event,
  enrich it, encode it again), target >= 0.95x; and a fourth, a handler that waits on
  a service (a 2 ms call per attempt, pills included: the call is made and its answer
  refused) run by ``run(handler, concurrency=16)`` (``--io-records``, 100,000 by
  default), where what a pill costs is its retries' calls. A pill runs its handler once per
  attempt (3 here), so the ratio cannot pass ~0.97 whatever the client does, and the
  lighter the handler, the larger the client's own share of a pill; then the
  same two consumers interleaved (open together, turns of 5,000 good records each; at
  1,000,000 records both fetch at once and a turn's speed depends on whose fetch is
  ahead: measured pair ratios split into ~0.65 and ~1.2 while the CPU ratio stayed
  0.94, so its CPU ratio is the figure to read; but it flatters the poisoned side: the
  clean side's CPU per good record rises 2-17% when it shares the process with the
  poisoned consumer, so the sequential figure is the one to judge by). Its runs are longer
  (--poison-records): a pill lives ~0.25 s (two backoffs, then its dead letter's
  batch and ack), so a 200,000-record run (~0.3 s) ends before most
  pills reach the dlq and measures the start, not the steady state. It prints how busy
  the consuming thread was (CPU / wall): near 100% the run is bound by the consumer's
  own CPU, below it by fetching (the broker and librdkafka on the same two cores).
Runs come in pairs, the order flipped every pair; the figure is the median of the per-pair
ratios, printed with a 95% confidence interval for it (distribution-free, from the order
statistics: 6 pairs at least, 9-15 to make it narrow).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Producer, TopicPartition

from _stack import Stack, local_stack
from _stats import describe_ratios
from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.producer import StreamProducer
from streamplane.kafka.admin import KafkaAdmin
from streamplane.kafka.clients import consume_available, consumer_config, producer_config

PARTITIONS = 6
POISON_EVERY = 100  # 1% poison pills
TURN_RECORDS = 5000  # good records per turn of the interleaved poison comparison


def raw_produce(bootstrap: str, topic: str, n: int, value: bytes) -> float:
    p = Producer(producer_config(bootstrap))
    t = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, str(i).encode())
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    p.flush(60)
    return n / (time.perf_counter() - t)


def stream_produce(stack: Stack, stream: str, n: int, value: bytes) -> float:
    with StreamProducer(stream, stack.client) as p:
        t = time.perf_counter()
        for i in range(n):
            p.send(value, key=str(i).encode())
        p.flush(60)
        return n / (time.perf_counter() - t)


def raw_consume(bootstrap: str, topic: str, n: int) -> float:
    """Raw at-least-once loop: per record a handler call and store_offsets; commit every 1 s.

    Records/s from the first record on (start-up is reported separately).
    """
    c = Consumer(
        consumer_config(
            bootstrap, f"raw-{uuid.uuid4().hex[:6]}", {"enable.auto.offset.store": False}
        )
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = 0
    first: float | None = None
    last_commit = time.perf_counter()
    while got < n:
        for m in consume_available(c, 1000, 0.5):  # the same batching as StreamConsumer
            if m.error() is None:
                if first is None:
                    first = time.perf_counter()
                handle(m.value())
                c.store_offsets(message=m)
                got += 1
        if time.perf_counter() - last_commit >= 1.0:
            c.commit(asynchronous=False)
            last_commit = time.perf_counter()
    c.commit(asynchronous=False)
    assert first is not None
    rate = n / (time.perf_counter() - first)
    c.close()
    return rate


def handle(value: bytes | None) -> None:
    """The application's work in both loops: trivial, so the client's cost shows."""


def number_of(value: bytes | None) -> int:
    """The poison comparison's trivial handler: the record's number."""
    return int(value or b"0")


def number_in_event(value: bytes | None) -> int:
    """The poison comparison's JSON handler: decode a log event."""
    event = json.loads(value or b"{}")
    return int(event["n"])


SEVERITY = {"debug": 10, "info": 20, "warn": 30, "error": 40}


def number_in_enriched_event(value: bytes | None) -> int:
    """The poison comparison's indexer handler: decode a JSON log event, enrich it and
    encode it again for the next system (an indexer's or a router's work per record)."""
    event = json.loads(value or b"{}")
    event["severity"] = SEVERITY.get(event["level"], 0)
    event["shard"] = zlib.crc32(event["service"].encode()) % 16
    event["slow"] = event["latency_ms"] > 250
    json.dumps(event).encode()  # what would be handed on
    return int(event["n"])


def number_record(i: int) -> bytes:
    """The trivial handler's record: its number."""
    return str(i).encode()


def log_event(i: int) -> bytes:
    return json.dumps(
        {
            "n": i,
            "level": "info",
            "service": "checkout",
            "msg": "request served",
            "latency_ms": i % 500,
        }
    ).encode()


def bench_consumer(
    stack: Stack, stream: str, group_prefix: str, max_attempts: int = 3
) -> StreamConsumer:
    """A StreamConsumer in a new group, with the poison comparison's retry settings
    (3 attempts, 50 ms backoff)."""
    return StreamConsumer(
        stream,
        f"{group_prefix}-{uuid.uuid4().hex[:6]}",
        stack.client,
        max_attempts=max_attempts,
        retry_backoff=0.05,
    )


def handle_record(
    m: StreamMessage,
    parse: Callable[[bytes | None], int] | None,
    poison_every: int,
    reject_pills: bool = False,
) -> bool:
    """The benchmark's application: True for a good record (acked), False for a poison
    pill (nacked, or rejected with ``reject_pills``). The poison comparison parses every
    record and tests whether it is a pill in both of its runs (the same handler work);
    only in the poisoned run (``poison_every`` set) does a pill fail."""
    number = parse(m.value) if parse is not None else 1
    if parse is not None and number % POISON_EVERY == 0 and poison_every:
        if reject_pills:
            m.reject("poison")
        else:
            m.nack("poison")
        return False
    handle(m.value)
    m.ack()
    return True


def good_records(n: int, poison_every: int) -> int:
    """How many of a stream's ``n`` records are good when every ``poison_every``-th is a
    pill (0: none is)."""
    return n - (n // poison_every if poison_every else 0)


def stream_consume(
    stack: Stack,
    stream: str,
    n: int,
    poison_every: int = 0,
    parse: Callable[[bytes | None], int] | None = None,
    reject_pills: bool = False,
) -> float:
    """Good records handled per second from the first record on (poison ones raise)."""
    good_target = good_records(n, poison_every)
    good = 0
    first: float | None = None
    cpu_at_first = broker_at_first = 0.0
    with bench_consumer(stack, stream, "sc") as c:
        started = time.perf_counter()
        while good < good_target:
            for m in c.poll_batch(500, 0.5):
                if first is None:
                    first = time.perf_counter()
                    cpu_at_first, broker_at_first = time.thread_time(), broker_cpu_s(stack)
                    STARTUP.append(first - started)
                good += handle_record(m, parse, poison_every, reject_pills)
        assert first is not None
        wall_s = time.perf_counter() - first
        cpu_s = time.thread_time() - cpu_at_first
        CPU_PER_GOOD_US.setdefault(poison_every, []).append(
            (
                cpu_s / good * 1e6,
                (broker_cpu_s(stack) - broker_at_first) / good * 1e6,
                cpu_s / wall_s,  # the consuming thread's busy share of the run
            )
        )
        return good / wall_s


@dataclass
class _Side:
    """One consumer of the interleaved poison comparison."""

    consumer: StreamConsumer
    poison_every: int
    reject_pills: bool
    target: int  # good records to handle
    good: int = 0
    wall_s: float = 0.0  # its own turns only
    cpu_s: float = 0.0
    in_hand: list[StreamMessage] = field(default_factory=list)  # fetched, not handled


def interleaved_poison(
    stack: Stack,
    stream: str,
    n: int,
    parse: Callable[[bytes | None], int],
    slice_records: int,
    reject_pills: bool,
) -> tuple[float, float, float, float]:
    """A clean and a poisoned consumer of the same stream (two groups), open together
    and handed the machine in turns of ``slice_records`` good records (which goes first
    alternates): both see the same machine, so its drift (+-20% between back-to-back
    runs here) cancels out. A side's rate and consuming-thread CPU count its own turns
    only; background work (client threads, the broker, the poisoned side's dead
    letters) runs when it runs, in either side's turn. Returns (clean rec/s, poisoned
    rec/s, clean us of CPU per good record, poisoned us of CPU per good record)."""
    sides = []
    for poison_every in (0, POISON_EVERY):
        consumer = bench_consumer(stack, stream, "il").open()
        target = good_records(n, poison_every)
        sides.append(_Side(consumer, poison_every, reject_pills, target))
    for side in sides:  # start-up (routing, assignment, first fetch) is not timed
        while not side.in_hand:
            side.in_hand = side.consumer.poll_batch(500, 0.5)
    turn = 0
    while any(side.good < side.target for side in sides):
        turn += 1
        for side in sides if turn % 2 else sides[::-1]:
            if side.good < side.target:
                take_turn(side, parse, min(side.good + slice_records, side.target))
    for side in sides:
        side.consumer.close()
    clean, poisoned = sides
    return (
        clean.good / clean.wall_s,
        poisoned.good / poisoned.wall_s,
        clean.cpu_s / clean.good * 1e6,
        poisoned.cpu_s / poisoned.good * 1e6,
    )


def take_turn(side: _Side, parse: Callable[[bytes | None], int], stop_at: int) -> None:
    """Handle ``side``'s records until it has ``stop_at`` good ones (the same loop as
    stream_consume); what is left of the last batch opens its next turn."""
    t, cpu = time.perf_counter(), time.thread_time()
    good, poison_every, hand = side.good, side.poison_every, side.in_hand
    while good < stop_at:
        batch = hand or side.consumer.poll_batch(500, 0.5)
        hand = []
        for i, m in enumerate(batch):
            good += handle_record(m, parse, poison_every, side.reject_pills)
            if good >= stop_at:
                hand = batch[i + 1 :]
                break
    side.wall_s += time.perf_counter() - t
    side.cpu_s += time.thread_time() - cpu
    side.good, side.in_hand = good, hand


STARTUP: list[float] = []
# poison_every -> (main-thread CPU, broker + control plane CPU) per good record, and the
# main thread's busy share, per run
CPU_PER_GOOD_US: dict[int, list[tuple[float, float, float]]] = {}


def broker_cpu_s(stack: Stack) -> float:
    """CPU seconds the stack's brokers and control plane have used so far."""
    pids = [b.pid for c in stack.fleet.clusters.values() for b in c.brokers]
    pids.append(stack.control_plane.pid)
    total = 0.0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def cpu_summary() -> str:
    """Median CPU per good record of the last comparison, clean vs poisoned (the warm-up
    pair left out), and the per-pair ratio of the consuming thread's CPU per good
    record, clean / poisoned: what the good-record throughput ratio comes to when the
    consumer is bound by its own CPU."""
    parts = []
    per_side = {key: CPU_PER_GOOD_US.pop(key, [])[1:] for key in (0, POISON_EVERY)}
    for key, label in ((0, "clean"), (POISON_EVERY, "poison")):
        runs = per_side[key]
        if runs:
            main = statistics.median(r[0] for r in runs)
            broker = statistics.median(r[1] for r in runs)
            busy = statistics.median(r[2] for r in runs)
            parts.append(
                f"{label} {main:.2f} us main thread (busy {busy:.0%}) + {broker:.2f} us broker"
            )
    summary = "CPU per good record: " + ", ".join(parts)
    clean, poisoned = per_side[0], per_side[POISON_EVERY]
    if clean and len(clean) == len(poisoned):
        cpu_ratios = [c[0] / p[0] for c, p in zip(clean, poisoned, strict=True)]
        summary += f"; consuming-thread CPU ratio {describe_ratios(cpu_ratios)}"
    return summary


def median_pair(runs: int, a: object, b: object) -> tuple[float, float, float, list[float]]:
    """``runs`` pairs of a and b after one warm-up pair (cold caches, page cache and
    broker warm-up skew the first run of each side), the order flipped every pair (a b,
    b a, a b, ...: the side that runs first measured ~2-3% lower). Returns the median
    of each side, the median of the per-pair ratios b/a (robust to the machine
    drifting during the benchmark) and those ratios."""
    a()  # type: ignore[operator]
    b()  # type: ignore[operator]
    xs: list[float] = []
    ys: list[float] = []
    for i in range(runs):
        if i % 2:
            ys.append(b())  # type: ignore[operator]
            xs.append(a())  # type: ignore[operator]
        else:
            xs.append(a())  # type: ignore[operator]
            ys.append(b())  # type: ignore[operator]
    ratios = [y / x for x, y in zip(xs, ys, strict=True)]
    return statistics.median(xs), statistics.median(ys), statistics.median(ratios), ratios


def pairs(ratios: list[float]) -> str:
    return "pair ratios " + describe_ratios(ratios)


def compare_produce(stack: Stack, admin: KafkaAdmin, bootstrap: str, n: int, runs: int) -> None:
    kib = b"x" * 1024
    raw_topic = "bench.raw.produce"
    admin.create_topics([(raw_topic, PARTITIONS, 1, {})])
    stream = "bench-produce"
    stack.client.create_stream(stream, "local-a", partitions=PARTITIONS)
    raw, ours, ratio, ratios = median_pair(
        runs,
        lambda: raw_produce(bootstrap, raw_topic, n, kib),
        lambda: stream_produce(stack, stream, n, kib),
    )
    print(
        f"produce 1 KiB x {n}: raw {raw:,.0f} rec/s, StreamProducer {ours:,.0f} rec/s "
        f"-> ratio {ratio:.2f} (target >= 0.90); {pairs(ratios)}"
    )


def compare_consume(stack: Stack, admin: KafkaAdmin, bootstrap: str, n: int, runs: int) -> None:
    """Small records, produced once, read from the start by a new group every run."""
    small = b'{"level":"info","msg":"hello world","n":12345}'
    raw_topic = "bench.raw.consume"
    admin.create_topics([(raw_topic, PARTITIONS, 1, {})])
    raw_produce(bootstrap, raw_topic, n, small)
    stream = "bench-consume"
    stack.client.create_stream(stream, "local-a", partitions=PARTITIONS)
    with StreamProducer(stream, stack.client) as p:
        for i in range(n):
            p.send(str(i).encode() + small, key=str(i).encode())
    raw, ours, ratio, ratios = median_pair(
        runs,
        lambda: raw_consume(bootstrap, raw_topic, n),
        lambda: stream_consume(stack, stream, n),
    )
    print(
        f"consume x {n}: raw (store_offsets per record, commit every 1 s) {raw:,.0f} rec/s, "
        f"StreamConsumer acks {ours:,.0f} rec/s -> ratio {ratio:.2f} (target >= 0.80); "
        f"{pairs(ratios)}"
    )
    print(
        "StreamConsumer time to first record (routing, committed state, assign): "
        f"median {statistics.median(STARTUP):.2f} s"
    )


IO_WAIT_S = 0.002  # the waiting handler's service call, per attempt
IO_CONCURRENCY = 16


class Refused(Exception):
    """The waiting handler's service refused a poison pill."""


def waiting_consume(stack: Stack, stream: str, n: int, poison_every: int = 0) -> float:
    """Good records handled per second by ``run(handler, concurrency=IO_CONCURRENCY)``
    with a handler that waits IO_WAIT_S on every attempt (a service call; a pill's call
    is refused and raises, so it is nacked, retried, then dead-lettered), from the first
    record handled to the last good one."""
    target = good_records(n, poison_every)
    lock = threading.Lock()
    stop = threading.Event()
    good = 0
    first = last = 0.0

    def handler(m: StreamMessage) -> None:
        nonlocal good, first, last
        number = number_of(m.value)
        if not first:
            first = time.perf_counter()
        time.sleep(IO_WAIT_S)
        if poison_every and number % POISON_EVERY == 0:
            raise Refused(f"record {number} refused")
        with lock:
            good += 1
            if good >= target:
                last = time.perf_counter()
                stop.set()

    with bench_consumer(stack, stream, "io") as c:
        c.run(handler, concurrency=IO_CONCURRENCY, stop=stop)
    return good / (last - first)


def compare_waiting_poison(stack: Stack, n: int, runs: int) -> None:
    """1% retried pills with the waiting handler: good records per second against the
    clean run (the same stream, one group per run)."""
    stream = f"bench-poison-io-{uuid.uuid4().hex[:6]}"
    stack.client.create_stream(stream, "local-a", partitions=PARTITIONS)
    with StreamProducer(stream, stack.client) as p:
        for i in range(n):
            p.send(number_record(i), key=str(i).encode())
    clean, poisoned, ratio, ratios = median_pair(
        runs,
        lambda: waiting_consume(stack, stream, n),
        lambda: waiting_consume(stack, stream, n, poison_every=POISON_EVERY),
    )
    print(
        f"good-record throughput x {n}, waiting handler ({IO_WAIT_S * 1000:.0f} ms service "
        f"call per attempt, run(concurrency={IO_CONCURRENCY})): clean {clean:,.0f} rec/s, "
        f"1% poison (retried, then dead-lettered) {poisoned:,.0f} rec/s -> ratio "
        f"{ratio:.2f} (target >= 0.95; 3% of the calls go to pills' three attempts: ~0.97 "
        f"at best); {pairs(ratios)}"
    )


def compare_poison(stack: Stack, n: int, runs: int, reject_pills: bool) -> None:
    """1% of records fail every attempt (nacked, retried twice, then dead-lettered; or,
    with ``reject_pills``, rejected at once), with three handlers: a trivial one (the
    record is a number; the client's own cost shows), a JSON log event to decode, and
    an indexer's (decode, enrich, encode)."""
    pills = "rejected at once" if reject_pills else "retried, then dead-lettered"
    for label, value_of, parse in [
        ("trivial handler (int)", number_record, number_of),
        ("JSON-event handler", log_event, number_in_event),
        ("indexer handler (decode, enrich, encode JSON)", log_event, number_in_enriched_event),
    ]:
        stream = f"bench-poison-{uuid.uuid4().hex[:6]}"
        stack.client.create_stream(stream, "local-a", partitions=PARTITIONS)
        with StreamProducer(stream, stack.client) as p:
            for i in range(n):
                p.send(value_of(i), key=str(i).encode())
        CPU_PER_GOOD_US.clear()
        clean, poisoned, ratio, ratios = median_pair(
            runs,
            lambda s=stream, f=parse: stream_consume(stack, s, n, parse=f),
            lambda s=stream, f=parse: stream_consume(
                stack, s, n, poison_every=POISON_EVERY, parse=f, reject_pills=reject_pills
            ),
        )
        print(
            f"good-record throughput x {n}, {label}: clean {clean:,.0f} rec/s, 1% poison "
            f"({pills}) {poisoned:,.0f} rec/s -> ratio {ratio:.2f} (target >= 0.95); "
            f"{pairs(ratios)}"
        )
        print("  " + cpu_summary())
        interleaved = [
            interleaved_poison(stack, stream, n, parse, TURN_RECORDS, reject_pills)
            for _ in range(runs)
        ]
        il_ratios = [poisoned / clean for clean, poisoned, _, _ in interleaved]
        cpu_ratios = [clean_cpu / poisoned_cpu for _, _, clean_cpu, poisoned_cpu in interleaved]
        print(
            f"  interleaved (turns of {TURN_RECORDS:,} good records, same machine for both): ratio "
            f"{statistics.median(il_ratios):.2f} (target >= 0.95), consuming-thread CPU "
            f"ratio {describe_ratios(cpu_ratios)}; {pairs(il_ratios)}"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--poison-records", type=int, default=1_000_000)
    ap.add_argument(
        "--io-records", type=int, default=100_000, help="poison: the waiting handler's run"
    )
    ap.add_argument(
        "--only",
        choices=["produce", "consume", "poison", "poison-waiting"],
        help="run one comparison only (poison-waiting: the waiting handler's row of poison)",
    )
    ap.add_argument(
        "--pills",
        choices=["retried", "rejected"],
        default="retried",
        help="poison: pills nacked each attempt (default) or rejected at once",
    )
    args = ap.parse_args()
    wanted = {args.only} if args.only else {"produce", "consume", "poison"}
    with local_stack() as stack:
        bootstrap = stack.fleet.bootstrap("local-a")
        admin = KafkaAdmin(bootstrap)
        if "produce" in wanted:
            compare_produce(stack, admin, bootstrap, args.records, args.runs)
        if "consume" in wanted:
            compare_consume(stack, admin, bootstrap, args.records, args.runs)
        if "poison" in wanted:
            compare_poison(stack, args.poison_records, args.runs, args.pills == "rejected")
        if wanted & {"poison", "poison-waiting"} and args.pills == "retried":
            compare_waiting_poison(stack, args.io_records, args.runs)


if __name__ == "__main__":
    main()
