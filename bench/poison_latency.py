"""Delay of good records with and without 1% poison pills, while producing live.

    .venv/bin/python bench/poison_latency.py [--records 100000] [--rate 5000] [--runs 3]
        [--warmup 1000]

A producer sends ``--records`` records at ``--rate`` records/s while a StreamConsumer
group member (``run``, concurrency 4) handles them; in the poison runs 1% of records
raise every time (nacked, retried with backoff, dead-lettered after 3 attempts). The
delay of a good record is handling time minus its ingestion time (LogAppendTime).
Clean and poison runs alternate (which goes first flips every run); the median of
each run's p50/p99 is compared. Target: poison p99 within 10% of clean p99 (ratio
<= 1.10).

Each run first sends ``--warmup`` records, unmeasured, and waits until the consumer
has handled them all: the measured records then meet a consumer that has its
routing, its Assigner lease, its partitions and its first fetch behind it. Without
that, records sent while the consumer was still starting waited for it, and the
first ~1% of them (0.2 s of production at 5,000/s) made the p99 a measure of the
consumer's start-up (0.2-1.8 s from run to run), not of the delay of a record.
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

WARMUP_PREFIX = b"w"  # warm-up records' values: handled and acked, never measured


def one_run(
    stack: Stack, records: int, rate: int, poison_every: int, warmup: int
) -> tuple[float, float, int]:
    stream = f"lat-{uuid.uuid4().hex[:6]}"
    stack.client.create_stream(stream, "local-a", partitions=6)
    delays: list[float] = []
    lock = threading.Lock()
    poison = len(range(0, records, poison_every)) if poison_every else 0
    warmed = [0]

    def handler(msg: StreamMessage) -> None:
        value = msg.value or b"-1"
        if value.startswith(WARMUP_PREFIX):
            with lock:
                warmed[0] += 1
            return
        n = int(value)
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
        for i in range(warmup):
            producer.send(WARMUP_PREFIX + str(i).encode(), key=str(i).encode())
        producer.flush()
        deadline = time.monotonic() + 120
        while warmed[0] < warmup:
            if time.monotonic() > deadline:
                raise SystemExit(f"the consumer handled {warmed[0]} of {warmup} warm-up records")
            time.sleep(0.05)
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
    ap.add_argument(
        "--warmup", type=int, default=1000, help="unmeasured records handled before the run"
    )
    args = ap.parse_args()
    with local_stack() as stack:
        clean: list[tuple[float, float, int]] = []
        dirty: list[tuple[float, float, int]] = []
        for r in range(args.runs):
            # The order flips every run: the first run of the process meets a cold broker.
            for poison_every in (0, 100) if r % 2 == 0 else (100, 0):
                got = one_run(stack, args.records, args.rate, poison_every, args.warmup)
                (dirty if poison_every else clean).append(got)
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
