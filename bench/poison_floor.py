"""StreamConsumer's poison ratio next to the best any Python client could do.

    .venv/bin/python bench/poison_floor.py [--records 1000000] [--passes 5]
        [--handler int|json|indexer|all] [--dlq batched|now|none]

``client_throughput.py --only poison`` compares StreamConsumer's good-record throughput
with 1% poison pills (each nacked, retried twice, then dead-lettered) against its clean
run; target >= 0.95x. This benchmark asks how much of the gap is the client's: next to
StreamConsumer it runs an ideal client, a raw confluent-kafka loop (the same consumer
settings and 250-record fetches) that handles a pill the cheapest way that still does
what the scenario asks:

- its three attempts run back to back, at once (no backoff: nothing waits, nothing is
  kept alive, no retry bookkeeping);
- then its dead letter, with the same headers StreamConsumer writes
  (``provenance.dlq_headers``), is produced in a burst with the others every 100 ms
  (``--dlq now``: at once; ``--dlq none``: not at all) through a producer that reports
  failures only, and nothing waits for it (no settling);
- offsets are stored as records are handed out and committed every second (no
  per-record acks, no commit log).

Four readers of one stream (four groups: StreamConsumer and the ideal client, each
clean and poisoned) are open together and take turns of 20,000 good records, the order
rotating every round, so the machine's drift (+-30% between back-to-back runs on a
shared 2-core host) falls on all four alike. Every handler parses each record and tests
it for a pill on both sides (the same handlers as ``client_throughput.py``). Printed
per pass and as the median of the passes: the ratio poisoned/clean of good records per
second over each reader's own turns, and clean/poisoned of consuming-thread CPU per
good record (the steadier one: wall time also holds the other readers' background
work). What the ideal client loses is the price of a pill's unavoidable work on this
stack (its own fetch, three handler runs that raise, one produce with its headers):
any client does that work and more, so an ideal CPU ratio well under 0.95 says the
target is out of reach of any client design with that handler, short of doing that
work somewhere other than the consuming thread.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Protocol

from confluent_kafka import Consumer, Message, Producer

from _stack import Stack, local_stack
from client_throughput import (
    PARTITIONS,
    POISON_EVERY,
    bench_consumer,
    handle_record,
    log_event,
    number_in_enriched_event,
    number_in_event,
    number_of,
    number_record,
)
from streamplane.client.consumer import StreamMessage
from streamplane.client.producer import StreamProducer
from streamplane.client.provenance import dlq_headers, source_headers
from streamplane.core.routing import DLQ_LANE
from streamplane.kafka.clients import consume_available, consumer_config, producer_config

ATTEMPTS = 3
BURST_EVERY_S = 0.1  # StreamConsumer's dlq batch interval
TURN_RECORDS = 20_000
HANDLERS: dict[str, tuple[Callable[[int], bytes], Callable[[bytes | None], int]]] = {
    "int": (number_record, number_of),
    "json": (log_event, number_in_event),
    "indexer": (log_event, number_in_enriched_event),
}


class Poison(Exception):
    pass


class Reader(Protocol):
    def turn(self, good_records: int) -> tuple[float, float]: ...

    def close(self) -> None: ...


class IdealReader:
    """A raw consumer handling a pill the cheapest way (the module's docstring), read a
    turn at a time."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        dlq_topic: str,
        parse: Callable[[bytes | None], int],
        poisoned: bool,
        dlq_mode: str,
    ) -> None:
        self.topic, self.dlq_topic, self.dlq_mode = topic, dlq_topic, dlq_mode
        self.consumer = Consumer(consumer_config(bootstrap, f"floor-{uuid.uuid4().hex[:6]}"))
        self.consumer.subscribe([topic])
        self.dlq = Producer(producer_config(bootstrap, {"delivery.report.only.error": True}))
        self.parse, self.poisoned = parse, poisoned
        self.in_hand: list[Message] = []  # fetched, not handled yet
        self.waiting: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]] = []
        self.next_burst = 0.0
        self.last_commit = time.perf_counter()

    def handler(self, value: bytes | None) -> None:
        if self.parse(value) % POISON_EVERY == 0 and self.poisoned:
            raise Poison("poison")

    def turn(self, good_records: int) -> tuple[float, float]:
        """Handle ``good_records`` good records (and the pills among them): wall and
        consuming-thread CPU seconds."""
        wall, cpu = time.perf_counter(), time.thread_time()
        good = 0
        while good < good_records:
            batch = self.in_hand or consume_available(self.consumer, 250, 0.5)
            self.in_hand = []
            for i, m in enumerate(batch):
                if good == good_records:
                    self.in_hand = batch[i:]
                    break
                if m.error() is None:
                    good += self.handle(m)
            if self.waiting and time.perf_counter() >= self.next_burst:
                for v, k, h in self.waiting:
                    self.dlq.produce(self.dlq_topic, v, k, -1, None, None, 0, h)  # type: ignore[arg-type]
                self.waiting = []
                self.next_burst = time.perf_counter() + BURST_EVERY_S
            self.dlq.poll(0)
            if time.perf_counter() - self.last_commit >= 1.0:
                self.consumer.commit(asynchronous=True)
                self.last_commit = time.perf_counter()
        return time.perf_counter() - wall, time.thread_time() - cpu

    def handle(self, m: Message) -> int:
        """1 for a good record, 0 for a pill (three attempts, then its dead letter)."""
        value = m.value()
        for attempt in range(1, ATTEMPTS + 1):
            try:
                self.handler(value)
            except Exception as exc:
                if attempt < ATTEMPTS:
                    continue
                source = source_headers("s", "default", "local-a", self.topic, m.partition())
                headers = dlq_headers(
                    source,
                    m.headers(),  # type: ignore[arg-type]
                    offset=m.offset(),  # type: ignore[arg-type]
                    attempts=attempt,
                    error=f"exhausted: {exc}",
                    first_seen_ms=0,
                )
                if self.dlq_mode == "now":
                    self.dlq.produce(self.dlq_topic, value, m.key(), -1, None, None, 0, headers)  # type: ignore[arg-type]
                elif self.dlq_mode == "batched":
                    self.waiting.append((value, m.key(), headers))
            else:
                return 1
        return 0

    def close(self) -> None:
        self.consumer.close()
        self.dlq.flush(30)


