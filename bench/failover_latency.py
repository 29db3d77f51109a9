"""Failover latency under load: ten failovers local-a <-> local-b at 5,000 records/s.

A StreamProducer sends 5,000 records/s (ids as values, delivery callbacks counting what
was acknowledged) while three StreamConsumers of one group read; every 3 s the stream is
failed over to the other cluster. For each failover, the latency is the time from the
epoch change (the new routing saved, after the call created its topics: the audit
entry's time) to the producer writing with the new epoch
(``StreamProducer.epoch_switch_times``): the acceptance figure. The time from the command
(the HTTP call starting), which adds the topic creation, and the call itself are
printed too. Afterwards every acknowledged id must have been
consumed (loss), and ids consumed twice are reported (duplicates).

Baseline: the acceptance target of 1 s (p99) for "producers write to the new segment
within 1 s of the epoch change".

    .venv/bin/python bench/failover_latency.py [--failovers 10] [--rate 5000]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from _stack import local_stack
from _stats import percentile
from streamplane.client.consumer import StreamConsumer
from streamplane.client.producer import StreamProducer

TARGET_S = 1.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--failovers", type=int, default=10)
    ap.add_argument("--rate", type=float, default=5000.0)
    ap.add_argument("--every", type=float, default=3.0, help="seconds between failovers")
    args = ap.parse_args()

    with local_stack(clusters=2) as stack:
        client = stack.client
        client.create_stream("bench-failover", "local-a", partitions=6)
        acked: set[int] = set()
        lock = threading.Lock()
        stop = threading.Event()
        sent = 0

        def delivered(n: int) -> Callable[[Any, Any], None]:
            def cb(err: Any, _msg: Any) -> None:
                if err is None:
                    with lock:
                        acked.add(n)

            return cb

        producer = StreamProducer(
            "bench-failover", control_plane=client, delivery_reports="all"
        ).open()

        def produce() -> None:
            nonlocal sent
            start = time.monotonic()
            while not stop.is_set():
                due = int((time.monotonic() - start) * args.rate)
                while sent < due:
                    producer.send(str(sent).encode(), on_delivery=delivered(sent))
                    sent += 1
                producer.poll(0)
                time.sleep(0.002)

        seen: dict[int, int] = {}
        consumers_stop = threading.Event()

        def consume() -> None:
            with StreamConsumer("bench-failover", "bench", control_plane=client) as c:
                while not consumers_stop.is_set():
                    for msg in c.poll_batch(500, 0.2):
                        n = int(msg.value or b"-1")
                        with lock:
                            seen[n] = seen.get(n, 0) + 1
                        msg.ack()
                c.commit()

        threads = [threading.Thread(target=produce, daemon=True)]
        threads += [threading.Thread(target=consume, daemon=True) for _ in range(3)]
        for t in threads:
            t.start()
        time.sleep(args.every)
        latencies: list[float] = []  # from the command
        after_change: list[float] = []
        calls: list[float] = []
        wall_minus_mono = time.time() - time.monotonic()
        clusters = ["local-b", "local-a"]
        began = time.monotonic()
        for i in range(args.failovers):
            commanded = time.monotonic()
            table = client.failover("bench-failover", clusters[i % 2], reason="bench")
            calls.append(time.monotonic() - commanded)
            while producer.epoch < table.epoch:
                time.sleep(0.001)
            switched = producer.switched_at(table.epoch)
            assert switched is not None  # its epoch is at or past the change
            latencies.append(switched - commanded)
            changed = client.epoch_changed_at("bench-failover", table.epoch)
            if changed is None:
                raise SystemExit(f"no audit entry for epoch {table.epoch}")
            after_change.append(switched + wall_minus_mono - changed.timestamp())
            time.sleep(args.every)
        stop.set()
        threads[0].join()
        elapsed = time.monotonic() - began
        producer.close(30)
        want = set(acked)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with lock:
                if want <= seen.keys():
                    break
            time.sleep(0.5)
        consumers_stop.set()
        for t in threads[1:]:
            t.join(30)
        missing = want - seen.keys()
        dups = sum(c - 1 for c in seen.values() if c > 1)

    print(f"failovers: {len(latencies)} at {sent / (elapsed + args.every):.0f} records/s offered")
    p99 = percentile(after_change, 0.99)
    for what, xs in (("the epoch change", after_change), ("the command", latencies)):
        ms = [x * 1000 for x in xs]
        print(
            f"producer on the new topic after {what}: p50 {percentile(xs, 0.5) * 1000:.0f} ms, "
            f"p99 {percentile(xs, 0.99) * 1000:.0f} ms, max {max(ms):.0f} ms, "
            f"mean {statistics.mean(ms):.0f} ms"
        )
    print(
        f"failover call itself (topic creation + save): p50 {percentile(calls, 0.5) * 1000:.0f} ms"
    )
    print(f"records: sent {sent}, acked {len(want)}, lost {len(missing)}, duplicates {dups}")
    print(f"ratio p99 after the epoch change / target ({TARGET_S:g} s): {p99 / TARGET_S:.2f}")


if __name__ == "__main__":
    main()
