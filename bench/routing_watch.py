"""Routing-watch propagation with 100 watchers: a failover reaches every one how fast?

100 RoutingWatchers (each its own ControlPlaneClient and thread, as 100 producers would
have) watch one stream; the stream is failed over five times. For each watcher and each
failover, the latency is the time from the failover call *returning* (the change saved)
to the watcher's listener seeing the new epoch; negative values mean the watcher was
woken before the call had answered (the hub is woken right after the save).

Baseline: the integration test's figure in docs/control-plane.md (the last of 100 parked
watchers released about 12 ms after the failover answers).

    .venv/bin/python bench/routing_watch.py [--watchers 100] [--rounds 5]
"""

from __future__ import annotations

import argparse
import threading
import time

from _stack import local_stack
from _stats import percentile
from streamplane.client.control_plane import ControlPlaneClient
from streamplane.client.routing_watch import RoutingWatcher
from streamplane.core.routing import RoutingTable

BASELINE_S = 0.012


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--watchers", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with local_stack(clusters=2) as stack:
        stack.client.create_stream("bench-watch", "local-a", partitions=1)
        seen: dict[int, list[float]] = {}
        lock = threading.Lock()

        def on_change(table: RoutingTable) -> None:
            now = time.monotonic()
            with lock:
                seen.setdefault(table.epoch, []).append(now)

        clients = [ControlPlaneClient(stack.control_plane.url) for _ in range(args.watchers)]
        watchers = [RoutingWatcher(c, "bench-watch") for c in clients]
        for w in watchers:
            w.add_listener(on_change)
            w.start()
        time.sleep(2.0)  # every watcher parked in its long poll
        per_round_last: list[float] = []
        all_lat: list[float] = []
        targets = ["local-b", "local-a"]
        for i in range(args.rounds):
            table = stack.client.failover("bench-watch", targets[i % 2], reason="bench")
            answered = time.monotonic()
            deadline = answered + 10
            while time.monotonic() < deadline:
                with lock:
                    if len(seen.get(table.epoch, [])) >= args.watchers:
                        break
                time.sleep(0.001)
            with lock:
                lat = [t - answered for t in seen.get(table.epoch, [])]
            all_lat += lat
            per_round_last.append(max(lat))
            print(
                f"round {i + 1}: {len(lat)}/{args.watchers} watchers, "
                f"first {min(lat) * 1000:+.1f} ms, last {max(lat) * 1000:+.1f} ms "
                "after the failover answered"
            )
            time.sleep(1.0)
        for w in watchers:
            w.stop()
        for c in clients:
            c.close()
    last = percentile(per_round_last, 0.5)
    print(
        f"{args.watchers} watchers: p50 {percentile(all_lat, 0.5) * 1000:+.1f} ms, "
        f"p99 {percentile(all_lat, 0.99) * 1000:+.1f} ms, last (median of rounds) "
        f"{last * 1000:+.1f} ms"
    )
    print(f"ratio last / baseline ({BASELINE_S * 1000:.0f} ms): {last / BASELINE_S:.2f}")


if __name__ == "__main__":
    main()