class StreamReader:
    """StreamConsumer as the poison comparison of ``client_throughput.py`` runs it (3
    attempts, 50 ms backoff, then the dlq lane), read a turn at a time."""

    def __init__(
        self, stack: Stack, stream: str, parse: Callable[[bytes | None], int], poisoned: bool
    ) -> None:
        self.consumer = bench_consumer(stack, stream, "floor-sc").open()
        self.parse = parse
        self.poison_every = POISON_EVERY if poisoned else 0
        self.in_hand: list[StreamMessage] = []

    def turn(self, good_records: int) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.thread_time()
        good = 0
        while good < good_records:
            batch = self.in_hand or self.consumer.poll_batch(500, 0.5)
            self.in_hand = []
            for i, m in enumerate(batch):
                if good == good_records:
                    self.in_hand = batch[i:]
                    break
                good += handle_record(m, self.parse, self.poison_every)
        return time.perf_counter() - wall, time.thread_time() - cpu

    def close(self) -> None:
        self.consumer.close()


def compare(
    stack: Stack,
    stream: str,
    n: int,
    parse: Callable[[bytes | None], int],
    dlq_mode: str,
) -> dict[str, tuple[float, float]]:
    """Four readers of the same stream in four groups, open together: StreamConsumer
    and the ideal client, each clean and poisoned, taking turns of TURN_RECORDS good
    records (the order rotating every round) until each has ``n`` records' worth of
    good ones: the same machine for all four, its drift spread over them alike.
    Returns, per reader, the wall and consuming-thread CPU seconds of its turns."""
    bootstrap = stack.fleet.bootstrap("local-a")
    routing = stack.client.routing(stream)
    topic = routing.active(routing.lanes[0]).topic
    dlq_topic = routing.active(DLQ_LANE).topic
    readers: dict[str, Reader] = {
        "stream clean": StreamReader(stack, stream, parse, False),
        "stream poisoned": StreamReader(stack, stream, parse, True),
        "ideal clean": IdealReader(bootstrap, topic, dlq_topic, parse, False, dlq_mode),
        "ideal poisoned": IdealReader(bootstrap, topic, dlq_topic, parse, True, dlq_mode),
    }
    for reader in readers.values():
        reader.turn(TURN_RECORDS)  # warm-up turns (start-up, first fetches)
    totals = dict.fromkeys(readers, (0.0, 0.0))
    names = list(readers)
    rounds = n // POISON_EVERY * (POISON_EVERY - 1) // TURN_RECORDS - 1
    for r in range(rounds):
        for name in names[r % 4 :] + names[: r % 4]:
            wall, cpu = readers[name].turn(TURN_RECORDS)
            totals[name] = (totals[name][0] + wall, totals[name][1] + cpu)
    for reader in readers.values():
        reader.close()
    return totals


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--passes", type=int, default=5, help="reads of the stream, new groups each")
    ap.add_argument(
        "--dlq",
        choices=["batched", "now", "none"],
        default="batched",
        help="dead letters produced in a burst every 100 ms (as StreamConsumer does), "
        "each at once, or not at all (the attempts alone)",
    )
    ap.add_argument("--handler", choices=[*HANDLERS, "all"], default="all")
    args = ap.parse_args()
    names = list(HANDLERS) if args.handler == "all" else [args.handler]
    with local_stack() as stack:
        for name in names:
            value_of, parse = HANDLERS[name]
            stream = f"floor-{name}-{uuid.uuid4().hex[:6]}"
            stack.client.create_stream(stream, "local-a", partitions=PARTITIONS)
            with StreamProducer(stream, stack.client) as p:
                for i in range(args.records):
                    p.send(value_of(i), key=str(i).encode())
            per_pass: dict[str, list[float]] = {"stream": [], "ideal": []}
            cpu_pass: dict[str, list[float]] = {"stream": [], "ideal": []}
            for _ in range(args.passes):
                totals = compare(stack, stream, args.records, parse, args.dlq)
                for client in ("stream", "ideal"):
                    (c_wall, c_cpu), (p_wall, p_cpu) = (
                        totals[f"{client} clean"],
                        totals[f"{client} poisoned"],
                    )
                    per_pass[client].append(c_wall / p_wall)
                    cpu_pass[client].append(c_cpu / p_cpu)
                print(
                    "  pass: "
                    + ", ".join(
                        f"{client} {per_pass[client][-1]:.3f} (CPU {cpu_pass[client][-1]:.3f})"
                        for client in per_pass
                    ),
                    flush=True,
                )
            for client, label in (("stream", "StreamConsumer"), ("ideal", "ideal client")):
                print(
                    f"{label}, {name} handler, 1% pills x {ATTEMPTS} attempts, dlq "
                    f"{args.dlq if client == 'ideal' else 'batched'}, {args.passes} reads of "
                    f"{args.records:,} records in turns of {TURN_RECORDS:,} good records: "
                    f"good-record throughput ratio {statistics.median(per_pass[client]):.3f}, "
                    f"consuming-thread CPU ratio {statistics.median(cpu_pass[client]):.3f} "
                    f"(passes {', '.join(f'{x:.3f}' for x in cpu_pass[client])}; "
                    "target >= 0.95)",
                    flush=True,
                )


if __name__ == "__main__":
    main()
