"""The best any Python client could do on the poison target: an upper bound.

    .venv/bin/python bench/poison_floor.py [--records 1000000] [--runs 7]
        [--handler int|json|indexer|all]

``client_throughput.py --only poison`` compares StreamConsumer's good-record throughput
with 1% poison pills (each nacked, retried twice, then dead-lettered) against its clean
run; target >= 0.95x. This benchmark removes the client: a raw confluent-kafka loop
(the same consumer settings and 250-record fetches as StreamConsumer) that handles a
pill the cheapest way that still does what the target's scenario asks of it:

- its three attempts run back to back, at once (no backoff: nothing waits, nothing is
  kept alive, no retry bookkeeping);
- then its dead letter is produced with the same provenance headers as StreamConsumer
  writes (``provenance.dlq_headers``) through a producer that reports failures only,
  and nothing waits for it (no settling);
- offsets are stored by the consumer as it hands records out and committed every second
  (no per-record acks, no commit log).

Both runs parse every record and test it for a pill (the same handlers as
``client_throughput.py``); only the poisoned run's pills fail. Prints, per handler,
the median of the per-pair ratios poisoned/clean of good records per second and of
the consuming thread's CPU per good record (pairs in flipped order after a warm-up
pair), each with a 95% confidence interval. A client with retry backoff, per-record
acks and dead letters settled once written can only do worse, so a ratio under 0.95
here means the target cannot be met by any client on this stack with that handler.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, Producer

from _stack import local_stack
from _stats import describe_ratios
from client_throughput import (
    PARTITIONS,
    POISON_EVERY,
    log_event,
    number_in_enriched_event,
    number_in_event,
    number_of,
    number_record,
)
from streamplane.client.producer import StreamProducer
from streamplane.client.provenance import dlq_headers, source_headers
from streamplane.core.routing import DLQ_LANE
from streamplane.kafka.clients import consume_available, consumer_config, producer_config

ATTEMPTS = 3
BURST_EVERY_S = 0.1  # StreamConsumer's dlq batch interval
HANDLERS: dict[str, tuple[Callable[[int], bytes], Callable[[bytes | None], int]]] = {
    "int": (number_record, number_of),
    "json": (log_event, number_in_event),
    "indexer": (log_event, number_in_enriched_event),
}


class Poison(Exception):
    pass


def ideal_consume(
    bootstrap: str,
    topic: str,
    dlq_topic: str,
    n: int,
    parse: Callable[[bytes | None], int],
    poisoned: bool,
    dlq_mode: str,
) -> tuple[float, float]:
    """Good records per second and consuming-thread CPU per good record (us), from the
    first record on."""

    def handler(value: bytes | None) -> None:
        if parse(value) % POISON_EVERY == 0 and poisoned:
            raise Poison("poison")

    good_target = n - (n // POISON_EVERY if poisoned else 0)
    c = Consumer(consumer_config(bootstrap, f"floor-{uuid.uuid4().hex[:6]}"))
    c.subscribe([topic])
    dlq = Producer(producer_config(bootstrap, {"delivery.report.only.error": True}))
    good = 0
    first: float | None = None
    cpu_at_first = 0.0
    last_commit = time.perf_counter()
    waiting: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]] = []
    next_burst = 0.0
    while good < good_target:
        for m in consume_available(c, 250, 0.5):
            if m.error() is not None:
                continue
            if first is None:
                first = time.perf_counter()
                cpu_at_first = time.thread_time()
            value = m.value()
            for attempt in range(1, ATTEMPTS + 1):
                try:
                    handler(value)
                except Exception as exc:
                    if attempt == ATTEMPTS:
                        source = source_headers("s", "default", "local-a", topic, m.partition())
                        headers = dlq_headers(
                            source,
                            m.headers(),  # type: ignore[arg-type]
                            offset=m.offset(),  # type: ignore[arg-type]
                            attempts=attempt,
                            error=f"exhausted: {exc}",
                            first_seen_ms=0,
                        )
                        if dlq_mode == "now":
                            dlq.produce(dlq_topic, value, m.key(), -1, None, None, 0, headers)  # type: ignore[arg-type]
                        elif dlq_mode == "batched":
                            waiting.append((value, m.key(), headers))
                    continue
                good += 1
                break
        if waiting and time.perf_counter() >= next_burst:
            for v, k, h in waiting:
                dlq.produce(dlq_topic, v, k, -1, None, None, 0, h)  # type: ignore[arg-type]
            waiting = []
            next_burst = time.perf_counter() + BURST_EVERY_S
        dlq.poll(0)
        if time.perf_counter() - last_commit >= 1.0:
            c.commit(asynchronous=True)
            last_commit = time.perf_counter()
    assert first is not None
    wall = time.perf_counter() - first
    cpu = time.thread_time() - cpu_at_first
    c.close()
    dlq.flush(30)
    return good / wall, cpu / good * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=7)
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
        bootstrap = stack.fleet.bootstrap("local-a")
        for name in names:
            value_of, parse = HANDLERS[name]
            stream = f"floor-{name}-{uuid.uuid4().hex[:6]}"
            stack.client.create_stream(stream, "local-a", partitions=PARTITIONS)
            with StreamProducer(stream, stack.client) as p:
                for i in range(args.records):
                    p.send(value_of(i), key=str(i).encode())
            routing = stack.client.routing(stream)
            topic = routing.active(routing.lanes[0]).topic
            dlq_topic = routing.active(DLQ_LANE).topic

            def run(
                poisoned: bool, t: str = topic, d: str = dlq_topic, f: Callable[..., int] = parse
            ) -> tuple[float, float]:
                return ideal_consume(bootstrap, t, d, args.records, f, poisoned, args.dlq)

            run(False)
            run(True)  # warm-up pair
            rates, cpus = [], []
            for i in range(args.runs):
                if i % 2:
                    p_rate, p_cpu = run(True)
                    c_rate, c_cpu = run(False)
                else:
                    c_rate, c_cpu = run(False)
                    p_rate, p_cpu = run(True)
                rates.append(p_rate / c_rate)
                cpus.append(c_cpu / p_cpu)
                print(
                    f"  pair {i + 1}: clean {c_rate:,.0f} rec/s ({c_cpu:.2f} us), "
                    f"poisoned {p_rate:,.0f} rec/s ({p_cpu:.2f} us)",
                    flush=True,
                )
            print(
                f"ideal client, {name} handler, 1% pills x {ATTEMPTS} attempts, dlq {args.dlq}, "
                f"{args.records:,} records: good-record throughput ratio "
                f"{statistics.median(rates):.3f} [{describe_ratios(rates)}], "
                f"consuming-thread CPU ratio {describe_ratios(cpus)} (target >= 0.95)",
                flush=True,
            )


if __name__ == "__main__":
    main()
