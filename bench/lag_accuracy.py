"""Time-lag accuracy, side by side on the same run: streamplane's exact method against the
interpolation baseline (kafka-lag-exporter: log-end offsets polled every 30 s, the
committed offset's time found by linear interpolation between polls).

One local Kafka cluster and a control plane (its lag monitor on). A producer writes one
partition with a bursty rate (``--burst`` records/s for 5 s, then ``--quiet`` records/s
for 5 s, repeated); a StreamConsumer handles ``--handle-rate`` records/s, in order, and
commits every 0.5 s, so it falls behind. Every second the bench samples:

  truth          now - ingestion time of the record the consumer is on (its first
                 unsettled record)
  streamplane    ``time_lag_s`` from the control plane's ``GET /v1/lag``
  interpolation  ``EndOffsetTable`` (streamplane.core.lag_interpolation) fed with the
                 log-end offset every ``--poll`` seconds (30 s, kafka-lag-exporter's
                 default), evaluated at the committed offset ``/v1/lag`` reports

and prints the mean / p95 / max absolute error of both, and their ratio.

    .venv/bin/python bench/lag_accuracy.py [--seconds 120] [--poll 30]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import httpx

from _stack import local_stack
from streamplane.client.consumer import StreamConsumer
from streamplane.client.producer import StreamProducer
from streamplane.core.lag_interpolation import EndOffsetTable
from streamplane.lag.reader import LogEnds


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--poll", type=float, default=30.0)
    parser.add_argument("--burst", type=float, default=150.0)
    parser.add_argument("--quiet", type=float, default=10.0)
    parser.add_argument("--handle-rate", type=float, default=50.0)
    args = parser.parse_args()

    with local_stack(1) as stack:
        cluster = next(iter(stack.fleet.clusters.values()))
        stream = "lag-bench"
        stack.client.create_stream(stream, cluster.name, lanes=["realtime"], partitions=1)
        topic = f"sp.{stream}.realtime.e1"
        group = "bench-accuracy"
        stop = threading.Event()
        current_ts: list[int] = []

        def produce() -> None:
            with StreamProducer(stream, stack.client) as producer:
                start = time.monotonic()
                due = start
                while not stop.is_set():
                    phase = int((time.monotonic() - start) // 5) % 2
                    rate = args.burst if phase == 0 else args.quiet
                    producer.send(b"x" * 200)
                    producer.poll(0)
                    due += 1.0 / rate
                    time.sleep(max(0.0, due - time.monotonic()))

        def consume() -> None:
            with StreamConsumer(stream, group, stack.client, commit_interval_s=0.5) as consumer:
                last_commit = time.monotonic()
                while not stop.is_set():
                    msg = consumer.poll(0.2)
                    if msg is not None:
                        current_ts[:] = [msg.timestamp_ms]
                        time.sleep(1.0 / args.handle_rate)
                        msg.ack()
                    if time.monotonic() - last_commit >= 0.5:
                        consumer.commit()
                        last_commit = time.monotonic()

        threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
        for t in threads:
            t.start()
        ends = LogEnds(cluster.bootstrap)
        table = EndOffsetTable(60)
        exact: list[float] = []
        interpolated: list[float] = []
        missing = 0
        started = time.monotonic()
        next_poll = started
        try:
            while time.monotonic() - started < args.seconds:
                now_mono = time.monotonic()
                if now_mono >= next_poll:
                    end = ends.fetch([(topic, 0)]).get((topic, 0))
                    if end is not None:
                        table.add(end, int(time.time() * 1000))
                    next_poll += args.poll
                before = time.time()
                doc = httpx.get(f"{stack.control_plane.url}/v1/lag", params={"group": group}).json()
                after = time.time()
                parts = doc["partitions"]
                if parts and current_ts and parts[0]["time_lag_s"] is not None:
                    now_s = (before + after) / 2
                    truth = now_s - current_ts[0] / 1000.0
                    exact.append(parts[0]["time_lag_s"] - truth)
                    estimate = table.time_lag_s(parts[0]["committed_offset"], int(now_s * 1000))
                    if estimate is None:
                        missing += 1
                    else:
                        interpolated.append(estimate - truth)
                time.sleep(max(0.0, 1.0 - (time.monotonic() - now_mono)))
        finally:
            stop.set()
            for t in threads:
                t.join(30)

    def stats(errors: list[float]) -> tuple[float, float, float, float]:
        absolute = sorted(abs(e) for e in errors)
        p95 = absolute[min(len(absolute) - 1, int(0.95 * len(absolute)))]
        return statistics.mean(errors), statistics.mean(absolute), p95, absolute[-1]

    print(
        f"{args.seconds:.0f} s run, production {args.burst:g}/s and {args.quiet:g}/s in 5 s "
        f"phases, consumer {args.handle_rate:g}/s, end offsets polled every {args.poll:g} s "
        "for the interpolation"
    )
    print(f"\n{'method':<28} {'samples':>7} {'bias':>8} {'mean |err|':>11} {'p95':>8} {'max':>8}")
    for name, errors in (
        ("streamplane (exact)", exact),
        ("interpolation (baseline)", interpolated),
    ):
        if not errors:
            print(f"{name:<28} {0:>7}")
            continue
        bias, mean_abs, p95, worst = stats(errors)
        print(
            f"{name:<28} {len(errors):>7} {bias:>+7.2f}s {mean_abs:>10.2f}s {p95:>7.2f}s "
            f"{worst:>7.2f}s"
        )
    if missing:
        print(f"interpolation had no estimate for {missing} samples (fewer than two polls)")
    if exact and interpolated:
        ratio = stats(interpolated)[1] / max(stats(exact)[1], 1e-9)
        print(f"\nmean absolute error, baseline / streamplane: {ratio:.1f}x")


if __name__ == "__main__":
    main()
