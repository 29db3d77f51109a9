"""Delay of good records with and without 1% poison pills, while producing live.

    .venv/bin/python bench/poison_latency.py [--records 100000] [--rate 5000] [--runs 3]

A producer sends ``--records`` records at ``--rate`` records/s while a StreamConsumer
group member (``run``, concurrency 4) handles them; in the poison runs 1% of records
raise every time (nacked, retried with backoff, dead-lettered after 3 attempts). The
delay of a good record is handling time minus its ingestion time (LogAppendTime).
Clean and poison runs alternate; the median of each run's p50/p99 is compared.
Target: poison p99 within 10% of clean p99 (ratio <= 1.10).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid

from _stack import Stack, local_stack
from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.producer import StreamProducer


def one_run(stack: Stack, records: int, rate: int, poison_every: int) -> tuple[float, float, int]:
    stream = f"lat-{uuid.uuid4().hex[:6]}"
    stack.client.create_stream(stream, "local-a", partitions=6)
    delays: list[float] = []
    lock = threading.Lock()
    poison = len(range(0, records, poison_every)) if poison_every else 0

    def handler(msg: StreamMessage) -> None:
        n = int(msg.value or b"-1")
        if poison_every and n % poison_every == 0:
            raise ValueError("poison")
        d = time.time() * 1000 - msg.timestamp_ms
        with lock:
            delays.append(d)

    stop = threading.Event()
    consumer = StreamConsumer(
        stream, f"lat-{stream}", stack.client, max_attempts=3, retry_backoff=0.05
    )
    t = threading.Thread(
        target=consumer.run, args=(handler,), kwargs={"concurrency": 4, "stop": stop}
    )
    t.start()
    with StreamProducer(stream, stack.client, extra_config={"linger.ms": 2}) as producer:
        start = time.monotonic()
        for i in range(records):
            target = start + i / rate
            now = time.monotonic()
            if target > now:
                time.sleep(target - now)
            producer.send(str(i).encode(), key=str(i).encode())
            if i % 100 == 0:
                producer.poll(0)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with lock:
            n = len(delays)
        if n >= records - poison and consumer.stats["dlq"] >= poison:
            break
        time.sleep(0.1)
    stop.set()
    t.join()
    consumer.close()
    delays.sort()
    p50 = delays[len(delays) // 2]
    p99 = delays[int(len(delays) * 0.99)]
    return p50, p99, consumer.stats["dlq"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--rate", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with local_stack() as stack:
        clean: list[tuple[float, float, int]] = []
        dirty: list[tuple[float, float, int]] = []
        for r in range(args.runs):
            clean.append(one_run(stack, args.records, args.rate, 0))
            dirty.append(one_run(stack, args.records, args.rate, 100))
            print(
                f"run {r + 1}: clean p50 {clean[-1][0]:.1f} ms p99 {clean[-1][1]:.1f} ms | "
                f"1% poison p50 {dirty[-1][0]:.1f} ms p99 {dirty[-1][1]:.1f} ms "
                f"(dead-lettered {dirty[-1][2]})",
                flush=True,
            )
        c50 = statistics.median(x[0] for x in clean)
        c99 = statistics.median(x[1] for x in clean)
        d50 = statistics.median(x[0] for x in dirty)
        d99 = statistics.median(x[1] for x in dirty)
        print(
            f"{args.records} records at {args.rate}/s: good-record delay, "
            f"median of {args.runs} runs"
        )
        print(f"  clean      p50 {c50:.1f} ms  p99 {c99:.1f} ms")
        print(f"  1% poison  p50 {d50:.1f} ms  p99 {d99:.1f} ms")
        print(f"  ratio p99 poison/clean = {d99 / c99:.2f} (target <= 1.10)")


if __name__ == "__main__":
    main()
