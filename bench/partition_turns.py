"""What partitions taking turns costs the brokers: bytes sent per record handled.

    .venv/bin/python bench/partition_turns.py [--seconds 30] [--runs 3]

A slow member (``run(handler)``, 10 ms a record, as in
tests/integration/groups/test_partition_share.py) reads a backlog of 400-byte records
(random bytes: compression does not shrink them) on 4 partitions. StreamConsumer makes
a partition it has handed out alone for 2 s, while its fetching client holds
prefetched records of another, take its turn at the back of the queue
(``StreamConsumer._take_turns``): it pauses it for one housekeeping pass, and
librdkafka drops what it had prefetched of it, which the broker sends again after the
resume. This measures that price: the bytes the cluster's brokers wrote
(``wchar`` of /proc/PID/io, which counts the fetches' sendfile) per record handled,
with the turns (the default) and without them (``_TURN_S`` set to infinity: one
partition at a time, as before the turns), runs alternating, one new group a run. It
prints both, their ratio (median of the pairs) and each run's records by partition.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
import uuid
from collections import Counter

import streamplane.client.consumer as consumer_module
from _stack import Stack, local_stack
from streamplane.client.consumer import StreamConsumer, StreamMessage
from streamplane.client.producer import StreamProducer

PARTITIONS = 4
RECORDS_PER_PARTITION = 6_000
VALUE_BYTES = 400
HANDLER_S = 0.01


def brokers_wchar(stack: Stack) -> int:
    """Bytes the brokers of the stack's cluster have written so far (files, sockets,
    sendfile)."""
    total = 0
    for cluster in stack.fleet.clusters.values():
        for broker in cluster.brokers:
            with open(f"/proc/{broker.pid}/io") as f:
                fields = dict(line.split(": ") for line in f.read().splitlines())
            total += int(fields["wchar"])
    return total


def one_run(
    stack: Stack, stream: str, seconds: float, turns: bool
) -> tuple[float, int, Counter[int]]:
    """Handle records for ``seconds``; returns (broker bytes written per record
    handled, records handled, records handled by partition)."""
    consumer_module._TURN_S = 2.0 if turns else float("inf")
    handled: Counter[int] = Counter()
    stop = threading.Event()

    def handler(msg: StreamMessage) -> None:
        time.sleep(HANDLER_S)
        handled[msg.partition] += 1

    before = brokers_wchar(stack)
    timer = threading.Timer(seconds, stop.set)
    with StreamConsumer(stream, f"turns-{uuid.uuid4().hex[:6]}", stack.client) as consumer:
        timer.start()
        consumer.run(handler, stop=stop)
    written = brokers_wchar(stack) - before
    count = sum(handled.values())
    return written / max(count, 1), count, handled


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30.0, help="handling time per run")
    ap.add_argument("--runs", type=int, default=3, help="pairs (turns, no turns)")
    args = ap.parse_args()
    with local_stack() as stack:
        stream = f"bench-turns-{uuid.uuid4().hex[:6]}"
        stack.client.create_stream(stream, "local-a", partitions=PARTITIONS, lanes=["realtime"])
        with StreamProducer(stream, stack.client) as producer:
            for i in range(PARTITIONS * RECORDS_PER_PARTITION):
                producer.send(b"%d " % i + os.urandom(VALUE_BYTES), key=b"%d" % i)
        time.sleep(5)  # replication and the producer's own traffic settle
        ratios = []
        for i in range(args.runs):
            order = (True, False) if i % 2 == 0 else (False, True)
            result = {}
            for turns in order:
                per_record, count, by_partition = one_run(stack, stream, args.seconds, turns)
                result[turns] = per_record
                label = "turns   " if turns else "no turns"
                print(
                    f"pair {i + 1} {label}: {count:,} records handled, "
                    f"{per_record:,.0f} broker bytes written per record, by partition "
                    f"{dict(sorted(by_partition.items()))}",
                    flush=True,
                )
            ratios.append(result[True] / result[False])
        print(
            f"broker bytes written per record handled, turns / no turns: median "
            f"{statistics.median(ratios):.2f} (pairs: {' '.join(f'{r:.2f}' for r in ratios)}); "
            f"a record is {VALUE_BYTES + 10} bytes of value"
        )


if __name__ == "__main__":
    main()
